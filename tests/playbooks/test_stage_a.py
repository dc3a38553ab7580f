"""Stage A (Engram packing) on the lab: preflight verdicts, check mode, packing, restart, packed checks.

Each test module starts from a fresh lab in the report's state (`labctl.py reset`). The module runs on the
lab's legacy launcher (DSV41_LAB_LAUNCHER_VARIANT=legacy), the one shape that reads a per-host
WORKER_ENGRAM_DIR_SPARK2: the packing tests need spark2 alone to pack into its spare volume. What a
real-shaped launcher offers instead (one WORKER_ENGRAM_DIR for every worker) is checked on the default
launcher in test_a_real_shaped_launcher_offers_only_what_it_can_express.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

from labhelpers import (LAB_INVENTORY, boot_facts, install_launcher, MINI_CHECKPOINT, MODELS, ROOT, changed_tasks, env, playbook,
                        read_bytes, set_launcher_env, sh, snapshot)
from spec_reader import expected_shard

ENGRAM = {"spark1": "/home/mia/dsv41-engram", "spark2": "/home/zurih/dsv41-3x-spark/engram",
          "spark3": "/home/zurih/dsv41-3x-spark/engram"}
ROOMY_DEST = "/data/dsv41-engram"
WATCHED = {
    "spark1": ["/home/mia/dsv41-engram", "/home/mia/dsv41-3x-spark", "/srv/models"],
    "spark2": ["/home/zurih/dsv41-3x-spark", "/home/zurih/dsv41-engram", "/data"],
    "spark3": ["/home/zurih/dsv41-3x-spark"],
}


# the launcher variant the lab reset seeds for this module (conftest.fresh_lab)
LAB_LAUNCHER_VARIANT = "legacy"


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


# A checkpoint whose layer 1 takes spark2 many progress rounds to pack at a capped rate: 160,000 rows
# per rank (42,244,096-byte shards, 40.3 MiB) at engram_pack_max_mib_s 1 is about 40 s, polled every
# second (a round also costs a module run over ssh: 1.5 to 3 s a round on the 2-core lab machine).
# The other ranks pack uncapped. Random bytes; the expected shards are rebuilt from them. Neither
# layer has the mini checkpoint's row count: a shard header names rows, not the checkpoint, so a
# mini shard left by an earlier test would otherwise pass for a complete paced one.
PACED = "DeepSeek-V4.1-Flash-paced"
PACED_CHECKPOINT = f"/srv/models/{PACED}"
PACED_ROWS = {1: 3 * 160000, 14: 3 * 1001}
PACED_SHARD_BYTES = 4096 + 160000 * 264
PACED_MIB_S = 1
PROGRESS_FILE = "/tmp/dsv41-engram-pack-1.json"  # spark2 is rank 1 (the role's default path)
FOLLOW_TASK = "Follow the packer to its end: layer 1"


@pytest.fixture(scope="module")
def paced_checkpoint():
    """Built once under the lab's models directory (every host sees it at /srv/models; the workers
    read-only, as over NFS). Written aside and renamed in, so an interrupted build is never used."""
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import ckpt_factory
    target = MODELS / PACED
    index = target / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        for layer, rows in PACED_ROWS.items():
            weight = f"layers.{layer}.engram.embed.weight"
            header, _ = ckpt_factory.read_header(target / weight_map[weight])
            if header[weight]["shape"][0] != rows:
                shutil.rmtree(target)  # built for other figures
                break
    if not index.exists():
        building = MODELS / (PACED + ".building")
        shutil.rmtree(building, ignore_errors=True)
        ckpt_factory.make_checkpoint(str(building), rows=PACED_ROWS)
        os.rename(building, target)
    return target


@pytest.fixture
def paced_inventory(roomy_inventory, paced_checkpoint):
    """The "spark2 given room" variant on the paced checkpoint: progress every second, spark2's packer
    capped; spark2's paced shards removed so that its layer 1 packs in this test."""
    (roomy_inventory / "group_vars" / "dsv41_ranks.yml").write_text(
        f"---\ndsv41_checkpoint_dir: {PACED_CHECKPOINT}\nengram_pack_poll_seconds: 1\n")
    (roomy_inventory / "host_vars" / "spark2" / "paced.yml").write_text(
        f"---\nengram_pack_max_mib_s: {PACED_MIB_S}\n")
    set_launcher_env(MODEL_PATH=PACED_CHECKPOINT, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    sh("spark2", f"rm -f {ROOMY_DEST}/engram-l1-r1of3.* {ROOMY_DEST}/engram-l14-r1of3.*")
    return roomy_inventory


def follow_section(out, host):
    """The output of `Follow layer 1` on ``host`` (serial: 1 gives each host its own task header),
    whitespace-normalised because the yaml callback folds long messages."""
    for section in out.split(f"TASK [engram_pack : {FOLLOW_TASK}]")[1:]:
        section = section.split("\nTASK [", 1)[0].split("\nPLAY ", 1)[0]
        if f"[{host}]" in section:
            return " ".join(section.split())
    raise AssertionError(f"no '{FOLLOW_TASK}' output for {host}")


ROUND = re.compile(r"msg: '(\S+) \(rank (\d+)\) layer 1: ([\d.]+)% \(([\d,]+) of ([\d,]+) bytes\), "
                   r"([\d.]+) MiB/s, ETA ([^']+)'")


def progress_rounds(section):
    """(percent, done, total, MiB/s, ETA) of every round that printed progress, in order."""
    return [(float(pct), int(done.replace(",", "")), int(total.replace(",", "")), float(rate), eta)
            for _host, _rank, pct, done, total, rate, eta in ROUND.findall(section)]


def assert_exact_shards(dests, checkpoint):
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        for layer in (1, 14):
            expected, lo, hi, n = expected_shard(checkpoint, layer, rank, 3)
            got = read_bytes(host, f"{dests[host]}/engram-l{layer}-r{rank}of3.bin")
            assert len(got) == 4096 + (hi - lo) * 264
            assert got == expected, (host, layer)
        assert ".partial" not in sh(host, f"ls -a {dests[host]}")


@pytest.mark.smoke
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


def test_a_real_shaped_launcher_offers_only_what_it_can_express(roomy_inventory):
    install_launcher("explicit")
    try:
        before = snapshot(WATCHED)
        rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                           inventories=lab_inventories(roomy_inventory))
        after = snapshot(WATCHED)
    finally:
        install_launcher("legacy")
    assert rc != 0 and before == after
    flat = " ".join(out.split())
    assert f"spark2 (rank 1): the inventory destination {ROOMY_DEST} is not where the engine will look" in flat
    assert "set WORKER_ENGRAM_DIR" in flat and "WORKER_ENGRAM_DIR_SPARK2" not in flat


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
    # no experiment records of this fleet: the estimate uses the fleet's figures (a 767 s boot)
    rc, out = playbook("stage_a_pack.yml", "--check", "-e", "maintenance_window=true",
                       "-e", "experiment_record_root=%s" % (roomy_inventory.parent / "no-records"),
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-4000:]
    for rank, (host, dest) in enumerate(dict(ENGRAM, spark2=ROOMY_DEST).items()):
        assert f"Check mode: {dest}/engram-l1-r{rank}of3.bin, {dest}/engram-l14-r{rank}of3.bin would be written" \
            in " ".join(out.split())  # the yaml callback folds long messages
    assert "Would run '/home/mia/dsv41-3x-spark/start.sh stop' then" in out
    text = " ".join(out.split())
    assert "stage_a_pack expected on this fleet: " in text and "restart: 12 min 47 s" in text, text[-4000:]
    assert "pack spark1: " in text and "benchmark after contention: " in text
    assert snapshot(WATCHED) == before
    # a window shorter than the estimate: refused before anything changes, naming the steps that fit
    rc, out = playbook("stage_a_pack.yml", "--check", "-e", "maintenance_window=true", "-e", "window_minutes=14",
                       inventories=lab_inventories(roomy_inventory))
    text = " ".join(out.split())
    assert rc != 0 and "stage_a_pack refused, nothing changed: it is expected to take " in text, text[-4000:]
    assert "more than the 14-minute window (window_minutes=14); the first step(s) would fit (pack spark1" in text
    assert snapshot(WATCHED) == before


def inventory_text():
    return {str(p): p.read_text() for p in sorted((ROOT / "inventory").rglob("*.yml"))}


def test_stage_a_packs_six_shards_restarts_and_checks(roomy_inventory):
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    inventory_before = inventory_text()
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
        facts = boot_facts(host, container)
        assert facts.marker_found and [facts.engram[layer]["packed"] for layer in (1, 14)] == [True, True], host
    assert snapshot({"spark2": ["/home/zurih/dsv41-engram"]}) == tp2_before  # the old TP2 shards are untouched
    boot_logs = ROOT / "records" / "lab" / "boot-logs"   # the lab fleet's own records
    assert all((boot_logs / f"{h}-rank{r}.log").exists() for r, h in enumerate(("spark1", "spark2", "spark3")))

    # The run record has every field filled for every node, and the benchmark ran from a worker.
    record = sorted((ROOT / "records" / "lab" / "runs").glob("*-stage_a"))[-1]
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        node = json.loads((record / "nodes" / f"{host}.json").read_text())
        assert node["rank"] == rank and node["container"]["state"] == "running"
        assert node["image_digests"] and node["engine_version"] != "unknown" and node["kernel"] != "unknown"
        assert node["packed"] == {"1": True, "14": True}
        assert node["kv_pool"]["allocated_tokens"] == 491520 and node["kv_pool"]["clamped"] is True
        assert node["graph_shapes"]["target"] and node["mem_available_gib"] > 0 and node["contention"]
        assert node["container_env"] and all(v == "***" for k, v in node["container_env"].items() if "API_KEY" in k)
        assert "sk-lab" not in (record / "nodes" / f"{host}.json").read_text()
    # the all-rank step profile: every rank's own trace of one profiled window, Engram's share of its compute
    # stream (packed: the lab's 1,000 us gather, where the unpacked files take 2,500 us)
    profile = json.loads((record / "step-profile.json").read_text())
    assert sorted(profile) == ["spark1", "spark2", "spark3"]
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        entry = profile[host]
        assert entry["rank"] == rank and entry["missing"] is None and entry["traces"], entry
        assert entry["profile"]["exposed_us"] == {"engram": 1000.0} and entry["profile"]["compute_us"] > 1000.0, entry
    assert "## Step profile, every rank" in (record / "summary.md").read_text()
    bench = json.loads((record / "benchmark.json").read_text())
    conditions = {(r["workload"], r["concurrency"]) for r in bench["results"]}
    assert conditions == {("prose", 1), ("prose", 4), ("code", 1), ("code", 4)}
    assert all(r["rounds"] == 5 and r["warmup_rounds"] >= 1 for r in bench["results"])
    assert "lab output" in bench["measured_on"] and "Lab output" in (record / "summary.md").read_text()
    # packing timed apart from contention reduction: the same conditions measured after packing, before it
    after_pack = json.loads((record / "benchmark-after_pack.json").read_text())
    assert {(r["workload"], r["concurrency"]) for r in after_pack["results"]} == conditions
    assert "## Decode benchmark after pack" in (record / "summary.md").read_text()
    # Expected beside actual for every step of the plan's estimate, in its order, each one this run took measured
    rows = json.loads((record / "expected-vs-actual.json").read_text())
    assert [r["step"] for r in rows] == ["pack spark1", "pack spark2", "pack spark3", "restart",
                                         "benchmark after packing", "contention", "benchmark after contention",
                                         "total"], rows
    # (the mini checkpoint's shards are kilobytes: their packing is expected to take 0.0 s at the fleet's rate)
    assert all(r["expected_s"] >= 0 and r["actual_s"] > 0 for r in rows), rows
    assert rows[3]["expected_s"] > 0 and rows[-1]["expected_s"] > 0
    assert rows[-1]["actual_s"] == pytest.approx(sum(r["actual_s"] for r in rows[:-1]), abs=0.5)
    assert rows[-1]["actual_s"] < 1800, "the lab run's steps add up to its own duration, minutes"
    summary = (record / "summary.md").read_text()
    assert "## Expected and actual, per step" in summary and "| restart | " in summary

    # The stage ledger: a pass proposes stage_a for the image the fleet runs, beside the record and printed;
    # the inventory is never edited by the run (the operator commits the entry)
    import yaml
    from labhelpers import running_image_digest
    proposal = yaml.safe_load((record / "stage-ledger.yml").read_text())
    entry = {"name": "stage_a", "image_digest": running_image_digest(), "record": "records/lab/runs/%s" % record.name}
    assert proposal == {"dsv41_stages_passed": [entry]}
    assert "Stage ledger: commit to dsv41_stages_passed" in " ".join(out.split())
    assert inventory_text() == inventory_before, "the run never edits the inventory"

    # A second run packs nothing, restarts nothing and changes no configuration: the only changes are
    # the measurement and record files written on the control node.
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-4000:]
    assert changed_tasks(out) <= {"benchmark : Bring the raw output back", "run_record : Create the record directory",
                                  "engine : Keep the latest boot of each rank on the control node",
                                  "run_record : Write each node's record", "run_record : Write the raw benchmark output",
                                  "run_record : Write the effective launch (secrets masked)",
                                  "run_record : Write summary.md",
                                  "run_record : Write every rank's step profile",
                                  "run_record : Write the proposed entries beside the run record",
                                  "run_record : Write the other benchmarks of this run (stage A's timings after packing, "
                                  "before contention)",
                                  "run_record : Write the stage's expected seconds per step beside what this run took"}, \
        changed_tasks(out)
    assert "Stop the engine" not in out or "skipping" in out.split("Stop the engine", 1)[1][:300]
    # nothing needed a restart: the record says the restart was not taken, the steps that ran are timed
    rows = {r["step"]: r for r in json.loads((sorted((ROOT / "records" / "lab" / "runs").glob("*-stage_a"))[-1]
                                              / "expected-vs-actual.json").read_text())}
    assert rows["restart"]["actual_s"] is None and rows["contention"]["actual_s"] > 0, rows


def test_a_pack_spanning_many_rounds_prints_each_round_and_leaves_exact_shards(paced_inventory, paced_checkpoint):
    """Issue 8 acceptance: packing that spans at least 10 progress rounds completes, prints the
    bytes done of total, percent, MiB/s and ETA every round, and leaves byte-exact shards."""
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                       inventories=lab_inventories(paced_inventory))
    assert rc == 0, out[-6000:]
    assert "Recursive loop" not in out
    section = follow_section(out, "spark2")
    headings = section.count(f"FAILED - RETRYING: [spark2]: {FOLLOW_TASK}")
    rounds = progress_rounds(section)
    print(f"spark2 layer 1: {len(rounds)} progress rounds, {headings} retried rounds")
    assert len(rounds) >= 10, section[-3000:]
    # Every round printed its result (a round before the first progress record says "starting").
    assert section.count("msg: 'spark2 (rank 1) layer 1:") == headings + 1
    total = PACED_SHARD_BYTES
    assert all(r[2] == total for r in rounds)
    assert [r[1] for r in rounds] == sorted(r[1] for r in rounds) and rounds[0][1] < total // 2
    assert all(0 < r[3] <= PACED_MIB_S + 0.05 for r in rounds if r[1] > 4096)  # the cap holds
    assert re.search(r"spark2 \(rank 1\) layer 1: done: /data/dsv41-engram/engram-l1-r1of3\.bin, "
                     r"42,244,096 bytes in [\d.]+ s \(1\.0 MiB/s\)", section), section[-1500:]
    assert_exact_shards(dict(ENGRAM, spark2=ROOMY_DEST), paced_checkpoint)


def test_a_packer_killed_in_round_5_fails_the_play_then_a_rerun_completes(paced_inventory, paced_checkpoint):
    """Issue 8 acceptance: the packer and its async job are SIGKILLed in round 5; the play fails in
    the next round naming host, layer and the packer's last message, leaves no final-named file and
    no .partial for the layer, and a rerun completes."""
    cmd = ["ansible-playbook", str(ROOT / "playbooks" / "stage_a_pack.yml"), "-i", str(LAB_INVENTORY),
           "-i", str(paced_inventory), "-e", "maintenance_window=true"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watchdog = threading.Timer(900, proc.kill)
    watchdog.start()
    lines, heading, rounds, killed, rounds_at_kill = [], f"FAILED - RETRYING: [spark2]: {FOLLOW_TASK}", 0, None, 0
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(heading):
                rounds += 1
                if rounds == 5 and killed is None:
                    record = json.loads(sh("spark2", f"cat {PROGRESS_FILE}"))
                    assert record["state"] == "packing" and 0 < record["percent"] < 100, record
                    # The packer and the async wrapper process that runs it (its parent): nothing is
                    # left to report the job, so only the pid can tell the wait.
                    wrapper = sh("spark2", f"ps -o ppid= -p {record['pid']}").strip()
                    sh("spark2", f"kill -KILL {wrapper} {record['pid']}")
                    killed, rounds_at_kill = record, rounds
        rc = proc.wait()
    finally:
        watchdog.cancel()
        proc.kill()
    out = "".join(lines)
    assert killed is not None, out[-4000:]
    assert rc != 0
    section = follow_section(out, "spark2")
    flat = " ".join(out.split())
    print(f"killed pid {killed['pid']} at {killed['percent']}% in round {rounds_at_kill}; "
          f"the wait ended after {rounds} retried rounds")
    assert rounds - rounds_at_kill <= 2  # noticed in the next round or so, not at the time limit
    fatal = flat.split("fatal: [spark2]: FAILED! =>", 1)[1]
    message = re.search(r"msg: '(spark2 \(rank 1\) layer 1: the packer .*?)' (?:\w+:|PLAY|NO MORE)", fatal).group(1)
    print("killed-packer message:", message)
    assert f"spark2 (rank 1) layer 1: the packer (pid {killed['pid']}) is gone" in message
    assert 'its last message: "writing rows 160000..319999 into /data/dsv41-engram/engram-l1-r1of3.partial' in message
    assert f"Removed its {ROOMY_DEST}/engram-l1-r1of3.partial; no final-named shard exists for this layer" in message
    assert section.count(heading) == rounds
    listing = sh("spark2", f"ls -a {ROOMY_DEST}").split()
    assert "engram-l1-r1of3.bin" not in listing and not [n for n in listing if n.endswith(".partial")], listing
    assert "Stage A pack | restart" not in out.split("fatal: [spark2]", 1)[1]  # the play stopped there

    # The rerun (uncapped) takes the lock at once and completes.
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", "-e", "engram_pack_max_mib_s=0",
                       inventories=lab_inventories(paced_inventory))
    assert rc == 0, out[-6000:]
    assert "spark2 (rank 1) layer 1: done: /data/dsv41-engram/engram-l1-r1of3.bin" in " ".join(out.split())
    assert_exact_shards(dict(ENGRAM, spark2=ROOMY_DEST), paced_checkpoint)


# Neither the mini nor the paced checkpoint's row counts, so no shard of theirs passes for one of these.
UPDATED = "DeepSeek-V4.1-Flash-updated"
UPDATED_ROWS = {1: 3 * 2001, 14: 3 * 1002}


def test_a_checkpoint_updated_with_the_same_shapes_makes_shards_stale_and_the_repack_exact(roomy_inventory):
    """Issue 10 acceptance: table bytes rewritten in place (same shapes, offsets and size) and the file
    touched. The next plan reports every rank's layer 1 stale with the reason, check mode changes
    nothing, and packing makes the shards byte-exact for the new bytes."""
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import ckpt_factory
    target = MODELS / UPDATED
    shutil.rmtree(target, ignore_errors=True)
    ckpt_factory.make_checkpoint(str(target), rows=UPDATED_ROWS)
    checkpoint = f"/srv/models/{UPDATED}"
    (roomy_inventory / "group_vars" / "dsv41_ranks.yml").write_text(f"---\ndsv41_checkpoint_dir: {checkpoint}\n")
    set_launcher_env(MODEL_PATH=checkpoint, WORKER_ENGRAM_DIR_SPARK2=ROOMY_DEST)
    dests = dict(ENGRAM, spark2=ROOMY_DEST)
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-6000:]
    assert_exact_shards(dests, target)

    source = target / "model-00001-of-00002.safetensors"  # layer 1; layer 14 lives in the other file
    ckpt_factory.update_table_rows(str(target), 1, range(0, UPDATED_ROWS[1], 5))
    before = snapshot(WATCHED)
    rc, out = playbook("stage_a_pack.yml", "--check", "-e", "maintenance_window=true",
                       inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-6000:]
    assert snapshot(WATCHED) == before
    flat = " ".join(out.split())
    st = os.stat(source)
    for rank, (host, dest) in enumerate(dests.items()):
        assert (f"{host} (rank {rank}) {dest}/engram-l1-r{rank}of3.bin: stale: source size or mtime changed: "
                f"model-00001-of-00002.safetensors is {st.st_size} bytes, mtime_ns {st.st_mtime_ns}") in flat, flat[-6000:]
        assert f"{dest}/engram-l14-r{rank}of3.bin: stale" not in flat
        assert f"Check mode: {dest}/engram-l1-r{rank}of3.bin would be written" in flat
    assert flat.count("sampled rows differ") >= 3

    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", inventories=lab_inventories(roomy_inventory))
    assert rc == 0, out[-6000:]
    assert_exact_shards(dests, target)
    for rank, (host, dest) in enumerate(dests.items()):
        meta = json.loads(sh(host, f"cat {dest}/engram-l1-r{rank}of3.bin.meta.json"))
        assert meta["source"] == {"file": source.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
