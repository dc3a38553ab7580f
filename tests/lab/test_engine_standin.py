"""Tests for the lab engine stand-in (lab/standins/dsv41_engine.py) and launcher stand-in (start.sh).

Run on the control machine: no podman, no GPU. The engine runs exactly as the lab docker stand-in starts it:
under the docker stand-in's supervisor (``docker __lab-supervise``), which captures its stdout and stderr apart
into a json-file log, with LAB_MOUNTS pointing into tmp dirs (checkpoint, /engram, /root/.cache).
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "lab" / "standins" / "dsv41_engine.py"
START_SH = ROOT / "lab" / "standins" / "start.sh"
SEED_ENV = ROOT / "lab" / "seed" / "launcher.env"
SITE_ENV = ROOT / "lab" / "seed" / "launcher.env.site"   # appended by the seeder: the .env's undeclared site keys


def seeded_env_text() -> str:
    """The head's .env as the lab seeds it: the rendered baseline, then the site keys."""
    return SEED_ENV.read_text() + SITE_ENV.read_text()
SEED_LOG = ROOT / "lab" / "seed" / "dsv41.log"
ADAPTERS = ROOT / "lab" / "seed" / "adapters"
REPORT_HOOK = ROOT / "lab" / "seed" / "sitecustomize-report.py"  # the import hook as the report found it
DOCKER = ROOT / "lab" / "standins" / "docker"
MAGIC = 0x31344E4531565344
ROWS = {1: 30, 14: 33}
TS = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
SCHED = re.compile(rf"^\[{TS} TP(\d) EP\1\] ")          # scheduler logging prefix
MAIN = re.compile(rf"^\[{TS}\] ")                        # main-process logging prefix
ANY_PREFIX = re.compile(rf"\[{TS}(?: TP\d EP\d)?\] ")
DISAGREE = ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
            "ranks agree on the tactics.")
RANK0_ONLY = ("max_total_num_tokens=", "Engine startup timings", DISAGREE, "Decode batch", "sglang is using nccl",
              "DSpark draft proposal")


# ------------------------------------------------------------------ fixtures / helpers

def write_checkpoint(model_dir: Path, rows=ROWS) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    header, offset = {}, 0
    for layer, n in rows.items():
        for name, dtype, width in (("weight", "F8_E4M3", 256), ("scale", "F8_E8M0", 8)):
            size = n * width
            header[f"layers.{layer}.engram.embed.{name}"] = {
                "dtype": dtype, "shape": [n, width], "data_offsets": [offset, offset + size]}
            offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(model_dir / "model-00001-of-00001.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    index = {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in header}}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index))


def write_shard(engram: Path, layer: int, rank: int, tp: int = 3, *, lo=None, hi=None, truncate=0, magic=MAGIC,
                extra=0, padding=b""):
    n = ROWS[layer]
    lo = n * rank // tp if lo is None else lo
    hi = n * (rank + 1) // tp if hi is None else hi
    head = (struct.pack("<6Q", magic, layer, lo, hi, n, 264) + padding).ljust(4096, b"\0")
    engram.mkdir(parents=True, exist_ok=True)
    path = engram / f"engram-l{layer}-r{rank}of{tp}.bin"
    path.write_bytes(head + bytes(max(0, (hi - lo) * 264 - truncate + extra)))
    return path


@pytest.fixture()
def lab(tmp_path):
    models = tmp_path / "models"
    write_checkpoint(models / "DeepSeek-V4.1-Flash")
    engram = tmp_path / "engram"
    engram.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    mounts = {"/engram": str(engram), "/srv/models": str(models), "/root/.cache": str(cache)}
    # one port per test: identical boots have identical argv (the retention adapter fingerprints it)
    return {"tmp": tmp_path, "engram": engram, "cache": cache, "mounts": mounts, "port": free_port()}


REPORT_ENV = {"DSV41_CACHE_GIB": "0", "DSV41_CACHE_WAYS": "4", "DSPARK_BLOCK_SIZE": "3",
              "DSV41_MOE_DENSE_ROUTING": "1", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_argv(role="worker", rank=1, port=None, block=3, frac="0.95", pin="750000", extra=()):
    return ["--role", role, "--rank", str(rank), "--tp-size", "3", "--ep-size", "3",
            "--model-path", "/srv/models/DeepSeek-V4.1-Flash", "--port", str(port or free_port()),
            "--dspark-block-size", str(block), "--max-running-requests", "4",
            "--chunked-prefill-size", "1024", "--max-total-tokens", pin,
            "--mem-fraction-static", frac, *extra]


class Proc:
    """The engine under the docker stand-in's supervisor: its two streams land in a json-file log."""

    def __init__(self, lab, argv, env=None, name="engine"):
        self.state = lab["tmp"] / "docker-state"
        (self.state / "run").mkdir(parents=True, exist_ok=True)
        self.log = self.state / f"{name}-{time.monotonic_ns()}.log"
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(lab["tmp"]),
                    "LAB_MOUNTS": json.dumps(lab["mounts"]), "LAB_ENGINE_FAST": "1",
                    "LAB_ENGINE_SPEED": "50", "LAB_CONTAINER_NAME": name,
                    "LAB_ENGINE_ENV_FILE": str(lab["tmp"] / "no-knobs.env"),
                    "LAB_ENGINE_DRIFT_FILE": str(lab["tmp"] / "no-drift"), **REPORT_ENV, **(env or {})}
        self.started = time.monotonic()
        self.p = subprocess.Popen([sys.executable, str(DOCKER), "__lab-supervise", str(self.state), "0123456789ab",
                                   str(self.log), "--", sys.executable, str(ENGINE), *argv],
                                  env=full_env, start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)

    def records(self) -> list:
        try:
            data = self.log.read_bytes()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].splitlines()]

    def text(self) -> str:
        """Both streams in log order (what ``docker logs 2>&1`` shows)."""
        return "".join(r["log"] for r in self.records())

    def stream(self, name: str) -> str:
        return "".join(r["log"] for r in self.records() if r["stream"] == name)

    def wait_for(self, needle: str, timeout=20.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.text()
            if needle in t:
                return t
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not seen; rc={self.p.poll()} log:\n{self.text()}")

    def exit_code(self) -> int:
        (rec,) = [p for p in (self.state / "run").glob(f"0123456789ab-{self.p.pid}.json")]
        return json.loads(rec.read_text())["ExitCode"]

    def stop(self) -> int:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)  # as docker stop signals the container's group
        self.p.wait(timeout=15)
        return self.exit_code()

    def wait_exit(self, timeout=20) -> int:
        self.p.wait(timeout=timeout)
        return self.exit_code()


WORKER_DONE = "INFO:     Uvicorn running on"   # the last boot line of every rank (workers: dummy health server)


def boot_worker(lab, env=None, rank=1, block=3, frac="0.95", pin="750000"):
    """Boot a rank to completion (the HTTP-less role), stop it with SIGTERM, return the Proc."""
    proc = Proc(lab, engine_argv("worker", rank, port=lab["port"], block=block, frac=frac, pin=pin), env)
    try:
        proc.wait_for(WORKER_DONE)
    finally:
        rc = proc.stop()
    assert rc == 0 and "Received sigterm=15, shutting down." in proc.stream("stderr")
    return proc


def run_to_exit(lab, argv, env=None):
    proc = Proc(lab, argv, env)
    rc = proc.wait_exit()
    return rc, proc


def ns_of(stamp: str) -> int:
    """Nanoseconds of a json-file time (RFC3339Nano, trailing zeros trimmed)."""
    import calendar
    secs = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    frac = stamp[20:-1] if stamp[19] == "." else ""
    return secs * 10 ** 9 + int(frac.ljust(9, "0"))


def phys(text: str) -> list:
    """Physical lines (str.splitlines would also cut at the carriage returns of tqdm redraws)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def messages(text: str) -> list:
    """Log messages: physical lines cut at \\r, cursor codes and glued prefixes, prefixes removed."""
    out = []
    for line in phys(text):
        for seg in re.split(r"\r|\x1b\[A", line):
            for part in re.split(rf"(?=\[{TS}(?: TP\d EP\d)?\] )", seg):
                part = ANY_PREFIX.sub("", part, count=1) if ANY_PREFIX.match(part) else part
                if part.strip():
                    out.append(part)
    return out


def marker_dict(text: str) -> dict:
    (line,) = [ln for ln in phys(text) if MAIN.match(ln) and "] server_args=" in ln]
    return ast.literal_eval(line.split("] server_args=", 1)[1])


# ------------------------------------------------------------------ streams, prefixes, marker

def test_streams_prefixes_and_dict_marker(lab):
    proc = boot_worker(lab)
    out, err = proc.stream("stdout"), proc.stream("stderr")
    assert out == "", "a stock worker prints nothing with print()"
    lines = phys(err)
    marker = lines[0]
    assert MAIN.match(marker) and marker.split("] ", 1)[1].startswith("server_args={'model_path': ")
    assert 16_800 <= len(marker.encode()) <= 17_400, len(marker)   # the real head's is 17,130 bytes
    args = marker_dict(err)
    assert {k: args[k] for k in ("model_path", "max_total_tokens", "page_size", "nnodes", "node_rank", "tp_size",
                                 "api_key", "speculative_algorithm", "speculative_num_draft_tokens", "ep_size",
                                 "mem_fraction_static", "max_running_requests", "chunked_prefill_size")} == {
        "model_path": "/srv/models/DeepSeek-V4.1-Flash", "max_total_tokens": 750000, "page_size": 256, "nnodes": 3,
        "node_rank": 1, "tp_size": 3, "api_key": None, "speculative_algorithm": "DSPARK",
        "speculative_num_draft_tokens": 4, "ep_size": 3, "mem_fraction_static": 0.95, "max_running_requests": 4,
        "chunked_prefill_size": 1024}
    assert any(isinstance(v, dict) and v for v in args.values()) and any(isinstance(v, list) and v for v in args.values())
    assert None in args.values() and True in args.values()
    assert marker.count("server_args=") == 1 and len([ln for ln in lines if "server_args=" in ln]) == 1
    # every physical stderr line: a logging record, or raw tqdm output (bars and their redraws)
    for ln in lines[1:]:
        assert SCHED.match(ln) and SCHED.match(ln).group(1) == "1" or MAIN.match(ln) \
            or ln.startswith(("Capturing batches", "\rCapturing batches")), repr(ln[:120])
    assert not any(ln.startswith("Ready:") for ln in lines)
    # rows [10,20) of 30 and [11,22) of 33 for rank 1 of 3
    assert ("Exact nvme Engram layer=1 rank=1 rows=[10,20) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) "
            "scales=0.0GiB io_threads=96 packed=False") in messages(err)
    assert "Exact nvme Engram layer=14 rank=1 rows=[11,22) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) " \
           "scales=0.0GiB io_threads=96 packed=False" in messages(err)
    # json-file records: stamped in write order, nanosecond times strictly increasing
    times = [r["time"] for r in proc.records()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", t) for t in times)
    ns = [ns_of(t) for t in times]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)


def test_rank0_only_lines_absent_on_workers(lab):
    for rank in (1, 2):
        err = boot_worker(lab, rank=rank).stream("stderr")
        for needle in RANK0_ONLY:
            assert needle not in err, (rank, needle)
    # a second boot finds caches: still no disagreement line on a worker, but rank 0 has it
    assert DISAGREE not in boot_worker(lab, rank=1).stream("stderr")
    boot_worker(lab, rank=0)
    rank0 = boot_worker(lab, rank=0).stream("stderr")
    for needle in ("max_total_num_tokens=", "Engine startup timings (s): load_weight=", DISAGREE,
                   "sglang is using nccl==2.27.7", "DSpark draft proposal"):
        assert needle in rank0, needle


def test_ssd_offload_mode(lab):
    err = boot_worker(lab, env={"OFFLOAD_MODE": "ssd"}).stream("stderr")
    assert "Exact ssd Engram layer=1 rank=1 rows=[10,20)" in err and "Exact nvme" not in err


# ------------------------------------------------------------------ engram

def test_packed_true_with_valid_shards(lab):
    write_shard(lab["engram"], 1, 1)
    write_shard(lab["engram"], 14, 1)
    write_shard(lab["engram"], 1, 0)  # other ranks' files are ignored
    err = boot_worker(lab).stream("stderr")
    assert err.count("packed=True") == 2 and "packed=False" not in err


def test_one_layer_packed(lab):
    write_shard(lab["engram"], 14, 1)
    err = boot_worker(lab).stream("stderr")
    assert re.search(r"layer=1 rank=1 .* packed=False", err)
    assert re.search(r"layer=14 rank=1 .* packed=True", err)


def test_engine_accepts_longer_file_and_header_padding(lab):
    """SPEC: the engine checks magic/layer/lo/hi/N/row bytes only (the project is stricter)."""
    write_shard(lab["engram"], 1, 1, extra=264)
    write_shard(lab["engram"], 14, 1, padding=b"project-metadata")
    assert boot_worker(lab).stream("stderr").count("packed=True") == 2


@pytest.mark.parametrize("kind,line", [
    ("range", "Engram retrieval failed: packed Engram shard does not match this rank's range; re-run the pack "
              "step (errno=0)"),
    ("truncated", "Engram retrieval failed: packed Engram shard is truncated (errno=0)"),
    ("noheader", "Engram retrieval failed: packed Engram shard has no header (errno=0)"),
    ("short", "Engram retrieval failed: packed Engram shard has no header (errno=61)"),
])
def test_invalid_shard_is_fatal(lab, kind, line):
    if kind == "range":
        write_shard(lab["engram"], 14, 1, lo=0, hi=11)  # a rank-0 range under the rank-1 name
    elif kind == "truncated":
        write_shard(lab["engram"], 14, 1, truncate=264)
    elif kind == "noheader":
        write_shard(lab["engram"], 14, 1, magic=0x1234)
    else:
        (lab["engram"] / "engram-l14-r1of3.bin").write_bytes(b"\0" * 40)
    rc, proc = run_to_exit(lab, engine_argv("worker", 1))
    assert rc == 134, "the engine aborts"
    err = proc.stream("stderr")
    assert line in phys(err), "its own line, no prefix"
    assert "/engram" not in line and line not in proc.stream("stdout")
    # the layer attached before it is in the log: the error belongs to layer 14 of rank 1
    lines = phys(err)
    assert "Exact nvme Engram layer=1 rank=1" in lines[lines.index(line) - 1]
    assert "layer=14" not in err and "Uvicorn" not in err and "Ready:" not in proc.text()


def test_tp2_files_are_not_tp3_shards(lab):
    write_shard(lab["engram"], 1, 1, tp=2)
    assert boot_worker(lab).stream("stderr").count("packed=False") == 2


def test_cache_slots(lab):
    err = boot_worker(lab, env={"DSV41_CACHE_GIB": "0.000001", "DSV41_CACHE_WAYS": "2"}, frac="0.96").stream("stderr")
    # 0.0000005 GiB per layer = 536 bytes -> 2 rows -> 2 slots (2-way)
    assert "(2 slots, 2-way, 20.0% of owned rows)" in err


# ------------------------------------------------------------------ memory

def test_report_pool_identical_on_ranks_and_clamped(lab):
    texts = [boot_worker(lab, rank=r).stream("stderr") for r in (1, 2)]
    for err in texts:
        msgs = messages(err)
        assert ("DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, "
                "c128_state_fixed=0.00 GB, swa_fixed=0.28 GB, full_token=491520") in msgs
        pools = [m for m in msgs if m.startswith("DSV4 pool sizes: ")]
        assert pools == ["DSV4 pool sizes: full=491520, swa=13312, c4=122880, c128=3840, c4_state=3328, "
                         "c128_state=0"] * 2
        assert ("\x1b[33mWARNING: max_total_tokens=750000 is larger than the profiled value 491520. "
                "Use the profiled value instead.\x1b[0m") in msgs
        assert "KV Cache is allocated. #tokens: 491520, full: 0.76 GB, swa: 0.28 GB" in msgs
    strip = lambda t: [m for m in messages(t) if m.startswith("DSV4")]
    assert strip(texts[0]) == strip(texts[1])


def test_page_rounding_is_not_a_clamp(lab):
    msgs = messages(boot_worker(lab, rank=0, frac="0.99", pin="3000000").stream("stderr"))
    pools = [m for m in msgs if m.startswith("DSV4 pool sizes: ")]
    assert len(pools) == 2 and pools[-1].startswith("DSV4 pool sizes: full=2999808, ")
    assert int(re.search(r"full=(\d+)", pools[0]).group(1)) > 3_000_000, "the first line is the profiled pool"
    assert not any("WARNING: max_total_tokens" in m for m in msgs)
    assert any(m.startswith("max_total_num_tokens=2999808, chunked_prefill_size=1024") for m in msgs)


def load_engine_module():
    sys.path.insert(0, str(ENGINE.parent))
    try:
        import dsv41_engine as eng
    finally:
        sys.path.pop(0)
    return eng


def test_memory_model_directions():
    eng = load_engine_module()
    saved = {k: os.environ.pop(k, None) for k in list(os.environ) if k.startswith(("DSV41_", "SGLANG_", "LAB_"))}
    try:
        base = eng.memory_model(0.95, 750000)
        assert base["allocated"] == 491520 and base["clamped"] and f"{base['available_bytes'] / 2 ** 30:.2f}" == "1.04"
        assert eng.memory_model(0.94, 750000)["available_bytes"] < base["available_bytes"]
        fits = eng.memory_model(0.98, 750000)
        assert fits["allocated"] == 749824 and not fits["clamped"], "rounded down to whole pages of 256"
        assert eng.memory_model(0.95, None)["allocated"] == base["full_token"] == 491520
        os.environ["DSV41_WO_A_W8"] = "1"
        w8 = eng.memory_model(0.95, 750000)
        assert w8["available_bytes"] == pytest.approx(base["available_bytes"] - 688 * 2 ** 20)
        assert w8["target_usage"] == pytest.approx(base["target_usage"] + 688 * 2 ** 20)
        os.environ["DSV41_WO_A_W8_DROP"] = "1"
        assert eng.memory_model(0.95, 750000)["available_bytes"] > base["available_bytes"]
        os.environ.pop("DSV41_WO_A_W8"); os.environ.pop("DSV41_WO_A_W8_DROP")
        os.environ["DSV41_DRAFT_HEAD_FP8"] = "1"
        fp8 = eng.memory_model(0.95, 750000)
        assert fp8["available_bytes"] == pytest.approx(base["available_bytes"] - 210.6 * 2 ** 20)
        assert fp8["draft_usage"] > base["draft_usage"]
        assert eng.memory_model(0.95, 750000, rank=1)["load_begin"] > base["load_begin"], "rank 0 has the least"
        assert eng.memory_model(0.95, 750000, rank=2)["available_bytes"] == fp8["available_bytes"]
    finally:
        for k in [k for k in os.environ if k.startswith(("DSV41_", "SGLANG_", "LAB_"))]:
            os.environ.pop(k)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def test_startup_peaks_follow_the_state(lab):
    def peaks(env=None):
        msgs = messages(boot_worker(lab, env=env).stream("stderr"))
        loads = [m for m in msgs if m.startswith("Load weight ")]
        assert len(loads) == 4, loads
        return msgs, loads
    msgs, loads = peaks()
    assert re.fullmatch(r"Load weight begin\. avail mem=\d+\.\d\d GB", loads[0])
    assert re.fullmatch(r"Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV4ForCausalLM, quant=fp8, "
                        r"avail mem=\d+\.\d\d GB, mem usage=94\.00 GB\.", loads[1])
    assert re.fullmatch(r"Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV4ForCausalLMNextN, quant=fp8, "
                        r"avail mem=\d+\.\d\d GB, mem usage=2\.61 GB\.", loads[3])
    assert any(re.fullmatch(r"Memory pool end\. avail mem=\d+\.\d\d GB", m) for m in msgs)
    for pass_name in ("target", "draft"):
        assert any(re.fullmatch(rf"Capture {pass_name} verify CUDA graph begin\. backend=full, num_tokens_per_req=4, "
                                r"bs=\[1, 2, 3, 4\], avail mem=\d+\.\d\d GB", m) for m in msgs), pass_name
        assert any(re.fullmatch(rf"Capture {pass_name} verify CUDA graph end\. elapsed=\d+\.\d\d s, "
                                r"mem usage=\d+\.\d\d GB, avail mem=\d+\.\d\d GB\.", m) for m in msgs), pass_name
    usage = lambda ls, i: float(re.search(r"mem usage=([\d.]+)", ls[i]).group(1))
    _, w8 = peaks({"DSV41_WO_A_W8": "1"})
    _, drop = peaks({"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"})
    _, fp8 = peaks({"DSV41_DRAFT_HEAD_FP8": "1"})
    assert usage(w8, 1) > usage(loads, 1) > usage(drop, 1)
    assert usage(fp8, 3) > usage(loads, 3)
    # the Engram row cache is loaded with the weights; the KV pool gets what is left
    cached, cache_loads = peaks({"DSV41_CACHE_GIB": "0.5"})
    assert usage(cache_loads, 1) == pytest.approx(94.50)
    pool = lambda ms: int(re.search(r"full=(\d+)", [m for m in ms if m.startswith("DSV4 pool")][-1]).group(1))
    assert pool(cached) < pool(msgs) == 491520


def test_not_enough_memory_is_fatal(lab):
    rc, proc = run_to_exit(lab, engine_argv("worker", 1), env={"DSV41_CACHE_GIB": "4"})
    err = proc.stream("stderr")
    assert rc == 1
    assert re.search(rf"^\[{TS} TP1 EP1\] Scheduler hit an exception: Traceback \(most recent call last\):\n"
                     r"(  .*\n)+RuntimeError: Not enough memory\. Please try to increase --mem-fraction-static\.",
                     err, re.M)
    assert re.search(rf"^\[{TS}\] Received sigquit from a child process\. It usually means the child failed\.$",
                     err, re.M)


# ------------------------------------------------------------------ autotune

def cache_files(lab):
    return sorted(p for p in lab["cache"].rglob("rank_tp*_pp0_dp0.json"))


CACHE_RE = r"/root/\.cache/sglang/flashinfer/autotune/0\.6\.18/sm121/([0-9a-f]{16})/rank_tp(\d)_pp0_dp0\.json"


def test_stock_autotune_disagrees_on_rank0_when_caches_exist(lab):
    first = boot_worker(lab, rank=0).stream("stderr")
    msgs = messages(first)
    assert DISAGREE not in first and msgs.count("FlashInfer autotune completed.") == 2
    runs = [m for m in msgs if m.startswith("Running FlashInfer autotune with cache: ")]
    assert len(runs) == 2 and all(re.fullmatch("Running FlashInfer autotune with cache: " + CACHE_RE, r) for r in runs)
    (f,) = cache_files(lab)
    second = boot_worker(lab, rank=0).stream("stderr")
    assert messages(second).count(DISAGREE) == 2
    assert second.count("Running FlashInfer autotune with cache: /root/.cache/") == 2
    # per-rank content differs
    boot_worker(lab, rank=2)
    contents = {p.name: json.loads(p.read_text())["rank"] for p in cache_files(lab)}
    assert contents == {"rank_tp0_pp0_dp0.json": 0, "rank_tp2_pp0_dp0.json": 2}
    assert f in cache_files(lab)


def test_glued_tqdm_lines_carry_cursor_codes(lab):
    boot_worker(lab, rank=0)
    err = boot_worker(lab, rank=0).stream("stderr")
    glued = [ln for ln in phys(err) if ln.startswith("Capturing batches (bs=4 ")]
    assert len(glued) == 2, "one bar per capture pass"
    for ln in glued:
        m = re.fullmatch(r"Capturing batches \(bs=4 avail_mem=\d+\.\d\d GB\):   0%\|          \| 0/4 "
                         r"\[00:00<\?, \?it/s\]\r(Capturing batches \(bs=4 [^\r\x1b]*)\x1b\[A"
                         rf"\[{TS} TP0 EP0\] (.*)", ln)
        assert m, repr(ln)
        assert m.group(2) == DISAGREE, "the logging record lands on the bar's physical line"
    redraws = [ln for ln in phys(err) if ln.startswith("\rCapturing batches")]
    assert len(redraws) == 2 and all("100%|██████████| 4/4 [" in ln and ln.count("\r") == 4 for ln in redraws)
    # a worker (no warning): the autotune run record is the one glued to the bar
    wk = boot_worker(lab, rank=1).stream("stderr")
    assert all(re.search(rf"\x1b\[A\[{TS} TP1 EP1\] Running FlashInfer autotune with cache: ", ln)
               for ln in phys(wk) if ln.startswith("Capturing batches (bs=4 "))


def test_retention_reuses_then_retunes_after_change(lab):
    keep = {"DSV41_AUTOTUNE_KEEP": "1"}
    first = boot_worker(lab, env=keep)
    out = first.stream("stdout").splitlines()
    assert out[0] == "[autotune_keep] armed"
    assert len(out) == 3 and all(re.fullmatch(r"\[autotune_keep\] tuned and saved [0-9a-f]{16}/rank_tp1_pp0_dp0\.json",
                                              ln) for ln in out[1:]), out
    assert "[autotune_keep]" not in first.stream("stderr")
    (cache,) = cache_files(lab)
    assert out[1].endswith(f"{cache.parent.name}/{cache.name}")
    assert Path(str(cache) + ".launch").exists()
    before = cache.read_bytes(), cache.stat().st_mtime_ns
    second = boot_worker(lab, env=keep)
    assert second.stream("stdout").splitlines() == ["[autotune_keep] armed"] + \
        [f"[autotune_keep] reused {cache.parent.name}/{cache.name}"] * 2
    assert "Running FlashInfer autotune" not in second.text() and DISAGREE not in second.text()
    assert (cache.read_bytes(), cache.stat().st_mtime_ns) == before
    # a shape-relevant change: new hash directory, tuned again
    third = boot_worker(lab, env={**keep, "DSPARK_BLOCK_SIZE": "5"}, block=5)
    assert third.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    # an env-only change (same cache dir): sidecar mismatch -> retune, then reused again
    fourth = boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"})
    assert fourth.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"}).stream("stdout").count("[autotune_keep] reused") == 2


def test_streams_keep_their_order_in_the_log(lab):
    """A print() line written between two logging records is stamped between them (docker logs order)."""
    proc = boot_worker(lab, env={"DSV41_AUTOTUNE_KEEP": "1"})
    recs = proc.records()
    idx = lambda needle: next(i for i, r in enumerate(recs) if needle in r["log"])
    armed = idx("[autotune_keep] armed")
    assert recs[armed]["stream"] == "stdout"
    assert idx("Init torch distributed ends") < armed < idx("Load weight begin")
    saved = [i for i, r in enumerate(recs) if "[autotune_keep] tuned and saved" in r["log"]]
    completed = [i for i, r in enumerate(recs) if "FlashInfer autotune completed." in r["log"]]
    assert len(saved) == len(completed) == 2 and all(c < s for c, s in zip(completed, saved))


def test_retention_drift_fails(lab):
    rc, proc = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"})
    assert rc == 1
    assert "\nRuntimeError: DSV41_AUTOTUNE_KEEP: flashinfer_autotune_context is gone; engine drifted\n" in \
        proc.stream("stderr")
    assert "Load weight begin" not in proc.text()


def test_retention_drift_file(lab):
    drift = lab["tmp"] / "engine_drift"
    drift.write_text("_autotune_cache_digest\n")
    rc, proc = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT_FILE": str(drift)})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in proc.stream("stderr")
    # stock engine ignores it
    assert WORKER_DONE in boot_worker(lab, env={"LAB_ENGINE_DRIFT_FILE": str(drift)}).text()


# ------------------------------------------------------------------ adapters gated on the image

def image_root(lab, *, keep_file: bool, registered: bool) -> Path:
    """An image rootfs as the docker stand-in builds it: sgl-workspace/adapter/ with the seven local
    adapters + sitecustomize.py, optionally autotune_keep.py and the hook that installs it (stage B's edit)."""
    root = lab["tmp"] / f"rootfs-{int(keep_file)}{int(registered)}"
    adir = root / "sgl-workspace" / "adapter"
    adir.mkdir(parents=True)
    for f in ADAPTERS.glob("*.py"):
        if f.name != "autotune_keep.py" or keep_file:
            shutil.copy(f, adir / f.name)
    # registered: the ported hook (stage B's edit: the autotune module wrapped, install_autotune_keep gated)
    text = (ADAPTERS / "sitecustomize.py").read_text() if registered else REPORT_HOOK.read_text()
    (adir / "sitecustomize.py").write_text(text)
    return root


@pytest.mark.parametrize("keep_file,registered", [(False, False), (True, False), (False, True)])
def test_retention_switch_ignored_when_adapter_not_in_image(lab, keep_file, registered):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "DSV41_SOURCE": "/sgl-workspace",
           "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=keep_file, registered=registered)),
           "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"}  # drift is moot without the adapter
    first = boot_worker(lab, env=env, rank=0)
    second = boot_worker(lab, env=env, rank=0)
    for proc in (first, second):
        assert "[autotune_keep]" not in proc.text() and proc.stream("stdout") == ""
        assert messages(proc.stream("stderr")).count("FlashInfer autotune completed.") == 2
    assert messages(second.stream("stderr")).count(DISAGREE) == 2, "behaves like the stock engine"
    (cache,) = cache_files(lab)
    assert not Path(str(cache) + ".launch").exists()


def test_retention_armed_when_adapter_in_image(lab):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "DSV41_SOURCE": "/sgl-workspace",
           "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=True, registered=True))}
    # without DSV41_SOURCE the hook inserts no finder: nothing is installed, whatever the switch
    unsourced = boot_worker(lab, env={k: v for k, v in env.items() if k != "DSV41_SOURCE"}, rank=0)
    assert "[autotune_keep]" not in unsourced.text()
    first = boot_worker(lab, env=env, rank=0)
    assert first.stream("stdout").startswith("[autotune_keep] armed\n")
    assert first.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env=env).stream("stdout").count("[autotune_keep] tuned and saved") == 2, "rank 1's file"
    assert boot_worker(lab, env=env, rank=0).stream("stdout").count("[autotune_keep] reused") == 2
    # switch off with the adapter in the image: stock
    off = boot_worker(lab, env={**env, "DSV41_AUTOTUNE_KEEP": "0"}, rank=0)
    assert "[autotune_keep]" not in off.text() and messages(off.stream("stderr")).count(DISAGREE) == 2
    # drift only matters when the adapter is armed
    rc, proc = run_to_exit(lab, engine_argv("worker", 1), env={**env, "LAB_ENGINE_DRIFT": "_autotune_cache_digest"})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in proc.stream("stderr")
    # an image root that does not exist (an engine image without a build): not armed
    gone = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(lab["tmp"] / "no-such-rootfs")})
    assert "[autotune_keep]" not in gone.text()


def test_adapter_lines_in_the_real_wording(lab):
    env = {"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_MID": "1", "DSV41_WO_A_W8_DROP": "1", "DSV41_DRAFT_HEAD_FP8": "1",
           "DSV41_DRAFT_TAU": "0.8", "DSV41_BLOCK_VERIFY": "1", "DSV41_VERIFY_CAP": "conf:0.1",
           "DSV41_FOLDED_FENCE": "1", "DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "1"}
    proc = boot_worker(lab, env=env, rank=0)
    out = proc.stream("stdout").splitlines()
    for line in ("[wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16",
                 "[wo_a_w8] mid path armed: 9..192 rows from the fp8 twin",
                 "[wo_a_w8] released the bf16 copy of 41 wo_a weights (1312 MB); 2 kept (dequantized copy not "
                 "bit-identical)",
                 "[draft_head_fp8] armed", "[draft_head_fp8] fp8 twin of the draft LM head (43136, 5120)",
                 "[draft_tau] draft temperature x0.8", "[block_verify] armed: block verification for sampled DSpark rows",
                 "[verify_cap] armed (conf:0.1): dead verify rows route to the anchor's experts",
                 "[verify_cap] remap captured into the verify graph for M=4", "[verify_cap] confidence present",
                 "[folded_fence] folded DSpark results cloned off the persistent verify buffers"):
        assert line in out, line
    msgs = messages(proc.stream("stderr"))
    assert ("DSV41 Engram prefetch ARMED: rows fetched on a side stream after the hasher (CHECK mode: old path re-run "
            "and compared)") in msgs
    assert any(m.startswith("DSV41 Engram prefetch disabled after error: ") for m in msgs), "needs packed shards"
    # off: nothing, and DSV41_DRAFT_TAU=1 is off
    quiet = boot_worker(lab, env={"DSV41_DRAFT_TAU": "1"})
    assert quiet.stream("stdout") == "" and "Engram prefetch" not in quiet.text()


def test_the_pool_and_the_folded_decision_follow_the_rank_with_the_least_free_memory():
    # SPEC: unset folded sampling is AUTO, decided from the minimum free memory across ranks. With the pool
    # fixed by --max-total-tokens (F 0.98: 750,000 tokens fit), a worker that starts 2.5 GiB tighter is also
    # tighter after its captures, and the head's own figure would fold where the engine does not
    eng = load_engine_module()
    saved = {k: os.environ.pop(k, None) for k in list(os.environ) if k.startswith(("DSV41_", "SGLANG_", "LAB_"))}
    try:
        head = eng.memory_model(0.98, 750000, rank=0)
        assert head["after_min"] == head["after"] >= eng.FOLDED_AUTO_MIN and eng.folded_sampling_active(head)
        os.environ["LAB_ENGINE_RANK_EXTRA_GIB"] = "0,0.38,-2.5"      # spark3 has 2.5 GiB less than the head
        tight = [eng.memory_model(0.98, 750000, rank=r) for r in range(3)]
        assert [m["allocated"] for m in tight] == [750000 // 256 * 256] * 3
        assert tight[0]["after"] == pytest.approx(head["after"]), "the head's own memory is unchanged"
        assert tight[0]["after"] >= eng.FOLDED_AUTO_MIN > tight[2]["after"], "the head alone would fold"
        assert all(m["after_min"] == pytest.approx(tight[2]["after"]) for m in tight)
        assert not any(eng.folded_sampling_active(m) for m in tight), "every rank takes the least rank's decision"
        assert eng.folded_sampling_line(tight[0]).startswith(
            "DSpark folded sampling disabled: its static buffers need 0.09 GB but only %s GB GPU memory is free"
            % eng.gib(max(tight[2]["after"], 0.0)))
        # where the pool is sized by what fits (F 0.95), it follows the least rank too, the same on every rank
        os.environ["LAB_ENGINE_RANK_EXTRA_GIB"] = "0,0.38,-0.5"
        fits = [eng.memory_model(0.95, 750000, rank=r) for r in range(3)]
        assert len(set(m["allocated"] for m in fits)) == 1
        os.environ["LAB_ENGINE_RANK_EXTRA_GIB"] = "0"      # every rank as free as the head: the head's own figure
        assert fits[0]["allocated"] < eng.memory_model(0.95, 750000, rank=0)["allocated"]
    finally:
        for k in [k for k in os.environ if k.startswith(("DSV41_", "SGLANG_", "LAB_"))]:
            os.environ.pop(k)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def test_folded_sampling_decision_rank0(lab):
    msgs = messages(boot_worker(lab, rank=0, env={"SGLANG_DSPARK_FOLDED_SAMPLING": "0"}).stream("stderr"))
    assert "DSpark draft proposal kept eager (reason=SGLANG_DSPARK_FOLDED_SAMPLING=0)" in msgs
    short = messages(boot_worker(lab, rank=0, env={"DSV41_CACHE_GIB": "0.3"}, frac="0.955").stream("stderr"))
    line = next(m for m in short if m.startswith("DSpark"))
    assert line.startswith("DSpark draft proposal (greedy + sampling) folded") or re.fullmatch(
        r"DSpark folded sampling disabled: its static buffers need 0\.09 GB but only \d+\.\d\d GB GPU memory is free; "
        r"sampling batches will take the eager proposal path\. Set SGLANG_DSPARK_FOLDED_SAMPLING=2 to force\.", line)


def _docker_logs_of(proc, tmp: Path, name: str, *flags: str) -> subprocess.CompletedProcess:
    """`docker logs FLAGS NAME` of a container whose json-file log is what this engine run wrote."""
    env = {**os.environ, "LAB_DOCKER_STATE_DIR": str(tmp / f"docker-{name}")}
    subprocess.run([sys.executable, str(DOCKER), "create", "--name", name, "dsv41-sglang:tp3"], env=env, check=True,
                   capture_output=True)
    shutil.copy(proc.log, tmp / f"docker-{name}" / "logs" / f"{name}.log")
    return subprocess.run([sys.executable, str(DOCKER), "logs", *flags, name], env=env, capture_output=True, check=True)


@pytest.mark.parametrize("build", ["new", "old"])
def test_marker_is_two_json_file_records_and_logs_t_stamps_inside_it(lab, build):
    """The marker is over docker's 16 KiB message limit (the real head's: 17,130 bytes): the supervisor keeps it as
    two records, the first 16 KiB without a newline, and `docker logs -t` stamps the second part inside the
    line, as real docker does."""
    proc = boot_worker(lab, rank=0 if build == "old" else 1, env={"LAB_ENGINE_BUILD": build, "API_KEY": "k"})
    recs = proc.records()
    i = next(i for i, r in enumerate(recs) if "server_args=" in r["log"])
    first, second = recs[i], recs[i + 1]
    assert len(first["log"].encode()) == 16384 and not first["log"].endswith("\n")
    assert second["log"].endswith(")\n" if build == "old" else "}\n") and second["stream"] == "stderr"
    assert "server_args=" not in second["log"] and ns_of(second["time"]) > ns_of(first["time"])
    line = first["log"] + second["log"]
    size = len(line.encode()) - 1
    if build == "new":
        assert 16_800 <= size <= 17_400, size
        assert ast.literal_eval(line.split("] server_args=", 1)[1])["node_rank"] == 1
    else:
        assert 16_384 < size <= 17_400, size
        assert line.split("] ", 1)[1].startswith("server_args=ServerArgs(model_path=") and "node_rank=0," in line
    err = _docker_logs_of(proc, lab["tmp"], f"m-{build}", "-t").stderr.decode()
    (stamped,) = [ln for ln in err.split("\n") if "server_args=" in ln]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z "
    assert re.match(stamp + re.escape(first["log"][:40]), stamped)
    inside = re.search(stamp, stamped[40:])
    assert inside and 40 + inside.start() == len(first["log"]) + 31, "the second part's time, inside the line"
    assert stamped[40 + inside.end():] == second["log"][:-1]
    plain = _docker_logs_of(proc, lab["tmp"], f"p-{build}").stderr.decode()
    assert line in plain, "without -t the line comes back whole"


# ------------------------------------------------------------------ lab knobs

def test_old_build_formats(lab):
    proc = boot_worker(lab, rank=0, env={"LAB_ENGINE_BUILD": "old", "API_KEY": "sk-old"})
    err = proc.stream("stderr")
    marker = err.splitlines()[0]
    assert re.match(rf"\[{TS}\] server_args=ServerArgs\(model_path='/srv/models/DeepSeek-V4\.1-Flash', ", marker)
    assert marker.endswith(")") and "node_rank=0" in marker and "max_total_tokens=750000" in marker
    assert "api_key='***'" in marker and "sk-old" not in proc.text()
    msgs = messages(err)
    assert ("Exact nvme Engram layer=1 rank=0 rows=[0,10) cache_budget=0.0GiB ways=4 io_threads=96") in msgs
    assert "packed=" not in err
    assert any(m.startswith("DSv4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, ")
               for m in msgs) and not re.search(r"\bDSV4 ", err)   # ("DSV41 TP padding" is another word)
    assert [m for m in msgs if m.startswith("DSv4 pool sizes")][-1] == "DSv4 pool sizes: full=491520, swa=61440, c128=3840"
    assert "Capture cuda graph bs [1, 2, 3, 4]" in msgs and "Capture draft cuda graph bs [1, 2, 3, 4]" in msgs
    assert any(m.startswith("Capture cuda graph end. Time elapsed: ") for m in msgs)
    assert any(re.fullmatch(r"Load weight end\. type=DeepseekV4ForCausalLM, dtype=torch\.bfloat16, avail mem=[\d.]+ GB, "
                            r"mem usage=94\.00 GB\.", m) for m in msgs)
    assert "Engine startup timings" not in err and "max_total_num_tokens=491520" in err


def test_knob_file_and_environment_precedence(lab):
    knobs = lab["tmp"] / "engine.env"
    knobs.write_text("# lab knobs\nLAB_ENGINE_BUILD=old\nexport LAB_ENGINE_OFFLOAD=ignored\nDSV41_WO_A_W8=1\n")
    env = {"LAB_ENGINE_ENV_FILE": str(knobs)}
    old = boot_worker(lab, env=env)
    assert "server_args=ServerArgs(" in old.stream("stderr")
    assert "[wo_a_w8]" not in old.text(), "only LAB_* keys come from the file"
    new = boot_worker(lab, env={**env, "LAB_ENGINE_BUILD": "new"})
    assert "] server_args={" in new.stream("stderr"), "the environment wins over the file"


def test_boot_seconds_knob_spreads_the_boot(lab):
    knobs = lab["tmp"] / "engine.env"
    knobs.write_text("LAB_ENGINE_BOOT_SECONDS=3\n")
    proc = Proc(lab, engine_argv("worker", 1), env={"LAB_ENGINE_ENV_FILE": str(knobs)})
    try:
        proc.wait_for(WORKER_DONE, timeout=30)
        took = time.monotonic() - proc.started
    finally:
        proc.stop()
    assert 2.4 <= took <= 20, took
    recs = proc.records()
    first = next(r for r in recs if "server_args=" in r["log"])
    load = next(r for r in recs if "Load weight end. elapsed=" in r["log"] and "DeepseekV4ForCausalLM," in r["log"])
    span = (ns_of(recs[-1]["time"]) - ns_of(first["time"])) / 1e9
    assert span >= 2.4, "the lines are spread over the boot (by their json-file times)"
    elapsed = float(re.search(r"elapsed=([\d.]+) s", load["log"]).group(1))
    assert elapsed >= 1.6, "target load is most of a real boot (541.76 of 767 s)"
    assert first["time"] < load["time"]


# ------------------------------------------------------------------ head HTTP

@pytest.fixture()
def head(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"API_KEY": "sk-test-secret", "LAB_ENGINE_SPEED": "200"},
                name="head")
    proc.wait_for(f"Ready: API on port {port}")
    yield {"port": port, "proc": proc}
    assert proc.stop() == 0


def request(port, path, body=None, key="sk-test-secret", header="Authorization"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header(header, f"Bearer {key}" if header == "Authorization" else key)
    return urllib.request.urlopen(req, timeout=30)


CHAT = {"model": "dsv41", "messages": [{"role": "user", "content": "Write a short story about three sparks."}],
        "max_tokens": 200, "temperature": 0}


def test_head_health_503_while_booting_then_200(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"LAB_ENGINE_BOOT_SECONDS": "3", "LAB_ENGINE_FAST": "0"},
                name="head-slow")
    try:
        proc.wait_for("Init torch distributed begin.")
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/health", key=None)
        assert exc.value.code == 503 and exc.value.read() == b""
        with pytest.raises(urllib.error.HTTPError) as exc:     # a chat request while booting: the error object
            request(port, "/v1/chat/completions", CHAT, key=None)
        body = json.load(exc.value)
        assert exc.value.code == 503 and body["object"] == "error" and body["code"] == 503
        text = proc.wait_for(f"Ready: API on port {port}", timeout=30)
        assert "Ready:" not in proc.stream("stderr") and proc.stream("stdout").endswith(f"Ready: API on port {port}\n")
        with request(port, "/health", key=None) as r:
            assert r.status == 200 and r.read() == b""
        with request(port, "/health_generate", key=None) as r:
            assert r.status == 200 and r.read() == b""
        assert '"GET /health HTTP/1.1" 503' in proc.stream("stderr")
        msgs = messages(text)
        assert msgs.index("The server is fired up and ready to roll!") < msgs.index(f"Ready: API on port {port}")
    finally:
        assert proc.stop() == 0


def test_head_models_auth_and_errors(head):
    port = head["port"]
    with request(port, "/v1/models") as r:
        assert json.load(r)["data"][0]["id"] == "deepseek-v4.1-flash"
    with request(port, "/v1/models", header="x-api-key") as r:
        assert r.status == 200
    for key in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/v1/chat/completions", CHAT, key=key)
        assert exc.value.code == 401 and json.load(exc.value) == {"error": "Unauthorized"}
    with pytest.raises(urllib.error.HTTPError) as exc:
        request(port, "/v1/chat/completions", {"messages": "not a list"})
    body = json.load(exc.value)
    assert exc.value.code == 400 and body["object"] == "error" and body["code"] == 400 and body["message"]
    text = head["proc"].text()
    assert "sk-test-secret" not in text
    assert marker_dict(head["proc"].stream("stderr"))["api_key"] == "[REDACTED]"


def test_head_non_stream_usage_determinism_and_limits(head):
    port = head["port"]
    outs = []
    for _ in range(2):
        with request(port, "/v1/chat/completions", CHAT) as r:
            data = json.load(r)
        usage = data["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert 64 <= usage["completion_tokens"] <= 200
        assert len(data["choices"][0]["message"]["content"].split()) == usage["completion_tokens"]
        outs.append(data["choices"][0]["message"]["content"])
    assert outs[0] == outs[1]
    with request(port, "/v1/chat/completions", {**CHAT, "max_tokens": 10}) as r:
        data = json.load(r)
    assert data["usage"]["completion_tokens"] == 10 and data["choices"][0]["finish_reason"] == "length"
    with request(port, "/v1/chat/completions", {**CHAT, "max_tokens": 10, "max_completion_tokens": 20}) as r:
        assert json.load(r)["usage"]["completion_tokens"] == 20, "max_completion_tokens overrides max_tokens"
    think = {**CHAT, "max_tokens": 400, "chat_template_kwargs": {"thinking": True}}
    with request(port, "/v1/chat/completions", think) as r:
        data = json.load(r)
    msg, usage = data["choices"][0]["message"], data["usage"]
    assert len(msg["reasoning_content"].split()) == usage["reasoning_tokens"] == 256
    assert len(msg["content"].split()) + 256 == usage["completion_tokens"]


def test_head_stream_several_tokens_per_message(head):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with request(head["port"], "/v1/chat/completions", body) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["delta"].get("content"), "the role chunk comes with the first text"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    pieces = [p for p in pieces if p]
    tokens = sum(len(p.split()) for p in pieces)
    assert tokens == usage["completion_tokens"]
    assert len(pieces) < tokens  # several tokens per SSE message (speculative commits)
    assert max(len(p.split()) for p in pieces) >= 2


def test_head_serving_lines_rank0(head):
    with request(head["port"], "/v1/chat/completions", CHAT) as r:
        json.load(r)
    head["proc"].wait_for("Engram layer=14 lookups=")  # written when the request leaves the batch
    # the access line follows the response's last bytes, which may come after the request left the batch
    head["proc"].wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK')
    err = head["proc"].stream("stderr")
    msgs = messages(err)
    decode = [m for m in msgs if m.startswith("Decode batch")]
    assert decode and re.fullmatch(
        r"Decode batch, #running-req: 1, #full token: \d+, full token usage: \d\.\d\d, #swa token: \d+, "
        r"swa token usage: \d\.\d\d, accept len: \d+\.\d\d, accept rate: \d\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0", decode[-1]), decode[-1]
    for layer in (1, 14):
        assert any(re.fullmatch(rf"Engram layer={layer} lookups=\d+ hit_rate=0\.0% reads=\d+ cache=0\.0GiB\(4-way\) "
                                r"scales=0\.0GiB threads=96 packed=False", m) for m in msgs), layer
    assert any(re.fullmatch(r'INFO:     127\.0\.0\.1:\d+ - "POST /v1/chat/completions HTTP/1\.1" 200 OK', m) for m in msgs)
    assert any(re.search(r"Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: 0, ", m) for m in msgs)


def test_echoed_request_stays_inside_its_record(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"LAB_ENGINE_LOG_REQUESTS": "1", "LAB_ENGINE_SPEED": "200"})
    try:
        proc.wait_for(f"Ready: API on port {port}")
        fake = ("hi\nserver_args={'node_rank': 7}\n[2026-09-24 02:39:10 TP0 EP0] Exact nvme Engram layer=1 rank=0 "
                "rows=[0,10) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 packed=True")
        with request(port, "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": fake}]}, key=None) as r:
            json.load(r)
        err = proc.stream("stderr")
        (echo,) = [ln for ln in phys(err) if "Receive: obj=ChatCompletionRequest(" in ln]
        assert MAIN.match(echo) and "server_args=" in echo and "packed=True" in echo
        assert not any(ln.startswith(("server_args=", "[2026-09-24")) for ln in phys(err))
        assert "packed=True" not in err.replace(echo, "")
    finally:
        proc.stop()


def test_head_sigterm_clean(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), name="head2")
    proc.wait_for("Ready: API on port")
    assert proc.stop() == 0
    assert phys(proc.stream("stderr"))[-3].endswith("] Received sigterm=15, shutting down.")


def test_seed_log_lines_are_engine_lines(lab):
    """Every message of the saved report boot (lab/seed/dsv41.log) has the shape of a line the engine prints."""
    def shapes(text):
        out = set()
        for m in messages(text):
            m = re.sub(r"\x1b\[[0-9;]*m", "", m)
            if m.startswith("Capturing batches"):
                m = "Capturing batches"
            elif m.startswith("server_args="):
                m = "server_args=" + m[len("server_args=")]
            m = re.sub(r"[0-9a-f]{16}", "H", m)
            out.add(re.sub(r"\d+(\.\d+)?", "N", m))
        return out

    boot_worker(lab, rank=0)  # caches exist for the next boot: the stock warning
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"API_KEY": "k", "LAB_ENGINE_SPEED": "200"})
    try:
        proc.wait_for(f"Ready: API on port {port}")
        with request(port, "/health", key=None):
            pass
        with request(port, "/v1/chat/completions", CHAT, key="k") as r:
            json.load(r)
        proc.wait_for("Engram layer=14 lookups=")
    finally:
        proc.stop()
    engine = shapes(proc.text())
    seed = SEED_LOG.read_bytes().decode()  # not read_text(): it turns tqdm's \r into \n
    latest = seed[seed.rfind("] server_args=") - 21:]
    missing = shapes(latest) - engine
    assert not missing, sorted(missing)


def bash(script: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


@pytest.fixture()
def checkout(tmp_path):
    d = tmp_path / "dsv41-3x-spark"
    d.mkdir()
    shutil.copy(START_SH, d / "start.sh")
    (d / ".env").write_text(seeded_env_text())
    return d


# docker logs as the real docker returns them: the engine's logging on stderr, its print() lines on stdout.
# The head's log shows its readiness line from the READY_AFTER-th call on (a boot that takes a few rounds).
FAKE_DOCKER = r"""#!/usr/bin/env bash
echo "$(hostname -s 2>/dev/null) docker $*" >> "$CALLS"
case $1 in
  run) for a in "$@"; do [[ $a == API_KEY* ]] && echo "API_KEY-ENV=${API_KEY:-unset}" >> "$CALLS"; done; echo cid ;;
  logs)
    n=$(( $(cat "$CALLS.logs" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$CALLS.logs"
    echo "[2026-01-01 00:00:00] server_args=ServerArgs(old=1)" >&2
    echo "[2026-01-01 00:00:01] Receive: obj=ChatCompletionRequest(messages=[{'content': \"server_args={'x': 1}\"}])" >&2
    echo "[2026-01-01 00:00:02] server_args={'new': 1}" >&2
    echo "[autotune_keep] armed"
    echo "[2026-01-01 00:00:03 TP0 EP0] Exact nvme Engram layer=1 rank=0 rows=[0,10) packed=False" >&2
    echo "Ready: API on port 88889"
    if (( n >= ${READY_AFTER:-1} )); then echo "[2026-01-01 00:00:04] The server is fired up and ready to roll!" >&2; echo "Ready: API on port 8888"; fi ;;
  inspect) if [[ $2 == --format ]]; then echo running; else echo '[{"Mounts":[{"Source":"/src/e","Destination":"/engram"}]}]'; fi ;;
  *) ;;
esac
"""
FAKE_SSH = r"""#!/usr/bin/env bash
echo "ssh $*" >> "$CALLS"
bash -c "${@: -1}"
"""


def serve_env(tmp_path, **extra):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls.txt"), "HOME": str(tmp_path),
            "LAB_LAUNCHER_KNOBS": str(tmp_path / "no-launcher.env"), "LAB_SERVE_POLL_SECONDS": "0", **extra}


def test_serve_saves_the_latest_boot_and_status_reads_the_mounts(checkout, tmp_path):
    env = serve_env(tmp_path)
    calls = tmp_path / "calls.txt"
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [l for l in calls.read_text().splitlines() if " docker run " in l and not l.startswith("ssh ")]
    assert len(runs) == 3 and "NODE_RANK=1" in runs[0] and "NODE_RANK=2" in runs[1] and "NODE_RANK=0" in runs[2]
    # the saved log: the latest boot (from the last marker MESSAGE, not the echoed request), both streams
    saved = (checkout / "logs" / "dsv41.log").read_text()
    assert saved.splitlines()[0] == "[2026-01-01 00:00:02] server_args={'new': 1}"
    assert "[autotune_keep] armed" in saved and "Ready: API on port 8888" in saved
    assert "ServerArgs(old=1)" not in saved and "Exact nvme Engram layer=1" in saved
    st = bash("./start.sh status", checkout, env=env)
    assert st.returncode == 0, st.stderr
    assert len(st.stdout.splitlines()) == 3 and "engram=/src/e" in st.stdout and "rank=2" in st.stdout
    assert bash("./start.sh pack", checkout, env=env).returncode == 2


def test_serve_polls_both_streams_in_rounds(checkout, tmp_path):
    env = serve_env(tmp_path, READY_AFTER="3", SERVE_TIMEOUT="5", LAB_SERVE_POLL_SECONDS="1")
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    waits = [l for l in r.stdout.splitlines() if "waiting for the head's Ready line" in l]
    assert waits == ["[start.sh] waiting for the head's Ready line: round 1/5",
                     "[start.sh] waiting for the head's Ready line: round 2/5"], "'Ready: ... 88889' is not port 8888"
    assert (tmp_path / "calls.txt.logs").read_text().strip() == "4", "three polls and the save"


def test_serve_times_out_after_its_rounds(checkout, tmp_path):
    env = serve_env(tmp_path, READY_AFTER="99", SERVE_TIMEOUT="2", LAB_SERVE_POLL_SECONDS="1")
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 1
    assert "[start.sh] ERROR: head not ready after 2s (2 rounds of 1s); last log lines:" in r.stderr
    assert "Exact nvme Engram layer=1 rank=0" in r.stderr, "the tail shows both streams"


def test_serve_wait_defaults_and_lab_knob(checkout, tmp_path):
    script = "START_SH_LIB_ONLY=1 source ./start.sh; echo $SERVE_TIMEOUT $LAB_SERVE_POLL_SECONDS"
    base = {k: v for k, v in os.environ.items() if k not in ("SERVE_TIMEOUT", "LAB_SERVE_POLL_SECONDS")}
    none = tmp_path / "none.env"
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(none)})
    assert r.stdout.split() == ["3600", "10"], "360 rounds of 10 s, as the real launchers"
    knobs = tmp_path / "launcher.env"
    knobs.write_text("# lab\nLAB_SERVE_POLL_SECONDS=1\n")
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(knobs), "SERVE_TIMEOUT": "900"})
    assert r.stdout.split() == ["900", "1"]
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(knobs), "LAB_SERVE_POLL_SECONDS": "5"})
    assert r.stdout.split() == ["3600", "5"], "the environment wins over the file"


FAKE_BUILD_DOCKER = r"""#!/usr/bin/env bash
echo "${FAKE_HOST:-head} docker $*" >> "$CALLS"
if [[ $1 == build ]]; then
  if [[ ${FAKE_HOST:-head} == "${FAIL_HOST:-none}" ]]; then
    echo "Sending build context to Docker daemon  2kB" ; echo 'ERROR: unable to prepare context: path "x" not found' >&2; exit 1
  fi
  echo "Successfully built 0123456789ab"; echo "Successfully tagged $3"
fi
"""
FAKE_BUILD_SSH = r"""#!/usr/bin/env bash
echo "ssh $*" >> "$CALLS"
host=${@: -2:1}; export FAKE_HOST=${host#*@}
bash -c "${@: -1}"
"""


def fake_bin(tmp_path, docker, ssh):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("docker", docker), ("ssh", ssh)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return bindir


def test_build_on_every_node_with_fakes(checkout, tmp_path):
    bindir = fake_bin(tmp_path, FAKE_BUILD_DOCKER, FAKE_BUILD_SSH)
    calls = tmp_path / "calls.txt"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(calls), "HOME": str(tmp_path)}
    r = bash("./start.sh build", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        f"[start.sh] built dsv41-sglang:tp3 on spark1 (rank 0) from {checkout}: image 0123456789ab",
        "[start.sh] built dsv41-sglang:tp3 on spark2 (rank 1) from /home/zurih/dsv41-3x-spark: image 0123456789ab",
        "[start.sh] built dsv41-sglang:tp3 on spark3 (rank 2) from /home/zurih/dsv41-3x-spark: image 0123456789ab"]
    lines = calls.read_text().splitlines()
    assert lines[0] == f"head docker build -t dsv41-sglang:tp3 {checkout}"
    # the seeded .env names the head's ssh identity (a site key): the launcher passes it to ssh
    assert "ssh -o BatchMode=yes -o ConnectTimeout=10 -i /home/mia/.ssh/id_ed25519 zurih@spark2 docker build " \
           "-t dsv41-sglang:tp3 /home/zurih/dsv41-3x-spark" in lines
    assert "spark3 docker build -t dsv41-sglang:tp3 /home/zurih/dsv41-3x-spark" in lines
    # one node fails: the others are still built, exit 1 naming it
    calls.unlink()
    r = bash("./start.sh build", checkout, env={**env, "FAIL_HOST": "spark2"})
    assert r.returncode == 1
    assert "[start.sh] ERROR: build of dsv41-sglang:tp3 failed on spark2 (rank 1): " \
           'ERROR: unable to prepare context: path "x" not found' in r.stderr
    assert r.stderr.rstrip().endswith("[start.sh] ERROR: build failed on: spark2")
    assert "on spark1 (rank 0)" in r.stdout and "on spark3 (rank 2)" in r.stdout
    builds = [l for l in calls.read_text().splitlines() if not l.startswith("ssh ") and " docker build " in l]
    assert [l.split()[0] for l in builds] == ["head", "spark2", "spark3"]
    r = bash("./start.sh build", checkout, env={**env, "FAIL_HOST": "head"})
    assert r.returncode == 1 and "build failed on: spark1" in r.stderr


def test_build_with_the_docker_standin(tmp_path):
    """start.sh build against the real docker stand-in, one state dir per node (no podman)."""
    nodes = {}
    for host, user in (("spark1", "mia"), ("spark2", "zurih"), ("spark3", "zurih")):
        co = tmp_path / host / "home" / user / "dsv41-3x-spark"
        (co / "adapter").mkdir(parents=True)
        for f in ADAPTERS.glob("*.py"):
            if f.name != "autotune_keep.py":
                shutil.copy(f, co / "adapter" / f.name)
        nodes[host] = co
    head = nodes["spark1"]
    shutil.copy(START_SH, head / "start.sh")
    # WORKER_DIR is one path for all workers; the fake ssh maps its @WORKER@ part to the worker's tree
    env_text = seeded_env_text().replace("WORKER_DIR=/home/zurih/dsv41-3x-spark",
                                         f"WORKER_DIR={tmp_path}/@WORKER@/home/zurih/dsv41-3x-spark")
    assert env_text != seeded_env_text()
    (head / ".env").write_text(env_text)
    # stage B's change on spark3 only: the retention adapter is added there
    shutil.copy(ADAPTERS / "autotune_keep.py", nodes["spark3"] / "adapter" / "autotune_keep.py")
    docker = f"""#!/usr/bin/env bash
export LAB_DOCKER_STATE_DIR={tmp_path}/${{FAKE_HOST:-spark1}}/state
exec {sys.executable} {DOCKER} "$@"
"""
    ssh = r"""#!/usr/bin/env bash
host=${@: -2:1}; export FAKE_HOST=${host#*@}
cmd=${@: -1}
bash -c "${cmd//@WORKER@/$FAKE_HOST}"
"""
    bindir = fake_bin(tmp_path, docker, ssh)
    r = bash("./start.sh build", head, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout + r.stderr
    ids = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[start\.sh\] built dsv41-sglang:tp3 on (spark\d) \(rank \d\) from (\S+): image ([0-9a-f]{12})",
                         line)
        assert m, line
        ids[m.group(1)] = m.group(3)
    assert sorted(ids) == ["spark1", "spark2", "spark3"]
    assert ids["spark1"] == ids["spark2"] != ids["spark3"], "same adapters, same image; spark3 differs"
    for host, co in nodes.items():
        images = tmp_path / host / "state" / "images"
        (rootfs,) = [d / "rootfs" for d in images.iterdir() if d.name.startswith(ids[host])]
        assert sorted(p.name for p in (rootfs / "sgl-workspace/adapter").iterdir()) == \
            sorted(p.name for p in (co / "adapter").iterdir())


def test_sps_table_judged_by_its_effect(lab, tmp_path):
    """A DSPARK_SPS_TABLE naming no file leaves the verify-all schedule; a table at that container path is read."""
    state = tmp_path / "state"
    state.mkdir()
    mounts = {**lab["mounts"], "/state": str(state)}
    env = {"DSPARK_SPS_TABLE": "/state/dspark_sps.json", "LAB_MOUNTS": json.dumps(mounts)}
    missing = messages(boot_worker(lab, env=env, rank=0).stream("stderr"))
    assert "DSPARK_SPS_TABLE=/state/dspark_sps.json not found; staying on the verify-all schedule" in missing
    (state / "dspark_sps.json").write_text("{}")
    present = messages(boot_worker(lab, env=env, rank=0).stream("stderr"))
    assert "DSPARK_SPS_TABLE=/state/dspark_sps.json loaded: ragged verify schedule in use" in present
    assert not any("DSPARK_SPS_TABLE" in m for m in messages(boot_worker(lab, rank=0).stream("stderr")))


def test_run_entrypoint_takes_the_settings_from_the_environment(lab):
    """`docker run ... IMAGE run`: the image's entrypoint builds the engine's arguments from -e variables."""
    env = {"NODE_RANK": "2", "TP_SIZE": "3", "EP_SIZE": "3", "MAX_TOTAL_TOKENS": "750000", "MEM_FRACTION_STATIC": "0.95",
           "CHUNKED_PREFILL_SIZE": "2048", "MAX_RUNNING_REQUESTS": "4", "DIST_INIT_ADDR": "192.168.100.11:20000",
           "PORT": str(lab["port"]), "MODEL_PATH": "/srv/models/DeepSeek-V4.1-Flash", "MOE_RUNNER_BACKEND": ""}
    proc = Proc(lab, ["run"], env)
    try:
        proc.wait_for(WORKER_DONE)
    finally:
        proc.stop()
    marker = next(m for m in messages(proc.stream("stderr")) if m.startswith("server_args={"))
    for field in ("'node_rank': 2", "'chunked_prefill_size': 2048", "'max_total_tokens': 750000",
                  "'dist_init_addr': '192.168.100.11:20000'", "'moe_runner_backend': 'auto'"):
        assert field in marker, field


# ------------------------------------------------------------------ experiment stages: switches, faults, evidence

FENCE_LINE = "[folded_fence] folded DSpark results cloned off the persistent verify buffers"
CHECK_ZERO = "DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = [0, 0]"


def hook_image(lab, hook_text: str, files=("folded_fence", "wo_a_w8", "engram_prefetch")) -> Path:
    """An image rootfs whose import hook is ``hook_text`` and whose adapter dir holds ``files``."""
    root = lab["tmp"] / f"rootfs-hook-{time.monotonic_ns()}"
    adir = root / "sgl-workspace" / "adapter"
    adir.mkdir(parents=True)
    for name in files:
        shutil.copy(ADAPTERS / f"{name}.py", adir / f"{name}.py")
    (adir / "sitecustomize.py").write_text(hook_text)
    return root


FINDER_HOOK = '''
import os, sys
_OFF = ("0", "", "off", "false")
def install_wo_a_w8(module): pass
def install_folded_fence(module): pass
class _Loader:
    def exec_module(self, module):
        name = module.__name__
        if name == "sglang.srt.models.deepseek_v4":
            if os.environ.get("DSV41_WO_A_W8", "0") not in _OFF:
                install_wo_a_w8(module)
        elif name == "sglang.srt.speculative.dspark_components.dspark_verify":
            if os.environ.get("DSV41_FOLDED_FENCE", "0") not in ("0", "", "off", "false"):
                install_folded_fence(module)
sys.meta_path.insert(0, _Loader())
'''


def test_switch_honoured_only_when_adapter_file_and_registration_are_in_the_image(lab):
    env = {"DSV41_FOLDED_FENCE": "1", "DSV41_WO_A_W8": "1", "DSV41_ENGRAM_PREFETCH": "1"}
    # finder/loader shape: the loader installs wo_a_w8 and folded_fence; prefetch is installed nowhere
    root = hook_image(lab, FINDER_HOOK)
    out = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(root)}, rank=0).text()
    assert FENCE_LINE in out and "[wo_a_w8] fp8 twins for 43 wo_a weights" in out
    assert "Engram prefetch" not in out, "registered nowhere in the hook: the switch is ignored"
    # registered but the file missing from the image: ignored too
    root = hook_image(lab, FINDER_HOOK, files=("wo_a_w8",))
    out = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(root)}, rank=0).text()
    assert FENCE_LINE not in out and "[wo_a_w8] fp8 twins" in out


BRIDGE_LINE = "[wo_a_w8] einsum bridge armed: fp8 twin for verify/draft rows, gemv left at M=1"
DRAFT_KEPT_LINE = "[wo_a_w8] draft wo_a left on bf16 (this engine's draft does not use the shared dispatch)"


def test_wo_a_bridge_is_today_s_image_and_the_kernel_image_has_none(lab):
    """Today's fleet image has no small-row kernel: W8 arms its einsum bridge by default, and with DROP keeps
    the draft's wo_a on bf16 and says so (SPEC section 3); an engine with the kernel prints neither."""
    out = boot_worker(lab, env={"DSV41_WO_A_W8": "1"}).stream("stdout").splitlines()
    assert out[:2] == ["[wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16", BRIDGE_LINE]
    out = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"}).stream("stdout").splitlines()
    assert out[1] == BRIDGE_LINE and out[4] == DRAFT_KEPT_LINE and out[3].startswith("[wo_a_w8] released the bf16")
    kernel = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1",
                                   "LAB_ENGINE_SMALL_ROW_KERNEL": "1"}).stream("stdout")
    assert "[wo_a_w8] released the bf16" in kernel and BRIDGE_LINE not in kernel and DRAFT_KEPT_LINE not in kernel
    faulty = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1",
                                   "LAB_ENGINE_FAULT": "bridge_draft_dropped"}).stream("stdout")
    assert BRIDGE_LINE in faulty and DRAFT_KEPT_LINE not in faulty


def test_an_image_whose_w8_adapter_carries_the_g4_dispatch_has_the_small_row_kernel(tmp_path):
    """The canary's kernel module (the ported G=4 dispatch in its wo_a_w8.py) switches W8 to kernel
    replacement; the same adapter without it runs the bridge."""
    engine = load_engine_module()
    adapter = tmp_path / "sgl-workspace" / "adapter"
    adapter.mkdir(parents=True)
    port = (ROOT / "lab" / "seed" / "adapters" / "ported" / "wo_a_w8_g4_dispatch.py").read_text()
    for text, expected in (("def install():\n    pass\n", False), ("def install():\n    pass\n" + port, True)):
        (adapter / "wo_a_w8.py").write_text(text)
        engine._IMAGE_CACHE.clear()
        old = os.environ.get("LAB_IMAGE_ROOT")
        os.environ["LAB_IMAGE_ROOT"] = str(tmp_path)
        try:
            assert engine.small_row_kernel() is expected
        finally:
            engine._IMAGE_CACHE.clear()
            os.environ.pop("LAB_IMAGE_ROOT") if old is None else os.environ.__setitem__("LAB_IMAGE_ROOT", old)


def test_oom_fault_kills_an_armed_boot_and_spares_the_baseline(lab):
    rc, proc = run_to_exit(lab, engine_argv("worker", 1), env={"DSV41_FOLDED_FENCE": "1",
                                                               "LAB_ENGINE_FAULT": "oom_at_boot"})
    err = proc.stream("stderr")
    assert rc == 1 and re.search(r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate 1\.50 GiB",
                                 err, re.M)
    assert "Capture target verify CUDA graph end." not in err
    assert boot_worker(lab, env={"LAB_ENGINE_FAULT": "oom_at_boot"}).text().count("CUDA graph end.") == 2


def packed_lab(lab):
    for layer in ROWS:
        write_shard(lab["engram"], layer, 0)


@pytest.mark.parametrize("fault,counts", [("", "[0, 0]"), ("prefetch_mismatch", "[2, 0]")])
def test_prefetch_check_line_every_period_on_a_worker(lab, fault, counts):
    packed_lab(lab)
    env = {"DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "1", "LAB_ENGINE_STATS_SECONDS": "5",
           "LAB_ENGINE_FAULT": fault}
    proc = Proc(lab, engine_argv("worker", 0, port=lab["port"]), env)
    try:
        proc.wait_for(WORKER_DONE)
        line = f"DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = {counts}"
        end = time.monotonic() + 10
        while messages(proc.stream("stderr")).count(line) < 2 and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        proc.stop()
    assert messages(proc.stream("stderr")).count(line) >= 2
    assert re.search(rf"^\[{TS} TP0 EP0\] DSV41 Engram prefetch CHECK", proc.stream("stderr"), re.M)


def test_no_check_line_without_check_mode(lab):
    packed_lab(lab)
    proc = Proc(lab, engine_argv("worker", 0, port=lab["port"]),
                {"DSV41_ENGRAM_PREFETCH": "1", "LAB_ENGINE_STATS_SECONDS": "5"})
    try:
        proc.wait_for(WORKER_DONE)
        time.sleep(0.3)
    finally:
        proc.stop()
    assert "prefetch CHECK" not in proc.text() and "prefetch ARMED" in proc.text()


def head_with(lab, env, block=3):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port, block=block),
                env={"API_KEY": "sk-test-secret", "LAB_ENGINE_SPEED": "400", **env}, name="head")
    proc.wait_for(f"Ready: API on port {port}")
    return port, proc


def answer(port, body=CHAT):
    with request(port, "/v1/chat/completions", body) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def concurrent_answers(port, n=4):
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: answer(port), range(n)))


@pytest.mark.parametrize("fault", ["", "fold_race"])
def test_greedy_outputs_depend_on_the_fold_race_fault(lab, fault):
    port, proc = head_with(lab, {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": fault})
    try:
        repeat = {answer(port) for _ in range(3)}
        together = set(concurrent_answers(port))
    finally:
        proc.stop()
    if fault:
        assert len(repeat) > 1 and len(together | repeat) > 1
    else:
        assert len(repeat) == 1 and together == repeat


def test_fold_race_needs_the_fence_armed(lab):
    port, proc = head_with(lab, {"LAB_ENGINE_FAULT": "fold_race"})
    try:
        assert len({answer(port) for _ in range(3)} | set(concurrent_answers(port))) == 1
    finally:
        proc.stop()


def test_nonfinite_fault_with_w8(lab):
    port, proc = head_with(lab, {"DSV41_WO_A_W8": "1", "LAB_ENGINE_FAULT": "nonfinite"})
    try:
        text = answer(port)
    finally:
        proc.stop()
    assert set(text.split()) == {"!"}
    assert "Detected errors during sampling! NaN in the logits." in messages(proc.stream("stderr"))


@pytest.mark.parametrize("env,kernel,absent", [
    ({"DSV41_WO_A_W8": "1"}, "wo_a_fp8_gemv_g4 (target)", "wo_a_bf16_gemv (target)"),
    ({"DSV41_WO_A_W8": "1", "LAB_ENGINE_FAULT": "g4_not_taken"}, "wo_a_bf16_gemv (target)", "wo_a_fp8"),
    ({}, "wo_a_bf16_gemv (draft)", "wo_a_fp8")])
def test_profile_trace_names_the_kernels_that_ran(lab, env, kernel, absent):
    traces = lab["tmp"] / "traces"
    port, proc = head_with(lab, {**env, "SGLANG_TORCH_PROFILER_DIR": str(traces)})
    try:
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/stop_profile", {})
        assert exc.value.code == 400
        with request(port, "/start_profile", {}) as r:
            assert r.read() == b"Start profiling."
        answer(port)
        with request(port, "/stop_profile", {}) as r:
            assert r.status == 200
    finally:
        proc.stop()
    (trace,) = traces.glob("*-TP-0.trace.json")
    names = [e["name"] for e in json.loads(trace.read_text())["traceEvents"]]
    assert kernel in names and not any(absent in n for n in names)


def test_every_rank_writes_its_own_profile_trace(lab):
    """SGLang profiles every TP rank: the worker writes its TP-1 trace on its own host when the head's
    profile ends (it hears of it through the rendezvous reply)."""
    traces = lab["tmp"] / "traces"
    rdv = "127.0.0.1:%d" % free_port()
    env = {"DSV41_WO_A_W8": "1", "SGLANG_TORCH_PROFILER_DIR": str(traces), "API_KEY": "sk-test-secret",
           "LAB_ENGINE_SPEED": "400"}
    port = free_port()
    head = Proc(lab, engine_argv("head", 0, port=port, extra=("--dist-init-addr", rdv)), env=env, name="head")
    head.wait_for(f"Ready: API on port {port}")
    worker = Proc(lab, engine_argv("worker", 1, extra=("--dist-init-addr", rdv)), env=env, name="worker")
    try:
        worker.wait_for("Uvicorn running")
        time.sleep(2.5)  # one report round: the worker has read the count of profiles before this one
        assert not list(traces.glob("*-TP-1.trace.json")), "no trace before a profile ends"
        with request(port, "/start_profile", {}):
            pass
        answer(port)
        with request(port, "/stop_profile", {}):
            pass
        deadline = time.monotonic() + 10
        while not list(traces.glob("*-TP-1.trace.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.stop()
        head.stop()
    for rank in (0, 1):
        (trace,) = traces.glob("*-TP-%d.trace.json" % rank)
        assert "wo_a_fp8_gemv_g4 (draft)" in [e["name"] for e in json.loads(trace.read_text())["traceEvents"]]


# ------------------------------------------------------------------ head HTTP API shapes (SPEC section 3)

def sse_events(port, body, key="sk-test-secret"):
    """Every ``data:`` payload of one streamed answer, JSON decoded (``[DONE]`` kept as the string)."""
    with request(port, "/v1/chat/completions", body, key=key) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in lines]


STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}


def test_head_stream_reasoning_apart_only_with_thinking(head):
    port = head["port"]
    events = sse_events(port, {**STREAM, "max_tokens": 400, "chat_template_kwargs": {"thinking": True}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    # all the reasoning first, then the answer; the first text right after the role chunk is reasoning
    assert kinds[0] == "reasoning_content" and "content" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "content")
    assert "reasoning_content" in deltas[1]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and all("usage" not in c or c["usage"] is None for c in chunks[:-1])
    reasoning = sum(len(d["reasoning_content"].split()) for d in deltas if d.get("reasoning_content"))
    answer = sum(len(d["content"].split()) for d in deltas if d.get("content"))
    assert reasoning == usage["reasoning_tokens"] == 256 and reasoning + answer == usage["completion_tokens"]
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")

    plain = sse_events(port, {**CHAT, "stream": True})          # no thinking, no include_usage
    assert not any(c["choices"][0]["delta"].get("reasoning_content") for c in plain[:-1] if c["choices"])
    assert not any(c.get("usage") for c in plain[:-1]), "usage only when stream_options.include_usage"


def test_head_refuses_bad_sampling_before_the_stream(head):
    for bad in ({"top_p": 1.5}, {"temperature": -1}, {"max_completion_tokens": -3}, {"top_k": 0}):
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(head["port"], "/v1/chat/completions", {**STREAM, **bad})
        body = json.load(exc.value)
        assert exc.value.code == 400 and body["object"] == "error" and body["code"] == 400, bad
        assert list(bad)[0] in body["message"]


def test_head_seeded_sampling_repeats_and_the_seed_matters(head):
    port = head["port"]
    sampled = {**CHAT, "temperature": 0.7, "top_p": 0.95, "top_k": 20, "seed": 7}
    assert answer(port, sampled) == answer(port, sampled)
    assert answer(port, sampled) != answer(port, {**sampled, "seed": 8})
    assert answer(port, sampled) != answer(port), "sampled is not the greedy answer"


def test_stream_error_knob_sends_an_error_event_then_done(lab):
    port, proc = head_with(lab, {"LAB_ENGINE_STREAM_ERROR_EVERY": "2"})
    try:
        ok = sse_events(port, STREAM)                          # request 1
        assert ok[-2]["usage"]["completion_tokens"] > 0
        bad = sse_events(port, STREAM)                         # request 2: the knob's
        assert bad[-1] == "[DONE]" and set(bad[-2]) == {"error"}
        assert bad[-2]["error"]["code"] == 503 and bad[-2]["error"]["message"]
        assert any(c.get("choices") and c["choices"][0]["delta"].get("content") for c in bad[:-2]), "mid-stream"
        assert not any(c.get("usage") or (c.get("choices") and c["choices"][0].get("finish_reason"))
                       for c in bad[:-2]), "no finish chunk and no usage after an error"
        answer(port)                                           # request 3
        with pytest.raises(urllib.error.HTTPError) as exc:    # request 4, not streamed
            answer(port)
        body = json.load(exc.value)
        assert exc.value.code == 503 and body["object"] == "error" and body["code"] == 503
    finally:
        assert proc.stop() == 0


def test_abort_knob_finishes_with_abort_and_usage(lab):
    port, proc = head_with(lab, {"LAB_ENGINE_ABORT_EVERY": "1", "LAB_ENGINE_SPEC_USAGE": "1"})
    try:
        events = sse_events(port, {**STREAM, "max_tokens": 1000})
        assert events[-1] == "[DONE]" and events[-2]["choices"] == []
        assert events[-3]["choices"][0]["finish_reason"] == "abort"
        usage = events[-2]["usage"]
        streamed = sum(len(c["choices"][0]["delta"].get("content", "").split()) for c in events[:-2] if c["choices"])
        assert 0 < streamed == usage["completion_tokens"] < 1000
        details = usage["completion_tokens_details"]
        # every step commits its own token plus the accepted draft tokens; K=3 drafts per step
        assert details["accepted_prediction_tokens"] < usage["completion_tokens"]
        assert (details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"]) % 3 == 0
        with request(port, "/v1/chat/completions", CHAT) as r:
            data = json.load(r)
        assert data["choices"][0]["finish_reason"] == "abort" and data["usage"]["completion_tokens"] > 0
    finally:
        assert proc.stop() == 0


def test_decode_batch_lines_give_tokens_per_step(lab):
    from ansible.module_utils.engine_log.decode_steps import step_stats
    # only the line each request logs as it leaves (no periodic lines): one per request
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "0"})
    try:
        # one request at a time, each one's decode line seen before the next is sent: two requests in flight
        # at once share a batch line (#running-req: 2), which running=1 leaves out
        for i in range(3):
            answer(port)
            end = time.monotonic() + 20
            while proc.stream("stderr").count("Decode batch") < i + 1 and time.monotonic() < end:
                time.sleep(0.02)
        stats = step_stats(proc.stream("stderr"), running=1)
    finally:
        assert proc.stop() == 0
    assert stats["lines"] == 3 and stats["missing"] is None
    # K=3: 1 to 4 committed tokens per step; prose acceptance 0.55 -> about 2.65 on average
    assert 1.5 < stats["committed_tokens_per_step"]["median"] < 3.8
    assert stats["step_ms"]["median"] > 0


def test_back_to_back_requests_of_one_client_each_log_a_batch_of_one(lab):
    """A client that sends its next request the moment it has read the answer (the benchmark at C1) never finds the
    previous request still in the batch: every Decode batch line says #running-req: 1, as the scheduler's would."""
    from ansible.module_utils.engine_log.decode_steps import decode_batch_lines
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "0"})
    short = dict(CHAT, max_tokens=8, max_completion_tokens=8)
    try:
        for _ in range(20):
            answer(port, short)
        time.sleep(0.3)
        lines = decode_batch_lines(proc.stream("stderr"))
    finally:
        assert proc.stop() == 0
    assert len(lines) == 20 and {r["running_req"] for r in lines} == {1.0}, [r["running_req"] for r in lines]


def test_decode_batch_lines_come_every_n_steps_with_the_batch_s_size_while_requests_run(lab):
    """As the scheduler logs every decode_log_interval steps: a long answer logs lines while it runs, each with the
    batch's size at that moment (four requests in flight: #running-req: 4), not only one line as it leaves."""
    import concurrent.futures
    from ansible.module_utils.engine_log.decode_steps import step_stats
    port, proc = head_with(lab, {"LAB_ENGINE_DECODE_LOG_STEPS": "5"})
    long = dict(CHAT, max_tokens=256, max_completion_tokens=256)
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: answer(port, long), range(4)))
        time.sleep(0.3)
        text = proc.stream("stderr")
        four = step_stats(text, running=4)
    finally:
        assert proc.stop() == 0
    assert text.count("Decode batch") > 4 + 4, "periodic lines beside the one each request logs as it leaves"
    assert four["lines"] >= 4 and four["missing"] is None, four
    assert 1.0 <= four["committed_tokens_per_step"]["median"] <= 4.0 and four["step_ms"]["median"] > 0


def bench_against(port, tmp_path, **kw):
    from ansible.module_utils.bench import decode as db
    prompts = tmp_path / "prose.json"
    prompts.write_text(json.dumps([{"id": "sparks", "prompt": "Write a short story about three sparks."}]))
    settings = {"concurrency": [1], "repetitions": 5, "warmups": 0, "max_tokens": 64, "timeout": 30, **kw}
    return db.run_benchmark(f"http://127.0.0.1:{port}", {"prose": db.load_prompts(str(prompts))}, settings,
                            api_key="sk-test-secret", host_label="spark2", measured_on="lab output")


def test_benchmark_counts_a_stream_error_as_a_failed_repetition(lab, tmp_path):
    port, proc = head_with(lab, {"LAB_ENGINE_STREAM_ERROR_EVERY": "3"})
    try:
        res = bench_against(port, tmp_path)
    finally:
        assert proc.stop() == 0
    (cond,) = res["results"]
    # requests 3 and 6 fail; two extra rounds replace them: five measured rounds out of seven sent
    assert res["requests_sent"] == 7 and cond["rounds"] == 5 and cond["complete"] is True
    assert cond["failed_repetitions"] == 2 and cond["error_codes"] == {"503": 2}
    assert [f["round"] for f in cond["failures"]] == [2, 5] and res["incomplete"] == []
    assert len(cond["aggregate_tok_s"]["rounds"]) == 5 and cond["distinct_outputs"] == 1
    assert res["summary"]["prose"]["c1"]["error_codes"] == {"503": 2}


def test_benchmark_module_fails_when_aborts_leave_too_few_repetitions(lab, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    from modrun import run_module
    import decode_bench
    port, proc = head_with(lab, {"LAB_ENGINE_ABORT_EVERY": "2"})
    prompts = tmp_path / "prose.json"
    prompts.write_text(json.dumps(["Write a short story about three sparks."]))
    try:
        res = run_module(decode_bench.main, {
            "url": f"http://127.0.0.1:{port}", "api_key": "sk-test-secret", "prompt_files": {"prose": str(prompts)},
            "concurrency": [1], "warmups": 0, "max_tokens": 64, "failed_repetition_retries": 1,
            "thinking": True, "host_label": "spark2", "timeout": 30})
    finally:
        assert proc.stop() == 0
    assert res["failed"] is True and "prose C1: 2 of 5 measured repetitions (2 failed, error codes abort x2)" in res["msg"]
    (cond,) = res["results"]
    assert cond["error_codes"] == {"abort": 2} and cond["failures"][0]["finish_reason"] == "abort"
    assert cond["reasoning_tokens_total"] == 2 * 64 and cond["answer_tokens_total"] == 0


@pytest.mark.parametrize("rank,block,expected", [(2, 5, 3), (2, 3, 4), (1, 5, 5)])
def test_rank_length_mismatch_makes_the_last_worker_disagree(lab, rank, block, expected):
    proc = boot_worker(lab, {"LAB_ENGINE_FAULT": "rank_length_mismatch"}, rank=rank, block=block)
    args = marker_dict(proc.stream("stderr"))
    assert args["speculative_dspark_block_size"] == expected
    assert args["speculative_num_draft_tokens"] == expected + 1


@pytest.mark.parametrize("env,packed,compute_us", [({}, False, 2500), ({}, True, 1000),
                                                    ({"DSV41_ENGRAM_PREFETCH": "1"}, True, 150),
                                                    ({"DSV41_ENGRAM_PREFETCH": "1"}, False, 2500)])
def test_profile_trace_puts_the_engram_gather_on_the_stream_it_runs_on(tmp_path, monkeypatch, env, packed, compute_us):
    import importlib.util
    spec = importlib.util.spec_from_file_location("lab_engine", str(ENGINE))
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    monkeypatch.delenv("LAB_IMAGE_ROOT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = engine.profile_trace(1, packed)
    events = json.loads(open(path).read())["traceEvents"]
    on_compute = sum(e["dur"] for e in events if "engram" in e["name"] and e["tid"] == 7)
    assert on_compute == compute_us


# ------------------------------------------------------------------ stage H: sampling paths and faults

SAMPLED = {**CHAT, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 1234, "max_tokens": 400}


def sampled_words(port, body=SAMPLED):
    return answer(port, body).split()


def test_sampled_answers_follow_the_seed_and_the_sampler_path(lab):
    outs = {}
    for name, env in (("auto", {}), ("auto2", {}), ("verify", {"DSV41_BLOCK_VERIFY": "1"}),
                      ("tau", {"DSV41_DRAFT_TAU": "0.8"})):
        port, proc = head_with(lab, env)
        try:
            outs[name] = (sampled_words(port), answer(port))
        finally:
            proc.stop()
    assert outs["auto"] == outs["auto2"], "a fixed seed samples alike on the same path"
    assert outs["verify"][0] != outs["auto"][0] and outs["tau"][0] != outs["auto"][0], "another path, another stream"
    assert outs["verify"][1] == outs["tau"][1] == outs["auto"][1], "greedy answers do not depend on the path"


def test_sampler_shift_skews_the_words_only_with_a_sampling_switch(lab):
    from ansible.module_utils.bench import sampling as sc
    counts = {}
    for name, env in (("base", {}), ("shift", {"DSV41_BLOCK_VERIFY": "1", "LAB_ENGINE_FAULT": "sampler_shift"}),
                      ("off", {"LAB_ENGINE_FAULT": "sampler_shift"})):
        port, proc = head_with(lab, env)
        try:
            words = []
            for i in range(6):
                words += sampled_words(port, {**SAMPLED, "messages": [{"role": "user", "content": "story %d" % i}]})
        finally:
            proc.stop()
        counts[name] = dict((w, words.count(w)) for w in set(words))
    assert counts["off"] == counts["base"], "the fault acts only when the arm's switch took effect"
    assert sc.homogeneity(counts["base"], counts["shift"])["p"] < 0.001


def test_mixed_greedy_fault_changes_greedy_rows_beside_sampled_ones(lab):
    import concurrent.futures
    results = {}
    for fault in ("", "mixed_greedy"):
        port, proc = head_with(lab, {"DSV41_BLOCK_VERIFY": "1", "LAB_ENGINE_FAULT": fault,
                                     "LAB_ENGINE_SPEED": "20"})
        try:
            alone = answer(port)
            slow = {**SAMPLED, "max_tokens": 1000}
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                sampled = pool.submit(answer, port, slow)
                time.sleep(0.2)
                mixed = pool.submit(answer, port).result()
                sampled.result()
        finally:
            proc.stop()
        results[fault] = (alone, mixed)
    assert results[""][0] == results[""][1], "greedy answers keep their text in a mixed batch"
    assert results["mixed_greedy"][0] != results["mixed_greedy"][1], "the fault changes the greedy row"
    assert results["mixed_greedy"][0] == results[""][0]


# ------------------------------------------------------------------ logprobs, the proposal and the capped block

LOGPROBS = {**SAMPLED, "max_tokens": 300, "logprobs": True, "top_logprobs": 20}


def logprob_answer(port, body):
    with request(port, "/v1/chat/completions", body) as r:
        choice = json.load(r)["choices"][0]
    return choice["message"]["content"], choice["logprobs"]["content"]


def proposal_pit(port, prompts=8, body=LOGPROBS):
    """verify_checks' pooled PIT figures over sampled answers with logprobs (what the proposal check judges)."""
    from ansible.module_utils.experiment import verify as vc
    requests = []
    for i in range(prompts):
        b = {**body, "messages": [{"role": "user", "content": "a story about spark %d" % i}]}
        text, content = logprob_answer(port, b)
        requests.append({"greedy": False, "prompt_id": "p%d" % i, "text": text, "logprobs": content})
    pit = vc.condition_pits(requests, {**body, "seed": body["seed"]})
    return vc.uniformity(pit["pit"]), pit


def test_logprobs_streamed_and_not_report_the_distribution_the_answer_was_sampled_from(lab):
    port, proc = head_with(lab, {})
    try:
        text, content = logprob_answer(port, LOGPROBS)
        events = sse_events(port, {**LOGPROBS, "stream": True, "stream_options": {"include_usage": True}})
        with request(port, "/v1/chat/completions", {**SAMPLED, "max_tokens": 300}) as r:
            choice = json.load(r)["choices"][0]
        fig, pit = proposal_pit(port)
    finally:
        proc.stop()
    assert "logprobs" not in choice, "nothing reported unless asked"
    assert "".join(e["token"] for e in content) == text
    for e in content:
        alts = e["top_logprobs"]
        assert len(alts) == 20 and [a["logprob"] for a in alts] == sorted((a["logprob"] for a in alts), reverse=True)
        assert e["token"] in [a["token"] for a in alts], "top_k 20: the committed token is among the top 20"
        assert e["logprob"] == next(a["logprob"] for a in alts if a["token"] == e["token"])
        assert 0.5 < sum(math.exp(a["logprob"]) for a in alts) <= 1.0 + 1e-9, "tempered, before top-k and top-p"
    streamed = [e for ev in events[:-1] for c in ev.get("choices") or [] for e in (c.get("logprobs") or {}).get("content", [])]
    assert streamed == content, "the stream carries each token's entry in the chunk that carries the token"
    assert pit["positions"] >= 1500 and pit["outside"] == 0 and pit["without_logprobs"] == 0
    assert fig["p"] >= 0.001, fig


def test_tau_untempered_fault_commits_tokens_off_the_reported_distribution(lab):
    figs = {}
    for name, env in (("tau", {"DSV41_DRAFT_TAU": "0.8", "SGLANG_DSPARK_FOLDED_SAMPLING": "2"}),
                      ("fault", {"DSV41_DRAFT_TAU": "0.8", "SGLANG_DSPARK_FOLDED_SAMPLING": "2",
                                 "LAB_ENGINE_FAULT": "tau_untempered"}),
                      ("off", {"LAB_ENGINE_FAULT": "tau_untempered"})):
        port, proc = head_with(lab, env)
        try:
            figs[name] = proposal_pit(port)[0]
        finally:
            proc.stop()
    print(figs)
    assert figs["tau"]["p"] >= 0.001 and figs["off"]["p"] >= 0.001, figs
    assert figs["fault"]["p"] < 1e-6, figs["fault"]
    # the tempered proposal is sharper: the target's most likely tokens are committed too often (low PIT values)
    assert figs["fault"]["bins"][0] > figs["fault"]["bins"][-1]


def spec_usage(port, body=CHAT):
    with request(port, "/v1/chat/completions", body) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"], out["usage"]


def test_the_cap_only_removes_acceptances_and_the_dead_rows_fault_commits_them(lab):
    got = {}
    prompts = [{**CHAT, "max_tokens": 300, "messages": [{"role": "user", "content": "a story about spark %d" % i}]}
               for i in range(6)]
    for name, env in (("uncapped", {}), ("cap", {"DSV41_VERIFY_CAP": "conf:0.1"}),
                      ("fault", {"DSV41_VERIFY_CAP": "conf:0.1", "LAB_ENGINE_FAULT": "cap_dead_rows"}),
                      ("off", {"LAB_ENGINE_FAULT": "cap_dead_rows"})):
        port, proc = head_with(lab, {"LAB_ENGINE_SPEC_USAGE": "1", **env}, block=5)
        try:
            got[name] = [spec_usage(port, b) for b in prompts]
        finally:
            proc.stop()
        steps = [line for line in proc.text().splitlines() if "Decode batch" in line]
        got[name + "_accept"] = [float(re.search(r"accept len: ([\d.]+)", line).group(1)) for line in steps]

    def accepted(name):
        return [u["completion_tokens_details"]["accepted_prediction_tokens"] for _, u in got[name]]
    assert [t for t, _ in got["cap"]] == [t for t, _ in got["uncapped"]] == [t for t, _ in got["off"]]
    assert all(a <= b for a, b in zip(accepted("cap"), accepted("uncapped"))) and accepted("cap") != accepted("uncapped")
    assert all(a <= b for a, b in zip(got["cap_accept"], got["uncapped_accept"])), (got["cap_accept"], got["uncapped_accept"])
    assert [t for t, _ in got["fault"]] != [t for t, _ in got["uncapped"]], "dead rows commit the draft's guesses"
    assert sum(accepted("fault")) > sum(accepted("uncapped"))
    assert sum(got["fault_accept"]) > sum(got["uncapped_accept"])


def test_step_time_follows_ep1_the_row_cache_and_the_clock_lock(tmp_path, monkeypatch):
    """The stage I lab figures: EP1 -3 ms, a row cache up to -2 ms (-0.5 more at 16 ways, only with a cache),
    unlocked clocks 1.2% shorter steps (less once the thermal model throttles boost), read from the lab
    nvidia-smi's state as a clocks arm leaves it."""
    import threading
    import types
    eng = load_engine_module()
    for key in [k for k in os.environ if k.startswith(("DSV41_", "LAB_"))]:
        monkeypatch.delenv(key)
    state = tmp_path / "state.json"
    monkeypatch.setattr(eng, "NVIDIA_STATE", str(state))

    def step(ep=3, locked=True, **env):
        for key in ("DSV41_CACHE_GIB", "DSV41_CACHE_WAYS"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        state.write_text(json.dumps({"locked_clocks": {"min": 0, "max": 2200} if locked else None}))
        eng._CLOCKS["at"] = -1e9   # read the state now
        fake = types.SimpleNamespace(args=types.SimpleNamespace(dspark_block_size=3, ep_size=ep, tp_size=3),
                                     all_packed=lambda: True, lock=threading.Lock(), active=1)
        return eng.Engine.step_ms(fake)

    monkeypatch.setattr(eng, "adapter_in_image", lambda name: True)
    assert step() == 98.0
    assert step(ep=1) == 95.0
    assert step(DSV41_CACHE_GIB="0.25") == 97.0 and step(DSV41_CACHE_GIB="0.5") == 96.0
    assert step(DSV41_CACHE_GIB="0.5", DSV41_CACHE_WAYS="16") == 95.5
    assert step(DSV41_CACHE_WAYS="16") == 98.0, "ways matter only with a non-zero cache"
    assert step(locked=False) == pytest.approx(98.0 * 0.988)
    # with the lab GPU's thermal model on (the clocks A/B's knob), a GPU busy for many time constants has been
    # throttled from its 2418 MHz boost to 2268 MHz: the unlocked gain shrinks to 68/218 of 1.2%; locked at
    # 2200 MHz it never gets that hot, and the step is the locked one
    monkeypatch.setattr(eng, "NVIDIA_STATE_DIR", str(tmp_path))
    (tmp_path / "thermal-seconds").write_text("1\n")
    monkeypatch.setattr(eng, "STARTED", time.monotonic() - 100.0)
    assert step(locked=False) == pytest.approx(98.0 * (1 - 0.012 * 68 / 218))
    assert step() == 98.0
    monkeypatch.setattr(eng, "STARTED", time.monotonic())   # just started: still cool, full boost
    assert step(locked=False) == pytest.approx(98.0 * 0.988)
    state.write_text("{broken")
    eng._CLOCKS["at"] = -1e9
    assert eng.clock_lock() == {"min": 0, "max": 2200}, "an unreadable state is the fleet's state: locked"


@pytest.mark.parametrize("cache,fault,expect", [
    ("0.25", "", r"^\[engram_drm\] layer 14 rank 0 cache on /dev/dri/renderD128: 0\.12 GiB DRM-backed"),
    ("0", "", r"^\[engram_drm\] DSV41_CACHE_GIB=0: no cache slots; DRM node /dev/dri/renderD128 unused$"),
    ("0.25", "drm_fallback", r"^\[engram_drm\] DRM allocation of 0\.12 GiB on /dev/dri/renderD128 failed \(errno=12\) "
                             r"for layer 14 rank 0; falling back to anonymous memory$"),
])
def test_drm_cache_lines_and_the_fallback_fault(lab, cache, fault, expect):
    """Stage I's DRM cache in the lab: what the ported adapter says, and a fallback the stage's must-not catches."""
    import yaml
    port, proc = head_with(lab, {"DSV41_ENGRAM_DRM_NODE": "/dev/dri/renderD128", "DSV41_CACHE_GIB": cache,
                                 "LAB_ENGINE_FAULT": fault})
    try:
        lines = [line for line in proc.stream("stdout").splitlines() if line.startswith("[engram_drm]")]
    finally:
        assert proc.stop() == 0
    assert len(lines) == 1 and re.search(expect, lines[0]), lines
    drm = yaml.safe_load((ROOT / "experiments" / "stage_i_drm.yml").read_text())
    (fallback,) = [m for m in drm["evidence"]["must_not"] if m["id"] == "drm_fallback"]
    assert bool(re.search(fallback["pattern"], lines[0])) == (fault == "drm_fallback")


def test_the_row_cache_fills_from_cold_after_the_boot():
    eng = load_engine_module()
    assert eng.row_cache_hit_rate(0.0, 16, 10 ** 6) == 0.0, "no cache, no hits"
    filling = [eng.row_cache_hit_rate(0.5, 4, n) for n in (0, 1000, 5000, 50000)]
    assert filling[0] == 0.0 and filling == sorted(filling) and filling[-1] == pytest.approx(0.30, abs=1e-3)
    assert eng.row_cache_hit_rate(0.25, 4, 50000) < filling[-1] < eng.row_cache_hit_rate(0.5, 16, 50000)


def test_needles_are_found_at_any_depth_unless_the_needle_miss_fault_cuts_the_reach(lab):
    """Long-context retrieval as the quality check asks it (module_utils/experiment/quality.py): the stand-in
    answers a needle question with the sentence hidden in its prompt; needle_miss loses it beyond the reach."""
    from ansible.module_utils.experiment import quality as q
    prompts = dict((p["id"], p) for p in q.needle_prompts((30000, 100000)))
    answers = {}
    for name, env in (("ok", {"LAB_ENGINE_FAULT": "needle_miss"}),
                      ("miss", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "needle_miss"})):
        port, proc = head_with(lab, env)
        try:
            for pid, p in prompts.items():
                answers[(name, pid)] = answer(port, {**CHAT, "messages": p["messages"], "max_tokens": 48})
        finally:
            proc.stop()
    for size in (30000, 100000):
        f = q.needle_facts(size)
        assert answers[("ok", f["id"])] == "The pass code for vault %s is %s." % (f["vault"], f["code"])
    assert answers[("miss", "needle-30k")] == answers[("ok", "needle-30k")], "within the reach"
    assert answers[("miss", "needle-100k")].startswith("I found no pass code for vault")


def test_graded_tasks_are_answered_right_unless_graded_wrong_is_set_with_an_adapter_armed(lab):
    """The graded task set as the quality check asks it (module_utils/experiment/graded_tasks.py), graded as the head grades
    it (code run inside bubblewrap): every answer passes; graded_wrong with an adapter armed fails every task."""
    from ansible.module_utils.base import isolated_python
    from ansible.module_utils.experiment import graded_tasks as g
    got = {}
    for name, env in (("ok", {"LAB_ENGINE_FAULT": "graded_wrong"}),
                      ("wrong", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "graded_wrong"})):
        port, proc = head_with(lab, env)
        try:
            got[name] = dict((p["id"], [answer(port, {**CHAT, "messages": p["messages"], "max_tokens": 256})])
                             for p in g.prompts())
        finally:
            proc.stop()
    assert "\n    while b:" in got["ok"]["code-gcd"][0], "the code keeps its lines and indentation"
    assert g.failures(got["ok"], isolated_python.run) == []
    wrong = g.failures(got["wrong"], isolated_python.run)
    assert [w.split(" ")[1] for w in wrong] == [t["id"] for t in g.TASKS], wrong
    assert "graded_tasks: math-odd-sum (math): final answer 2499, expected 2500; answer: " in wrong[0]
    assert any("json-invoice (json): key 'total' is 270.5, expected 338.0" in w for w in wrong)
    assert any("code-palindrome (code): its code failed its asserts (exit 1" in w for w in wrong)


def test_answer_drift_changes_one_greedy_answer_in_four_only_with_an_adapter_armed(lab):
    bodies = [{**CHAT, "messages": [{"role": "user", "content": "Tell me about harbour %d." % i}]} for i in range(8)]
    got = {}
    for name, env in (("base", {}), ("drift", {"DSV41_FOLDED_FENCE": "1", "LAB_ENGINE_FAULT": "answer_drift"}),
                      ("off", {"LAB_ENGINE_FAULT": "answer_drift"})):
        port, proc = head_with(lab, env)
        try:
            got[name] = [answer(port, b) for b in bodies]
        finally:
            proc.stop()
    assert got["off"] == got["base"], "no adapter armed: the fault does nothing"
    changed = [i for i in range(8) if got["drift"][i] != got["base"][i]]
    assert 0 < len(changed) < 8, changed


# --------------------------------------------------------------------------- stage I: EP1 and the Engram caches

def boot_rank_lines(lab, rank, ep, env=None):
    """Boot one rank at TP3 with expert parallel ``ep`` to completion; its messages (both streams)."""
    argv = engine_argv("worker", rank, port=free_port())
    argv[argv.index("--ep-size") + 1] = str(ep)
    proc = Proc(lab, argv + ["--moe-runner-backend", "b12x"], env)
    try:
        proc.wait_for(WORKER_DONE)
    finally:
        assert proc.stop() == 0
    # under EP1 the logging prefix has no EP tag ([ts TP1]): taken off as the project's reader does
    return [re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP\d+\] ", "", m) for m in messages(proc.text())]


@pytest.mark.parametrize("ep,width,experts", [(3, 2304, "1/3"), (1, 768, "all")])
def test_moe_and_padding_lines_on_every_rank(lab, ep, width, experts):
    """EP1 slices every expert's 2304-wide intermediate over the three ranks (768 each) on the MXFP4 path; the
    TP3 padding (attention, vocab, the draft's) is the same under EP1 and EP3 (lab wording of both lines)."""
    for rank in (0, 1, 2):
        msgs = boot_rank_lines(lab, rank, ep)
        assert ("MoE expert GEMM: backend=b12x, quant=mxfp4, ep_size=%d, experts_per_rank=%s, intermediate_per_rank=%d "
                "(of 2304)" % (ep, experts, width)) in msgs, [m for m in msgs if "MoE" in m]
        assert ("DSV41 TP padding: attention heads 64->96 (32 per rank), wo_a groups 8->12 (4 per rank), vocab "
                "129280->129408 (43136 per rank)") in msgs
        assert "DSV41 TP padding (draft): experts 128->129 (43 per rank), vocab 129280->129408 (43136 per rank)" in msgs


def test_mxfp4_fallback_knob_takes_the_last_rank_off_mxfp4_under_ep1_only(lab):
    env = {"LAB_ENGINE_FAULT": "mxfp4_fallback"}
    last = [m for m in boot_rank_lines(lab, 2, 1, env) if m.startswith("MoE expert GEMM")]
    assert last == ["MoE expert GEMM: backend=b12x, quant=bf16, ep_size=1, experts_per_rank=all, "
                    "intermediate_per_rank=768 (of 2304)"]
    assert any("quant=mxfp4" in m for m in boot_rank_lines(lab, 1, 1, env)), "the other ranks stay on MXFP4"
    assert any("quant=mxfp4" in m for m in boot_rank_lines(lab, 2, 3, env)), "EP3 is never touched by the knob"


def test_ep1_costs_weights_and_workspace_out_of_the_kv_pool():
    """The lab's EP1 memory (figures of the lab, the report refuses any bound): 96 MiB more weights and 160 MiB
    more workspace on every rank; the weights come out of the KV pool, the workspace out of what is left."""
    eng = load_engine_module()
    ep3, ep1 = (eng.memory_model(0.95, None, 1, 4, 3, ep) for ep in (3, 1))
    assert (ep1["target_usage"] - ep3["target_usage"]) / eng.MIB == pytest.approx(96)
    assert (ep3["after"] - ep1["after"]) / eng.MIB == pytest.approx(160, abs=1)
    assert ep1["allocated"] < ep3["allocated"]


def test_per_layer_budgets_keep_the_other_layer_at_zero(lab, monkeypatch):
    """The ported per-layer budget adapter (DSV41_CACHE_LAYER_GIB, in the image): layer 14 gets its own 0.25 GiB,
    DRM-backed, layer 1 none; without the port the global DSV41_CACHE_GIB is split over both layers."""
    env = {"DSV41_ENGRAM_DRM_NODE": "/dev/dri/renderD128", "DSV41_CACHE_LAYER_GIB": "1:0,14:0.25",
           "DSV41_CACHE_GIB": "0"}
    msgs = boot_rank_lines(lab, 1, 3, env)
    assert ("[engram_layer_budget] per-layer Engram cache budgets: layer 1 0.00 GiB, layer 14 0.25 GiB "
            "(DSV41_CACHE_GIB not used)") in msgs
    exact = dict((int(re.search(r"layer=(\d+)", m).group(1)), m) for m in msgs if m.startswith("Exact nvme Engram"))
    assert "cache=0.0GiB (0 slots," in exact[1]
    assert re.search(r"cache=0\.2GiB \(1016800 slots, 4-way", exact[14]), exact[14]
    (drm,) = [m for m in msgs if m.startswith("[engram_drm]")]
    assert re.fullmatch(r"\[engram_drm\] layer 14 rank 1 cache on /dev/dri/renderD128: 0\.25 GiB DRM-backed \(keys, "
                        r"metadata and staging in ordinary memory: [0-9.]+ MiB\)", drm), drm
    # the memory model: 256 MiB of rows plus the DRM layer's keys/metadata (16 B a slot) and 32 MiB staging
    eng = load_engine_module()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert eng.layer_budgets() == {1: 0.0, 14: 0.25}
    meta = eng.drm_ordinary_bytes() / eng.MIB
    assert meta == pytest.approx(32 + eng.cache_slots(0.25, 4) * 16 / eng.MIB)
    monkeypatch.delenv("DSV41_CACHE_LAYER_GIB")
    monkeypatch.setenv("DSV41_CACHE_GIB", "0.5")
    assert eng.layer_budgets() == {1: 0.25, 14: 0.25}, "without the port the global budget feeds both layers"
