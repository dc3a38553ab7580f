"""module_utils/engine_log/memory_ledger.py and its filters: where each rank's GPU memory went during a boot."""
from pathlib import Path

import pytest

from ansible.module_utils.engine_log import memory_ledger as ml
import experiment_filters as filters

ROOT = Path(__file__).resolve().parents[4]
REPORT_LOG = (ROOT / "lab" / "seed" / "dsv41.log").read_text()   # the report's rank-0 log, two boots


def test_the_report_s_boot_read_line_by_line():
    led = ml.rank_ledger(REPORT_LOG, "spark1")
    assert led == {
        "rank": 0, "free_before_load_gib": 103.24, "after_target_load_gib": 9.24, "after_draft_load_gib": 6.63,
        "weights_gib": 96.61, "after_kv_pool_gib": 5.59, "capture_low_gib": 3.19, "serving_free_gib": 3.19,
        "kv_pool_tokens": 491520, "kv_requested_tokens": 750000, "kv_clamped": True, "startup_s": 761.3,
        "fatal": [], "booted": True, "missing": []}
    assert ml.used_mib(led) == pytest.approx((103.24 - 3.19) * 1024, abs=0.1)


def test_a_boot_that_died_has_its_figures_so_far_and_names_what_is_missing():
    died = REPORT_LOG.rsplit("DSV4 memory calculation", 1)[0].rsplit("\n", 1)[0] + "\n"   # the latest boot, cut
    led = ml.rank_ledger(died, "spark1")
    assert led["after_draft_load_gib"] == 6.63 and led["kv_pool_tokens"] is None
    assert led["missing"] == ["after_kv_pool_gib", "capture_low_gib", "kv_pool_tokens", "serving_free_gib"]
    assert led["booted"] is False
    assert ml.rank_ledger("", "x")["missing"] == ["after_kv_pool_gib", "after_target_load_gib", "capture_low_gib",
                                                   "free_before_load_gib", "kv_pool_tokens", "serving_free_gib"]


def test_a_boot_that_died_in_a_capture_had_nothing_left_for_serving():
    died = REPORT_LOG.rsplit("Capture target verify CUDA graph end", 1)[0].rsplit("\n", 1)[0] + "\n"
    led = ml.rank_ledger(died, "spark1")
    assert led["capture_low_gib"] == 3.89 and led["serving_free_gib"] is None and not led["booted"]
    assert led["missing"] == ["serving_free_gib"]


def test_differences_are_arm_minus_reference_in_mib():
    base = {"spark1": ml.rank_ledger(REPORT_LOG, "spark1")}
    arm = {"spark1": dict(base["spark1"], weights_gib=base["spark1"]["weights_gib"] + 0.67,
                          serving_free_gib=2.52, kv_pool_tokens=491520 - 256)}
    assert ml.difference(arm, base) == {"spark1": {"weights_mib": 686.1, "capture_low_mib": 0.0,
                                                   "serving_free_mib": -686.1, "kv_pool_tokens": -256,
                                                   "mem_available_after_mib": None}}


def test_floor_failures_name_host_rank_and_figures():
    led = {"spark1": {"rank": 0, "serving_free_gib": 0.41}, "spark2": {"rank": 1, "serving_free_gib": 3.2},
           "spark3": {"rank": 2, "serving_free_gib": None}}
    assert filters.dsv41_memory_floor_failures(led, 1.0) == [
        "memory: spark1 rank 0 keeps 0.41 GiB for serving, below the floor 1.00 GiB",
        "memory: spark3 rank 2 has no free-memory figure after capture; the floor 1.00 GiB cannot be shown"]
    assert filters.dsv41_memory_floor_failures(led, 0) == []


def test_filter_adds_mem_available_before_and_after_boot():
    meminfo = "MemTotal:       127535200 kB\nMemAvailable:    8126464 kB\n"
    out = filters.dsv41_memory_ledger({"spark1": REPORT_LOG, "spark9": "x"}, {"spark1": 0},
                                      {"spark1": meminfo}, {"spark1": "MemAvailable: 4194304 kB\n"})
    assert list(out) == ["spark1"]
    assert out["spark1"]["mem_available_before_gib"] == 7.75 and out["spark1"]["mem_available_after_gib"] == 4.0
    assert filters.dsv41_memory_ledger({"spark1": REPORT_LOG}, {"spark1": 0})["spark1"]["mem_available_before_gib"] is None


def test_a_worker_that_captured_both_graphs_has_its_figure_without_a_ready_line():
    # a worker prints no max_total_num_tokens and no Ready line of its own
    worker = "\n".join(line for line in REPORT_LOG.splitlines()
                       if "max_total_num_tokens" not in line and "fired up" not in line and "Uvicorn" not in line) + "\n"
    led = ml.rank_ledger(worker, "spark2")
    assert led["serving_free_gib"] == 3.19 and led["booted"] is True and led["missing"] == []
