"""Tests for the lab engine stand-in (lab/standins/dsv41_engine.py) and launcher stand-in (start.sh).

Run on the control machine: no podman, no GPU. The engine runs as a subprocess with LAB_MOUNTS pointing
into tmp dirs (checkpoint, /engram, /root/.cache), exactly as the lab docker stand-in would start it.
"""
from __future__ import annotations

import json
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
ADAPTERS = ROOT / "lab" / "seed" / "adapters"
REPORT_HOOK = ROOT / "lab" / "seed" / "sitecustomize-report.py"  # the import hook as the report found it
DOCKER = ROOT / "lab" / "standins" / "docker"
MAGIC = 0x31344E4531565344
ROWS = {1: 30, 14: 33}
PREFIX = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} TP(\d) EP\1\] ")


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


def write_shard(engram: Path, layer: int, rank: int, tp: int = 3, *, lo=None, hi=None, truncate=0, magic=MAGIC):
    n = ROWS[layer]
    lo = n * rank // tp if lo is None else lo
    hi = n * (rank + 1) // tp if hi is None else hi
    head = struct.pack("<6Q", magic, layer, lo, hi, n, 264).ljust(4096, b"\0")
    engram.mkdir(parents=True, exist_ok=True)
    path = engram / f"engram-l{layer}-r{rank}of{tp}.bin"
    path.write_bytes(head + bytes(max(0, (hi - lo) * 264 - truncate)))
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
    return {"tmp": tmp_path, "engram": engram, "cache": cache, "mounts": mounts}


REPORT_ENV = {"DSV41_CACHE_GIB": "0", "DSV41_CACHE_WAYS": "4", "DSPARK_BLOCK_SIZE": "3",
              "DSV41_MOE_DENSE_ROUTING": "1", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0"}


def engine_argv(role="worker", rank=1, port=8888, block=3, frac="0.95", extra=()):
    return ["--role", role, "--rank", str(rank), "--tp-size", "3", "--ep-size", "3",
            "--model-path", "/srv/models/DeepSeek-V4.1-Flash", "--port", str(port),
            "--dspark-block-size", str(block), "--max-running-requests", "4",
            "--chunked-prefill-size", "1024", "--max-total-tokens", "750000",
            "--mem-fraction-static", frac, *extra]


class Proc:
    def __init__(self, lab, argv, env=None, name="engine"):
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(lab["tmp"]),
                    "LAB_MOUNTS": json.dumps(lab["mounts"]), "LAB_ENGINE_FAST": "1",
                    "LAB_ENGINE_SPEED": "50", "LAB_CONTAINER_NAME": name,
                    "LAB_ENGINE_DRIFT_FILE": str(lab["tmp"] / "no-drift"), **REPORT_ENV, **(env or {})}
        self.logfile = lab["tmp"] / f"{name}-{time.monotonic_ns()}.log"
        self.fh = open(self.logfile, "wb")
        self.p = subprocess.Popen([sys.executable, str(ENGINE), *argv], env=full_env,
                                  stdout=self.fh, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.logfile.read_text()

    def wait_for(self, needle: str, timeout=15.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.text()
            if needle in t:
                return t
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not seen; rc={self.p.poll()} log:\n{self.text()}")

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=10)
        self.fh.close()
        return rc


def boot_worker(lab, env=None, rank=1, block=3, frac="0.95"):
    """Boot a worker to completion, stop it with SIGTERM, return its log."""
    proc = Proc(lab, engine_argv("worker", rank, block=block, frac=frac), env)
    try:
        proc.wait_for("Worker ready")
    finally:
        rc = proc.stop()
    text = proc.text()
    assert rc == 0 and "Received sigterm, shutting down" in text
    return text


def run_to_exit(lab, argv, env=None):
    proc = Proc(lab, argv, env)
    rc = proc.p.wait(timeout=15)
    proc.fh.close()
    return rc, proc.text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ boot log / engram

def test_prefix_and_marker_without_shards(lab):
    text = boot_worker(lab)
    lines = text.splitlines()
    assert all(PREFIX.match(line) and PREFIX.match(line).group(1) == "1" for line in lines)
    assert "server_args=ServerArgs(model_path='/srv/models/DeepSeek-V4.1-Flash'" in lines[0]
    assert "tp_size=3, ep_size=3" in lines[0]
    # rank 1 of 3: rows [10,20) of 30 and [11,22) of 33
    assert ("Exact nvme Engram layer=1 rank=1 rows=[10,20) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) "
            "scales=0.0GiB io_threads=96 packed=False") in text
    assert "Exact nvme Engram layer=14 rank=1 rows=[11,22) cache=0.0GiB" in text
    assert text.count("packed=False") == 2


def test_packed_true_with_valid_shards(lab):
    write_shard(lab["engram"], 1, 1)
    write_shard(lab["engram"], 14, 1)
    write_shard(lab["engram"], 1, 0)  # other ranks' files are ignored
    text = boot_worker(lab)
    assert text.count("packed=True") == 2 and "packed=False" not in text


def test_one_layer_packed(lab):
    write_shard(lab["engram"], 14, 1)
    text = boot_worker(lab)
    assert re.search(r"layer=1 rank=1 .* packed=False", text)
    assert re.search(r"layer=14 rank=1 .* packed=True", text)


@pytest.mark.parametrize("kind,message", [
    ("range", "does not match this rank's range; re-run the pack step"),
    ("truncated", "is truncated"),
    ("noheader", "has no header"),
    ("short", "has no header"),
])
def test_invalid_shard_is_fatal(lab, kind, message):
    if kind == "range":
        write_shard(lab["engram"], 1, 1, lo=0, hi=10)  # a rank-0 range under the rank-1 name
    elif kind == "truncated":
        write_shard(lab["engram"], 1, 1, truncate=264)
    elif kind == "noheader":
        write_shard(lab["engram"], 1, 1, magic=0x1234)
    else:
        (lab["engram"] / "engram-l1-r1of3.bin").write_bytes(b"\0" * 100)
    rc, text = run_to_exit(lab, engine_argv("worker", 1))
    assert rc != 0
    assert f"RuntimeError: packed Engram shard /engram/engram-l1-r1of3.bin {message}" in text
    assert "Ready:" not in text and "Worker ready" not in text


def test_tp2_files_are_not_tp3_shards(lab):
    write_shard(lab["engram"], 1, 1, tp=2)
    text = boot_worker(lab)
    assert text.count("packed=False") == 2


def test_cache_slots(lab):
    text = boot_worker(lab, env={"DSV41_CACHE_GIB": "0.000001", "DSV41_CACHE_WAYS": "2"},
                       frac="0.96")
    # 0.0000005 GiB per layer = 536 bytes -> 2 rows -> 2 slots (2-way)
    assert "(2 slots, 2-way, 20.0% of owned rows)" in text


# ------------------------------------------------------------------ memory

def test_report_pool_and_identical_on_ranks(lab):
    texts = [boot_worker(lab, rank=r) for r in (1, 2)]
    for text in texts:
        assert ("DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, "
                "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=") in text
        assert text.count("DSV4 pool sizes: full=491520, swa=") == 2
        assert re.search(r"max_total_num_tokens=491520, chunked_prefill_size=1024, max_prefill_tokens=16384, "
                         r"max_running_requests=4, context_len=1048576, available_gpu_mem=[0-9.]+ GB", text)
    strip = lambda t: [PREFIX.sub("", l) for l in t.splitlines() if "DSV4" in l or "max_total_num" in l]
    assert strip(texts[0]) == strip(texts[1])


def test_memory_model_directions():
    sys.path.insert(0, str(ENGINE.parent))
    try:
        import dsv41_engine as eng
    finally:
        sys.path.pop(0)
    saved = {k: os.environ.pop(k, None) for k in list(os.environ) if k.startswith(("DSV41_", "SGLANG_"))}
    try:
        base = eng.memory_model(0.95, 750000)
        assert base["pool"] == 491520 and f"{base['available_bytes'] / 1e9:.2f}" == "1.04"
        assert eng.memory_model(0.94, 750000)["available_bytes"] < base["available_bytes"]
        assert eng.memory_model(0.98, 750000)["pool"] == 750000  # pin honoured when it fits
        os.environ["DSV41_WO_A_W8"] = "1"
        w8 = eng.memory_model(0.95, 750000)
        assert w8["available_bytes"] == pytest.approx(base["available_bytes"] - 688 * 2 ** 20)
        os.environ["DSV41_WO_A_W8_DROP"] = "1"
        assert eng.memory_model(0.95, 750000)["available_bytes"] > base["available_bytes"]
        os.environ.pop("DSV41_WO_A_W8"); os.environ.pop("DSV41_WO_A_W8_DROP")
        os.environ["DSV41_DRAFT_HEAD_FP8"] = "1"
        assert eng.memory_model(0.95, 750000)["available_bytes"] == pytest.approx(
            base["available_bytes"] - 210.6 * 2 ** 20)
    finally:
        for k in [k for k in os.environ if k.startswith(("DSV41_", "SGLANG_"))]:
            os.environ.pop(k)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def test_not_enough_memory_is_fatal(lab):
    rc, text = run_to_exit(lab, engine_argv("worker", 1), env={"DSV41_CACHE_GIB": "4"})
    assert rc == 1 and "Not enough memory" in text


# ------------------------------------------------------------------ autotune

def cache_files(lab):
    return sorted(p for p in lab["cache"].rglob("rank_tp*_pp0_dp0.json"))


DISAGREE = "FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch"


def test_stock_autotune_disagrees_when_caches_exist(lab):
    first = boot_worker(lab)
    assert DISAGREE not in first and first.count("FlashInfer autotune completed.") == 2
    files = cache_files(lab)
    assert len(files) == 1
    assert re.search(r"/root/\.cache/sglang/flashinfer/autotune/0\.6\.1/sm121/[0-9a-f]+/rank_tp1_pp0_dp0\.json",
                     first)
    second = boot_worker(lab)
    assert second.count(DISAGREE) == 2
    assert second.count("Running FlashInfer autotune with cache: /root/.cache/") == 2
    # per-rank content differs
    boot_worker(lab, rank=2)
    contents = {p.name: json.loads(p.read_text())["rank"] for p in cache_files(lab)}
    assert contents == {"rank_tp1_pp0_dp0.json": 1, "rank_tp2_pp0_dp0.json": 2}


def test_capture_lines_follow_each_pass_summary(lab):
    text = boot_worker(lab)
    lines = text.splitlines()
    for pass_name, capture in (("target", "Capture cuda graph bs [1, 2, 3, 4]"),
                               ("draft", "Capture draft cuda graph bs [1, 2, 3, 4]")):
        i = next(n for n, l in enumerate(lines) if l.endswith(f"Capturing {pass_name} cuda graphs (bs 1..4)"))
        assert PREFIX.match(lines[i + 1]) and lines[i + 1].endswith(capture)
    keep = boot_worker(lab, env={"DSV41_AUTOTUNE_KEEP": "1"})
    assert keep.count("Capture cuda graph bs [1, 2, 3, 4]") == 1
    assert keep.count("Capture draft cuda graph bs [1, 2, 3, 4]") == 1
    from ansible.module_utils import engine_log  # tests/conftest.py maps module_utils
    facts = engine_log.scan_text(text, kinds=[engine_log.KIND_GRAPH_SHAPES])
    assert facts.graph_shapes == {"target": [1, 2, 3, 4], "draft": [1, 2, 3, 4]}


def test_retention_reuses_then_retunes_after_change(lab):
    keep = {"DSV41_AUTOTUNE_KEEP": "1"}
    first = boot_worker(lab, env=keep)
    assert "[autotune_keep] armed" in first
    assert first.count("[autotune_keep] tuned and saved /root/.cache/sglang/flashinfer/autotune/") == 2
    (cache,) = cache_files(lab)
    assert Path(str(cache) + ".launch").exists()
    before = cache.read_bytes(), cache.stat().st_mtime_ns
    second = boot_worker(lab, env=keep)
    assert second.count("[autotune_keep] reused /root/.cache/") == 2
    assert "Running FlashInfer autotune" not in second and DISAGREE not in second
    assert (cache.read_bytes(), cache.stat().st_mtime_ns) == before
    # a shape-relevant change: new hash directory, tuned again
    third = boot_worker(lab, env={**keep, "DSPARK_BLOCK_SIZE": "5"}, block=5)
    assert third.count("[autotune_keep] tuned and saved") == 2
    # an env-only change (same cache dir): sidecar mismatch -> retune, then reused again
    fourth = boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"})
    assert fourth.count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"}).count("[autotune_keep] reused") == 2


def test_retention_drift_fails(lab):
    rc, text = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"})
    assert rc == 1
    assert "DSV41_AUTOTUNE_KEEP: flashinfer_autotune_context is gone; engine drifted" in text


def test_retention_drift_file(lab):
    drift = lab["tmp"] / "engine_drift"
    drift.write_text("_autotune_cache_digest\n")
    rc, text = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT_FILE": str(drift)})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in text
    # stock engine ignores it
    assert "Worker ready" in boot_worker(lab, env={"LAB_ENGINE_DRIFT_FILE": str(drift)})


# ------------------------------------------------------------------ retention adapter gated on the image

def image_root(lab, *, keep_file: bool, registered: bool) -> Path:
    """An image rootfs as the docker stand-in builds it: sgl-workspace/adapter/ with the seven local
    adapters + sitecustomize.py, optionally autotune_keep.py and its _ADAPTERS entry (stage B's edit)."""
    root = lab["tmp"] / f"rootfs-{int(keep_file)}{int(registered)}"
    adir = root / "sgl-workspace" / "adapter"
    adir.mkdir(parents=True)
    for f in ADAPTERS.glob("*.py"):
        if f.name != "autotune_keep.py" or keep_file:
            shutil.copy(f, adir / f.name)
    text = REPORT_HOOK.read_text()
    if registered:
        entry = '    "wo_a_w8": "DSV41_WO_A_W8",\n'
        assert entry in text
        text = text.replace(entry, entry + '    "autotune_keep": "DSV41_AUTOTUNE_KEEP",\n')
        text += ('\nif _on("DSV41_AUTOTUNE_KEEP"):\n    from adapter import autotune_keep\n'
                 '    _install("autotune_keep", autotune_keep)\n')
    (adir / "sitecustomize.py").write_text(text)
    return root


@pytest.mark.parametrize("keep_file,registered", [(False, False), (True, False), (False, True)])
def test_retention_switch_ignored_when_adapter_not_in_image(lab, keep_file, registered):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=keep_file, registered=registered)),
           "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"}  # drift is moot without the adapter
    first = boot_worker(lab, env=env)
    second = boot_worker(lab, env=env)
    for text in (first, second):
        assert "[autotune_keep]" not in text and "Adapters enabled: none" in text
        assert text.count("FlashInfer autotune completed.") == 2
    assert second.count(DISAGREE) == 2, "behaves like the stock engine"
    (cache,) = cache_files(lab)
    assert not Path(str(cache) + ".launch").exists()


def test_retention_armed_when_adapter_in_image(lab):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=True, registered=True))}
    first = boot_worker(lab, env=env)
    assert "[autotune_keep] armed" in first and "Adapters enabled: DSV41_AUTOTUNE_KEEP" in first
    assert first.count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env=env).count("[autotune_keep] reused") == 2
    # switch off with the adapter in the image: stock
    off = boot_worker(lab, env={**env, "DSV41_AUTOTUNE_KEEP": "0"})
    assert "[autotune_keep]" not in off and off.count(DISAGREE) == 2
    # drift only matters when the adapter is armed
    rc, text = run_to_exit(lab, engine_argv("worker", 1), env={**env, "LAB_ENGINE_DRIFT": "_autotune_cache_digest"})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in text
    # an image root that does not exist (an engine image without a build): not armed
    gone = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(lab["tmp"] / "no-such-rootfs")})
    assert "[autotune_keep]" not in gone


# ------------------------------------------------------------------ head HTTP

@pytest.fixture()
def head(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"API_KEY": "sk-test-secret", "LAB_ENGINE_SPEED": "200"},
                name="head")
    proc.wait_for(f"Ready: API on port {port}")
    yield {"port": port, "proc": proc}
    assert proc.stop() == 0


def request(port, path, body=None, key="sk-test-secret"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    return urllib.request.urlopen(req, timeout=30)


CHAT = {"model": "dsv41", "messages": [{"role": "user", "content": "Write a short story about three sparks."}],
        "max_tokens": 200, "temperature": 0}


def test_head_health_models_auth(head):
    port = head["port"]
    with request(port, "/health", key=None) as r:
        assert r.status == 200 and json.load(r) == {"status": "ok"}
    with request(port, "/v1/models") as r:
        assert json.load(r)["data"][0]["id"] == "/srv/models/DeepSeek-V4.1-Flash"
    for key in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/v1/chat/completions", CHAT, key=key)
        assert exc.value.code == 401
    assert "sk-test-secret" not in head["proc"].text()
    assert "api_key='***'" in head["proc"].text()


def test_head_non_stream_usage_and_determinism(head):
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


def test_head_stream_several_tokens_per_message(head):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with request(head["port"], "/v1/chat/completions", body) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]["usage"]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    pieces = [p for p in pieces if p]
    tokens = sum(len(p.split()) for p in pieces)
    assert tokens == usage["completion_tokens"]
    assert len(pieces) < tokens  # several tokens per SSE message (speculative commits)
    assert max(len(p.split()) for p in pieces) >= 2
    assert "Decode batch." in head["proc"].text()


def test_head_sigterm_clean(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), name="head2")
    proc.wait_for("Ready: API on port")
    assert proc.stop() == 0
    assert proc.text().rstrip().endswith("Received sigterm, shutting down")


# ------------------------------------------------------------------ launcher stand-in

def bash(script: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


@pytest.fixture()
def checkout(tmp_path):
    d = tmp_path / "dsv41-3x-spark"
    d.mkdir()
    shutil.copy(START_SH, d / "start.sh")
    shutil.copy(SEED_ENV, d / ".env")
    return d


def test_start_sh_syntax():
    assert subprocess.run(["bash", "-n", str(START_SH)]).returncode == 0


def parse_block(name: str) -> list:
    text = START_SH.read_text()
    m = re.search(rf"^{name}=\(\n(.*?)^\)", text, re.S | re.M)
    assert m, name
    return [w for line in m.group(1).splitlines() for w in line.split("#")[0].split()]


def test_forward_lists_reproduce_report_gap():
    head, worker = parse_block("HEAD_FORWARD"), parse_block("WORKER_FORWARD")
    common = ["DSV41_AUTOTUNE_KEEP", "DSV41_FOLDED_FENCE", "DSV41_WO_A_W8", "DSV41_WO_A_W8_MID",
              "DSV41_WO_A_W8_DROP", "DSV41_ENGRAM_PREFETCH", "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY",
              "DSPARK_BLOCK_SIZE", "DSV41_VERIFY_CAP", "DSV41_DRAFT_TAU", "DSV41_CACHE_GIB", "DSV41_CACHE_WAYS",
              "DSV41_ENGRAM_DRM_NODE", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "DSV41_MOE_DENSE_ROUTING",
              "PYTORCH_CUDA_ALLOC_CONF", "DSV41_SHARED_PAD_K", "DSPARK_SPS_TABLE", "OFFLOAD_MODE"]
    for lst in (head, worker):
        assert set(common) <= set(lst)
        assert "SGLANG_DSPARK_FOLDED_SAMPLING" not in lst and "DSV41_ENGRAM_PREFETCH_CHECK" not in lst
    assert "API_KEY" in head and "API_KEY" not in worker
    assert START_SH.read_text().count("HEAD_FORWARD=(") == 1
    assert START_SH.read_text().count("WORKER_FORWARD=(") == 1


def test_worker_engram_override_and_defaults(checkout):
    lib = "START_SH_LIB_ONLY=1 source ./start.sh; "
    r = bash(lib + 'worker_engram_var spark-2.lab; worker_engram_dir spark2; worker_engram_dir spark3; '
             'echo "$ENGRAM_DIR|$DSV41_AUTOTUNE_KEEP|$DSV41_WO_A_W8"',
             checkout, env={"WORKER_ENGRAM_DIR_SPARK2": "/data/engram", "DSV41_WO_A_W8": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["WORKER_ENGRAM_DIR_SPARK_2_LAB", "/data/engram",
                                     "/home/zurih/dsv41-3x-spark/engram", "/home/mia/dsv41-engram|0|1"]


def test_worker_run_command_quoting(checkout):
    r = bash("START_SH_LIB_ONLY=1 source ./start.sh; worker_run_command spark3 2", checkout,
             env={"DSV41_VERIFY_CAP": "conf:0.1 x'y", "SGLANG_DSPARK_FOLDED_SAMPLING": "2",
                  "DSV41_ENGRAM_PREFETCH_CHECK": "1"})
    assert r.returncode == 0, r.stderr
    cmd = r.stdout.strip()
    assert cmd.startswith("docker rm -f dsv41-worker >/dev/null 2>&1 || true; docker run -d --name dsv41-worker "
                          "--network host -v /home/zurih/dsv41-3x-spark/engram:/engram "
                          "-v /srv/models:/srv/models:ro -v /home/zurih/.cache:/root/.cache")
    assert "FOLDED_SAMPLING" not in cmd and "PREFETCH_CHECK" not in cmd and "API_KEY" not in cmd
    assert "--role worker --rank 2 --tp-size 3" in cmd and "--max-total-tokens 750000" in cmd
    # the quoted value survives a shell round trip
    rt = bash(f"set -- {cmd.split('; ', 1)[1]}; for a; do echo \"$a\"; done", checkout)
    assert "DSV41_VERIFY_CAP=conf:0.1 x'y" in rt.stdout.splitlines()
    assert "DSV41_AUTOTUNE_KEEP=0" in rt.stdout.splitlines()


FAKE_DOCKER = r"""#!/usr/bin/env bash
echo "$(hostname -s 2>/dev/null) docker $*" >> "$CALLS"
case $1 in
  run) for a in "$@"; do [[ $a == API_KEY* ]] && echo "API_KEY-ENV=${API_KEY:-unset}" >> "$CALLS"; done; echo cid ;;
  logs) printf '%s\n' "[2026-01-01 00:00:00 TP0 EP0] server_args=ServerArgs(old)" "[x] Ready: API on port 8888" \
          "[2026-01-01 00:00:01 TP0 EP0] server_args=ServerArgs(new)" "[2026-01-01 00:00:02 TP0 EP0] Ready: API on port 8888" ;;
  inspect) if [[ $2 == --format ]]; then echo running; else echo '[{"Mounts":[{"Source":"/src/e","Destination":"/engram"}]}]'; fi ;;
  *) ;;
esac
"""
FAKE_SSH = r"""#!/usr/bin/env bash
echo "ssh $*" >> "$CALLS"
bash -c "${@: -1}"
"""


def test_serve_order_and_forwarding_with_fakes(checkout, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(calls), "HOME": str(tmp_path)}
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = calls.read_text().splitlines()
    runs = [l for l in lines if " docker run " in l and not l.startswith("ssh ")]
    assert len(runs) == 3
    assert "--rank 1" in runs[0] and "--rank 2" in runs[1] and "--role head --rank 0" in runs[2]
    assert "-e API_KEY " in runs[2] and "sk-lab" not in runs[2]  # value via env, not argv
    assert "API_KEY-ENV=sk-lab-0000000000000000000000000000" in lines
    assert "-e DSV41_CACHE_GIB=0" in runs[0] and "-e DSV41_AUTOTUNE_KEEP" in runs[2]
    assert any(l.startswith("ssh -o BatchMode=yes -o ConnectTimeout=10 zurih@spark2 ") for l in lines)
    saved = (checkout / "logs" / "dsv41.log").read_text()
    assert "ServerArgs(new)" in saved and "ServerArgs(old)" not in saved
    st = bash("./start.sh status", checkout, env=env)
    assert st.returncode == 0, st.stderr
    assert len(st.stdout.splitlines()) == 3 and "engram=/src/e" in st.stdout and "rank=2" in st.stdout
    assert bash("./start.sh pack", checkout, env=env).returncode == 2


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
    assert "ssh -o BatchMode=yes -o ConnectTimeout=10 zurih@spark2 docker build -t dsv41-sglang:tp3 " \
           "/home/zurih/dsv41-3x-spark" in lines
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
    env_text = SEED_ENV.read_text().replace("WORKER_DIR=/home/zurih/dsv41-3x-spark",
                                            f"WORKER_DIR={tmp_path}/@WORKER@/home/zurih/dsv41-3x-spark")
    assert env_text != SEED_ENV.read_text()
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
