"""Stage G (block size, then the confidence cap) through the experiment engine, on the lab.

The cap runs only with the block5 validation for the running image: refused first, then given as an
inventory layer (what the operator commits after the block-size run proposes it).
"""
import pytest

from experiment_lab import (engine_healthy, flat, fleet_state, lab_definition, record, running_image_digest,
                            validation_layer, verdicts)
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import LAB_INVENTORY, playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def image_digest(tmp_path_factory):
    return running_image_digest("stage_g_spec.yml", tmp_path_factory.mktemp("digest"))


@pytest.fixture(scope="module")
def block5_validated(image_digest, tmp_path_factory):
    return validation_layer(tmp_path_factory.mktemp("validated"), "block5", image_digest)


def run(tmp_path, name, *extra, inventories=(LAB_INVENTORY,), **definition):
    return playbook("stage_g_spec.yml", *RUN, "-e", lab_definition(tmp_path, name, **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra, inventories=inventories)


def test_check_mode_prints_the_plan_and_changes_nothing(tmp_path, image_digest):
    before = fleet_state()
    rc, out = playbook("stage_g_spec.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "arm k5: DSPARK_BLOCK_SIZE=5; prose/code x C1/C2/C4, 5 reps after 1 warm-up(s), greedy" in out
    assert "k5: []" in out
    assert fleet_state() == before and not any(tmp_path.iterdir())


def test_the_cap_before_k5_was_measured_is_refused_before_any_host_is_touched(tmp_path, image_digest):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap", "-e", "stage_g_part=cap")
    assert rc != 0
    out = flat(out)
    assert "stage_g_cap refused, nothing changed:" in out
    assert '"cap": ["validation block5 is not in the ledger for image %s"]' % image_digest in out
    assert fleet_state() == before


def test_block_size_5_against_3_every_rank_consistent(tmp_path, fast_engine):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_spec")
    run_dir, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["k5"]["verdict"] == "pass"
    assert rec["arm_checks"]["k5"] == {"evidence_failures": [], "correctness_failures": []}
    md = (run_dir / "record.md").read_text()
    print(md)
    assert "| C | baseline (block size 3) | k5 (block size 5) |" in md
    (prop,) = rec["proposals"]
    assert prop["validation"]["name"] == "block5"
    assert '+  DSPARK_BLOCK_SIZE: "5"' in prop["inventory_diff"] or 'DSPARK_BLOCK_SIZE: "5"' in prop["inventory_diff"]
    steps = {n: rec["conditions"][n]["decode_steps"]["C1"]["committed_tokens_per_step"]["median"] for n in ("baseline", "k5")}
    print(steps)
    # the report's rank: committed tokens per step / step time at C1, prose and code apart, from the lines
    # rank 0 logged while each workload ran
    for name in ("baseline", "k5"):
        ws = rec["conditions"][name]["workload_steps"]
        assert sorted(ws) == ["code", "prose"], ws
        assert all(w["committed_per_s"] and w["lines"] >= 5 for w in ws.values()), ws
    assert "## Ranking at C1: committed tokens per step / step time, per workload" in md
    ranked = md.split("## Ranking at C1")[1].splitlines()
    assert [line.split(" | ")[0] for line in ranked if line.startswith(("| 1 |", "| 2 |"))] == ["| 1", "| 2"] * 2, \
        "both finalists ranked for code and for prose"
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_a_rank_on_another_block_size_fails_rank_consistency_and_rolls_back(tmp_path, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="rank_length_mismatch")
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_spec", trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["k5"]["evidence_failures"]
    print(failures)
    assert ("rank_consistency: speculative_dspark_block_size differs across ranks: 3 on spark3 rank 2; "
            "5 on spark1 rank 0, spark2 rank 1") in failures
    assert any(f.startswith("spark3 rank 2: block_size_5 missing from the latest boot") for f in failures)
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before and engine_healthy()


def test_the_cap_on_k5_with_block5_in_the_ledger(tmp_path, block5_validated, fast_engine):
    before = fleet_state()
    rc, out = run(tmp_path, "stage_g_cap", "-e", "stage_g_part=cap", inventories=block5_validated, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["cap"]["verdict"] == "pass"
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()
