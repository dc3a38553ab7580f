"""experiment_record / experiment_snapshot / experiment_chart and the experiment_record module."""
import json
import subprocess
from pathlib import Path

from ansible.module_utils.experiment import record as er
from ansible.module_utils.experiment import schema as es
from ansible.module_utils.experiment import arms
from ansible.module_utils.experiment import snapshot as snap
from modrun import run_module
import experiment_record

ROOT = Path(__file__).resolve().parents[4]
BASELINE_FILE = ROOT / "inventory" / "common" / "launcher_baseline.yml"


def definition(name="stage_c_fence"):
    path = ROOT / "experiments" / ("%s.yml" % name)
    return es.load_text(path.read_text(), str(path), name)


def res(workload, c, values):
    return {"workload": workload, "concurrency": c, "aggregate_tok_s": {"rounds": list(values)}}


BASE = [100.0, 102.0, 98.0, 101.0, 99.0]


def conditions(arm_values):
    return {"baseline": {"results": [res("prose", 1, BASE), res("code", 1, BASE)], "labels": {"block_size": 3}},
            "fence": {"results": [res("prose", 1, arm_values), res("code", 1, arm_values)],
                      "labels": {"block_size": 3}}}


def test_evaluate_passes_a_correct_fence_that_does_not_lose():
    v = er.evaluate(definition(), conditions([100, 101, 99, 100, 102]), {})
    assert v[0]["verdict"] == "pass" and len(v[0]["comparisons"]) == 2


def test_evaluate_fails_on_evidence_whatever_the_speed():
    v = er.evaluate(definition(), conditions([130] * 5),
                    {"fence": {"evidence_failures": ["spark3 rank 2: fence_armed missing from the latest boot"]}})
    assert v[0]["verdict"] == "fail"
    assert v[0]["reasons"] == ["evidence: spark3 rank 2: fence_armed missing from the latest boot"]


def test_evaluate_fails_when_the_baseline_lacks_a_condition():
    conds = conditions([100] * 5)
    conds["baseline"]["results"] = conds["baseline"]["results"][:1]
    v = er.evaluate(definition(), conds, {})
    assert v[0]["verdict"] == "fail" and "baseline has no prose C1" in v[0]["reasons"][-1] or \
        "baseline has no" in v[0]["reasons"][-1]


def test_baseline_diff_adds_a_key_to_the_settings_block_only():
    diff = er.baseline_diff(BASELINE_FILE.read_text(), {"DSV41_FOLDED_FENCE": "1"})
    assert diff.startswith("--- a/inventory/common/launcher_baseline.yml\n+++ b/inventory/common/launcher_baseline.yml")
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ['+  DSV41_FOLDED_FENCE: "1"']


def test_baseline_diff_replaces_an_existing_value():
    diff = er.baseline_diff(BASELINE_FILE.read_text(), {"DSPARK_BLOCK_SIZE": 5})
    assert "-  DSPARK_BLOCK_SIZE: 3\n+  DSPARK_BLOCK_SIZE: \"5\"" in diff


def test_baseline_diff_applies_with_git(tmp_path):
    target = tmp_path / "inventory" / "common" / "launcher_baseline.yml"
    target.parent.mkdir(parents=True)
    target.write_text(BASELINE_FILE.read_text())
    patch = tmp_path / "p.diff"
    patch.write_text(er.baseline_diff(target.read_text(), {"DSV41_FOLDED_FENCE": "1"}))
    subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, check=True)
    assert 'DSV41_FOLDED_FENCE: "1"' in target.read_text()


def test_proposals_only_for_passing_arms_and_validation_keyed_by_digest():
    d = definition("stage_d_wo_a")
    verdicts = [{"arm": "w8", "verdict": "pass"}, {"arm": "mid", "verdict": "fail"}]
    props = er.proposals(d, verdicts, BASELINE_FILE.read_text(), "sha256:abc", "records/x/record.json")
    assert props == [{"arm": "w8", "validation": {"name": "wo_a_w8", "image_digest": "sha256:abc",
                                                  "record": "records/x/record.json"}}]


def _w8_conditions(w8_rounds):
    return {"baseline": {"results": [res("prose", 1, BASE)]}, "w8": {"results": [res("prose", 1, w8_rounds)]},
            "mid": {"results": [res("prose", 1, w8_rounds)]}}


def test_w8_is_validated_by_its_checks_without_a_speed_win():
    """The report: W8 is validated when it passes its evidence and quality checks; a speed win decides
    promotion only. A W8 that measured no faster fails its speed verdict yet proposes wo_a_w8 (DROP may go on)."""
    d = definition("stage_d_wo_a")
    v = er.evaluate(d, _w8_conditions([100.0, 101.0, 99.0, 100.0, 102.0]), {"mid": {"refused": "needs w8"}})
    w8 = [x for x in v if x["arm"] == "w8"][0]
    assert w8["verdict"] == "fail" and w8["checks_passed"] is True
    assert any(r.startswith("speed: no condition where") for r in w8["reasons"])
    props = er.proposals(d, v, BASELINE_FILE.read_text(), "sha256:abc", "records/x/record.json")
    assert [p["arm"] for p in props] == ["w8"]
    assert props[0]["validation"]["name"] == "wo_a_w8" and "inventory_diff" not in props[0]
    assert props[0]["validation_note"].startswith("validated by its checks and measured; not promoted (speed: ")
    text = er.markdown({"definition": d, "conditions": _w8_conditions([100.0] * 5), "verdicts": v,
                        "proposals": props, "measured_on": "lab output"})
    assert "Ledger entry: `{\"image_digest\": \"sha256:abc\", \"name\": \"wo_a_w8\"" in text
    assert "not promoted (speed: " in text


def test_a_failed_check_or_a_refusal_validates_nothing():
    d = definition("stage_d_wo_a")
    for checks in ({"w8": {"evidence_failures": ["spark2 rank 1: w8_armed missing"]}},
                   {"w8": {"correctness_failures": ["prose-3: answers differ"]}},
                   {"w8": {"refused": "switch not forwarded"}}):
        v = er.evaluate(d, _w8_conditions([130.0] * 5), checks)
        assert [x["checks_passed"] for x in v if x["arm"] == "w8"] == [False], checks
        assert er.proposals(d, v, BASELINE_FILE.read_text(), "sha256:abc", "r") == []
    # a timed arm that was never measured is not validated either (nothing shows it ran)
    v = er.evaluate(d, {"baseline": {"results": [res("prose", 1, BASE)]}}, {})
    assert er.proposals(d, v, BASELINE_FILE.read_text(), "sha256:abc", "r") == []


def test_k5_that_loses_to_k3_still_unlocks_the_cap():
    """The report: measure k=5 alone; if it does not beat k=3 the cap must still be triable (block5)."""
    d = definition("stage_g_spec")
    slower = [80.0, 81.0, 79.0, 80.0, 82.0]
    conds = {"baseline": {"results": [res("prose", 1, BASE)]}, "k5": {"results": [res("prose", 1, slower)]}}
    # stage G judges committed tokens per step over step time, per round (decode_steps.round_metrics)
    assert d["arms"][0]["acceptance"]["metric"] == "committed_per_s"
    for r in conds["baseline"]["results"] + conds["k5"]["results"]:
        r["committed_per_s"] = r["aggregate_tok_s"]
    (k5,) = er.evaluate(d, conds, {})
    assert k5["verdict"] == "fail" and k5["losses"] and k5["checks_passed"] is True
    (prop,) = er.proposals(d, [k5], BASELINE_FILE.read_text(), "sha256:abc", "records/g/record.json")
    assert prop["validation"] == {"name": "block5", "image_digest": "sha256:abc", "record": "records/g/record.json"}
    assert "inventory_diff" not in prop, "a losing k=5 is never promoted"


def test_snapshot_compare_names_every_differing_item():
    before = {"spark1": {"env_sha256": "a" * 64, "adapters": {"wo_a_w8.py": "1"}}, "spark2": {"image_id": "x"}}
    after = {"spark1": {"env_sha256": "b" * 64, "adapters": {"wo_a_w8.py": "1"}}, "spark2": {"image_id": "x"}}
    out = snap.compare(before, after)
    assert out["equal"] is False and list(out["differences"]) == ["spark1"]
    assert out["differences"]["spark1"][0].startswith("env_sha256: aaaa")
    assert snap.compare(before, json.loads(json.dumps(before))) == {"equal": True, "differences": {}}


def test_markdown_has_side_by_side_rows_per_workload():
    d = definition()
    conds = conditions([100, 101, 99, 100, 102])
    record = {"definition": d, "conditions": conds, "labels": {"baseline": {"block_size": 3}},
              "verdicts": er.evaluate(d, conds, {}), "measured_on": "lab output"}
    text = er.markdown(record)
    assert "## prose: aggregate_tok_s" in text and "## code: aggregate_tok_s" in text
    assert "| C | baseline (block size 3) | fence |" in text
    assert "| C1 | 100.00 [98.00..102.00] | 100.00 [99.00..102.00] (+0.0%, no difference) |" in text
    assert "- **fence**: PASS" in text


def test_module_writes_json_markdown_and_a_png(monkeypatch, capsys, tmp_path):
    d = definition()
    snapshot = {"spark1": {"env_sha256": "1"}}
    out = run_module(experiment_record.main, {
        "dest": str(tmp_path / "rec"), "definition": d, "conditions": conditions([110, 111, 112, 113, 114]),
        "snapshot": snapshot, "restored": snapshot, "baseline_file": str(BASELINE_FILE),
        "image_digest": "sha256:feed", "measured_on": "lab output"})
    assert not out.get("failed"), out.get("msg")
    assert out["passed"] is True and out["restore"]["equal"] is True
    assert out["verdicts"][0]["wins"] == ["code C1 +12.0%", "prose C1 +12.0%"]
    png = (tmp_path / "rec" / "chart.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    rec = json.loads((tmp_path / "rec" / "record.json").read_text())
    assert rec["proposals"][0]["inventory_diff"].count('+  DSV41_FOLDED_FENCE: "1"') == 1
    assert "![chart](chart.png)" in (tmp_path / "rec" / "record.md").read_text()


def test_module_fails_the_run_when_the_restore_differs(monkeypatch, capsys, tmp_path):
    out = run_module(experiment_record.main, {
        "dest": str(tmp_path / "rec"), "definition": definition(), "conditions": conditions([100] * 5),
        "snapshot": {"spark1": {"env_sha256": "1"}}, "restored": {"spark1": {"env_sha256": "2"}}, "chart": False})
    assert out["passed"] is False and out["restore"]["differences"] == {"spark1": ["env_sha256: 1 -> 2"]}
    assert "Fleet equal to the snapshot: **NO**" in "\n".join(out["table"])


def test_module_check_mode_writes_nothing(monkeypatch, capsys, tmp_path):
    out = run_module(experiment_record.main, {
        "dest": str(tmp_path / "rec"), "definition": definition(), "conditions": conditions([100] * 5),
        "_ansible_check_mode": True})
    assert out["files"] == [] and not (tmp_path / "rec").exists()


def test_markdown_gives_each_condition_s_phase_seconds_and_steps():
    from ansible.module_utils.engine_log import decode_steps
    from ansible.module_utils.experiment import checks as experiment_checks
    d = definition()
    conds = conditions([100, 101, 99, 100, 102])
    head_log = ("server_args={'x': 1}\n"
                "[2026-11-30 10:00:00] Decode batch, #running-req: 1, #full token: 10, full token usage: 0.00, "
                "accept len: 3.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 0\n"
                "[2026-11-30 10:00:01] Decode batch, #running-req: 1, #full token: 10, full token usage: 0.00, "
                "accept len: 2.00, accept rate: 0.40, cuda graph: True, gen throughput (token/s): 25.00, #queue-req: 0\n")
    conds["baseline"]["decode_steps"] = decode_steps.condition_steps(
        {"spark1": head_log, "spark2": ""}, {"spark1": 0, "spark2": 1}, (1, 4))
    conds["baseline"]["timing"] = experiment_checks.phase_seconds(
        {"start": 0, "applied": 2.2, "booted": 60.0, "measured": 300.4, "judged": 301})
    conds["fence"]["timing"] = experiment_checks.phase_seconds({"start": 400, "applied": 401})
    text = er.markdown({"definition": d, "conditions": conds, "verdicts": er.evaluate(d, conds, {})})
    # 3 tokens in 100 ms and 2 tokens in 80 ms: medians 2.5 tokens and 90 ms
    assert "| baseline | 2 | 58 | 240 | 1 | 301 | C1 | 2.50 [2.00..3.00] | 90.00 [80.00..100.00] |" in text
    assert "| baseline | 2 | 58 | 240 | 1 | 301 | all | 2.50 [2.00..3.00] | 90.00 [80.00..100.00] |" in text
    assert "C4" not in text.split("## Each condition")[1], "a concurrency with no line is left out"
    # a concurrency beyond C4 (more slots) has its own row, in numeric order before "all"
    eight = head_log.replace("#running-req: 1,", "#running-req: 8,").replace("10:00:0", "10:01:0")
    conds["baseline"]["decode_steps"] = decode_steps.condition_steps(
        {"spark1": head_log + eight.split("\n", 1)[1]}, {"spark1": 0}, (1, 2, 4, 8, 16))
    rows = [r.split(" | ")[6] for r in er.condition_table(conds, ["baseline"]) if r.startswith("| baseline")]
    assert rows == ["C1", "C8", "all"], rows
    assert "| fence | 1 | - | - | - | - | - | - | - |" in text, "a condition that stopped early"


def test_condition_steps_say_why_a_figure_is_missing():
    from ansible.module_utils.engine_log import decode_steps
    assert decode_steps.condition_steps({"spark2": "x"}, {"spark2": 1}) is None
    out = decode_steps.condition_steps({"spark1": "server_args={}\n"}, {"spark1": 0})
    assert out["all"]["missing"] == "no Decode batch line in the latest boot"
    assert er.condition_table({"baseline": {"decode_steps": out, "timing": {}}}, ["baseline"])[-1] == (
        "| baseline | - | - | - | - | - | all | n/a (no Decode batch line in the latest boot) | - |")


def test_markdown_has_no_column_for_an_untimed_validation_phase():
    d = definition("stage_e_prefetch")
    conds = {"baseline": {"results": [res("prose", 1, BASE)]}, "prefetch_check": {"results": []},
             "prefetch": {"results": [res("prose", 1, [100, 101, 99, 100, 102])]}}
    text = er.markdown({"definition": d, "conditions": conds, "verdicts": er.evaluate(d, conds, {})})
    assert "| C | baseline | prefetch |" in text and "- **prefetch_check**:" in text


def test_memory_tables_difference_each_arm_against_what_it_builds_on_with_the_reference():
    d = definition("stage_f_drop")
    led = {"spark1": {"rank": 0, "weights_gib": 96.61, "serving_free_gib": 3.19, "capture_low_gib": 3.19,
                      "kv_pool_tokens": 491520, "kv_requested_tokens": 750000, "kv_clamped": True}}

    def cond(settings, weights, kv):
        return {"settings": settings, "results": [res("prose", 1, BASE)],
                "memory": {"spark1": dict(led["spark1"], weights_gib=weights, kv_pool_tokens=kv)}}
    conds = {"baseline": cond({}, 96.61, 491520), "twin_only": cond({"DSV41_WO_A_W8": "1"}, 97.28, 59648),
             "drop": cond({"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"}, 96.00, 749824),
             "draft_head_fp8": cond({"DSV41_DRAFT_HEAD_FP8": "1"}, 96.82, 359424)}
    text = "\n".join(er.memory_tables(d, conds, ["baseline", "twin_only", "drop", "draft_head_fp8"]))
    assert "| drop | spark1 (0) | - / - | - | - | - | 96.00 | - | 3.19 | 3.19 | 749,824 (750,000, clamped) | - |" in text
    assert ("| drop | twin_only | spark1 | -1310.7 | +0.0 | +0.0 | -690176 |" not in text and
            "| drop | twin_only | spark1 | -1310.7 | +0.0 | +0.0 | +690176 | - | -1310.7 | -1376.0 MiB weights (report: "
            "the gross release against twin-only) |") in text
    assert "| drop | baseline | spark1 | -624.6 |" in text
    assert "| draft_head_fp8 | baseline | spark1 | +215.1 |" in text   # 0.21 GiB printed: the ledger reads what the engine prints
    assert "| draft_head_fp8 | twin_only |" not in text, "two unrelated changes are not differenced"


def test_stage_e_plans_and_records_the_exposed_engram_time():
    d = definition("stage_e_prefetch")
    assert d["profile"]["exposed"] == {"name": "engram", "pattern": "engram", "must_fall": True}
    assert ("profile of the baseline and every timed arm: engram time on the compute stream (kernels matching "
            "'engram'), must fall on every rank") in arms.plan_lines(d)
    conds = {"baseline": {"results": [res("prose", 1, BASE)], "exposed_us": {"spark1": 1000.0, "spark2": None}},
             "prefetch": {"results": [res("prose", 1, BASE)], "exposed_us": {"spark1": 150.0, "spark2": 150.0}}}
    text = er.markdown({"definition": d, "conditions": conds, "verdicts": er.evaluate(d, conds, {})})
    assert "## Exposed engram time on the compute stream (us per profiled step, kernels matching `engram`)" in text
    assert "| baseline | spark1 1000.0 | spark2 - |" in text and "| prefetch | spark1 150.0 | spark2 150.0 |" in text
    assert definition()["profile"] == {"exposed": None}


def test_ranking_table_orders_conditions_per_workload_best_first():
    from ansible.module_utils.experiment import record as er
    st = lambda per, ms, q: {"committed_tokens_per_step": {"median": per}, "step_ms": {"median": ms},
                             "committed_per_s": q, "lines": 12, "missing": None}
    conditions = {"baseline": {"workload_steps": {"prose": st(2.5, 100.0, 25.0), "code": st(3.0, 100.0, 30.0)}},
                  "k5": {"workload_steps": {"prose": st(3.2, 110.0, 29.09), "code": st(3.3, 120.0, 27.5)}}}
    labels = {"baseline": {"block_size": 3}, "k5": {"block_size": 5}}
    assert er.ranking_table({"ranking": None}, conditions, ["baseline", "k5"], labels) == []
    out = er.ranking_table({"ranking": {"concurrency": 1}}, conditions, ["baseline", "k5"], labels)
    code, prose = out.index("### code"), out.index("### prose")
    assert out[code + 4] == "| 1 | baseline (block size 3) | 3.00 | 100.00 | 30.0 | 12 |"
    assert out[code + 5] == "| 2 | k5 (block size 5) | 3.30 | 120.00 | 27.5 | 12 |"
    assert out[prose + 4].startswith("| 1 | k5 (block size 5) | 3.20 | 110.00 | 29.1 |")


def test_reported_metrics_are_tabled_beside_the_judged_one():
    d = definition("stage_i_slots")

    def both(c, agg, per):
        return {"workload": "prose", "concurrency": c, "aggregate_tok_s": {"rounds": agg},
                "per_stream_tok_s": {"rounds": per}}
    conds = {"baseline": {"results": [both(8, [40, 41, 39, 40, 40], [10, 10, 10, 10, 10])]},
             "slots6": {"results": []},
             "slots8": {"results": [both(8, [60, 61, 59, 60, 62], [7.5, 7.6, 7.4, 7.5, 7.7])]}}
    text = er.metric_tables(d, conds, ["baseline", "slots6", "slots8"])
    assert text[1] == "## prose: per_stream_tok_s, median [min..max] (reported, not judged)"
    assert "| C8 | 10.00 [10.00..10.00] | - | 7.50 [7.40..7.70] |" in text
    assert er.metric_tables(definition(), conds, ["baseline"]) == [], "nothing beside the judged metric"


def test_markdown_tables_the_wo_a_mode_of_each_armed_condition_per_rank():
    d = definition("stage_d_wo_a")
    bridge = {"armed": True, "mode": "bridge", "drop": False, "draft_kept": False}
    conds = _w8_conditions([100.0] * 5)
    conds["baseline"]["wo_a_modes"] = dict((h, {"rank": r, "armed": False, "mode": None, "drop": False,
                                                "draft_kept": False}) for r, h in enumerate(("spark1", "spark2")))
    conds["w8"]["wo_a_modes"] = dict((h, dict(bridge, rank=r)) for r, h in enumerate(("spark1", "spark2")))
    text = er.markdown({"definition": d, "conditions": conds, "verdicts": er.evaluate(d, conds, {}),
                        "measured_on": "lab output"})
    assert "## wo_a_w8 mode per rank" in text
    assert "| w8 | spark1 | 0 | bridge | no | no |" in text and "| w8 | spark2 | 1 | bridge | no | no |" in text
    assert "| baseline | spark1" not in text, "a condition without W8 has no row"


def test_accept_length_tabled_per_concurrency_beside_the_baselines():
    def steps(c1, c4, lines=12):
        def st(v):
            return {"lines": lines, "committed_tokens_per_step": {"median": v, "min": v, "max": v},
                    "step_ms": {"median": 90.0, "min": 90.0, "max": 90.0}}
        return {"C1": st(c1), "C2": {"lines": 0}, "C4": st(c4), "all": st(c1)}
    conds = {"baseline": {"decode_steps": steps(3.08, 2.91)}, "ep1": {"decode_steps": steps(3.11, 2.80)}}
    text = "\n".join(er.accept_length_table(conds, ["baseline", "ep1"]))
    assert "## Acceptance: rank 0's accept length per concurrency, beside the baseline's" in text
    assert "| baseline | C1 | 3.08 | 3.08 | - | 12 |" in text
    assert "| ep1 | C1 | 3.11 | 3.08 | +0.03 | 12 |" in text and "| ep1 | C4 | 2.80 | 2.91 | -0.11 | 12 |" in text
    assert "| ep1 | C2 |" not in text, "a concurrency without lines is not tabled"
    assert er.accept_length_table({"baseline": {}}, ["baseline"]) == []


def test_a_condition_without_the_judged_figure_is_recorded_unmeasured(monkeypatch, capsys, tmp_path):
    """Stage G judges rank 0's Decode batch lines per round; a round without one leaves the figure out. The record is
    still written: the arm fails naming the condition, the round and why, the tables say unmeasured, the chart
    names the condition without drawing it."""
    from ansible.module_utils.engine_log import decode_steps
    d = definition("stage_g_spec")
    why = "round 2 of 5 (03:10:00 to 03:10:30 UTC): no Decode batch line with #running-req: 1 in the measured window"
    conds = {"baseline": {"results": [dict(res("prose", 1, BASE), unmeasured=dict.fromkeys(decode_steps.ROUND_METRICS, why))]},
             "k5": {"results": [dict(res("prose", 1, BASE), committed_per_s={"rounds": BASE})]}}
    (k5,) = er.evaluate(d, conds, {})
    assert k5["verdict"] == "fail" and k5["reasons"] == [
        "speed: no condition was measured", "speed: condition prose C1 has no per-repetition committed_per_s: " + why]
    record = {"definition": d, "conditions": conds, "labels": {}, "verdicts": [k5], "measured_on": "lab output"}
    text = er.markdown(record)
    assert "| C1 | unmeasured | 100.00 [98.00..102.00] |" in text
    out = run_module(experiment_record.main, {
        "dest": str(tmp_path / "rec"), "definition": d, "conditions": conds, "snapshot": {}, "restored": {},
        "baseline_file": str(BASELINE_FILE), "image_digest": "sha256:feed", "measured_on": "lab output"})
    assert not out.get("failed"), out.get("msg")
    assert out["passed"] is False and (tmp_path / "rec" / "chart.png").read_bytes()[:4] == b"\x89PNG"
    assert why in (tmp_path / "rec" / "record.md").read_text()
