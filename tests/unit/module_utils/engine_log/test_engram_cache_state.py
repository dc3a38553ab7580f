"""module_utils/engine_log/engram_cache.py and its filter: the Engram row cache cold and warm, per rank and layer."""
from pathlib import Path

from ansible.module_utils.engine_log import engram_cache as cs
import experiment_filters as filters

ROOT = Path(__file__).resolve().parents[4]
REPORT_LOG = (ROOT / "lab" / "seed" / "dsv41.log").read_text()   # the report's rank-0 log, two boots
LINE = ("[2026-09-24 03:0%d:00 TP0 EP0] Engram layer=%d lookups=%d hit_rate=%s%% reads=%d "
        "cache=0.1GiB(16-way) scales=0.0GiB threads=96 packed=True\n")


# the report's log up to the first periodic Engram line of its latest boot (which printed three per layer)
UNSERVED = REPORT_LOG.rsplit("Engram layer=1 lookups", 3)[0].rsplit("\n", 1)[0] + "\n"


def cached_boot(rates):
    """The report's latest boot serving with a 0.25 GiB, 16-way cache: its periodic lines (both layers)."""
    out = UNSERVED
    for i, rate in enumerate(rates):
        lookups = 1000 * (i + 1)
        for layer in (1, 14):
            out += LINE % (i, layer, lookups, rate, round(lookups * (1 - float(rate) / 100)))
    return out


def test_the_report_s_latest_boot_never_had_a_cache():
    state = cs.rank_cache_state(REPORT_LOG, "spark1")
    assert state == [
        {"layer": 1, "lines": 3, "cache_gib": 0.0, "ways": 4, "cold_hit_pct": 0.0, "warm_hit_pct": 0.0,
         "lookups": 16664, "reads": 16664},
        {"layer": 14, "lines": 3, "cache_gib": 0.0, "ways": 4, "cold_hit_pct": 0.0, "warm_hit_pct": 0.0,
         "lookups": 16664, "reads": 16664}]
    # nothing to table when no condition had a cache
    assert cs.cache_table({"baseline": {"engram_cache": {"spark1": state}}}, ["baseline"]) == []


def test_cold_is_the_first_periodic_line_of_the_boot_and_warm_the_last():
    (l1, l14) = cs.rank_cache_state(cached_boot(["0.0", "7.5", "18.2"]), "spark1")
    assert l1 == {"layer": 1, "lines": 3, "cache_gib": 0.1, "ways": 16, "cold_hit_pct": 0.0, "warm_hit_pct": 18.2,
                  "lookups": 3000, "reads": 2454}
    assert l14["layer"] == 14 and l14["cold_hit_pct"] == 0.0 and l14["warm_hit_pct"] == 18.2


def test_a_boot_without_periodic_lines_has_no_state_and_an_unread_host_is_left_out():
    assert cs.rank_cache_state(UNSERVED, "spark1") == [] and cs.rank_cache_state("", "x") == []
    out = filters.dsv41_experiment_cache_state({"spark1": cached_boot(["2.0", "9.0"]), "stray": REPORT_LOG},
                                               {"spark1": 0, "spark2": 1})
    assert list(out) == ["spark1"] and out["spark1"][0]["warm_hit_pct"] == 9.0


def test_the_table_shows_each_condition_rank_and_layer_cold_and_warm():
    conditions = {"baseline": {"engram_cache": {"spark1": cs.rank_cache_state(REPORT_LOG)}},
                  "cache_025": {"engram_cache": {"spark1": cs.rank_cache_state(cached_boot(["0.5", "18.2"]))}}}
    lines = cs.cache_table(conditions, ["baseline", "cache_025", "not_run"])
    assert lines[1].startswith("## Engram row cache, cold and warm")
    assert "| baseline | spark1 | 1 | 0 GiB, 4-way | 0.0% | 0.0% | 16,664 | 3 |" in lines
    assert "| cache_025 | spark1 | 14 | 0.1 GiB, 16-way | 0.5% | 18.2% | 2,000 | 2 |" in lines
    assert not any(line.startswith("| condition | workload |") for line in lines), "no timings: no speed table"


def test_the_first_round_after_each_boot_is_timed_cold_beside_the_measured_median_warm():
    def result(workload, c, warm, median, start=None):
        return {"workload": workload, "concurrency": c, "warmup_per_stream_tok_s": warm,
                "per_stream_tok_s": {"median": median}, "window": {"start": start, "end": start} if start else None}
    conditions = {
        "baseline": {"engram_cache": {"spark1": cs.rank_cache_state(REPORT_LOG)},
                     "results": [result("prose", 1, [20.0], 21.0), result("code", 1, [30.0], 30.0)]},
        "cache_025": {"engram_cache": {"spark1": cs.rank_cache_state(cached_boot(["0.5", "18.2"]))},
                      # listed in the plan's order; code C4 ran first (its measured window is the earliest)
                      "results": [result("prose", 1, [10.0], 25.0, start=200.0),
                                  result("code", 4, [16.0, 18.0], 20.0, start=100.0)]},
        # the first workload run had no warm-up: its cold round was measured, no figure stands apart
        "cache_05": {"engram_cache": {}, "results": [result("prose", 1, [], 22.0), result("code", 1, [9.0], 9.0)]},
    }
    lines = cs.cache_table(conditions, ["baseline", "cache_025", "cache_05"])
    assert "| baseline | prose C1 | 20.00 | 21.00 | +5.0% |" in lines
    assert "| cache_025 | code C4 | 16.00 | 20.00 | +25.0% |" in lines
    assert not any(line.startswith("| cache_05 |") for line in lines), "the first round was measured: nothing cold"
    assert not any(line.startswith("| cache_025 | prose") for line in lines), "only the first round after boot"
