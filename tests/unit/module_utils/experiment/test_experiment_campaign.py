"""experiment_campaign: a campaign file is validated, its definitions merged into the one the experiment role
runs (shared baseline, every stage's arms with their own checks), each stage judged from the shared conditions
as its own run would be, and the A-B-A baseline check; the module entry point loads a campaign."""
import copy
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.experiment import campaign as ec
from ansible.module_utils.experiment import record as er
from ansible.module_utils.experiment import schema as es
from modrun import run_module
import experiment_definition

ROOT = Path(__file__).resolve().parents[4]


def definition(name):
    return es.validate(yaml.safe_load((ROOT / "experiments" / (name + ".yml")).read_text()), name + ".yml")


def campaign(**changes):
    doc = yaml.safe_load((ROOT / "campaigns" / "stage_d_e.yml").read_text())
    doc.update(changes)
    return doc


def load(doc, stem="stage_d_e"):
    return ec.load_text(yaml.safe_dump(doc), "campaigns/%s.yml" % stem, stem)


def test_the_shipped_campaign_merges_d_and_e_into_one_run_with_seven_boots_instead_of_eight():
    info = load(campaign())
    defs = [definition(n) for n in info["stages"]]
    merged = ec.merge(info, defs)
    assert [a["name"] for a in merged["arms"]] == ["w8", "mid", "prefetch_check", "prefetch"]
    assert merged["baseline"]["benchmark"]["concurrency"] == [1, 2, 4]          # D's C2 and both stages' C1/C4
    assert merged["baseline"]["settings"] == defs[0]["baseline"]["settings"]
    assert ec.boots(defs) == {"one_by_one": 8, "campaign": 7, "saved": 1}
    # each arm keeps its own stage's checks: E's exposed time must fall, D's arms have no such check
    exposed = {a["name"]: a["profile_exposed"] for a in merged["arms"]}
    assert exposed["w8"] is None and exposed["prefetch"] == defs[1]["profile"]["exposed"]
    assert [s["name"] for s in merged["campaign"]["stages"]] == ["stage_d_wo_a", "stage_e_prefetch"]
    lines = ec.plan_lines(info, defs)
    assert "boots: 7 for the campaign against 8 for the stages one by one (1 saved)" in lines


@pytest.mark.parametrize("changes,said", [
    ({"stages": ["stage_d_wo_a"]}, "stages: a list of at least two definition names"),
    ({"stages": ["stage_d_wo_a", "stage_d_wo_a"]}, "stages: stage_d_wo_a is named twice"),
    ({"stges": []}, "stges: unknown key"),
    ({"name": "other"}, "name: 'other' must be the file's name"),
    ({"baseline_drift": {"tolerance_pct": 120}}, "baseline_drift.tolerance_pct: a percentage from 0 to 100"),
])
def test_a_malformed_campaign_is_refused_naming_the_file_and_key(changes, said):
    with pytest.raises(ec.CampaignError) as exc:
        load(campaign(**changes))
    assert str(exc.value).startswith("campaigns/stage_d_e.yml: ") and said in str(exc.value)


def test_stages_that_cannot_share_a_baseline_are_refused_naming_both_and_the_key():
    d, e = definition("stage_d_wo_a"), definition("stage_e_prefetch")
    other = copy.deepcopy(e)
    other["baseline"]["settings"]["DSV41_WO_A_W8"] = "1"
    with pytest.raises(ec.CampaignError) as exc:
        ec.merge(load(campaign()), [d, other], "c.yml")
    assert "the baselines of stage_d_wo_a and stage_e_prefetch set DSV41_WO_A_W8 differently" in str(exc.value)
    other = copy.deepcopy(e)
    other["baseline"]["benchmark"]["max_tokens"] = 64
    with pytest.raises(ec.CampaignError) as exc:
        ec.merge(load(campaign()), [d, other], "c.yml")
    assert "differ in max_tokens (256, 64)" in str(exc.value)
    with pytest.raises(ec.CampaignError) as exc:
        ec.merge(load(campaign()), [d, copy.deepcopy(d)], "c.yml")
    assert "arm w8 of stage_d_wo_a: the name is taken (stage_d_wo_a)" in str(exc.value)


def result(workload, concurrency, values):
    return {"workload": workload, "concurrency": concurrency,
            "aggregate_tok_s": {"rounds": list(values), "median": sorted(values)[len(values) // 2]}}


def test_the_end_baseline_within_its_noise_holds_and_one_that_moved_fails_every_comparison():
    start = [result("prose", 1, [60, 61, 62, 63, 64])]
    same = {"baseline": {"results": start}, "baseline_end": {"results": [result("prose", 1, [61, 62, 63, 64, 65])]}}
    held = ec.baseline_drift(same)
    assert held["moved"] is False and held["rows"][0]["outcome"] == "no_difference"
    assert ec.drift_reason(held) is None
    slower = {"baseline": {"results": start}, "baseline_end": {"results": [result("prose", 1, [40, 41, 42, 43, 44])]}}
    moved = ec.baseline_drift(slower)
    assert moved["moved"] is True and moved["rows"][0]["gain_pct"] < -30
    assert ec.drift_reason(moved).startswith("campaign: the baseline moved beyond its noise between the start and "
                                             "the end of the window (prose C1 -")
    assert ec.baseline_drift(slower, tolerance_pct=50)["moved"] is False, "within the campaign's tolerance"
    assert "| prose | C1 | 62.0 | 42.0 |" in "\n".join(ec.drift_table(moved))
    assert ec.baseline_drift({"baseline": {"results": start}})["note"] == "the end baseline was not measured"


def test_each_stage_is_judged_from_the_shared_conditions_with_its_own_definition():
    info = load(campaign())
    defs = [definition(n) for n in info["stages"]]
    merged = ec.merge(info, defs)
    conds = {name: {"results": []} for name in ["baseline", "w8", "mid", "prefetch_check", "prefetch", "baseline_end"]}
    checks = {name: {"evidence_failures": [], "correctness_failures": []} for name in conds}
    c, k = ec.stage_conditions(merged, "stage_e_prefetch", conds, checks)
    assert sorted(c) == sorted(k) == ["baseline", "prefetch", "prefetch_check"]
    verdicts = er.evaluate(defs[1], c, k)
    assert [v["arm"] for v in verdicts] == ["prefetch_check", "prefetch"]


def test_module_loads_a_campaign_with_its_plan_boots_and_estimate(tmp_path):
    out = run_module(experiment_definition.main, {"campaign": str(ROOT / "campaigns" / "stage_d_e.yml"),
                                                  "definitions_dir": str(ROOT / "experiments")})
    assert not out.get("failed"), out
    assert out["definition"]["stage"] == "campaign" and out["campaign"]["boots"]["saved"] == 1
    assert out["estimate"]["boots"] == 7 and out["estimate"]["conditions"][-2]["name"] == "baseline_end"
    assert any(line.startswith("[stage_e_prefetch] arm prefetch:") for line in out["plan"])
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\ndescription: x\nstages: [stage_d_wo_a, nosuch]\n")
    out = run_module(experiment_definition.main, {"campaign": str(bad), "definitions_dir": str(ROOT / "experiments")})
    assert out["failed"] and "nosuch.yml: cannot read the experiment definition" in out["msg"]
    out = run_module(experiment_definition.main, {})
    assert out["failed"] and "one of the following is required: path, campaign" in out["msg"]
