"""Stage I's Engram caches through the experiment engine, on the lab, after stage A packed the shards.

The row cache needs packed shards and proven headroom (refused without either: tests/playbooks/test_stage_i.py);
here a module fixture runs stage_a_pack.yml for real on the small real-format checkpoint, then the row cache
runs end to end: 0.25 GiB, 0.5 GiB, then 16 ways on 0.5 GiB once 0.5 GiB alone passed. The DRM cache stays
refused on the packed fleet too: the lab's driver is 580.95.05 and its image has no ported engram_drm adapter.
"""
import pytest

from experiment_lab import (engine_healthy, flat, fleet_state, lab_definition, mini_inventory, pack_mini, record,
                            verdicts)
from labhelpers import playbook

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_mini(mini_inventory(tmp_path_factory.mktemp("mini")))


def run_experiment(tmp_path, inventories, name, **definition):
    return playbook("stage_i_experiments.yml", "-e", "experiment=%s" % name, *RUN,
                    "-e", lab_definition(tmp_path, "stage_i_" + name, **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), inventories=inventories)


def test_row_cache_sizes_then_ways_against_the_zero_cache_baseline(tmp_path, packed, fast_engine):
    before = fleet_state()
    rc, out = run_experiment(tmp_path, packed, "row_cache")
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    for arm in ("cache_025", "cache_05", "cache_05_ways16"):
        assert v[arm]["verdict"] == "pass", v[arm]
        assert rec["arm_checks"][arm] == {"evidence_failures": [], "correctness_failures": []}
    md = (run / "record.md").read_text()
    print(md)
    # the cache comes out of the same memory: the ledger shows its 512 MiB of weights on every rank
    for host in ("spark1", "spark2", "spark3"):
        assert "| cache_05 | baseline | %s | +512.0 |" % host in md
    assert "cache_05_ways16 (block size 3, cache gib 0.5, ways 16)" in md
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_drm_stays_refused_on_a_packed_fleet_naming_driver_and_adapter(tmp_path, packed):
    before = fleet_state()
    rc, out = run_experiment(tmp_path, packed, "drm")
    assert rc != 0
    out = flat(out)
    assert "stage_i_drm refused, nothing changed:" in out
    assert "packed shards required" not in out
    assert "GPU driver 580.173.02 required on every rank; found: spark1 580.95.05" in out
    assert "engine feature engram_drm: adapter not in the image or not registered in its import hook" in out
    assert fleet_state() == before
