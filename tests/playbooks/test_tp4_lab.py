"""The TP4 lab (lab/labctl.py with DSV41_LAB_TP=4): four hosts of a four-node TP4 fleet of the same launcher
family, beside the TP3 lab, driven through inventory/lab-tp4 exactly as the TP3 lab is through inventory/lab.

What an operator of a TP4 fleet checks: stage A's check mode plans four ranks with the TP4 arithmetic (each rank
a quarter of every layer) and changes nothing; a converge renders the TP4 settings the TP4 rule set accepts
(idempotent), refuses what breaks the TP4 adapters, and every rank's container runs them; one experiment's check
mode judges all four ranks; one bin/fleet-drift --all checks the TP3 and the TP4 lab side by side, each fleet's
drift its own. Slow tier (unmarked): the TP4 lab's four hosts come up for this module and go after it.
"""
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from labhelpers import LAB_INVENTORY, ROOT, env, playbook, recap, sh, stage_ledger_layer

TP4_INVENTORY = ROOT / "inventory" / "lab-tp4"
TP4_HOSTS = ("spark1", "spark2", "spark3", "spark4")
ENGRAM_DIRS = {"spark1": "/home/mia/dsv41-engram", "spark2": "/home/zurih/dsv41-3x-spark/engram",
               "spark3": "/home/zurih/dsv41-3x-spark/engram", "spark4": "/home/zurih/dsv41-3x-spark/engram"}
HEAD_ENV = "/home/mia/dsv41-3x-spark/.env"


def tp4_lab(action):
    subprocess.run([sys.executable, str(ROOT / "lab" / "labctl.py"), action], check=True, cwd=ROOT,
                   env={**os.environ, "DSV41_LAB_TP": "4"})


def tp4_sh(host, script, check=True):
    return sh(host, script, check=check, tp=4)


@pytest.fixture(scope="module", autouse=True)
def tp4_lab_up():
    tp4_lab("reset")        # up when it is not up (a fresh share), else back to its TP4 state in seconds
    yield
    tp4_lab("down")         # the share's TP3 jobs that follow get the machine back


def engram_rows():
    """{layer: rows} of the lab checkpoint's two Engram layers, from the seeder that models them."""
    spec = importlib.util.spec_from_file_location("host_seed", ROOT / "lab" / "seed" / "host_seed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ENGRAM_ROWS, mod.ROW_BYTES, mod.HEADER_BYTES


def rank_bytes(rank, tp):
    """Bytes of one rank's packed shards: for each layer a 4096-byte header and rows [n*r//tp, n*(r+1)//tp)."""
    rows, row_bytes, header = engram_rows()
    return sum(header + (n * (rank + 1) // tp - n * rank // tp) * row_bytes for n in rows.values())


def env_hash():
    return hashlib.sha256(tp4_sh("spark1", "cat %s" % HEAD_ENV).encode()).hexdigest()


def shards_on_disk():
    return {h: tp4_sh(h, "ls -A %s" % ENGRAM_DIRS[h]).split() for h in TP4_HOSTS}


def serving():
    """{host: (container, started at)} of every rank's serving container: a restart would move it."""
    out = {}
    for rank, host in enumerate(TP4_HOSTS):
        name = "dsv41-head" if rank == 0 else "dsv41-worker"
        out[host] = (name, tp4_sh(host, "docker inspect --format '{{.State.StartedAt}}' %s" % name).strip())
    return out


def test_stage_a_check_plans_four_ranks_with_the_tp4_arithmetic_and_changes_nothing():
    before, started = env_hash(), serving()
    rc, out = playbook("stage_a_pack.yml", "--check", inventories=(TP4_INVENTORY,))
    assert rc == 0, out[-4000:]
    per_rank = rank_bytes(0, 4)
    assert per_rank == 50_689_516_424 and rank_bytes(0, 3) == 67_586_019_080     # a quarter, not a third
    for rank, host in enumerate(TP4_HOSTS):
        want = rank_bytes(rank, 4)
        row = re.search(r"^\s*%s\s+%d\s+%s\s+([\d,]+) \([\d.]+ GiB\)\s+([\d,]+)\s.*\bfits$"
                        % (host, rank, re.escape(ENGRAM_DIRS[host])), out, re.M)
        assert row, "no preflight row for %s rank %d:\n%s" % (host, rank, out[-6000:])
        assert int(row.group(1).replace(",", "")) == want and int(row.group(2).replace(",", "")) == want
    assert "Check mode: %s/engram-l1-r3of4.bin" % ENGRAM_DIRS["spark4"] in out
    assert "pack spark4: " in out and "up to 50.7 GB a rank" in out
    # check mode's "changed" counts what a real run would change; the hosts say what did
    assert shards_on_disk() == {h: [] for h in TP4_HOSTS} and env_hash() == before
    assert serving() == started


def test_converge_renders_the_tp4_settings_every_rank_runs_them_and_a_second_run_changes_nothing():
    rc, out = playbook("site.yml", inventories=(TP4_INVENTORY,))
    assert rc == 0, out[-4000:]
    rc, out = playbook("site.yml", inventories=(TP4_INVENTORY,))
    assert rc == 0, out[-4000:]
    assert {h: c["changed"] for h, c in recap(out).items()} == {h: 0 for h in TP4_HOSTS}
    settings = dict(line.split("=", 1) for line in tp4_sh("spark1", "cat %s" % HEAD_ENV).splitlines()
                    if "=" in line and not line.startswith("#"))
    assert {k: settings[k] for k in ("TP_SIZE", "MAX_RUNNING_REQUESTS", "MAX_TOTAL_TOKENS", "MEM_FRACTION_STATIC",
                                     "DSV41_CACHE_GIB", "DSV41_SHARED_PAD_K", "IMAGE")} == {
        "TP_SIZE": "4", "MAX_RUNNING_REQUESTS": "16", "MAX_TOTAL_TOKENS": "8000000", "MEM_FRACTION_STATIC": "0.80",
        "DSV41_CACHE_GIB": "4", "DSV41_SHARED_PAD_K": "1", "IMAGE": "dsv41-sglang:tp4"}
    # the running containers are the truth: the launcher gave every rank the TP4 size and its own rank
    sh("spark1", "cd /home/mia/dsv41-3x-spark && ./start.sh stop >/dev/null && ./start.sh serve >/dev/null",
       user="mia", tp=4)
    for rank, host in enumerate(TP4_HOSTS):
        name = "dsv41-head" if rank == 0 else "dsv41-worker"
        received = json.loads(tp4_sh(host, "docker inspect %s" % name))[0]["Config"]["Env"]
        assert "TP_SIZE=4" in received and "DSV41_SHARED_PAD_K=1" in received, (host, received)
        if rank:
            assert "NODE_RANK=%d" % rank in received, (host, received)


def test_converge_refuses_a_value_that_breaks_the_tp4_adapters_and_changes_nothing():
    before = env_hash()
    rc, out = playbook("site.yml", "-e", json.dumps({"dsv41_launcher_overrides": {"DSV41_SHARED_PAD_K": 576}}),
                       inventories=(TP4_INVENTORY,))
    assert rc != 0
    assert "DSV41_SHARED_PAD_K='576'" in out and "spark1" in out
    assert env_hash() == before


def test_an_experiment_check_judges_all_four_ranks_and_changes_nothing(tmp_path):
    ledger = stage_ledger_layer(tmp_path / "ledger", inventory=TP4_INVENTORY, tp=4)
    before, started = env_hash(), serving()
    rc, out = playbook("stage_g_spec.yml", "--check", inventories=(TP4_INVENTORY, ledger))
    assert rc == 0, out[-4000:]
    assert "expected on this fleet: " in out and "arm k5: DSPARK_BLOCK_SIZE=5" in out
    assert re.search(r"^\s+spark4: ''$", out, re.M)        # the verdict's facts name the fourth rank
    assert "records/lab-tp4/experiments/" in out             # this fleet's records, never the TP3 lab's
    assert env_hash() == before and serving() == started


def test_one_drift_run_checks_both_labs_each_drift_its_own_fleet_s(tmp_path):
    """bin/fleet-drift --all over the TP3 lab and the TP4 lab at once. A change on the TP4 head (.env: 12 slots where
    the inventory declares 16) is a new finding of lab-tp4 alone; the TP3 lab's findings do not move; each fleet's
    history and metrics stay under its own name; the exit code is the worst of the two."""
    from prometheus_client.parser import text_string_to_metric_families
    fleets, records, metrics_dir = tmp_path / "fleets", tmp_path / "records", tmp_path / "metrics"
    for inventory in (LAB_INVENTORY, TP4_INVENTORY):
        shutil.copytree(inventory, fleets / inventory.name)      # connection files and the baseline link's file

    def drift_all():
        res = subprocess.run([sys.executable, str(ROOT / "bin" / "fleet-drift"), "--all", "--fleets", str(fleets),
                              "--records", str(records), "--metrics-dir", str(metrics_dir)], cwd=ROOT, env=env(),
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        reports = {}
        for fleet in ("lab", "lab-tp4"):
            latest = sorted(p for p in (records / fleet / "drift").iterdir() if p.is_dir())[-1]
            reports[fleet] = json.loads((latest / "drift.json").read_text())
        return res, reports

    res, before = drift_all()
    assert "fleet-drift --all: 2 fleet(s)" in res.stdout, res.stdout[-3000:]
    assert before["lab"]["fleet"] == "lab" and before["lab-tp4"]["fleet"] == "lab-tp4"
    assert set(before["lab-tp4"]["hosts"]) == set(TP4_HOSTS) and set(before["lab"]["hosts"]) == {"spark1", "spark2",
                                                                                                   "spark3"}
    sh("spark1", "sed -i 's/^MAX_RUNNING_REQUESTS=16$/MAX_RUNNING_REQUESTS=12/' %s" % HEAD_ENV, user="mia", tp=4)
    try:
        res, after = drift_all()
    finally:
        sh("spark1", "sed -i 's/^MAX_RUNNING_REQUESTS=12$/MAX_RUNNING_REQUESTS=16/' %s" % HEAD_ENV, user="mia", tp=4)
    new = {(f["host"], f["area"], f["item"]) for f in after["lab-tp4"]["findings"] if f.get("new")}
    assert ("spark1", "env", "MAX_RUNNING_REQUESTS") in new, after["lab-tp4"]["findings"]
    # the TP4 change is lab-tp4's alone: the TP3 lab reports nothing about it. (Its other findings are the TP3 lab's
    # own state, which another share's load can move between the two runs: one slow-tier run saw both TP3 workers'
    # containers reported absent on the second run, cause not found; they are printed, not judged here.)
    lab_new = [f for f in after["lab"]["findings"] if f.get("new")]
    assert not [f for f in after["lab"]["findings"] if "MAX_RUNNING_REQUESTS" in f["item"]], after["lab"]["findings"]
    assert not [f for f in lab_new if f["area"] in ("env", "launch")], lab_new
    if lab_new:
        print("TP3 lab findings new on the second run (not the TP4 change):", json.dumps(lab_new, indent=1))
    codes = {fleet: after[fleet]["exit_code"] for fleet in after}
    worst = 1 if 1 in codes.values() else max(codes.values())
    assert codes["lab-tp4"] == 2 and res.returncode == worst, res.stdout[-3000:]
    assert "fleet lab-tp4 (%s): exit 2" % (fleets / "lab-tp4") in res.stdout
    # records apart: two runs in each fleet's own history, none anywhere else
    assert sorted(p.name for p in records.iterdir()) == ["lab", "lab-tp4"]
    assert [len([p for p in (records / f / "drift").iterdir() if p.is_dir()]) for f in ("lab", "lab-tp4")] == [2, 2]
    # the dashboards' view: one file per fleet, the new finding counted under lab-tp4 only
    assert sorted(p.name for p in metrics_dir.iterdir()) == ["dsv41_drift_lab-tp4.prom", "dsv41_drift_lab.prom"]
    samples = {fleet: [s for fam in text_string_to_metric_families((metrics_dir / ("dsv41_drift_%s.prom" % fleet))
                                                                   .read_text()) for s in fam.samples]
               for fleet in ("lab", "lab-tp4")}
    assert all(s.labels.get("fleet") == fleet for fleet in samples for s in samples[fleet] if "fleet" in s.labels)
    assert any(s.name == "dsv41_drift_open_findings" and s.labels.get("area") == "env" and s.labels["host"] == "spark1"
               for s in samples["lab-tp4"])
