"""Stage I's clocks A/B through the experiment engine, on the lab.

The arm resets the lock through the clock-lock role's unlocked state (the reset unit), the restore locks
every rank again through the lock unit, and rollback.yml does the same for a run killed mid-arm. Every rank's
GPU is sampled over each measured window (the lab GPU heats and, unlocked, loses boost to a thermal limit). A rank
already unlocked by hand (sudo -rgc: drift in the journal) refuses the run before anything changes.
"""
import json
import subprocess

import pytest

from experiment_lab import engine_healthy, flat, fleet_state, kill_during, lab_definition, record, verdicts
from labhelpers import HOSTS, lab_container, playbook, sh

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")


def run_experiment(tmp_path, *extra, **definition):
    return playbook("stage_i_experiments.yml", "-e", "experiment=clocks", *RUN,
                    "-e", lab_definition(tmp_path, "stage_i_clocks", **definition),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra)


def test_check_mode_reads_every_ranks_lock_and_changes_nothing(tmp_path):
    before = fleet_state()
    rc, out = playbook("stage_i_experiments.yml", "-e", "experiment=clocks", "--check",
                       "-e", "experiment_record_root=%s" % tmp_path)
    assert rc == 0, out[-3000:]
    out = flat(out)
    assert "arm unlocked: hook clock_state" in out
    assert "clocks: spark1: locked spark2: locked spark3: locked" in out
    assert fleet_state() == before
    assert not any(tmp_path.iterdir()), "check mode writes no record"


def nv_history(host):
    """The lab nvidia-smi's record of clock commands (lab only: the real driver has no such read-back)."""
    return json.loads(sh(host, "cat /var/lib/lab-nvidia/state.json"))["history"]


@pytest.fixture
def hot_gpu():
    """The lab GPU's thermal model on, heating through in about a second of engine life; off again after."""
    for host in HOSTS:
        sh(host, "mkdir -p /var/lib/lab-nvidia && echo 1 > /var/lib/lab-nvidia/thermal-seconds")
    yield
    for host in HOSTS:
        sh(host, "rm -f /var/lib/lab-nvidia/thermal-seconds")


def test_clocks_unlocked_for_the_arm_only_then_locked_again(tmp_path, fast_engine, hot_gpu):
    before, seen = fleet_state(), dict((h, len(nv_history(h))) for h in HOSTS)
    rc, out = run_experiment(tmp_path)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["unlocked"]["verdict"] == "pass"
    assert rec["conditions"]["unlocked"]["hook"] == "clock_state" and rec["conditions"]["baseline"]["hook"] is None
    for host in HOSTS:
        # reset for the arm through the role's reset unit, locked again by the lock unit in the restore
        argv = [" ".join(e["argv"][-2:]) if e["argv"][-1] != "-rgc" else "-rgc" for e in nv_history(host)[seen[host]:]]
        assert argv == ["-rgc", "-lgc 0,2200"], (host, argv)
    md = (run / "record.md").read_text()
    print(md)
    assert "unlocked (block size 3, clocks unlocked)" in md
    # the sustained runs' telemetry: under the lock the GPU stays at or below 2200 MHz and cooler; unlocked it
    # boosts, heats past the slowdown point and the driver takes boost back, on every rank
    assert "## GPU telemetry during the measured window (nvidia-smi samples on every rank)" in md
    for host in HOSTS:
        locked, unlocked = (rec["conditions"][c]["telemetry"][host] for c in ("baseline", "unlocked"))
        assert locked["samples"] >= 1 and unlocked["samples"] >= 1, (host, locked, unlocked)
        assert locked["sm_mhz"]["max"] <= 2200 and "sw_thermal_slowdown" not in locked["reasons"], locked
        assert unlocked["reasons"].get("sw_thermal_slowdown", 0) > 0, unlocked
        assert unlocked["temp_c"]["max"] > locked["temp_c"]["max"], (locked, unlocked)
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()


def test_clocks_refused_while_a_rank_is_already_unlocked(tmp_path):
    # an operator's manual reset through sudo (the journal keeps sudo's line, as on a real Spark)
    p = subprocess.run(["podman", "exec", "--user", "zurih", "--workdir", "/home/zurih", lab_container("spark3"),
                        "sudo", "-n", "nvidia-smi", "-rgc"], text=True, capture_output=True)
    assert p.returncode == 0, p
    try:
        before = fleet_state()
        rc, out = run_experiment(tmp_path)
        assert rc != 0
        out = flat(out)
        assert "stage_i_clocks refused, nothing changed:" in out
        assert "clocks locked required on every rank (from the journal of this boot); found: spark3 drift" in out, out[-3000:]
        assert fleet_state() == before
    finally:
        # the lock unit's own run after the manual reset: the journal's verdict is "locked" again
        sh("spark3", "systemctl restart nvidia-clock-lock.service")


def test_a_clocks_run_killed_mid_arm_is_locked_again_by_rollback(tmp_path, fast_engine):
    root = tmp_path / "rec"
    before = fleet_state()
    killed, out = kill_during("stage_i_experiments.yml", ["-e", "experiment=clocks", *RUN,
                                                          "-e", lab_definition(tmp_path, "stage_i_clocks", trim=True),
                                                          "-e", "experiment_record_root=%s" % root],
                              "Note when the engine was up: unlocked")
    assert killed, out[-3000:]
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    assert fleet_state() != before, "killed with the clocks unlocked"
    rc, out = playbook("rollback.yml", *RUN, "-e", "experiment_rollback_run=%s" % run.name,
                       "-e", "experiment_record_root=%s" % root)
    assert rc == 0, out[-4000:]
    assert "The fleet equals run %s's snapshot." % run.name in flat(out)
    for host in HOSTS:
        assert json.loads(sh(host, "cat /var/lib/lab-nvidia/state.json"))["locked_clocks"] == {"min": 0, "max": 2200}
    assert fleet_state() == before and engine_healthy()
