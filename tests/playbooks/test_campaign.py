"""Campaigns (playbooks/campaign.yml) on the lab: stages D and E in one window.

- smoke: --check prints the campaign's plan (7 boots against 8 one by one), each stage's plan and the estimate,
  and changes nothing.
- a campaign of lab copies of D and E (one workload at C1, five measured repetitions) whose end baseline is
  slowed by a lab knob while the arms run: 7 boots, every stage judged and recorded with its own definition
  under the run, the A-B-A table says the baseline moved, every comparison fails saying so, and the fleet ends
  equal to its snapshot.
- the same campaign killed as stage D's first arm comes up: the next run refused naming it, rollback.yml
  back to the campaign's snapshot, the record keeping the start baseline, marked interrupted.
"""
import json

import pytest
import yaml

import experiment_lab
from experiment_lab import (act_during, engine_healthy, flat, fleet_state, inventory_layer, kill_during, knobs,
                            lab_definition, record)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order)
STAGES_PASSED = True


@pytest.mark.smoke
def test_check_mode_prints_the_campaign_plan_and_judges_every_stage_before_anything_changes(tmp_path):
    """On the lab as the report left it: the plan (7 boots against 8 one by one, each stage's own plan, the
    estimate), then every stage's preconditions judged before any change: stage D's arms may run, stage E's are
    refused for what its own run would be refused for (no packed shards, the CHECK switch not forwarded)."""
    before = fleet_state()
    rc, out = playbook("campaign.yml", "--check", "-e", "campaign=stage_d_e",
                       "-e", "experiment_record_root=%s" % tmp_path)
    text = flat(out)
    assert "boots: 7 for the campaign against 8 for the stages one by one (1 saved)" in text, text[-3000:]
    assert "[stage_d_wo_a] arm w8: DSV41_WO_A_W8=1" in text and "[stage_e_prefetch] arm prefetch:" in text
    assert "expected on this fleet: " in text and ", 7 boots (boot 12 min 47 s" in text
    assert rc != 0 and "stage_d_e refused, nothing changed: " in text
    refusal = text.split("stage_d_e refused, nothing changed: ", 1)[1]
    assert '"prefetch": ["packed shards required: packed=True missing on spark1, spark2, spark3"]' in refusal
    assert '"w8"' not in refusal.split("PLAY RECAP")[0], "stage D's arms pass their preconditions"
    assert fleet_state() == before
    assert not any(tmp_path.iterdir())


def test_no_campaign_named_is_refused_naming_the_shipped_ones(tmp_path):
    rc, out = playbook("campaign.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc != 0 and "Name the campaign: -e campaign=<name> (a file in campaigns/: stage_d_e)" in flat(out)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Stage E's preconditions met as its own tests meet them (tests/playbooks/test_stage_e.py): the mini
    checkpoint packed (stage A), the CHECK switch declared off and forwarded on both launch paths."""
    packed = experiment_lab.pack_mini(experiment_lab.mini_inventory(tmp_path_factory.mktemp("mini")))
    inventories = packed + inventory_layer(tmp_path_factory.mktemp("declared"),
                                           'dsv41_launcher_overrides:\n  DSV41_ENGRAM_PREFETCH_CHECK: "0"\n')[1:]
    rc, out = playbook("site.yml", "--tags", "container_env", "-e", "container_env_add_forwards=true",
                       inventories=inventories)
    assert rc == 0, out[-4000:]
    return inventories


def lab_campaign(tmp_path):
    """(definitions dir, campaign file) of a campaign of the lab copies of stages D and E."""
    defs = tmp_path / "defs"
    for name in ("stage_d_wo_a", "stage_e_prefetch"):
        path = lab_definition(tmp_path, name, trim=True).split("=", 1)[1]
        defs.mkdir(exist_ok=True)
        (defs / (name + ".yml")).write_text(open(path).read())
    camp = tmp_path / "lab_d_e.yml"
    camp.write_text(yaml.safe_dump({"name": "lab_d_e", "description": "stages D and E, lab copies",
                                    "stages": ["stage_d_wo_a", "stage_e_prefetch"]}))
    return defs, camp


def test_a_campaign_whose_end_baseline_moved_fails_every_comparison_and_restores(tmp_path, prepared, fast_engine):
    defs, camp = lab_campaign(tmp_path)
    before = fleet_state()
    # the end baseline's boot reads the knob: the engine then serves ten times slower than during the start baseline
    rc, out, acted = act_during(
        "campaign.yml", ["-e", "maintenance_window=true", "-e", "campaign=%s" % camp,
                         "-e", "experiment_definitions_dir=%s" % defs, "-e", "experiment_record_root=%s" % (tmp_path / "rec")],
        "Measure the baseline again at the end of the campaign",
        lambda: knobs(LAB_ENGINE_SPEED=STAGE_TEST_SPEED // 10), inventories=prepared)
    text = flat(out)
    assert acted, text[-3000:]
    run, rec = record(tmp_path / "rec")
    assert rc != 0, "a campaign whose baseline moved does not pass"
    assert sorted(rec["conditions"]) == ["baseline", "baseline_end", "mid", "prefetch", "prefetch_check", "w8"]
    # 7 boots: one per condition and the restore (the engine role's restart, counted in the output)
    assert text.count("TASK [engine : Serve (workers first, then the head) in the background]") == 7
    drift = rec["campaign_drift"]
    assert drift["moved"] is True and drift["rows"][0]["gain_pct"] < 0, drift
    md = (run / "record.md").read_text()
    assert "## Baseline at the start and at the end (A-B-A)" in md and "The baseline moved" in md
    print(md.split("## Baseline at the start and at the end (A-B-A)", 1)[1][:1500])
    for stage, arms in (("stage_d_wo_a", ["w8", "mid"]), ("stage_e_prefetch", ["prefetch_check", "prefetch"])):
        own = json.loads((run / stage / "record.json").read_text())
        assert [v["arm"] for v in own["verdicts"]] == arms and own["definition"]["name"] == stage
        assert sorted(own["conditions"]) == sorted(["baseline"] + arms)
        for v in own["verdicts"]:
            moved = any(r.startswith("campaign: the baseline moved") for r in v["reasons"])
            if v["comparisons"]:        # a timed arm's comparisons with the moved baseline fail
                assert v["verdict"] == "fail" and moved, v
            else:                       # an untimed arm (stage E's CHECK phase) compares nothing with it
                assert not moved, v
        print(stage, [(v["arm"], v["verdict"], v["checks_passed"]) for v in own["verdicts"]])
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before


def test_a_campaign_killed_in_its_first_arm_blocks_the_next_run_until_rollback_finishes_it(tmp_path, prepared,
                                                                                          fast_engine):
    """Killed (SIGKILL) as stage D's first arm comes up, after the campaign's start baseline: the fleet is left
    in the arm's state; the next run is refused naming the campaign's run; rollback.yml puts the fleet back to
    the campaign's one snapshot and marks the run finished, its record keeping the baseline it measured."""
    defs, camp = lab_campaign(tmp_path)
    root = tmp_path / "rec"
    before = fleet_state()
    killed, out = kill_during("campaign.yml", ["-e", "maintenance_window=true", "-e", "campaign=%s" % camp,
                                               "-e", "experiment_definitions_dir=%s" % defs,
                                               "-e", "experiment_record_root=%s" % root],
                              "Note when the engine was up: w8", inventories=prepared)
    assert killed, out[-3000:]
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    text = flat(out)
    assert text.index("If it is interrupted, finish it with: ansible-playbook playbooks/rollback.yml") \
        < text.index("changed: ["), "the way back is printed before the first change"
    assert "-e experiment_rollback_run=%s " % run.name in text
    assert fleet_state() != before, "killed with the w8 settings in place"

    rc, refused = playbook("campaign.yml", "--check", "-e", "campaign=%s" % camp,
                           "-e", "experiment_definitions_dir=%s" % defs, "-e", "experiment_record_root=%s" % root,
                           inventories=prepared)
    assert rc != 0 and "Refused before touching any host: 1 experiment run(s) on the lab fleet" in flat(refused)
    assert "run %s (lab_d_e, stopped in condition w8" % run.name in flat(refused), flat(refused)[-3000:]

    rc, out = playbook("rollback.yml", "-e", "maintenance_window=true", "-e", "experiment_rollback_run=%s" % run.name,
                       "-e", "experiment_record_root=%s" % root, inventories=prepared)
    assert rc == 0, out[-4000:]
    assert "The fleet equals run %s's snapshot." % run.name in flat(out)
    assert fleet_state() == before and engine_healthy()
    rec = json.loads((run / "record.json").read_text())
    print("interrupted:", rec.get("interrupted"), "conditions:", sorted(rec.get("conditions") or {}))
    assert rec["interrupted"]["condition"] == "w8" and rec["interrupted"]["measured"] == ["baseline"]
    assert rec["conditions"]["baseline"]["results"][0]["rounds"] == 5
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert json.loads((run / "finished.json").read_text())["by"] == "rollback"

