"""The engine stand-in's experiment faults (LAB_ENGINE_FAULT): an OOM at boot, the prefetch CHECK line, the fold race,
non-finite logits.
"""
from __future__ import annotations

import re
import time

import pytest

from engine_standin import (Proc, ROWS, TS, WORKER_DONE, answer, boot_worker, engine_argv, head_with, messages,
                            run_to_exit, write_shard)


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
