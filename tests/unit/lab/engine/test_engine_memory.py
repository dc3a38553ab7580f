"""The engine stand-in's memory model: the KV pool, its clamp and rounding, the start-up peaks, the folded-sampling
decision, not enough memory.
"""
from __future__ import annotations

import os
import re

import pytest

from engine_standin import TS, boot_worker, engine_argv, load_engine_module, messages, run_to_exit


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


def test_memory_model_directions():
    eng = load_engine_module("memory")
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


def test_the_pool_and_the_folded_decision_follow_the_rank_with_the_least_free_memory():
    # SPEC: unset folded sampling is AUTO, decided from the minimum free memory across ranks. With the pool
    # fixed by --max-total-tokens (F 0.98: 750,000 tokens fit), a worker that starts 2.5 GiB tighter is also
    # tighter after its captures, and the head's own figure would fold where the engine does not
    eng = load_engine_module("memory", "constants", "boot", "output")
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
