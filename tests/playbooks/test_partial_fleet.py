"""Whole fleet or nothing: --limit (any subset of the ranks) on the playbooks that change the fleet.

Refused by default in the preflight, before any host is contacted; with -e allow_partial_fleet=true
only the ranks in the limit change and the engine is never restarted (the launcher restarts every
rank); a host that fails mid-play stops every host before the restart. What is compared is what an
operator would look at: every container's state and start time (docker inspect) and the files the
playbooks write, on every host.
"""
import re
import shutil
import subprocess

import pytest

from labhelpers import (HOSTS, LAB_INVENTORY, MINI_CHECKPOINT, MODELS, lab, lab_container, playbook,
                        read_bytes, recap, sh, snapshot)
from spec_reader import expected_shard

ENGRAM = {"spark1": "/home/mia/dsv41-engram", "spark2": "/home/zurih/dsv41-3x-spark/engram",
          "spark3": "/home/zurih/dsv41-3x-spark/engram"}
WATCHED = {
    "spark1": ["/home/mia/dsv41-engram", "/home/mia/dsv41-3x-spark", "/home/mia/.local/state", "/etc/systemd/system"],
    "spark2": ["/home/zurih/dsv41-3x-spark", "/home/zurih/dsv41-engram", "/data", "/home/zurih/.local/state",
               "/etc/systemd/system"],
    "spark3": ["/home/zurih/dsv41-3x-spark", "/home/zurih/.local/state", "/etc/systemd/system"],
}
# Every playbook that can change a host; stage B refuses a subset even with the flag.
CHANGING = ("stage_a_pack.yml", "stage_b_autotune.yml", "site.yml", "contention.yml", "rollback.yml")
REFUSAL = "Refusing to run on part of the fleet; nothing was changed on any host."


def flat(out):
    return " ".join(out.split())


def containers(host):
    """Every container on the host with its state, start time and id (a restart changes the start time)."""
    fmt = "'{{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.Id}}'"
    return sorted(sh(host, f"docker ps -aq | xargs docker inspect --format {fmt}").splitlines())


def fleet_state():
    files = snapshot(WATCHED)
    return {host: {"containers": containers(host), "files": files[host]} for host in HOSTS}


def locked_clocks(host):
    out = sh(host, "python3 -c 'import json; print(json.load(open(\"/var/lib/lab-nvidia/state.json\"))"
                   ".get(\"locked_clocks\"))'")
    return out.strip()


def tasks_run(out):
    return [t for t in re.findall(r"^TASK \[([^\]]+)\]", out, re.M) if "Validating arguments" not in t]


@pytest.fixture
def mini_inventory(tmp_path):
    """Lab variant: every rank packs from the small real checkpoint (the full-scale one is header-only)."""
    inv = tmp_path / "mini"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (inv / "group_vars" / "dsv41_ranks.yml").write_text(f"---\ndsv41_checkpoint_dir: {MINI_CHECKPOINT}\n")
    return (LAB_INVENTORY, inv)


@pytest.fixture
def unreachable_inventory(tmp_path):
    """The lab inventory with every host pointed at a closed local port: any contact is UNREACHABLE."""
    inv = tmp_path / "unreachable"
    shutil.copytree(LAB_INVENTORY, inv, ignore=shutil.ignore_patterns("lab_connection.yml"))
    for host in HOSTS:
        (inv / "host_vars" / host / "closed.yml").write_text("---\nansible_host: 127.0.0.1\nansible_port: 1\n")
    return (inv,)


@pytest.mark.parametrize("book", CHANGING)
def test_a_limit_is_refused_in_the_preflight_and_nothing_changes(book):
    before = fleet_state()
    rc, out = playbook(book, "--limit", "spark1,spark3", "-e", "maintenance_window=true")
    assert rc != 0
    text = flat(out)
    assert REFUSAL in text, text[-1500:]
    assert "This run covers spark1, spark3 (--limit spark1,spark3) and leaves out spark2 (rank 1)." in text
    # Only the preflight ran, and it stopped at the refusal.
    tasks = tasks_run(out)
    assert all(t.startswith("preflight : ") for t in tasks), tasks
    assert tasks[-1] == "preflight : Refuse a run on part of the fleet unless this playbook allows it"
    assert all(c["changed"] == 0 for c in recap(out).values())
    assert fleet_state() == before


@pytest.mark.smoke
def test_the_refusal_contacts_no_host(unreachable_inventory):
    rc, out = playbook("stage_a_pack.yml", "--limit", "spark2", "-e", "maintenance_window=true",
                       inventories=unreachable_inventory)
    assert rc != 0 and REFUSAL in flat(out)
    assert "leaves out spark1 (rank 0), spark3 (rank 2)" in flat(out)
    assert "UNREACHABLE" not in out
    # The same inventory on the whole fleet does reach for the hosts (so the check above can fail).
    rc, out = playbook("fleet_status.yml", inventories=unreachable_inventory)
    assert rc != 0 and "UNREACHABLE" in out


def test_stage_b_refuses_a_subset_even_with_the_flag():
    before = fleet_state()
    rc, out = playbook("stage_b_autotune.yml", "--limit", "spark3", "-e", "allow_partial_fleet=true",
                       "-e", "maintenance_window=true")
    assert rc != 0
    text = flat(out)
    assert REFUSAL in text and "leaves out spark1 (rank 0), spark2 (rank 1)" in text
    assert "cannot run on a subset of the ranks, even with -e allow_partial_fleet=true" in text
    assert all(t.startswith("preflight : ") for t in tasks_run(out))
    assert fleet_state() == before


@pytest.mark.parametrize("args", [("fleet_status.yml",), ("drift.yml", "--check")])
def test_read_only_playbooks_run_on_a_subset(args):
    before = fleet_state()
    rc, out = playbook(*args, "--limit", "spark3")
    assert rc == 0, out[-3000:]
    assert REFUSAL not in flat(out)
    assert set(recap(out)) == {"spark3"}
    assert fleet_state() == before


def test_site_with_the_flag_converges_only_the_limit():
    # Drift on every rank: clocks reset on spark2 and spark3, a setting changed in the head's .env.
    sh("spark2", "nvidia-smi -rgc")
    sh("spark3", "nvidia-smi -rgc")
    sh("spark1", "sed -i 's/^MAX_RUNNING_REQUESTS=4$/MAX_RUNNING_REQUESTS=6/' /home/mia/dsv41-3x-spark/.env")
    before = fleet_state()
    spark2_clocks = locked_clocks("spark2")
    rc, out = playbook("site.yml", "--limit", "spark3", "-e", "allow_partial_fleet=true")
    assert rc == 0, out[-3000:]
    text = flat(out)
    assert "Partial fleet (allow_partial_fleet=true): acting on spark3 only; spark1, spark2 are left alone." in text
    assert "spark1 (the head, which holds the launcher .env) is outside the limit" in text
    assert locked_clocks("spark3") == "{'min': 0, 'max': 2200}"  # the rank in the limit is converged
    after = fleet_state()
    # Outside the limit nothing moved: spark2 keeps its reset clocks, spark1 its edited .env.
    assert locked_clocks("spark2") == spark2_clocks
    assert "MAX_RUNNING_REQUESTS=6" in sh("spark1", "cat /home/mia/dsv41-3x-spark/.env")
    assert after["spark1"] == before["spark1"] and after["spark2"] == before["spark2"]
    assert after["spark3"]["containers"] == before["spark3"]["containers"]
    # Put the declared state back for the tests that follow.
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]


def test_stage_a_with_the_flag_packs_the_limit_and_refuses_the_restart(mini_inventory):
    before = fleet_state()
    rc, out = playbook("stage_a_pack.yml", "--limit", "spark1,spark3", "-e", "allow_partial_fleet=true",
                       "-e", "maintenance_window=true", inventories=mini_inventory)
    assert rc != 0
    text = flat(out)
    assert ("Not restarting: the launcher on spark1 stops and serves every rank, and this run "
            "(-e allow_partial_fleet=true) leaves out spark2.") in text, text[-3000:]
    assert "Shards written on this run (complete, kept): spark1, spark3." in text
    assert "Stop the engine" not in out
    after = fleet_state()
    # No rank restarted (the launcher would have restarted all three) and spark2 is exactly as before.
    assert {h: after[h]["containers"] for h in HOSTS} == {h: before[h]["containers"] for h in HOSTS}
    assert after["spark2"] == before["spark2"]
    # The ranks in the limit got their shards, byte-exact, and nothing else changed there.
    for rank, host in ((0, "spark1"), (2, "spark3")):
        written = {f"{ENGRAM[host]}/engram-l{layer}-r{rank}of3.bin{meta}" for layer in (1, 14)
                   for meta in ("", ".meta.json")}     # each shard and its provenance record
        changed = {p for p in set(after[host]["files"]) | set(before[host]["files"])
                   if after[host]["files"].get(p) != before[host]["files"].get(p)}
        # (the directory itself and the packer's lock file beside the shards change too)
        assert changed - {ENGRAM[host], f"{ENGRAM[host]}/.engram-pack.lock"} == written, (host, changed)
        for layer in (1, 14):
            expected, *_ = expected_shard(MODELS / "DeepSeek-V4.1-Flash-mini", layer, rank, 3)
            assert read_bytes(host, f"{ENGRAM[host]}/engram-l{layer}-r{rank}of3.bin") == expected


def privileged(host, *argv):
    """Lab faults need mount(2) inside the lab host, which only a privileged exec may call."""
    subprocess.run(["podman", "exec", "--privileged", lab_container(host), *argv], check=True)


def remount(host, path, mode):
    """Lab fault: remount a host's tmpfs read-only (EROFS for the packer) or read-write again."""
    privileged(host, "mount", "-o", f"remount,{mode}", path)


def test_spark2_losing_the_checkpoint_stops_every_rank_before_any_write(mini_inventory):
    # Lab fault: spark2's view of the head's export goes empty (an empty tmpfs over the checkpoint), so
    # its free-space plan fails while spark1's and spark3's succeed in the same task.
    before = fleet_state()
    privileged("spark2", "mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", MINI_CHECKPOINT)
    try:
        rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", inventories=mini_inventory)
    finally:
        privileged("spark2", "umount", MINI_CHECKPOINT)
    assert rc != 0
    assert re.search(r"^fatal: \[spark2\]", out, re.M), out[-3000:]
    assert "model.safetensors.index.json" in out
    # spark1 and spark3 stopped with it: no rank packed, no rank restarted, nothing changed anywhere.
    assert "Pack this rank's layers" not in out and "Stop the engine" not in out
    assert fleet_state() == before


@pytest.mark.parametrize("serial", [1, 3])
def test_a_pack_failing_on_spark2_stops_every_rank_before_the_restart(mini_inventory, serial):
    # serial 1 (the default) packs one host at a time; serial 3 packs all three at once, where only
    # any_errors_fatal keeps spark1 and spark3 from carrying on to the restart.
    lab("reset")  # from the report's state: no rank has shards yet
    before = fleet_state()
    remount("spark2", ENGRAM["spark2"], "ro")
    try:
        rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", "-e", f"engram_pack_serial={serial}",
                           inventories=mini_inventory)
    finally:
        remount("spark2", ENGRAM["spark2"], "rw")
    assert rc != 0
    assert re.search(r"^fatal: \[spark2\]", out, re.M), out[-3000:]
    assert "Stop the engine" not in out and "Stage A pack | restart" not in out
    after = fleet_state()
    # No rank restarted, and no rank went on to its next layer after spark2 failed.
    assert {h: after[h]["containers"] for h in HOSTS} == {h: before[h]["containers"] for h in HOSTS}
    assert after["spark2"]["files"] == before["spark2"]["files"]
    spark3_engram = sh("spark3", f"ls -a {ENGRAM['spark3']}")
    assert "engram-l14-" not in spark3_engram
    if serial == 1:
        assert "engram-l1-" not in spark3_engram  # spark3's turn never came
