"""experiment_stats: descriptions, the separation rule, and arm verdicts (evidence/correctness first)."""
import pytest

from ansible.module_utils.experiment import stats as st

BASE = [100.0, 102.0, 98.0, 101.0, 99.0]


def result(workload, c, values, metric="aggregate_tok_s"):
    return {"workload": workload, "concurrency": c, metric: {"rounds": list(values)}}


def test_describe_reports_median_min_max_quartiles_and_dispersion():
    d = st.describe([5, 1, 3, 2, 4])
    assert (d["median"], d["min"], d["max"], d["n"]) == (3, 1, 5, 5)
    assert (d["q1"], d["q3"], d["iqr"], d["range"]) == (2, 4, 2, 4)
    assert d["stdev"] == pytest.approx(1.5811, abs=1e-4)


def test_arm_wins_only_when_its_worst_run_beats_the_baselines_best():
    row = st.compare(BASE, [103, 104, 105, 103.5, 106])
    assert row["outcome"] == "win" and row["margin"] == pytest.approx(1.0)
    assert row["gain"] == pytest.approx(0.04)


def test_overlapping_ranges_are_no_difference_even_with_a_higher_median():
    # median +3 % but one arm run (101) is below the baseline's best (102)
    row = st.compare(BASE, [103, 104, 101, 105, 103])
    assert row["outcome"] == "no_difference" and row["gain"] > 0.02 and row["margin"] == 0.0


def test_loss_is_the_mirror_rule():
    row = st.compare(BASE, [90, 91, 92, 93, 94])
    assert row["outcome"] == "loss" and row["gain"] < 0


def test_lower_is_better_metrics_invert_the_rule():
    row = st.compare([200, 210, 205, 208, 202], [150, 160, 155, 158, 152], metric="ttft_ms")
    assert row["outcome"] == "win" and row["gain"] > 0


def test_fewer_than_five_repetitions_gives_no_verdict():
    with pytest.raises(st.StatsError, match="arm has 4 measured repetition"):
        st.compare(BASE, [1, 2, 3, 4])


def test_compare_conditions_pairs_prose_and_code_separately():
    base = [result("prose", 1, BASE), result("code", 1, BASE)]
    arm = [result("prose", 1, [110] * 5), result("code", 1, [100, 101, 99, 100, 100])]
    rows = st.compare_conditions(base, arm)
    assert [(r["workload"], r["outcome"]) for r in rows] == [("code", "no_difference"), ("prose", "win")]


def test_compare_conditions_refuses_an_arm_condition_the_baseline_lacks():
    with pytest.raises(st.StatsError, match="baseline has no code C4"):
        st.compare_conditions([result("prose", 1, BASE)], [result("code", 4, BASE)])


def test_failed_evidence_fails_a_faster_arm():
    rows = st.compare_conditions([result("prose", 1, BASE)], [result("prose", 1, [120] * 5)])
    v = st.arm_verdict("fence", {"wins_required": "any"}, evidence_failures=["spark2 rank 1: no fence line"],
                       comparisons=rows)
    assert v["verdict"] == "fail" and v["wins"] == ["prose C1 +20.0%"]
    assert v["reasons"] == ["evidence: spark2 rank 1: no fence line"]


def test_failed_correctness_fails_whatever_the_speed():
    rows = st.compare_conditions([result("prose", 1, BASE)], [result("prose", 1, [120] * 5)])
    v = st.arm_verdict("fence", {"wins_required": "none"}, correctness_failures=["2 distinct greedy outputs"],
                       comparisons=rows)
    assert v["verdict"] == "fail" and "correctness: 2 distinct greedy outputs" in v["reasons"]


def test_correctness_arm_passes_without_a_win_but_not_with_a_loss():
    same = st.compare_conditions([result("prose", 1, BASE)], [result("prose", 1, [100, 101, 99, 100, 102])])
    assert st.arm_verdict("fence", {"wins_required": "none"}, comparisons=same)["verdict"] == "pass"
    slower = st.compare_conditions([result("prose", 1, BASE)], [result("prose", 1, [90] * 5)])
    v = st.arm_verdict("fence", {"wins_required": "none"}, comparisons=slower)
    assert v["verdict"] == "fail" and "slower than the baseline beyond both spreads at prose C1" in v["reasons"][0]


def test_speed_arm_needs_a_win():
    same = st.compare_conditions([result("prose", 1, BASE)], [result("prose", 1, [100, 101, 99, 100, 102])])
    v = st.arm_verdict("w8", {"wins_required": "any"}, comparisons=same)
    assert v["verdict"] == "fail" and v["reasons"][0].startswith("speed: no condition where")


def test_untimed_validation_arm_passes_on_evidence_and_correctness():
    assert st.arm_verdict("check", {}, timed=False)["verdict"] == "pass"
    assert st.arm_verdict("check", {}, timed=False, evidence_failures=["x"])["verdict"] == "fail"


def test_refused_arm_says_why():
    v = st.arm_verdict("mid", {}, refused="requires arm w8 to pass")
    assert v["verdict"] == "refused" and v["reasons"] == ["requires arm w8 to pass"]
