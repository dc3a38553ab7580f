"""Stage I's Engram caches through the experiment engine, on the lab, after stage A packed the shards.

The row cache needs packed shards and proven headroom (refused without either: tests/playbooks/test_stage_i.py);
here a module fixture runs stage_a_pack.yml for real on the small real-format checkpoint, then the row cache
runs end to end: 0.25 GiB, 0.5 GiB, then 16 ways on 0.5 GiB once 0.5 GiB alone passed, each cache cold (the first
periodic Engram line of its boot) and warm (the last) in the record. The DRM cache stays
refused on the packed fleet too: the lab's driver is 580.95.05, its image has no ported engram_drm or
engram_layer_budget adapter and no serving container has the DRM node. Then the lab builds what the DRM cache
needs (an image whose import hook registers ports of both adapters, lab/seed/adapters/ported/, the qualified
driver on every rank and the node passed to the containers) and the DRM cache runs end to end, layer 14 on the
DRM node and layer 1 at zero on every rank; the driver probe refuses it again, naming each host, when a rank's
render node is gone, another's container lacks it and a third has modeset off; with the port's allocation falling
back to ordinary memory (fault drm_fallback) the arm fails for that reason and the fleet is restored.
"""
import re

import pytest

from experiment_lab import (STAGE_TEST_SPEED, build_ported_adapter, drm_container_access, engine_healthy, flat,
                            fleet_state, lab_definition, mini_inventory, pack_mini, record, verdicts)
from labhelpers import playbook, sh

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_mini(mini_inventory(tmp_path_factory.mktemp("mini")))


@pytest.fixture(scope="module")
def drm_image(packed, tmp_path_factory):
    """The packed fleet made ready for the DRM cache the way an operator would (after the refusal test above,
    which needs the lab as the report left it): the switch's forward added on both launch paths by name (off is
    unset for a device path; the stage refuses an arm whose switch is not forwarded), then an image with the
    ported adapter, on the qualified driver."""
    rc, out = playbook("site.yml", "--tags", "container_env", "-e", "container_env_add_forwards=true",
                       "-e", '{"container_env_forward_keys": ["DSV41_ENGRAM_DRM_NODE", "DSV41_CACHE_LAYER_GIB"]}',
                       inventories=packed)
    assert rc == 0, out[-4000:]
    assert "changed: [spark1]" in out, "the managed forward was added"
    # container access (docker run --device on both launch paths) for the serves the builds below end with
    drm_container_access()
    build_ported_adapter("engram_layer_budget", "sglang.srt.layers.engram", "DSV41_CACHE_LAYER_GIB")
    build_ported_adapter("engram_drm", "sglang.srt.layers.engram", "DSV41_ENGRAM_DRM_NODE", driver="580.173.02")
    return packed


def run_experiment(tmp_path, inventories, name, **definition):
    return playbook("stage_i_experiments.yml", "-e", "experiment=%s" % name, *RUN,
                    "-e", lab_definition(tmp_path, "stage_i_" + name, **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), inventories=inventories)


def passed(rc, tmp_path, arms):
    """The run's record, after asserting that every arm passed its evidence and correctness; (record, its
    Markdown, printed for the closing note)."""
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    v = verdicts(rec)
    for arm in arms:
        assert v[arm]["verdict"] == "pass", v[arm]
        assert rec["arm_checks"][arm] == {"evidence_failures": [], "correctness_failures": []}
    md = (run / "record.md").read_text()
    print(md)
    return rec, md


def test_row_cache_sizes_then_ways_against_the_zero_cache_baseline(tmp_path, packed, fast_engine):
    before = fleet_state()
    rc, out = run_experiment(tmp_path, packed, "row_cache")
    rec, md = passed(rc, tmp_path, ("cache_025", "cache_05", "cache_05_ways16"))
    # the cache comes out of the same memory: the ledger shows its 512 MiB of weights on every rank
    for host in ("spark1", "spark2", "spark3"):
        assert "| cache_05 | baseline | %s | +512.0 |" % host in md
    assert "cache_05_ways16 (block size 3, cache gib 0.5, ways 16)" in md
    # cold and warm: the cache starts empty at every boot and warms while the arm serves; never without one
    assert "## Engram row cache, cold and warm" in md
    for arm in ("cache_025", "cache_05", "cache_05_ways16"):
        for layer in rec["conditions"][arm]["engram_cache"]["spark1"]:
            assert layer["warm_hit_pct"] > layer["cold_hit_pct"] >= 0.0, (arm, layer)
    assert all(layer["warm_hit_pct"] == 0.0 for layer in rec["conditions"]["baseline"]["engram_cache"]["spark1"])
    # and timed: each condition's first round after its boot (a warm-up, cache cold) beside its measured median
    for name in ("baseline", "cache_025", "cache_05", "cache_05_ways16"):
        first = min(rec["conditions"][name]["results"], key=lambda r: r["window"]["start"])
        cold = first["warmup_per_stream_tok_s"][0]
        assert re.search(r"^\| %s \| %s C%d \| %.2f \| [0-9.]+ \| [+-][0-9.]+%% \|$"
                         % (name, first["workload"], first["concurrency"], cold), md, re.M), name
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
    assert "engine feature engram_layer_budget: adapter not in the image or not registered in its import hook" in out
    assert ("DSV41_ENGRAM_DRM_NODE is not forwarded on the head and worker launch path (a DRM device path; unset "
            "is off: leave it undeclared") in out
    assert "DRM probe on spark2: serving container dsv41-worker has no device /dev/dri/renderD128" in out
    assert fleet_state() == before


def test_the_driver_probe_refuses_the_drm_cache_naming_each_host_and_what_failed(tmp_path, drm_image):
    """The isolated probe runs before anything changes, check mode too: spark1's nvidia_drm modeset off, spark2's
    render node gone from the host, spark3's serving container started without it."""
    sh("spark1", "echo N > /var/lib/lab-sys/module/nvidia_drm/parameters/modeset")
    sh("spark2", "mv /dev/dri/renderD128 /dev/dri/renderD128.lab-moved")
    drm_container_access(("spark3",), on=False)
    try:
        # spark3's container loses the node at its next start: restart the fleet once (the launcher's serve)
        sh("spark1", "cd /home/mia/dsv41-3x-spark && ./start.sh serve", user="mia")
        before = fleet_state()
        rc, out = playbook("stage_i_experiments.yml", "-e", "experiment=drm", "--check",
                           "-e", "experiment_record_root=%s" % (tmp_path / "rec"), inventories=drm_image)
        out = flat(out)
        assert rc != 0 and "stage_i_drm refused, nothing changed:" in out
        print(out[out.index("stage_i_drm refused, nothing changed:"):][:1500])
        assert ("DRM probe on spark1: nvidia_drm modeset is N (/var/lib/lab-sys/module/nvidia_drm/parameters/modeset), "
                "Y needed; changing it needs a host change and a reboot, a later experiment") in out
        assert "DRM probe on spark2: render node /dev/dri/renderD128 is not a character device on the host (absent)" in out
        assert ("DRM probe on spark3: serving container dsv41-worker has no device /dev/dri/renderD128 (docker inspect: "
                "Devices none); pass it on both launch paths (docker run --device)") in out
        assert "DRM probe on spark2: serving container" not in out, "spark2's container still has the node"
        refusal = out[out.index("stage_i_drm refused, nothing changed:"):].split(" Origin: ")[0]
        assert "GPU driver" not in refusal and "engine feature" not in refusal, "only what the probe found is refused"
        assert fleet_state() == before
    finally:
        sh("spark1", "echo Y > /var/lib/lab-sys/module/nvidia_drm/parameters/modeset")
        sh("spark2", "mv /dev/dri/renderD128.lab-moved /dev/dri/renderD128")
        drm_container_access(("spark3",))
        sh("spark1", "cd /home/mia/dsv41-3x-spark && ./start.sh serve", user="mia")


def test_drm_cache_runs_on_the_qualified_driver_with_the_ported_adapter(tmp_path, drm_image, fast_engine):
    before = fleet_state()
    rc, out = run_experiment(tmp_path, drm_image, "drm")
    rec, md = passed(rc, tmp_path, ("drm_cache",))
    # layer 14's 0.25 GiB is DRM-backed (on a GB10 the DRM node's memory is the same unified memory) and its keys,
    # metadata and staging stay in ordinary memory: 256 MiB of rows plus 47.5 MiB (16 B for each of 1,016,800
    # slots and a 32 MiB staging buffer) per rank more than the zero-cache baseline, read from the weights the
    # engine prints in GB with two decimals (94.30 against 94.00: +307.2 MiB); layer 1 has no cache at all
    for host in ("spark1", "spark2", "spark3"):
        assert "| drm_cache | baseline | %s | +307.2 |" % host in md
    # rank 0's periodic Engram lines (the workers serve no request of their own): layer 14 cached, layer 1 none
    layers = dict((e["layer"], e) for e in rec["conditions"]["drm_cache"]["engram_cache"]["spark1"])
    assert sorted(layers) == [1, 14] and layers[1]["cache_gib"] == 0 and layers[14]["cache_gib"] > 0, layers
    assert layers[1]["warm_hit_pct"] == 0.0 < layers[14]["warm_hit_pct"], layers
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_a_drm_allocation_that_falls_back_fails_the_arm_and_restores(tmp_path, drm_image, fast_engine):
    fast_engine(LAB_ENGINE_SPEED=STAGE_TEST_SPEED, LAB_ENGINE_FAULT="drm_fallback")
    before = fleet_state()
    rc, out = run_experiment(tmp_path, drm_image, "drm", trim=True)
    run, rec = record(tmp_path / "rec")
    assert rc != 0
    v = verdicts(rec)
    assert v["drm_cache"]["verdict"] == "fail", v["drm_cache"]
    failures = " ".join(rec["arm_checks"]["drm_cache"]["evidence_failures"])
    assert "drm_fallback" in failures and "drm_backed" in failures, failures
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()
