"""Helpers of the engine stand-in's tests (tests/unit/lab/engine): the checkpoint and shards they boot on, the
engine under the docker stand-in's supervisor (both streams into a json-file log), the log's
messages, the head's HTTP API. Run on the control machine: no podman, no GPU. The engine runs exactly
as the lab docker stand-in starts it, with LAB_MOUNTS pointing into tmp dirs (checkpoint, /engram,
/root/.cache).
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
ENGINE = ROOT / "lab" / "standins" / "dsv41_engine.py"
ADAPTERS = ROOT / "lab" / "seed" / "adapters"
DOCKER = ROOT / "lab" / "standins" / "docker"
MAGIC = 0x31344E4531565344
ROWS = {1: 30, 14: 33}
TS = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
MAIN = re.compile(rf"^\[{TS}\] ")                        # main-process logging prefix
ANY_PREFIX = re.compile(rf"\[{TS}(?: TP\d EP\d)?\] ")
DISAGREE = ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
            "ranks agree on the tactics.")


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


def load_engine_module(*names):
    """The engine stand-in's module ``lab_engine.<name>`` (lab/standins on sys.path, as its entry file puts it);
    for several names, their names in one namespace, to read (a test patches the module that defines a name)."""
    sys.path.insert(0, str(ENGINE.parent))
    try:
        modules = [importlib.import_module(f"lab_engine.{name}") for name in names]
    finally:
        sys.path.pop(0)
    if len(modules) == 1:
        return modules[0]
    merged = {}
    for module in modules:
        merged.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    return types.SimpleNamespace(**merged)


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

CHECK_ZERO = "DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per layer = [0, 0]"


def head_with(lab, env, block=3):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port, block=block),
                env={"API_KEY": "sk-test-secret", "LAB_ENGINE_SPEED": "400", **env}, name="head")
    proc.wait_for(f"Ready: API on port {port}")
    return port, proc


def answer(port, body=CHAT):
    with request(port, "/v1/chat/completions", body) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def sse_events(port, body, key="sk-test-secret"):
    """Every ``data:`` payload of one streamed answer, JSON decoded (``[DONE]`` kept as the string)."""
    with request(port, "/v1/chat/completions", body, key=key) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in lines]
