#!/usr/bin/env python3
"""LAB STAND-IN for the DeepSeek-V4.1-Flash SGLang engine (TP3). Not the product; lab hosts only.

Started by the lab ``docker`` stand-in for images ``dsv41-sglang:*`` as
``python3 /usr/local/lib/dsv41-lab/dsv41_engine.py ARGS...`` with env = the container's ``-e``
variables (+ PATH, HOME) + ``LAB_CONTAINER_NAME`` + ``LAB_MOUNTS`` (JSON {container_dst: host_src}).
Python 3.11 stdlib only; it never imports the repository's module_utils (independent re-implementation).
Every figure it prints or serves is LAB OUTPUT, not a fleet measurement.

Arguments (passed by the launcher stand-in ``start.sh``; unknown ones are ignored)::

  --role head|worker --rank R --tp-size T --ep-size E --model-path PATH --port 8888
  --dspark-block-size K --max-running-requests M --chunked-prefill-size C
  --max-total-tokens P --mem-fraction-static F [--moe-runner-backend B] [--dist-init-addr HOST:PORT]

Environment read: DSV41_* and SGLANG_* switches, DSPARK_BLOCK_SIZE (fallback for --dspark-block-size),
API_KEY (head), LAB_MOUNTS, and the lab knobs
  LAB_ENGINE_FAST=1        no boot pacing (tests)
  LAB_ENGINE_SPEED=<f>     divide every request-path sleep by f (tests use a big factor)
  LAB_IMAGE_ROOT=<dir>     the container image's rootfs (set by the docker stand-in). The retention
                           adapter is armed only if DSV41_AUTOTUNE_KEEP is non-zero AND
                           <dir>/sgl-workspace/adapter/autotune_keep.py exists AND that directory's
                           sitecustomize.py has "autotune_keep" as a key of _ADAPTERS; otherwise the switch
                           is silently ignored (stock autotune). Unset: the switch alone decides (tests).
  LAB_ENGINE_DRIFT=<sym>   with DSV41_AUTOTUNE_KEEP=1: the adapter's hook symbol is "gone" -> boot fails
  LAB_ENGINE_DRIFT_FILE    (default /etc/dsv41-lab/engine_drift) first line = <sym>, same effect; a host-side
                           switch, since the docker stand-in passes only the container's -e variables

Boot (stdout, each line prefixed ``[YYYY-MM-DD HH:MM:SS TP{r} EP{r}] `` in UTC):
  server_args=ServerArgs(...)  (boot marker; api_key shown as '***')
  Engram: N rows per layer (1, 14) from the checkpoint index + safetensors headers at --model-path;
    rank r owns [N*r//tp, N*(r+1)//tp). Packed shard ``engram-l{L}-r{r}of{tp}.bin`` in DSV41_PACKED_DIR
    (default /engram): missing -> packed=False; valid (size 4096+(hi-lo)*264, header magic/layer/lo/hi/N/264,
    zero padding) -> packed=True; anything else -> RuntimeError naming the shard and exit 1.
  Memory model (documented, deterministic, identical on all ranks for identical settings; "GB" = 10**9 bytes):
    available_bytes = 1.04e9 + (F - 0.95) * 100 * 1.2e9          (each 0.01 of fraction ~ 1.2 GB)
                      - DSV41_CACHE_GIB * 2**30                   (row cache, total per rank, split over 2 layers)
                      - 688 MiB   if DSV41_WO_A_W8                 (FP8 twins)
                      + 1376 MiB  if DSV41_WO_A_W8 and DSV41_WO_A_W8_DROP (bf16 originals dropped)
                      - 210.6 MiB if DSV41_DRAFT_HEAD_FP8
                      - 96 MiB    if SGLANG_DSPARK_FOLDED_SAMPLING=2 (static buffers)
    bytes_per_full_token = 1670.75
    full_token (bytes for the full-token pool) = 0.8 * available_bytes
    pool = min(pin, floor(available_bytes / 1670.75 * 0.8 / 32768) * 32768)   (pin = --max-total-tokens)
      report settings: 1.04e9 -> 15 * 32768 = 491520 (asked 750000: silently clamped)
    swa = pool // 4, c128 = pool // 128; available_gpu_mem = available_bytes - pool * 1670.75
    pool < 32768 -> RuntimeError "Not enough memory", exit 1.
  Autotune cache ``/root/.cache/sglang/flashinfer/autotune/0.6.1/sm121/<hash>/rank_tp{r}_pp0_dp0.json``
    (<hash> = sha256(block size, max running requests, chunked prefill, tp size)[:16]); two passes (target,
    draft) on the same file. Stock: caches present at boot -> per pass "per-rank caches disagree" + retune +
    rewrite (content has the rank). DSV41_AUTOTUNE_KEEP=1 (adapter in the image): sidecar ``<cache>.launch`` = sha256 over argv and the
    sorted DSV41_/SGLANG_/DSPARK_/FLASHINFER_ env; match at boot -> "reused" (file untouched) else tune+save.
  Head: "Ready: API on port P" then an HTTP server on 0.0.0.0:P. Workers sleep until SIGTERM.
  SIGTERM: "Received sigterm, shutting down", exit 0.

Latency model of the head's chat endpoint (real sleeps, all divided by LAB_ENGINE_SPEED):
  TTFT            = 60 ms + 0.05 ms * prompt_tokens
  step_ms         = base + 4 * (K - 3)                    base 98 if every known rank is packed else 120
                    - 4 if DSV41_WO_A_W8, - 2 if DSV41_ENGRAM_PREFETCH (packed only), - 1 if DSV41_DRAFT_HEAD_FP8,
                    + 15 if DSV41_ENGRAM_PREFETCH_CHECK (validation mode)
                    times (1 + 0.12 * (active_requests - 1))   (aggregate improves, per-stream falls)
                    times a +-3% jitter
  committed/step  = 1 + accepted, accepted ~ Binomial(K, a); a = 0.55 prose, 0.70 code-like prompts
                    ('def ' or 'code' in the prompt); DSV41_DRAFT_TAU / DSV41_VERIFY_CAP nudge a by +0.02 each.
  Concurrency is capped at --max-running-requests with a semaphore (extra requests queue).
  "Known ranks": workers started with --dist-init-addr report their packed state to the head's rendezvous
  port (a lab detail); without it the head uses its own state.
  Output text: words drawn from a hash of the messages (temperature 0: deterministic; > 0: random seed);
  completion length = min(max_tokens, natural), natural = 64 + hash % 961 (+256 with thinking).
  Streaming sends one SSE message per speculative step (several tokens each), then a usage chunk when
  stream_options.include_usage, then ``data: [DONE]``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAGIC = 0x31344E4531565344
ROW_BYTES = 264
HEADER_BYTES = 4096
ENGRAM_LAYERS = (1, 14)
BYTES_PER_FULL_TOKEN = 1670.75
POOL_ALIGN = 32768
GB = 10 ** 9
MIB = 2 ** 20
GIB = 2 ** 30
AUTOTUNE_ROOT = "/root/.cache/sglang/flashinfer/autotune/0.6.1/sm121"
IMAGE_ADAPTER_DIR = "sgl-workspace/adapter"  # under LAB_IMAGE_ROOT: the adapters the image was built with
FINGERPRINT_PREFIXES = ("DSV41_", "SGLANG_", "DSPARK_", "FLASHINFER_")
CONTEXT_LEN = 1048576
MAX_PREFILL_TOKENS = 16384

RANK = 0
_print_lock = threading.RLock()  # re-entrant: the SIGTERM handler may interrupt a log() call


class Fatal(Exception):
    """A boot error the real engine would die of (printed as RuntimeError, exit 1)."""


# --------------------------------------------------------------------------- logging

def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    with _print_lock:
        sys.stdout.write(f"[{stamp} TP{RANK} EP{RANK}] {msg}\n")
        sys.stdout.flush()


def pace(seconds: float) -> None:
    if os.environ.get("LAB_ENGINE_FAST", "0") not in ("", "0"):
        return
    time.sleep(seconds)


def speed_sleep(seconds: float) -> None:
    try:
        factor = float(os.environ.get("LAB_ENGINE_SPEED", "1") or 1)
    except ValueError:
        factor = 1.0
    if factor <= 0:
        factor = 1.0
    if seconds > 0:
        time.sleep(seconds / factor)


def flag(name: str) -> bool:
    return os.environ.get(name, "0").strip() not in ("", "0", "false", "False", "off")


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


# --------------------------------------------------------------------------- container paths

def load_mounts() -> dict:
    try:
        mounts = json.loads(os.environ.get("LAB_MOUNTS", "") or "{}")
        return {str(k): str(v) for k, v in mounts.items()} if isinstance(mounts, dict) else {}
    except ValueError:
        return {}


def host_path(container_path: str, mounts: dict | None = None) -> str:
    """Map a container path to the host path through LAB_MOUNTS (longest-prefix match)."""
    mounts = load_mounts() if mounts is None else mounts
    best = None
    for dst in mounts:
        d = dst.rstrip("/") or "/"
        if container_path == d or container_path.startswith(d + "/") or d == "/":
            if best is None or len(d) > len(best[0]):
                best = (d, mounts[dst])
    if best is None:
        return container_path
    d, src = best
    rest = container_path[len(d):] if d != "/" else container_path
    return src.rstrip("/") + rest if rest else src


# --------------------------------------------------------------------------- checkpoint / engram

def read_safetensors_header(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise Fatal(f"RuntimeError: {path} is not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * MIB:
            raise Fatal(f"RuntimeError: {path} has an implausible safetensors header length {length}")
        data = fh.read(length)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise Fatal(f"RuntimeError: {path}: bad safetensors header ({exc})") from None


def engram_rows(model_path_container: str, mounts: dict) -> dict:
    """Return {layer: N} from the checkpoint (index + safetensors headers)."""
    model_dir = host_path(model_path_container, mounts)
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    weight_map = {}
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as fh:
            weight_map = json.load(fh).get("weight_map", {})
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        weight_map = None
    else:
        raise Fatal(f"RuntimeError: no checkpoint index at {model_path_container}/model.safetensors.index.json")
    headers: dict = {}
    result = {}
    for layer in ENGRAM_LAYERS:
        wname = f"layers.{layer}.engram.embed.weight"
        sname = f"layers.{layer}.engram.embed.scale"
        fname = "model.safetensors" if weight_map is None else weight_map.get(wname)
        if not fname:
            raise Fatal(f"RuntimeError: Engram tensor {wname} not found in checkpoint index")
        if fname not in headers:
            headers[fname] = read_safetensors_header(os.path.join(model_dir, fname))
        hdr = headers[fname]
        w = hdr.get(wname)
        s = hdr.get(sname)
        if not w or not s:
            raise Fatal(f"RuntimeError: Engram tensors for layer {layer} missing in {fname}")
        if (w.get("dtype") != "F8_E4M3" or len(w.get("shape", [])) != 2 or w["shape"][1] != 256
                or s.get("dtype") != "F8_E8M0" or list(s.get("shape", [])) != [w["shape"][0], 8]):
            raise Fatal(f"RuntimeError: Engram tensors for layer {layer} have unexpected dtype/shape "
                        f"({w.get('dtype')} {w.get('shape')}, {s.get('dtype')} {s.get('shape')})")
        result[layer] = int(w["shape"][0])
    return result


def check_shard(host_file: str, shown: str, layer: int, lo: int, hi: int, n: int) -> bool:
    """False if missing; True if valid; Fatal if present but invalid."""
    if not os.path.exists(host_file):
        return False
    size = os.path.getsize(host_file)
    with open(host_file, "rb") as fh:
        head = fh.read(HEADER_BYTES)
    if len(head) < 48 or struct.unpack_from("<Q", head, 0)[0] != MAGIC or size < HEADER_BYTES:
        raise Fatal(f"RuntimeError: packed Engram shard {shown} has no header; re-run the pack step")
    fields = struct.unpack_from("<6Q", head, 0)
    if fields != (MAGIC, layer, lo, hi, n, ROW_BYTES) or any(head[48:HEADER_BYTES]):
        raise Fatal(f"RuntimeError: packed Engram shard {shown} does not match this rank's range; "
                    f"re-run the pack step")
    if size != HEADER_BYTES + (hi - lo) * ROW_BYTES:
        raise Fatal(f"RuntimeError: packed Engram shard {shown} is truncated; re-run the pack step")
    return True


# --------------------------------------------------------------------------- memory model

def memory_model(frac: float, pin: int | None) -> dict:
    avail = 1.04e9 + round((frac - 0.95) * 100, 6) * 1.2e9
    avail -= env_float("DSV41_CACHE_GIB", 0.0) * GIB
    if flag("DSV41_WO_A_W8"):
        avail -= 688 * MIB
        if flag("DSV41_WO_A_W8_DROP"):
            avail += 1376 * MIB
    if flag("DSV41_DRAFT_HEAD_FP8"):
        avail -= 210.6 * MIB
    if os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip() == "2":
        avail -= 96 * MIB
    fit = max(0, math.floor(avail / BYTES_PER_FULL_TOKEN * 0.8 / POOL_ALIGN)) * POOL_ALIGN
    pool = min(pin, fit) if pin else fit
    return {
        "available_bytes": avail,
        "full_token": 0.8 * avail,
        "pool": pool,
        "swa": pool // 4,
        "c128": pool // 128,
        "after": avail - pool * BYTES_PER_FULL_TOKEN,
    }


# --------------------------------------------------------------------------- autotune

def autotune_paths(args) -> tuple:
    key = f"block={args.dspark_block_size};mrr={args.max_running_requests};" \
          f"chunk={args.chunked_prefill_size};tp={args.tp_size}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cdir = f"{AUTOTUNE_ROOT}/{digest}"
    cfile = f"{cdir}/rank_tp{args.rank}_pp0_dp0.json"
    return cdir, cfile


def launch_fingerprint(argv: list) -> str:
    lines = ["argv:" + "\x1f".join(argv)]
    for k in sorted(os.environ):
        if k.startswith(FINGERPRINT_PREFIXES):
            lines.append(f"{k}={os.environ[k]}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def write_atomic(path: str, data: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.replace(tmp, path)


def tune(args, shown: str, host_file: str, pass_name: str) -> None:
    log(f"Running FlashInfer autotune with cache: {shown}")
    pace(0.25)
    payload = {"lab": True, "rank": args.rank, "pass": pass_name, "tuned_at": time.time(),
               "tactics": {f"moe_gemm_m{m}": (args.rank * 31 + m) % 11 for m in (1, 2, 4, 8, 16)}}
    write_atomic(host_file, json.dumps(payload, indent=1, sort_keys=True) + "\n")
    log("FlashInfer autotune completed.")


def log_capture(pass_name: str, max_running: int) -> None:
    """The capture lines of one pass: the lab's summary, then SGLang's batch-size list."""
    log(f"Capturing {pass_name} cuda graphs (bs 1..{max_running})")
    shapes = ", ".join(str(bs) for bs in range(1, max_running + 1))
    what = "draft cuda graph" if pass_name == "draft" else "cuda graph"
    log(f"Capture {what} bs [{shapes}]")


def _registered_adapters(sitecustomize: str) -> set:
    """Keys of the ``_ADAPTERS`` mapping of a sitecustomize.py (empty if unreadable): ``_ADAPTERS = {...}``
    or ``dict(name=...)``, ``_ADAPTERS["name"] = ...`` and ``_ADAPTERS.update({...} / name=...)``."""
    import ast
    try:
        with open(sitecustomize, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=sitecustomize)
    except (OSError, SyntaxError, ValueError):
        return set()

    def is_mapping(node):
        return isinstance(node, ast.Name) and node.id == "_ADAPTERS"

    def keys_of(value):
        if isinstance(value, ast.Dict):
            return {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
            out = {kw.arg for kw in value.keywords if kw.arg}
            for arg in value.args:
                out |= keys_of(arg)
            return out
        return set()

    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if is_mapping(t):
                    keys |= keys_of(node.value)
                elif isinstance(t, ast.Subscript) and is_mapping(t.value) and isinstance(t.slice, ast.Constant) \
                        and isinstance(t.slice.value, str):
                    keys.add(t.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and is_mapping(node.func.value):
            keys |= {kw.arg for kw in node.keywords if kw.arg}
            for arg in node.args:
                keys |= keys_of(arg)
    return keys


def adapter_in_image(name: str) -> bool:
    """The adapter NAME is in the container's image: ``$LAB_IMAGE_ROOT/sgl-workspace/adapter/<name>.py``
    exists and the image's ``sitecustomize.py`` registers it in ``_ADAPTERS``. Without LAB_IMAGE_ROOT
    (an engine started outside the docker stand-in) every adapter counts as present."""
    root = os.environ.get("LAB_IMAGE_ROOT")
    if root is None:
        return True
    adir = os.path.join(root, IMAGE_ADAPTER_DIR)
    return (os.path.isfile(os.path.join(adir, f"{name}.py"))
            and name in _registered_adapters(os.path.join(adir, "sitecustomize.py")))


def autotune_keep_armed() -> bool:
    """DSV41_AUTOTUNE_KEEP non-zero and the retention adapter in the image; otherwise the switch is
    silently ignored, as the real engine ignores a switch whose adapter the image does not carry."""
    return flag("DSV41_AUTOTUNE_KEEP") and adapter_in_image("autotune_keep")


def run_autotune(args, mounts: dict) -> None:
    cdir, cfile = autotune_paths(args)
    host_file = host_path(cfile, mounts)
    keep = autotune_keep_armed()
    if keep:
        drift = os.environ.get("LAB_ENGINE_DRIFT", "").strip()
        drift_file = os.environ.get("LAB_ENGINE_DRIFT_FILE", "/etc/dsv41-lab/engine_drift")
        if not drift and os.path.isfile(drift_file):
            with open(drift_file, encoding="utf-8") as fh:
                lines = fh.read().split()
            drift = lines[0] if lines else ""
        if drift:
            raise Fatal(f"DSV41_AUTOTUNE_KEEP: {drift} is gone; engine drifted")
        log("[autotune_keep] armed")
        fp = launch_fingerprint(sys.argv[1:])
        sidecar = host_file + ".launch"
        valid = False
        if os.path.exists(host_file) and os.path.exists(sidecar):
            with open(sidecar, encoding="utf-8") as fh:
                valid = fh.read().strip() == fp
        for pass_name in ("target", "draft"):
            log_capture(pass_name, args.max_running_requests)
            if valid:
                log(f"[autotune_keep] reused {cfile}")
            else:
                tune(args, cfile, host_file, pass_name)
                write_atomic(sidecar, fp + "\n")
                log(f"[autotune_keep] tuned and saved {cfile}")
            pace(0.1)
    else:
        existed = os.path.exists(host_file)
        for pass_name in ("target", "draft"):
            log_capture(pass_name, args.max_running_requests)
            if existed:
                log("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from "
                    "scratch so all ranks agree on the tactics.")
            tune(args, cfile, host_file, pass_name)
            pace(0.1)


# --------------------------------------------------------------------------- boot

def parse_args(argv: list):
    p = argparse.ArgumentParser(prog="dsv41_engine", add_help=True)
    p.add_argument("--role", choices=("head", "worker"), default="head")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--tp-size", type=int, default=3)
    p.add_argument("--ep-size", type=int, default=3)
    p.add_argument("--model-path", default="/srv/models/DeepSeek-V4.1-Flash")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--dspark-block-size", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=4)
    p.add_argument("--chunked-prefill-size", type=int, default=1024)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--mem-fraction-static", type=float, default=0.95)
    p.add_argument("--moe-runner-backend", default="auto")
    p.add_argument("--dist-init-addr", default="")
    args, _unknown = p.parse_known_args(argv)
    if args.dspark_block_size is None:
        try:
            args.dspark_block_size = int(os.environ.get("DSPARK_BLOCK_SIZE", "3") or 3)
        except ValueError:
            args.dspark_block_size = 3
    if args.max_running_requests < 1:
        args.max_running_requests = 1
    return args


def server_args_line(args) -> str:
    api = "'***'" if os.environ.get("API_KEY") else "None"
    pin = args.max_total_tokens if args.max_total_tokens else None
    dist = f"'{args.dist_init_addr}'" if args.dist_init_addr else "None"
    return (f"server_args=ServerArgs(model_path='{args.model_path}', tokenizer_path='{args.model_path}', "
            f"host='{args.host}', port={args.port}, tp_size={args.tp_size}, ep_size={args.ep_size}, "
            f"nnodes={args.tp_size}, node_rank={args.rank}, dist_init_addr={dist}, "
            f"mem_fraction_static={args.mem_fraction_static}, max_running_requests={args.max_running_requests}, "
            f"max_total_tokens={pin}, chunked_prefill_size={args.chunked_prefill_size}, "
            f"speculative_algorithm='DSPARK', speculative_num_draft_tokens={args.dspark_block_size}, "
            f"moe_runner_backend='{args.moe_runner_backend}', context_length={CONTEXT_LEN}, "
            f"api_key={api}, served_model_name='{args.model_path}')")


def boot(args) -> dict:
    mounts = load_mounts()
    log(server_args_line(args))
    pace(0.15)
    log(f"Init torch distributed begin. rank={args.rank} world_size={args.tp_size} (lab stand-in: no GPU)")
    pace(0.2)
    on = [k for k in ("DSV41_AUTOTUNE_KEEP", "DSV41_FOLDED_FENCE", "DSV41_WO_A_W8", "DSV41_WO_A_W8_MID",
                      "DSV41_WO_A_W8_DROP", "DSV41_ENGRAM_PREFETCH", "DSV41_ENGRAM_PREFETCH_CHECK",
                      "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY") if flag(k)]
    if "DSV41_AUTOTUNE_KEEP" in on and not autotune_keep_armed():
        on.remove("DSV41_AUTOTUNE_KEEP")  # not in the image: the switch does nothing
    log("Adapters enabled: " + (", ".join(on) if on else "none"))
    folded = os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip()
    log("DSpark folded sampling: " + ({"": "AUTO (unset; decided from the minimum free memory across ranks)",
                                       "0": "off", "2": "forced (static buffers 96 MiB)"}
                                      .get(folded, f"mode={folded}")))
    log("Load weight begin.")
    pace(0.2)

    rows = engram_rows(args.model_path, mounts)
    packed_dir = os.environ.get("DSV41_PACKED_DIR", "/engram").rstrip("/") or "/engram"
    cache_gib_total = env_float("DSV41_CACHE_GIB", 0.0)
    ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
    packed_all = True
    for layer in ENGRAM_LAYERS:
        n = rows[layer]
        r, tp = args.rank, args.tp_size
        lo, hi = n * r // tp, n * (r + 1) // tp
        name = f"engram-l{layer}-r{r}of{tp}.bin"
        shown = f"{packed_dir}/{name}"
        packed = check_shard(host_path(shown, mounts), shown, layer, lo, hi, n)
        packed_all = packed_all and packed
        cache = cache_gib_total / len(ENGRAM_LAYERS)
        slots = int(cache * GIB // ROW_BYTES // ways * ways) if cache > 0 else 0
        owned = max(1, hi - lo)
        pct = min(100.0, 100.0 * slots / owned)
        log(f"Exact nvme Engram layer={layer} rank={r} rows=[{lo},{hi}) cache={cache:.1f}GiB "
            f"({slots} slots, {ways}-way, {pct:.1f}% of owned rows) scales=0.0GiB io_threads=96 "
            f"packed={packed}")
        pace(0.1)
    if flag("DSV41_ENGRAM_PREFETCH"):
        log("[engram_prefetch] " + ("armed" if packed_all else "disabled: Engram shards not packed on this rank")
            + (" (check mode: validating every prefetched row)" if flag("DSV41_ENGRAM_PREFETCH_CHECK") else ""))
    log("Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16")
    pace(0.2)

    mem = memory_model(args.mem_fraction_static, args.max_total_tokens)
    log(f"DSV4 memory calculation: bytes_per_full_token={BYTES_PER_FULL_TOKEN:.2f}, "
        f"available_bytes={mem['available_bytes'] / GB:.2f} GB, c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, "
        f"full_token={mem['full_token'] / GB:.2f} GB")
    if mem["pool"] < POOL_ALIGN:
        raise Fatal("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                    f"(available_bytes={mem['available_bytes'] / GB:.2f} GB)")
    pool_line = f"DSV4 pool sizes: full={mem['pool']}, swa={mem['swa']}, c128={mem['c128']}"
    log(pool_line)
    pace(0.1)
    log(pool_line)
    pace(0.1)

    run_autotune(args, mounts)

    log(f"max_total_num_tokens={mem['pool']}, chunked_prefill_size={args.chunked_prefill_size}, "
        f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={args.max_running_requests}, "
        f"context_len={CONTEXT_LEN}, available_gpu_mem={mem['after'] / GB:.2f} GB")
    return {"packed": packed_all, "rows": rows, "mem": mem}


# --------------------------------------------------------------------------- rendezvous (lab detail)

class RankStates:
    def __init__(self, own_packed: bool):
        self.lock = threading.Lock()
        self.packed = {0: own_packed}

    def set(self, rank: int, packed: bool) -> None:
        with self.lock:
            self.packed[rank] = packed

    def all_packed(self) -> bool:
        with self.lock:
            return all(self.packed.values())


def start_rendezvous_server(addr: str, states: RankStates) -> None:
    try:
        port = int(addr.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                msg = json.loads(self.rfile.readline(4096).decode() or "{}")
                states.set(int(msg["rank"]), bool(msg["packed"]))
            except (ValueError, KeyError, TypeError):
                pass

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    try:
        srv = Server(("0.0.0.0", port), Handler)
    except OSError as exc:
        log(f"rendezvous port {port} unavailable ({exc}); using this rank's state only")
        return
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def worker_report_loop(addr: str, rank: int, packed: bool) -> None:
    try:
        host, port = addr.rsplit(":", 1)
        port = int(port)
    except ValueError:
        return
    msg = (json.dumps({"rank": rank, "packed": packed}) + "\n").encode()
    while True:
        try:
            with socket.create_connection((host, port), timeout=2) as s:
                s.sendall(msg)
        except OSError:
            pass
        time.sleep(2)


# --------------------------------------------------------------------------- serving

WORDS_PROSE = ("the of and a to in is was that for on with as by at from it be this are which an or have "
               "one had not but what all were when we there can more if will each about how up out them "
               "then she many some so these would other into has two like time could way been now people "
               "rank engram token memory step cache draft verify block").split()
WORDS_CODE = ("def return self if else for in range import from None True False print len list dict "
              "value key result x y i n args kwargs class raise try except with as yield lambda".split())


def prompt_text(messages) -> str:
    parts = []
    for m in messages or []:
        c = m.get("content", "") if isinstance(m, dict) else ""
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(str(c))
    return "\n".join(parts)


def count_prompt_tokens(messages) -> int:
    total = 3
    for m in messages or []:
        text = prompt_text([m])
        total += 4 + (len(text.split()) * 4 + 2) // 3
    return total


class Engine:
    def __init__(self, args, state: dict, ranks: RankStates):
        self.args = args
        self.state = state
        self.ranks = ranks
        self.sem = threading.BoundedSemaphore(args.max_running_requests)
        self.lock = threading.Lock()
        self.active = 0
        self.queued = 0
        self.lookups = 0

    def step_ms(self) -> float:
        k = self.args.dspark_block_size
        base = 98.0 if self.ranks.all_packed() else 120.0
        base += 4.0 * (k - 3)
        if flag("DSV41_WO_A_W8"):
            base -= 4.0
        if flag("DSV41_ENGRAM_PREFETCH") and self.ranks.all_packed():
            base -= 2.0
        if flag("DSV41_ENGRAM_PREFETCH_CHECK"):
            base += 15.0
        if flag("DSV41_DRAFT_HEAD_FP8"):
            base -= 1.0
        with self.lock:
            active = max(1, self.active)
        return base * (1 + 0.12 * (active - 1))

    def plan(self, body: dict) -> dict:
        messages = body.get("messages") or []
        text = prompt_text(messages)
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
        h = int.from_bytes(digest[:8], "little")
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        rng = random.Random(h) if temperature <= 0 else random.Random(int.from_bytes(os.urandom(8), "little"))
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
        natural = 64 + h % 961 + (256 if thinking else 0)
        if temperature > 0:
            natural = max(64, natural + rng.randint(-32, 32))
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 1024
        n_out = max(0, min(int(max_tokens), natural))
        low = text.lower()
        code = "def " in low or "code" in low
        vocab = WORDS_CODE if code else WORDS_PROSE
        words = [rng.choice(vocab) for _ in range(n_out)]
        accept = (0.70 if code else 0.55)
        if os.environ.get("DSV41_DRAFT_TAU", "").strip() not in ("", "0", "1", "1.0"):
            accept += 0.02
        if os.environ.get("DSV41_VERIFY_CAP", "").strip() not in ("", "0"):
            accept += 0.02
        return {"words": words, "prompt_tokens": count_prompt_tokens(messages), "accept": min(accept, 0.95),
                "finish": "length" if n_out < natural else "stop", "rng": rng}

    def steps(self, plan: dict):
        """Yield lists of committed words, sleeping one speculative step per list."""
        k = self.args.dspark_block_size
        words = plan["words"]
        rng = plan["rng"]
        i = 0
        while i < len(words):
            n = 1 + sum(1 for _ in range(k) if rng.random() < plan["accept"])
            speed_sleep(self.step_ms() * rng.uniform(0.97, 1.03) / 1000.0)
            yield words[i:i + n]
            i += n

    def enter(self):
        with self.lock:
            self.queued += 1
        self.sem.acquire()
        with self.lock:
            self.queued -= 1
            self.active += 1

    def leave(self, plan: dict, n_tokens: int, steps: int, wall: float) -> None:
        with self.lock:
            self.active -= 1
            running, queued = self.active, self.queued
            self.lookups += plan["prompt_tokens"] + n_tokens
            lookups = self.lookups
        self.sem.release()
        rate = n_tokens / wall if wall > 0 else 0.0
        log(f"Decode batch. #running-req: {running + 1}, #token: {plan['prompt_tokens'] + n_tokens}, "
            f"token usage: 0.00, accept len: {n_tokens / max(1, steps):.2f}, "
            f"gen throughput (token/s): {rate:.2f}, #queue-req: {queued}")
        for layer in ENGRAM_LAYERS:
            log(f"Engram layer={layer} lookups={lookups} hit_rate=0.0% reads={lookups} "
                f"cache={env_float('DSV41_CACHE_GIB', 0.0) / 2:.1f}GiB({int(env_float('DSV41_CACHE_WAYS', 4)) or 4}-way) "
                f"scales=0.0GiB threads=96 packed={self.state['packed']}")


def make_handler(engine: Engine):
    model_id = engine.args.model_path

    class Handler(BaseHTTPRequestHandler):
        server_version = "dsv41-lab-engine/1.0"

        def log_message(self, fmt, *a):  # keep the container log clean
            pass

        def send_json(self, code: int, obj) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self) -> bool:
            key = os.environ.get("API_KEY", "")
            if not key:
                return True
            if self.headers.get("Authorization", "") == f"Bearer {key}":
                return True
            self.send_json(401, {"error": {"message": "Unauthorized", "type": "invalid_request_error"}})
            return False

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self.send_json(200, {"status": "ok"})
            elif path == "/v1/models":
                if self.authorized():
                    self.send_json(200, {"object": "list", "data": [
                        {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                         "root": model_id, "max_model_len": CONTEXT_LEN}]})
            else:
                self.send_json(404, {"error": {"message": "Not Found"}})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if path != "/v1/chat/completions":
                self.send_json(404, {"error": {"message": "Not Found"}})
                return
            if not self.authorized():
                return
            try:
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    raise ValueError("messages must be a list")
            except ValueError as exc:
                self.send_json(400, {"error": {"message": f"bad request: {exc}", "type": "invalid_request_error"}})
                return
            plan = engine.plan(body)
            engine.enter()
            start = time.monotonic()
            n_tokens = 0
            n_steps = 0
            try:
                speed_sleep((60.0 + 0.05 * plan["prompt_tokens"]) / 1000.0)
                rid = "chatcmpl-" + uuid.uuid4().hex[:24]
                created = int(time.time())
                model = body.get("model") or model_id
                usage_fn = lambda: {"prompt_tokens": plan["prompt_tokens"], "completion_tokens": n_tokens,
                                    "total_tokens": plan["prompt_tokens"] + n_tokens}
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()

                    def sse(obj) -> None:
                        data = obj if isinstance(obj, str) else json.dumps(obj)
                        self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()

                    def chunk(delta, finish=None):
                        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

                    sse(chunk({"role": "assistant", "content": ""}))
                    first = True
                    for block in engine.steps(plan):
                        piece = ("" if first else " ") + " ".join(block)
                        first = False
                        n_tokens += len(block)
                        n_steps += 1
                        sse(chunk({"content": piece}))
                    sse(chunk({}, plan["finish"]))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [], "usage": usage_fn()})
                    sse("[DONE]")
                else:
                    out = []
                    for block in engine.steps(plan):
                        out.extend(block)
                        n_steps += 1
                    n_tokens = len(out)
                    self.send_json(200, {
                        "id": rid, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(out)},
                                     "finish_reason": plan["finish"]}],
                        "usage": usage_fn()})
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                engine.leave(plan, n_tokens, n_steps, time.monotonic() - start)

    return Handler


# --------------------------------------------------------------------------- main

def on_sigterm(_signum, _frame):
    log("Received sigterm, shutting down")
    os._exit(0)


def main(argv: list | None = None) -> int:
    global RANK
    args = parse_args(sys.argv[1:] if argv is None else argv)
    RANK = args.rank
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        state = boot(args)
    except Fatal as exc:
        log(str(exc))
        return 1
    except OSError as exc:
        log(f"RuntimeError: {exc}")
        return 1
    if args.role == "worker" or args.rank != 0:
        if args.dist_init_addr:
            threading.Thread(target=worker_report_loop, args=(args.dist_init_addr, args.rank, state["packed"]),
                             daemon=True).start()
        log("Worker ready; waiting for the head (rank 0)")
        while True:
            time.sleep(3600)
    ranks = RankStates(state["packed"])
    if args.dist_init_addr:
        start_rendezvous_server(args.dist_init_addr, ranks)
    engine = Engine(args, state, ranks)

    class Server(ThreadingHTTPServer):
        allow_reuse_address = True
        daemon_threads = True

    try:
        httpd = Server((args.host, args.port), make_handler(engine))
    except OSError as exc:
        log(f"RuntimeError: cannot bind {args.host}:{args.port}: {exc}")
        return 1
    log(f"Ready: API on port {args.port}")
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
