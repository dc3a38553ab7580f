"""Stage A (Engram packing) on the lab: preflight verdicts, check mode, packing, restart, packed checks.

Each test module starts from a fresh lab in the report's state (`labctl.py up`).
"""
import pytest

import json

from labhelpers import (MINI_CHECKPOINT, MODELS, ROOT, changed_tasks, lab, playbook, read_bytes,
                        set_launcher_env, sh, snapshot)
from spec_reader import expected_shard

ENGRAM = {"spark1": "/home/mia/dsv41-engram", "spark2": "/home/zurih/dsv41-3x-spark/engram",
          "spark3": "/home/zurih/dsv41-3x-spark/engram"}
ROOMY_DEST = "/data/dsv41-engram"
WATCHED = {
    "spark1": ["/home/mia/dsv41-engram", "/home/mia/dsv41-3x-spark", "/srv/models"],
    "spark2": ["/home/zurih/dsv41-3x-spark", "/home/zurih/dsv41-engram", "/data"],
    "spark3": ["/home/zurih/dsv41-3x-spark"],
}


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("up")
    yield


@pytest.fixture
def roomy_inventory(tmp_path):
    """Lab variant: spark2 packs into its spare volume and everyone uses the small real checkpoint."""
    inv = tmp_path / "roomy"
    (inv / "host_vars" / "spark2").mkdir(parents=True)
    (inv / "group_vars").mkdir()
    (inv / "hosts.yml").write_text((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    (inv / "host_vars" / "spark2" / "roomy.yml").write_text(f"---\ndsv41_engram_dir: {ROOMY_DEST}\n")
    (inv / "group_vars" / "dsv41_ranks.yml").write_text(f"---\ndsv41_checkpoint_dir: {MINI_CHECKPOINT}\n")
    return inv


def lab_inventories(extra=None):
    base = (ROOT / "inventory" / "lab",)
    return base + ((extra,) if extra else ())


def test_check_mode_on_full_scale_stops_at_spark2_and_changes_nothing():
    before = snapshot(WATCHED)
    rc, out = playbook("stage_a_pack.yml", "--check")
    after = snapshot(WATCHED)
    assert rc != 0
    # The preflight table: spark2 needs 67,586,019,080 bytes (62.944 GiB) and has 64,906,600,448.
    assert "67,586,019,080 (62.944 GiB)" in out
    assert "64,906,600,448 (60.449 GiB)" in out
    assert "spark2 (rank 1) needs" in out and "deficit" in out
    for host in ("spark1", "spark3"):
        assert host in out.split("Print the preflight for every rank", 1)[1].split("Stop before any write", 1)[0]
    assert "Pack this rank's layers" not in out  # it stopped at the preflight, before any write
    assert before == after


def test_destination_the_engine_does_not_read_is_refused(roomy_inventory):
    before = snapshot(WATCHED)
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc != 0
    assert f"spark2 (rank 1): the inventory destination {ROOMY_DEST} is not where the engine will look" in out
    assert "Nothing was written on any rank." in out
    assert "WORKER_ENGRAM_DIR_SPARK2" in out
    assert snapshot(WATCHED) == before


def test_packing_outside_a_maintenance_window_is_refused(roomy_inventory):
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    before = snapshot(WATCHED)
    rc, out = playbook("stage_a_pack.yml", inventories=lab_inventories(roomy_inventory))
    assert rc != 0
    assert "this is not a maintenance window" in out
    assert snapshot(WATCHED) == before


def test_check_mode_of_a_fleet_that_fits_reports_the_writes_and_changes_nothing(roomy_inventory):
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    before = snapshot(WATCHED)
    rc, out = playbook("stage_a_pack.yml", "--check", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-4000:]
    for rank, (host, dest) in enumerate(dict(ENGRAM, spark2=ROOMY_DEST).items()):
        assert f"Check mode: {dest}/engram-l1-r{rank}of3.bin, {dest}/engram-l14-r{rank}of3.bin would be written" \
            in " ".join(out.split())  # the yaml callback folds long messages
    assert "Would run '/home/mia/dsv41-3x-spark/start.sh stop' then" in out
    assert snapshot(WATCHED) == before


def test_stage_a_packs_six_shards_restarts_and_checks(roomy_inventory):
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    tp2_before = snapshot({"spark2": ["/home/zurih/dsv41-engram"]})
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-6000:]
    dests = dict(ENGRAM, spark2=ROOMY_DEST)
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        for layer in (1, 14):
            expected, lo, hi, n = expected_shard(MODELS / "DeepSeek-V4.1-Flash-mini", layer, rank, 3)
            got = read_bytes(host, f"{dests[host]}/engram-l{layer}-r{rank}of3.bin")
            assert len(got) == 4096 + (hi - lo) * 264
            assert got == expected, (host, layer)
            assert ".partial" not in sh(host, f"ls -a {dests[host]}")
    # The engine restarted and every rank's latest boot has both layers packed with its rows.
    for host, container in (("spark1", "dsv41-head"), ("spark2", "dsv41-worker"), ("spark3", "dsv41-worker")):
        log = sh(host, f"docker logs {container}")
        latest = log[log.rfind("server_args=ServerArgs("):]
        assert latest.count("packed=True") >= 2 and "packed=False" not in latest.split("Ready")[0], host
    assert snapshot({"spark2": ["/home/zurih/dsv41-engram"]}) == tp2_before  # the old TP2 shards are untouched
    boot_logs = ROOT / "records" / "boot-logs"
    assert all((boot_logs / f"{h}-rank{r}.log").exists() for r, h in enumerate(("spark1", "spark2", "spark3")))

    # The run record has every field filled for every node, and the benchmark ran from a worker.
    record = sorted((ROOT / "records").glob("*-stage_a"))[-1]
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        node = json.loads((record / "nodes" / f"{host}.json").read_text())
        assert node["rank"] == rank and node["container"]["state"] == "running"
        assert node["image_digests"] and node["engine_version"] != "unknown" and node["kernel"] != "unknown"
        assert node["packed"] == {"1": True, "14": True}
        assert node["kv_pool"]["allocated_tokens"] == 491520 and node["kv_pool"]["clamped"] is True
        assert node["graph_shapes"]["target"] and node["mem_available_gib"] > 0 and node["contention"]
        assert node["container_env"] and all(v == "***" for k, v in node["container_env"].items() if "API_KEY" in k)
        assert "sk-lab" not in (record / "nodes" / f"{host}.json").read_text()
    bench = json.loads((record / "benchmark.json").read_text())
    conditions = {(r["workload"], r["concurrency"]) for r in bench["results"]}
    assert conditions == {("prose", 1), ("prose", 4), ("code", 1), ("code", 4)}
    assert all(r["rounds"] == 5 and r["warmup_rounds"] >= 1 for r in bench["results"])
    assert "lab output" in bench["measured_on"] and "Lab output" in (record / "summary.md").read_text()

    # A second run packs nothing, restarts nothing and changes no configuration: the only changes are
    # the measurement and record files written on the control node.
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-4000:]
    assert changed_tasks(out) <= {"benchmark : Bring the raw output back", "run_record : Create the record directory",
                                  "engine : Keep the latest boot of each rank on the control node",
                                  "run_record : Write each node's record", "run_record : Write the raw benchmark output",
                                  "run_record : Write summary.md"}, changed_tasks(out)
    assert "Stop the engine" not in out or "skipping" in out.split("Stop the engine", 1)[1][:300]
