"""The engine stand-in's profiler traces: the kernels that ran, one trace per rank, the stream the Engram gather runs
on.
"""
from __future__ import annotations

import json
import time
import urllib.error

import pytest

from engine_standin import Proc, answer, engine_argv, free_port, head_with, load_engine_module, request


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


@pytest.mark.parametrize("env,packed,compute_us", [({}, False, 2500), ({}, True, 1000),
                                                    ({"DSV41_ENGRAM_PREFETCH": "1"}, True, 150),
                                                    ({"DSV41_ENGRAM_PREFETCH": "1"}, False, 2500)])
def test_profile_trace_puts_the_engram_gather_on_the_stream_it_runs_on(tmp_path, monkeypatch, env, packed, compute_us):
    engine = load_engine_module("profiler")
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    monkeypatch.delenv("LAB_IMAGE_ROOT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = engine.profile_trace(1, packed)
    events = json.loads(open(path).read())["traceEvents"]
    on_compute = sum(e["dur"] for e in events if "engram" in e["name"] and e["tid"] == 7)
    assert on_compute == compute_us
