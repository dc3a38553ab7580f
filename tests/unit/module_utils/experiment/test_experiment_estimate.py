"""experiment_estimate: the expected duration of a run on the fleet, per condition and step, from the fleet's
figures or from this fleet's records; the window budget that refuses a run that does not fit, naming what
would; and the module entry point that puts both in the plan."""
import json
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.experiment import estimate as ee
from ansible.module_utils.experiment import schema as es
from modrun import run_module
import experiment_definition

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = ROOT / "roles" / "benchmark" / "files" / "prompts"
HOSTS = ["spark1", "spark2", "spark3"]


def definition(name):
    return es.validate(yaml.safe_load((ROOT / "experiments" / (name + ".yml")).read_text()), name + ".yml")


def prompts():
    return {p.stem: len(json.loads(p.read_text())) for p in PROMPTS.glob("*.json")}


def test_stage_d_without_records_boots_once_per_condition_and_once_to_restore_at_the_fleet_boot():
    defn = definition("stage_d_wo_a")
    est = ee.estimate(defn, {}, prompts())
    names = [c["name"] for c in est["conditions"]]
    assert names == ["baseline"] + [a["name"] for a in defn["arms"]] + ["restore"]
    assert est["boots"] == len(defn["arms"]) + 2
    assert all(c["boot_s"] == 767.0 for c in est["conditions"])
    assert "767 s" in est["figures"]["boot_s"] and "scheduler_e2e=761.30" in est["figures"]["boot_s"]
    # the total is the sum of every step of every condition, nothing else
    assert est["total_s"] == pytest.approx(sum(c["apply_s"] + c["boot_s"] + c["benchmark_s"] + c["evidence_s"]
                                               for c in est["conditions"]), abs=0.5)
    assert est["conditions"][-1]["benchmark_s"] == 0.0


def test_benchmark_follows_the_definition_rounds_prompts_and_the_fleet_rate():
    bench = {"workloads": ["prose"], "concurrency": [1, 4], "repetitions": 5, "warmups": 1, "max_tokens": 256}
    seconds, source = ee.benchmark_seconds(bench, {}, {"prose": 8})
    # C1: 8 prompts one at a time; C4: two waves of four; 6 rounds each; 256 tokens at 38 tok/s per request
    assert seconds == pytest.approx(6 * (8 + 2) * 256 / 38.0)
    assert source == "fleet"


def test_recorded_figures_replace_the_fleet_ones(tmp_path):
    for i, (boot, wall) in enumerate(((800.0, 40.0), (780.0, 44.0), (790.0, 42.0))):
        run = tmp_path / ("2026120%dT000000Z-stage_c_fence" % (i + 1))
        run.mkdir()
        (run / "record.json").write_text(json.dumps({
            "snapshot": {h: {} for h in HOSTS},
            "conditions": {"baseline": {
                "timing": {"apply_s": 20.0, "boot_s": boot, "benchmark_s": 300.0, "evidence_s": 90.0},
                "results": [{"workload": "prose", "concurrency": 1, "settings": {"max_tokens": 256},
                             "round_wall_s": [wall, wall + 2], "per_stream_tok_s": {"median": 50.0}}]}}}))
    (tmp_path / "20261204T000000Z-broken").mkdir()
    (tmp_path / "20261204T000000Z-broken" / "record.json").write_text("{not json")
    other = tmp_path / "20261205T000000Z-lab"
    other.mkdir()
    (other / "record.json").write_text(json.dumps({"snapshot": {"labhost": {}}, "conditions": {
        "baseline": {"timing": {"boot_s": 5.0}}}}))
    records = ee.read_records(str(tmp_path), HOSTS)
    assert len(records) == 3, "the broken record and the other fleet's are passed over"
    figures = ee.recorded_figures(records)
    assert figures["boot_s"] == (790.0, 3) and figures["apply_s"] == (20.0, 3)
    est = ee.estimate(definition("stage_c_fence"), figures, prompts())
    assert est["conditions"][0]["boot_s"] == 790.0
    assert est["figures"]["boot_s"] == "recorded on this fleet (median of 3)"
    base = est["conditions"][0]
    # prose C1 from the recorded round (median 43 s for 256 tokens), the other workload/concurrencies at the rate
    bench = definition("stage_c_fence")["baseline"]["benchmark"]
    rounds = bench["warmups"] + bench["repetitions"]
    assert base["benchmark_s"] > rounds * 43.0 * bench["max_tokens"] / 256
    assert base["sources"]["benchmark_s"] in ("fleet+recorded", "recorded")


def test_an_untimed_arm_is_estimated_by_its_probe_up_to_its_request_slots():
    defn = definition("stage_e_prefetch")
    untimed = [a for a in defn["arms"] if a["benchmark"] is None]
    if not untimed:
        pytest.skip("stage E has no untimed arm in this definition")
    est = ee.estimate(defn, {}, prompts(), slots=4)
    cond = next(c for c in est["conditions"] if c["name"] == untimed[0]["name"])
    assert cond["benchmark_s"] > 0 and cond["boot_s"] == 767.0


def test_window_refusal_names_what_fits_and_none_when_it_fits():
    est = ee.estimate(definition("stage_d_wo_a"), {}, prompts())
    assert ee.window_refusal("stage_d_wo_a", est, None) is None
    assert ee.window_refusal("stage_d_wo_a", est, est["total_s"] / 60.0 + 1) is None
    base, first = est["conditions"][0]["total_s"], est["conditions"][1]["total_s"]
    restore = est["conditions"][-1]["total_s"]
    minutes = (base + first + restore) / 60.0 + 0.5
    said = ee.window_refusal("stage_d_wo_a", est, minutes)
    assert said.startswith("stage_d_wo_a refused, nothing changed: it is expected to take %s on this fleet (%d boots)"
                           % (ee.duration(est["total_s"]), est["boots"]))
    assert "the baseline and arm(s) %s with the restore" % est["conditions"][1]["name"] in said
    assert "only the baseline" in ee.window_refusal("stage_d_wo_a", est, (base + restore) / 60.0 + 0.1)
    assert "not even the baseline" in ee.window_refusal("stage_d_wo_a", est, 1)


def test_expected_vs_actual_pairs_every_timed_step():
    est = ee.estimate(definition("stage_c_fence"), {}, prompts())
    rows = ee.expected_vs_actual(est, {"baseline": {"timing": {"apply_s": 7.2, "boot_s": 15.2, "benchmark_s": 15.4,
                                                               "evidence_s": 3.2, "total_s": 41.0}}})
    assert [r["step"] for r in rows] == ["apply", "boot", "benchmark", "evidence", "total"]
    assert rows[1] == {"name": "baseline", "step": "boot", "expected_s": 767.0, "actual_s": 15.2}


def test_duration_reads_like_a_person_would_say_it():
    assert [ee.duration(s) for s in (38, 767, 3840)] == ["38 s", "12 min 47 s", "1 h 04 min"]


# --------------------------------------------------------------------------- module entry point

def test_module_plan_carries_the_estimate_and_the_refusal(tmp_path):
    args = {"path": str(ROOT / "experiments" / "stage_d_wo_a.yml"), "record_root": str(tmp_path / "none"),
            "hosts": HOSTS, "prompt_dir": str(PROMPTS)}
    out = run_module(experiment_definition.main, args)
    assert not out.get("failed"), out
    assert out["window_refusal"] is None
    lines = [line for line in out["plan"] if line.startswith("expected on this fleet: ")]
    assert lines and "%d boots" % out["estimate"]["boots"] in lines[0]
    out = run_module(experiment_definition.main, dict(args, window_minutes=30))
    assert "refused, nothing changed" in out["window_refusal"] and "window_minutes=30" in out["window_refusal"]


def test_module_reads_no_other_fleet_s_records_for_the_estimate(tmp_path):
    _boot_record(tmp_path, "20261204T000000Z-stage_c_fence", HOSTS, 15.0)
    (tmp_path / "20261204T000000Z-stage_c_fence" / "run.json").write_text(json.dumps({"fleet": "lab"}))
    args = {"path": str(ROOT / "experiments" / "stage_d_wo_a.yml"), "record_root": str(tmp_path), "hosts": HOSTS,
            "prompt_dir": str(PROMPTS)}
    fleet = run_module(experiment_definition.main, dict(args, fleet="production"))
    assert fleet["estimate"]["conditions"][0]["boot_s"] == 767.0, "the lab's 15 s boot is no fleet figure"
    assert run_module(experiment_definition.main, dict(args, fleet="lab"))["estimate"]["conditions"][0]["boot_s"] == 15.0


def test_module_refuses_a_window_that_is_not_positive():
    out = run_module(experiment_definition.main, {"path": str(ROOT / "experiments" / "stage_c_fence.yml"),
                                                  "window_minutes": 0})
    assert out["failed"] and "window_minutes must be a positive number" in out["msg"]


def test_the_record_tables_expected_beside_actual():
    from ansible.module_utils.experiment import record as er
    est = ee.estimate(definition("stage_c_fence"), {}, prompts())
    lines = er.expected_table(est, {"baseline": {"timing": {"apply_s": 7.2, "boot_s": 15.2, "benchmark_s": 15.4,
                                                            "evidence_s": 3.2, "total_s": 41.0}}})
    assert lines[1] == "## Expected and actual, seconds per step"
    assert "| baseline | boot | 767 | 15 |" in lines
    assert er.expected_table(None, {}) == [] and er.expected_table(est, {}) == []


# --------------------------------------------------------------------------- stage A

BENCH = {"workloads": ["prose", "code"], "concurrency": [1, 4], "repetitions": 5, "warmups": 1, "max_tokens": 256}
REPORT_LAYER = 33_800_000_000      # one layer, one rank (SPEC): two layers a rank


def test_stage_a_packs_one_rank_at_a_time_at_the_assumed_rate_then_one_restart_and_two_benchmarks():
    to_write = {h: 2 * REPORT_LAYER for h in HOSTS}
    est = ee.stage_a_estimate(to_write, BENCH, prompts())
    names = [s["name"] for s in est["steps"]]
    assert names == ["pack spark1", "pack spark2", "pack spark3", "restart", "benchmark after packing",
                     "contention", "benchmark after contention"]
    assert est["steps"][0]["seconds"] == pytest.approx(2 * REPORT_LAYER / 100e6, abs=0.1)   # 676 s a rank
    assert est["steps"][3]["seconds"] == 767.0 and est["boots"] == 1
    assert est["total_s"] == pytest.approx(sum(s["seconds"] for s in est["steps"]), abs=0.5)
    capped = ee.stage_a_estimate(to_write, BENCH, prompts(), max_mib_s=50)
    assert capped["steps"][0]["seconds"] == pytest.approx(2 * REPORT_LAYER / (50 * 1024 * 1024), abs=0.1)
    assert "engram_pack_max_mib_s=50" in capped["figures"]["pack_rate"]


def test_stage_a_on_four_ranks_packs_each_rank_s_quarter_and_names_its_size():
    """A TP4 fleet: four ranks packed one at a time, each its quarter of the two layers (50,689,516,424 bytes,
    the TP4 lab's preflight); the assumption names the largest rank's bytes, not TP3's 33.8 GB layer."""
    tp4 = {"spark%d" % i: 50_689_516_424 for i in range(1, 5)}
    est = ee.stage_a_estimate(tp4, BENCH, prompts())
    assert [s["name"] for s in est["steps"]][:5] == ["pack spark1", "pack spark2", "pack spark3", "pack spark4",
                                                      "restart"]
    assert est["steps"][0]["seconds"] == pytest.approx(506.9, abs=0.1) and est["bytes"] == 4 * 50_689_516_424
    assert "up to 50.7 GB a rank" in est["figures"]["pack_rate"] and "33.8" not in est["figures"]["pack_rate"]


def test_stage_a_window_refusal_names_the_steps_that_fit():
    est = ee.stage_a_estimate({h: 2 * REPORT_LAYER for h in HOSTS}, BENCH, prompts())
    assert ee.stage_window_refusal("stage_a_pack", est, 0) is None
    assert ee.stage_window_refusal("stage_a_pack", est, est["total_s"] / 60 + 1) is None
    said = ee.stage_window_refusal("stage_a_pack", est, 25)
    assert said.startswith("stage_a_pack refused, nothing changed: it is expected to take %s" % ee.duration(est["total_s"]))
    assert "(pack spark1, pack spark2, 22 min 32 s)" in said


def test_the_stage_a_filter_reads_each_rank_plan_and_the_prompt_sets():
    import engram_pack_filters as f
    hostvars = {h: {"engram_pack_plan": {"to_write_bytes": 2 * REPORT_LAYER}} for h in HOSTS}
    bench = dict(BENCH, workloads={"prose": "prose.json", "code": "code.json"})
    out = f.dsv41_stage_a_estimate(HOSTS, hostvars, bench, str(PROMPTS), 0, 30)
    assert out["estimate"]["bytes"] == 6 * REPORT_LAYER
    assert out["lines"][0].startswith("stage_a_pack expected on this fleet: ")
    assert out["refusal"] and "window_minutes=30" in out["refusal"]


def test_the_stage_a_filter_takes_the_restart_from_this_fleet_s_records(tmp_path):
    import engram_pack_filters as f
    _boot_record(tmp_path, "20261201T000000Z-stage_c_fence", HOSTS, 700.0)
    _boot_record(tmp_path, "20261202T000000Z-stage_c_fence", HOSTS, 15.0)
    (tmp_path / "20261202T000000Z-stage_c_fence" / "run.json").write_text(json.dumps({"fleet": "lab"}))
    hostvars = {h: {"engram_pack_plan": {"to_write_bytes": 2 * REPORT_LAYER}} for h in HOSTS}
    bench = dict(BENCH, workloads={"prose": "prose.json", "code": "code.json"})
    out = f.dsv41_stage_a_estimate(HOSTS, hostvars, bench, str(PROMPTS), 0, 0, str(tmp_path), "production")
    restart = [s for s in out["estimate"]["steps"] if s["name"] == "restart"][0]
    assert restart["seconds"] == 700.0 and out["estimate"]["figures"]["boot_s"] == "recorded on this fleet (median of 1)"
    assert "  restart: 11 min 40 s" in out["lines"]


def test_stage_a_record_puts_each_step_measured_beside_its_estimate_in_the_plan_order():
    est = ee.stage_a_estimate({h: 2 * REPORT_LAYER for h in HOSTS}, BENCH, prompts())
    # a second run: nothing to restart (no actual), the other steps timed; a stray step name is no row
    actual = {"pack spark1": 1.24, "pack spark2": 0.5, "pack spark3": 0.51, "benchmark after packing": 30.0,
              "contention": 4.0, "benchmark after contention": 31.06, "not a step": 99.0}
    rows = ee.stage_expected_vs_actual(est, actual)
    assert [r["step"] for r in rows] == [s["name"] for s in est["steps"]] + ["total"]
    by_step = {r["step"]: r for r in rows}
    assert by_step["restart"] == {"step": "restart", "expected_s": 767.0, "actual_s": None}
    assert by_step["pack spark1"]["actual_s"] == 1.2 and by_step["benchmark after contention"]["actual_s"] == 31.1
    assert by_step["total"] == {"step": "total", "expected_s": est["total_s"], "actual_s": 67.3}
    # check mode measures nothing; a run whose plan was left out by --tags has no estimate and no rows
    assert all(r["actual_s"] is None for r in ee.stage_expected_vs_actual(est, actual, check_mode=True))
    assert ee.stage_expected_vs_actual({}, actual) == []
    # a figure that is not a duration is not taken for one
    assert ee.stage_expected_vs_actual(est, {"contention": "soon", "restart": -3})[-1]["actual_s"] is None


def test_the_stage_a_record_filter_merges_every_rank_s_timed_steps():
    import engram_pack_filters as f
    est = ee.stage_a_estimate({h: 2 * REPORT_LAYER for h in HOSTS}, BENCH, prompts())
    hostvars = {"spark1": {"run_record_step_seconds": {"pack spark1": 3.0, "restart": 20.1, "contention": 2.0}},
                "spark2": {"run_record_step_seconds": {"pack spark2": 4.0, "restart": 20.3, "contention": 2.2,
                                                       "benchmark after packing": 12.0}},
                "spark3": {}}
    rows = {r["step"]: r["actual_s"] for r in f.dsv41_stage_a_expected_vs_actual(est, HOSTS, hostvars)}
    # each rank's own pack, the fleet-wide steps at the longest any rank took, a step no rank took left open
    assert rows["pack spark1"] == 3.0 and rows["pack spark2"] == 4.0 and rows["pack spark3"] is None
    assert rows["restart"] == 20.3 and rows["contention"] == 2.2 and rows["benchmark after contention"] is None
    assert rows["total"] == 41.5
    assert f.dsv41_stage_a_expected_vs_actual(None, HOSTS, hostvars) == []


# --------------------------------------------------------------------------- stage B

def _boot_record(root, name, hosts, boot_s, apply_s=20.0):
    run = root / name
    run.mkdir(parents=True)
    (run / "record.json").write_text(json.dumps({
        "snapshot": {h: {} for h in hosts},
        "conditions": {"baseline": {"timing": {"apply_s": apply_s, "boot_s": boot_s}}}}))


def test_stage_b_is_the_image_rebuild_and_four_boots_at_the_fleet_boot():
    est = ee.stage_b_estimate()
    assert [s["name"].split(" (")[0] for s in est["steps"]] == [
        "the retention adapter deployed and the image rebuilt", "boot1-first", "boot2-repeat", "boot3-changed",
        "boot4-restored"]
    assert est["boots"] == 4 and all(s["seconds"] == 60.0 + 767.0 for s in est["steps"][1:])
    assert est["total_s"] == 300.0 + 4 * 827.0
    lines = ee.stage_lines("stage_b_autotune", est)
    assert lines[0] == "stage_b_autotune expected on this fleet: 1 h 00 min in all, 4 boot(s)"
    assert "boot a fleet boot: Ready about 767 s after start (scheduler_e2e=761.30)" in lines[-1]


def test_the_stage_b_filter_takes_this_fleet_s_recorded_boots_only(tmp_path):
    import experiment_filters as f
    _boot_record(tmp_path, "20261201T000000Z-stage_c_fence", HOSTS, 700.0)
    _boot_record(tmp_path, "20261202T000000Z-stage_c_fence", HOSTS, 720.0)
    _boot_record(tmp_path, "20261203T000000Z-lab", ["lab1", "lab2", "lab3"], 15.0)   # another fleet's run
    # the lab's hosts carry the fleet's names: its runs are told apart by the fleet name they recorded
    _boot_record(tmp_path, "20261204T000000Z-stage_c_fence", HOSTS, 15.0)
    (tmp_path / "20261204T000000Z-stage_c_fence" / "run.json").write_text(json.dumps({"fleet": "lab"}))
    (tmp_path / "20261202T000000Z-stage_c_fence" / "run.json").write_text(json.dumps({"fleet": "production"}))
    assert [r["conditions"]["baseline"]["timing"]["boot_s"]
            for r in ee.read_records(str(tmp_path), HOSTS, fleet="production")] == [700.0, 720.0]
    assert [r["conditions"]["baseline"]["timing"]["boot_s"]
            for r in ee.read_records(str(tmp_path), HOSTS, fleet="lab")] == [700.0, 15.0], "no name: by hosts"
    out = f.dsv41_stage_b_estimate(HOSTS, str(tmp_path), 0, "production")
    boots = [s["seconds"] for s in out["estimate"]["steps"][1:]]
    assert boots == [20.0 + 710.0] * 4, "the median of this fleet's two boots and applies"
    assert out["estimate"]["figures"]["boot"] == "recorded on this fleet (median of 2)"
    assert out["refusal"] is None
    # no records at all: the fleet's figures
    assert f.dsv41_stage_b_estimate(HOSTS, str(tmp_path / "none"), 0)["estimate"]["steps"][1]["seconds"] == 827.0


def test_stage_b_window_refusal_names_the_steps_that_fit_and_why_not_part_of_it():
    said = ee.stage_window_refusal("stage_b_autotune", ee.stage_b_estimate(), 30, ee.STAGE_B_ADVICE)
    assert said.startswith("stage_b_autotune refused, nothing changed: it is expected to take 1 h 00 min on this "
                           "fleet, more than the 30-minute window (window_minutes=30); the first step(s) would fit "
                           "(the retention adapter deployed and the image rebuilt, boot1-first")
    assert said.endswith("its four boots prove retention only together (a partial run proposes nothing for the "
                         "ledger), so ask for a longer window")
    assert ee.stage_window_refusal("stage_b_autotune", ee.stage_b_estimate(), 61, ee.STAGE_B_ADVICE) is None
