"""Stage F (DROP and the draft FP8 head, memory first) through the experiment engine, on the lab.

DROP runs only with a wo_a_w8 validation in the ledger for the running image: the refusal is shown
first, then the validation is given as an inventory layer (what the operator commits after stage D's
record proposes it). Lab figures come from the engine stand-in's memory model (lab/standins/
lab_engine/memory.py: twins +688 MiB, DROP releases 41 copies of 32 MiB, 2 kept; the draft head +210.6 MiB),
printed beside the report's reference figures. The lab's default image is today's fleet image: no small-row
kernel, so W8 arms its einsum bridge and DROP keeps the draft's wo_a on bf16 and says so; a DROP that does not
fails on that line (wo_a_mode) and rolls back.
"""
import re

import pytest

import yaml

from experiment_lab import (ROOT, engine_healthy, flat, fleet_state, lab_definition, record, running_image_digest,
                            validation_layer, verdicts)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import LAB_INVENTORY, playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def image_digest(tmp_path_factory):
    return running_image_digest("stage_f_drop.yml", tmp_path_factory.mktemp("digest"))


@pytest.fixture(scope="module")
def validated(image_digest, tmp_path_factory):
    """The lab inventory with the wo_a_w8 validation for the running image (an inventory layer)."""
    return validation_layer(tmp_path_factory.mktemp("validated"), "wo_a_w8", image_digest)


def one_arm(arm, floor_gib=None):
    """Definition changes that keep only one arm (and its memory references against the baseline): the fault
    tests need one arm to fail, not three."""
    doc = yaml.safe_load((ROOT / "experiments" / "stage_f_drop.yml").read_text())
    memory = dict(doc["memory"], compare_with=["baseline"],
                  reference=[r for r in doc["memory"]["reference"] if r["arm"] == arm and r["vs"] == "baseline"])
    if floor_gib is not None:
        memory["floor_gib"] = floor_gib
    return {"arms": [a for a in doc["arms"] if a["name"] == arm], "memory": memory}


def draft_head_only(floor_gib=None):
    return one_arm("draft_head_fp8", floor_gib)


def run_stage(tmp_path, inventories, **definition):
    return playbook("stage_f_drop.yml", *RUN, "-e", lab_definition(tmp_path, "stage_f_drop", **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), inventories=inventories)


def test_drop_without_the_w8_validation_is_refused_before_any_host_is_touched(tmp_path, image_digest):
    before = fleet_state()
    rc, out = run_stage(tmp_path, (LAB_INVENTORY,))
    assert rc != 0
    out = flat(out)
    assert "stage_f_drop refused, nothing changed:" in out
    assert '"drop": ["validation wo_a_w8 is not in the ledger for image %s"]' % image_digest in out
    assert fleet_state() == before


def test_check_mode_prints_the_plan_with_the_memory_ledger_and_changes_nothing(tmp_path, validated):
    before = fleet_state()
    rc, out = playbook("stage_f_drop.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path,
                       inventories=validated)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "memory ledger on every rank, floor 1.00 GiB for serving; differences against baseline, twin_only" in out
    assert "twin_only: []" in out and "drop: []" in out and "draft_head_fp8: []" in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir())


def test_stage_f_ledger_against_both_baselines(tmp_path, validated, fast_engine):
    before = fleet_state()
    rc, out = run_stage(tmp_path, validated)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    assert {a: v[a]["verdict"] for a in v} == {"twin_only": "pass", "drop": "pass", "draft_head_fp8": "pass"}
    mem = {name: rec["conditions"][name]["memory"] for name in ("baseline", "twin_only", "drop", "draft_head_fp8")}
    for name, ledger in mem.items():
        assert sorted(ledger) == ["spark1", "spark2", "spark3"]
        for host, led in ledger.items():
            assert led["missing"] == [] and led["kv_pool_tokens"] > 0 and led["serving_free_gib"] >= 1.0, (name, host, led)
    # what the lab's model gives (weights per rank): twins +688 MiB; DROP -1312 against twin-only
    def weights_delta(arm, ref, host="spark1"):
        return round((mem[arm][host]["weights_gib"] - mem[ref][host]["weights_gib"]) * 1024)
    assert abs(weights_delta("twin_only", "baseline") - 688) <= 6       # the engine prints GB with 2 decimals
    assert abs(weights_delta("drop", "twin_only") + 1312) <= 6
    assert abs(weights_delta("draft_head_fp8", "baseline") - 211) <= 6
    md = (run / "record.md").read_text()
    print(md)
    assert "## Memory ledger per rank" in md and "## Memory differences" in md
    assert "| drop | twin_only | spark1 |" in md and "-1376.0 MiB weights (report: the gross release" in md
    # DROP on today's (bridge) image: every rank kept the draft's wo_a on bf16 and said so
    assert all(m["mode"] == "bridge" and m["drop"] and m["draft_kept"] for m in rec["conditions"]["drop"]["wo_a_modes"].values())
    assert "| drop | spark2 | 1 | bridge | yes | yes |" in md
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_a_boot_that_runs_out_of_memory_fails_its_arm_and_rolls_back(tmp_path, validated, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="oom_at_boot")
    before = fleet_state()
    rc, out = run_stage(tmp_path, validated, trim=True, **draft_head_only())
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["draft_head_fp8"]["evidence_failures"]
    assert failures[0].startswith("did not complete: ") and any(
        "torch.OutOfMemoryError: CUDA out of memory" in f for f in failures), failures
    # the ledger of the failed boot goes as far as the boot got
    led = rec["conditions"]["draft_head_fp8"]["memory"]["spark1"]
    assert led["after_draft_load_gib"] is not None and led["booted"] is False
    assert led["missing"] == ["serving_free_gib"], led
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()


def test_an_arm_below_the_memory_floor_fails_and_rolls_back(tmp_path, validated, fast_engine):
    before = fleet_state()
    rc, out = run_stage(tmp_path, validated, trim=True, **draft_head_only(floor_gib=50.0))
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["draft_head_fp8"]["evidence_failures"]
    assert any(re.match(r"memory: spark1 rank 0 keeps \d+\.\d\d GiB for serving, below the floor 50\.00 GiB", f)
               for f in failures), failures
    assert verdicts(rec)["draft_head_fp8"]["verdict"] == "fail"
    assert rec["restore"]["equal"] is True and fleet_state() == before
    print(failures)


def test_drop_in_bridge_mode_without_the_kept_draft_fails_and_rolls_back(tmp_path, validated, fast_engine):
    # today's image (the lab's default) has no small-row kernel: W8 arms its einsum bridge, whose draft does not
    # use the shared dispatch, so with DROP the adapter must keep the draft's wo_a on bf16 and say so (SPEC
    # section 3). A DROP that releases the draft's copy too and says nothing fails on every rank.
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="bridge_draft_dropped")
    before = fleet_state()
    rc, out = run_stage(tmp_path, validated, trim=True, **one_arm("drop"))
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["drop"]["evidence_failures"]
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        assert ("wo_a_mode: %s rank %d: DROP in bridge mode without '[wo_a_w8] draft wo_a left on bf16 (this "
                "engine's draft does not use the shared dispatch)'" % (host, rank)) in " ".join(failures), failures
    assert verdicts(rec)["drop"]["verdict"] == "fail"
    assert rec["restore"]["equal"] is True
    assert fleet_state() == before and engine_healthy()
    print(failures)
