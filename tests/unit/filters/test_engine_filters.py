"""The engine role's autotune table and failed-start log tails (filter_plugins/engine_filters.py)."""
import engine_filters as ef


def test_autotune_rows_one_per_rank():
    hv = {"spark1": {"dsv41_rank": 0, "engine_autotune": {
        "verdict": "reused", "armed": True, "reused_count": 2, "tuned_count": 0, "disagreements": 0,
        "cache_files": [{"sidecar": "/x.launch"}, {"sidecar": None}]}}}
    assert ef.dsv41_autotune_rows(["spark1"], hv) == [{"host": "spark1", "rank": 0, "verdict": "reused", "armed": True,
                                                       "reused": 2, "tuned": 0, "disagree": 0, "files": 2,
                                                       "sidecars": 1}]


def test_boot_tails_name_each_rank_and_its_container():
    hv = {"spark1": {"preflight_container_name": "dsv41-head"}, "spark2": {"preflight_container_name": "dsv41-worker"}}
    results = [{"item": "spark1", "content": "a\nb\n"}, {"item": "spark2", "msg": "spark2: docker exited 1"}]
    assert ef.dsv41_boot_tails(results, hv) == ("--- spark1 (dsv41-head) latest boot, last lines:\na\nb\n\n"
                                                "--- spark2 (dsv41-worker) latest boot, last lines:\nspark2: docker exited 1\n")
    assert ef.dsv41_boot_tails([], hv) == ""
