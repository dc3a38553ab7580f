"""The engine stand-in's stage I figures: the MoE and padding lines, EP1, the Engram row caches (per-layer budgets,
DRM-backed), the step time under EP1, a cache and the clock lock.
"""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from engine_standin import Proc, ROOT, WORKER_DONE, engine_argv, free_port, head_with, load_engine_module, messages


def test_step_time_follows_ep1_the_row_cache_and_the_clock_lock(tmp_path, monkeypatch):
    """The stage I lab figures: EP1 -3 ms, a row cache up to -2 ms (-0.5 more at 16 ways, only with a cache),
    unlocked clocks 1.2% shorter steps (less once the thermal model throttles boost), read from the lab
    nvidia-smi's state as a clocks arm leaves it."""
    import threading
    import types
    eng = load_engine_module("engine", "clocks")
    clocks, adapters = load_engine_module("clocks"), load_engine_module("adapters")
    for key in [k for k in os.environ if k.startswith(("DSV41_", "LAB_"))]:
        monkeypatch.delenv(key)
    state = tmp_path / "state.json"
    monkeypatch.setattr(clocks, "NVIDIA_STATE", str(state))

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

    monkeypatch.setattr(adapters, "adapter_in_image", lambda name: True)
    assert step() == 98.0
    assert step(ep=1) == 95.0
    assert step(DSV41_CACHE_GIB="0.25") == 97.0 and step(DSV41_CACHE_GIB="0.5") == 96.0
    assert step(DSV41_CACHE_GIB="0.5", DSV41_CACHE_WAYS="16") == 95.5
    assert step(DSV41_CACHE_WAYS="16") == 98.0, "ways matter only with a non-zero cache"
    assert step(locked=False) == pytest.approx(98.0 * 0.988)
    # with the lab GPU's thermal model on (the clocks A/B's knob), a GPU busy for many time constants has been
    # throttled from its 2418 MHz boost to 2268 MHz: the unlocked gain shrinks to 68/218 of 1.2%; locked at
    # 2200 MHz it never gets that hot, and the step is the locked one
    monkeypatch.setattr(clocks, "NVIDIA_STATE_DIR", str(tmp_path))
    (tmp_path / "thermal-seconds").write_text("1\n")
    monkeypatch.setattr(clocks, "STARTED", time.monotonic() - 100.0)
    assert step(locked=False) == pytest.approx(98.0 * (1 - 0.012 * 68 / 218))
    assert step() == 98.0
    monkeypatch.setattr(clocks, "STARTED", time.monotonic())   # just started: still cool, full boost
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
    eng = load_engine_module("engine")
    assert eng.row_cache_hit_rate(0.0, 16, 10 ** 6) == 0.0, "no cache, no hits"
    filling = [eng.row_cache_hit_rate(0.5, 4, n) for n in (0, 1000, 5000, 50000)]
    assert filling[0] == 0.0 and filling == sorted(filling) and filling[-1] == pytest.approx(0.30, abs=1e-3)
    assert eng.row_cache_hit_rate(0.25, 4, 50000) < filling[-1] < eng.row_cache_hit_rate(0.5, 16, 50000)


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
    eng = load_engine_module("memory", "constants")
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
    eng = load_engine_module("caches", "constants")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert eng.layer_budgets() == {1: 0.0, 14: 0.25}
    meta = eng.drm_ordinary_bytes() / eng.MIB
    assert meta == pytest.approx(32 + eng.cache_slots(0.25, 4) * 16 / eng.MIB)
    monkeypatch.delenv("DSV41_CACHE_LAYER_GIB")
    monkeypatch.setenv("DSV41_CACHE_GIB", "0.5")
    assert eng.layer_budgets() == {1: 0.25, 14: 0.25}, "without the port the global budget feeds both layers"
