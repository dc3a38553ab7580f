"""Stage E (Engram prefetch) through the experiment engine, on the lab.

The module starts from the lab in the report's state, where no rank has TP3 packed shards: the refusal
is shown there first. The other tests need stage A done, so a module fixture runs stage_a_pack.yml for
real on the small real-format checkpoint (the .env's MODEL_PATH and the inventory's checkpoint point at
it); the experiment then snapshots and restores that fleet.
"""
import pytest

import experiment_lab
from experiment_lab import engine_healthy, flat, fleet_state, inventory_layer, lab_definition, record, verdicts
from experiment_lab import STAGE_TEST_SPEED
from labhelpers import playbook

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def mini_inventory(tmp_path_factory):
    return experiment_lab.mini_inventory(tmp_path_factory.mktemp("mini"))


@pytest.fixture(scope="module")
def packed(mini_inventory):
    return experiment_lab.pack_mini(mini_inventory)


@pytest.fixture(scope="module")
def forwarded(packed, tmp_path_factory):
    """The lab's real-shaped launcher forwards DSV41_ENGRAM_PREFETCH but not its CHECK switch (as the
    report's start.sh): the operator declares the switch in the inventory, off, and adds the forward
    through the converge, as the refusal says. The declaration is an inventory layer here (what the
    operator would commit); every later run reads it."""
    inventories = packed + inventory_layer(tmp_path_factory.mktemp("declared"),
                                           'dsv41_launcher_overrides:\n  DSV41_ENGRAM_PREFETCH_CHECK: "0"\n')[1:]
    rc, out = playbook("site.yml", "--tags", "container_env", "-e", "container_env_add_forwards=true",
                       inventories=inventories)
    assert rc == 0, out[-4000:]
    assert "DSV41_ENGRAM_PREFETCH_CHECK" in flat(out)
    return inventories


def run_stage(tmp_path, inventories, *extra, **definition):
    return playbook("stage_e_prefetch.yml", *RUN, "-e", lab_definition(tmp_path, "stage_e_prefetch", **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra, inventories=inventories)


def test_refused_before_any_host_is_touched_without_packed_shards(tmp_path, mini_inventory):
    before = fleet_state()
    rc, out = run_stage(tmp_path, mini_inventory)
    assert rc != 0
    out = flat(out)
    assert "stage_e_prefetch refused, nothing changed:" in out
    assert "packed shards required: packed=True missing on spark1, spark2, spark3" in out
    assert fleet_state() == before


def test_refused_while_the_check_switch_is_not_forwarded_naming_the_fix(tmp_path, packed):
    before = fleet_state()
    rc, out = run_stage(tmp_path, packed)
    assert rc != 0
    out = flat(out)
    assert ("DSV41_ENGRAM_PREFETCH_CHECK is not forwarded on the head and worker launch path (declare it in the "
            "inventory, off, and add the forward: `ansible-playbook site.yml --tags container_env -e "
            "container_env_add_forwards=true`)") in out
    assert fleet_state() == before


def test_check_mode_prints_plan_and_verdicts_and_changes_nothing(tmp_path, forwarded):
    packed = forwarded
    before = fleet_state()
    rc, out = playbook("stage_e_prefetch.yml", "--check", "-e", "experiment_record_root=%s" % tmp_path,
                       inventories=packed)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "arm prefetch_check: DSV41_ENGRAM_PREFETCH=1, DSV41_ENGRAM_PREFETCH_CHECK=1; untimed validation phase" in out
    assert "prefetch_check: []" in out and "prefetch: []" in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir()), "check mode writes no record"


def test_stage_e_check_phase_at_zero_then_timed_prefetch_passes(tmp_path, forwarded, fast_engine):
    packed = forwarded
    before = fleet_state()
    rc, out = run_stage(tmp_path, packed)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    assert v["prefetch_check"]["verdict"] == "pass" and v["prefetch"]["verdict"] == "pass", rec["verdicts"]
    assert rec["arm_checks"]["prefetch_check"] == {"evidence_failures": [], "correctness_failures": []}
    assert sorted((c["workload"], c["concurrency"]) for c in v["prefetch"]["comparisons"]) == [
        ("code", 1), ("code", 4), ("prose", 1), ("prose", 4)]
    assert rec["conditions"]["prefetch_check"]["results"] == [], "the CHECK phase is never timed"
    # but it warmed every graph shape: each workload at every concurrency up to the four slots
    assert rec["conditions"]["prefetch_check"]["probe"] == {"workloads": ["prose", "code"], "concurrency": [1, 2, 3, 4]}
    assert rec["conditions"]["prefetch"]["probe"] is None
    # exposed Engram time falls on every rank: the gather's time on the compute stream of each rank's own
    # profile trace (lab model: 1,000 us synchronous on packed shards, a 150 us wait with the prefetch)
    exposed = {n: rec["conditions"][n]["exposed_us"] for n in ("baseline", "prefetch")}
    print(exposed)
    assert exposed["baseline"] == {"spark1": 1000.0, "spark2": 1000.0, "spark3": 1000.0}
    assert exposed["prefetch"] == {"spark1": 150.0, "spark2": 150.0, "spark3": 150.0}
    md = (run / "record.md").read_text()
    print(md)
    assert "| C | baseline (block size 3) | prefetch (block size 3) |" in md
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_prefetch_mismatch_fails_the_check_phase_and_the_fleet_is_restored(tmp_path, forwarded, fast_engine):
    packed = forwarded
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="prefetch_mismatch", LAB_ENGINE_STATS_SECONDS=1)
    before = fleet_state()
    rc, out = run_stage(tmp_path, packed, trim=True)
    _, rec = record(tmp_path / "rec")
    assert rc != 0
    failures = rec["arm_checks"]["prefetch_check"]["evidence_failures"]
    for host, rank in (("spark1", 0), ("spark2", 1), ("spark3", 2)):
        assert any(f.startswith("%s rank %d: check_nonzero present in the measured window: "
                                "'DSV41 Engram prefetch CHECK: gathers differing from the synchronous path per "
                                "layer = [2, 0]'" % (host, rank)) for f in failures), failures
    assert rec["arm_checks"]["prefetch"] == {"refused": "arm prefetch_check must pass first in this run"}
    assert rec["restore"]["equal"] is True and rec["proposals"] == []
    assert fleet_state() == before and engine_healthy()
    print(failures)
