"""clock_lock through site.yml on the lab's real-format nvidia-smi (no lock read-back).

The role's verdicts come from the journal of the current boot; the stand-in's own state file
(/var/lib/lab-nvidia/state.json, never printed by the stand-in) is read here only to check that the role
really did what it said.
"""
import json
import re
import socket
import subprocess
import time

import pytest

from labhelpers import HOSTS, lab_container, playbook, recap, sh

# Every test after the first runs only site.yml's clock part (`--tags clock_lock`, as an operator fixing
# clocks would; the preflight always runs): the first one converges the whole site twice for changed=0.
CLOCKS = ("--tags", "clock_lock")
USERS = {"spark1": "mia", "spark2": "zurih", "spark3": "zurih"}


def lab_cleanup():
    """After the module's last test (conftest.fresh_lab): leave no fault knob behind for the next module."""
    for host in HOSTS:  # leave no fault knob behind for the next module
        sh(host, "rm -f /var/lib/lab-nvidia/deny-clock-changes")


def nv_state(host):
    """What the stand-in recorded (lab only: the real driver has no such read-back)."""
    return json.loads(sh(host, "cat /var/lib/lab-nvidia/state.json"))


def flat(output):
    """Playbook output with YAML's folded lines joined and its doubled quotes undone."""
    return re.sub(r"\n\s+", " ", output).replace("''", "'")


def verdicts(output):
    """{host: verdict line} from the role's 'clock lock on HOST: ...' lines (the last one per host)."""
    return dict(re.findall(r"clock lock on (spark\d): ((?:locked|unlocked|drift|unknown) \(.*?\))'?\s*(?:$|\n|,|-)",
                           flat(output), re.M))


def sudo_as_login_user(host, command):
    """Run a command as the host's login user through sudo, as an operator would (journal: sudo line)."""
    return subprocess.run(["podman", "exec", "--user", USERS[host], "--workdir", "/home/" + USERS[host],
                           lab_container(host), "sudo", "-n"] + command,
                          text=True, capture_output=True)


def wait_for_ssh(host, timeout=60):
    """Until the host's sshd greets on its published port (after a restart of the lab host)."""
    port = int(subprocess.run(["podman", "port", lab_container(host), "22/tcp"], text=True, check=True,
                              capture_output=True).stdout.strip().rsplit(":", 1)[1])
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError("%s: no ssh greeting on 127.0.0.1:%d within %ds" % (host, port, timeout))


def test_converge_then_second_run_reports_no_change():
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    found = verdicts(out)
    for host in HOSTS:
        assert re.fullmatch(r"locked \(unit applied 0,2200 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC this boot, "
                            r"no later manual clock command\)", found[host]), found
        assert nv_state(host)["locked_clocks"] == {"min": 0, "max": 2200}
    assert "The clock lock cannot be read back" in out and "no read-back of a clock lock" in out


def test_manual_sudo_reset_is_drift_in_check_mode_and_fixed_by_converge():
    p = sudo_as_login_user("spark2", ["nvidia-smi", "-rgc"])
    assert p.returncode == 0 and p.stdout == "All done.\n", p
    # the lab's journald keeps sudo's line, as a real Spark's does
    log = sh("spark2", "journalctl -b 0 --no-pager -o cat SYSLOG_IDENTIFIER=sudo")
    assert "zurih : PWD=/home/zurih ; USER=root ; COMMAND=/usr/bin/nvidia-smi -rgc" in log
    assert nv_state("spark2")["locked_clocks"] is None

    rc, out = playbook("site.yml", *CLOCKS, "--check")
    assert rc == 0, out[-3000:]
    counts = recap(out)
    assert counts["spark2"]["changed"] >= 1 and counts["spark1"]["changed"] == 0 and counts["spark3"]["changed"] == 0
    found = verdicts(out)
    assert found["spark2"].startswith("drift (manual -rgc by zurih (sudo) at "), found
    assert "after the unit's run" in found["spark2"]
    assert found["spark1"].startswith("locked (") and found["spark3"].startswith("locked (")
    assert nv_state("spark2")["locked_clocks"] is None, "check mode changed nothing"

    rc, out = playbook("site.yml", *CLOCKS)
    assert rc == 0, out[-3000:]
    assert recap(out)["spark2"]["changed"] >= 1 and recap(out)["spark1"]["changed"] == 0
    st = nv_state("spark2")
    assert st["locked_clocks"] == {"min": 0, "max": 2200} and st["history"][-1]["argv"] == ["nvidia-smi", "-lgc", "0,2200"]
    assert re.search(r"clock lock on spark2: locked \(unit applied 0,2200 at [^)]+ this boot, no later manual clock "
                     r"command\)", out)
    rc, out = playbook("site.yml", *CLOCKS, "--check")
    assert rc == 0 and recap(out)["spark2"]["changed"] == 0, out[-3000:]


def test_unlocked_really_resets_and_is_idempotent():
    rc, out = playbook("site.yml", *CLOCKS, "-e", "clock_lock_state=unlocked")
    assert rc == 0, out[-3000:]
    for host in HOSTS:
        st = nv_state(host)
        assert st["locked_clocks"] is None and st["history"][-1]["argv"] == ["nvidia-smi", "-rgc"], st["history"][-3:]
        assert sh(host, "systemctl is-enabled nvidia-clock-lock.service", check=False).strip() == "disabled"
    assert re.search(r"clock lock on spark3: unlocked \(-rgc by unit nvidia-clock-reset.service at [^,]+, after "
                     r"-lgc 0,2200 by unit nvidia-clock-lock.service at", flat(out)), out[-3000:]
    # the reset is in the journal as the reset unit's run
    assert "All done." in sh("spark3", "journalctl -b 0 --no-pager -o cat -u nvidia-clock-reset.service")

    rc, out = playbook("site.yml", *CLOCKS, "-e", "clock_lock_state=unlocked")
    assert rc == 0, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert nv_state("spark3")["history"][-1]["argv"] == ["nvidia-smi", "-rgc"]

    # back to the declared lock: the reset after the unit's run is drift, fixed by restarting the unit
    rc, out = playbook("site.yml", *CLOCKS)
    assert rc == 0, out[-3000:]
    for host in HOSTS:
        assert nv_state(host)["locked_clocks"] == {"min": 0, "max": 2200}
        assert sh(host, "systemctl is-enabled nvidia-clock-lock.service").strip() == "enabled"
        assert sh(host, "test -e /etc/systemd/system/nvidia-clock-reset.service && echo yes || echo no").strip() == "no"
    rc, out = playbook("site.yml", *CLOCKS)
    assert rc == 0 and all(c["changed"] == 0 for c in recap(out).values()), recap(out)


def test_a_unit_that_may_not_change_clocks_fails_naming_host_and_message():
    # Fault knob: nvidia-smi answers as for a caller without the privilege (exit 4, the real message).
    sh("spark3", "touch /var/lib/lab-nvidia/deny-clock-changes")
    try:
        p = sudo_as_login_user("spark3", ["systemctl", "restart", "nvidia-clock-lock.service"])
        assert p.returncode != 0
        rc, out = playbook("site.yml", *CLOCKS, "--check")
        assert rc == 0, out[-3000:]
        assert re.search(r"clock lock on spark3: drift \(nvidia-clock-lock.service run at [^)]*failed with exit "
                         r"status 4: The current user does not have permission to change clocks for GPU "
                         r"0000000F:01:00.0\.", flat(out)), out[-3000:]
        rc, out = playbook("site.yml", *CLOCKS)
        assert rc != 0
        assert re.search(r"spark3: the clock lock is not in force after restarting nvidia-clock-lock.service: "
                         r"nvidia-clock-lock.service run at [^:]+:\d\d:\d\d UTC failed with exit status 4: The "
                         r"current user does not have permission to change clocks for GPU 0000000F:01:00.0.", flat(out)), \
            out[-3000:]
        assert recap(out)["spark3"]["failed"] == 1 and recap(out)["spark1"]["failed"] == 0
    finally:
        sh("spark3", "rm -f /var/lib/lab-nvidia/deny-clock-changes")
    rc, out = playbook("site.yml", *CLOCKS)
    assert rc == 0, out[-3000:]
    assert nv_state("spark3")["history"][-1]["argv"] == ["nvidia-smi", "-lgc", "0,2200"]


def test_a_reset_without_sudo_shows_only_in_the_clock_of_a_busy_gpu():
    # A root shell leaves no sudo line: the journal cannot see this reset. On a busy GPU the SM clock
    # runs above the cap and gives it away; the role says so. (On an idle GPU nothing would.)
    busy = sh("spark1", "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits").strip()
    if busy == "0":
        pytest.skip("the engine stand-in is not running on spark1, its GPU reads idle")
    sh("spark1", "nvidia-smi -rgc")
    rc, out = playbook("site.yml", *CLOCKS, "--check")
    assert rc == 0, out[-3000:]
    found = verdicts(out)
    assert found["spark1"] == "drift (the SM clock reads 2418 MHz now, above the lock's maximum 2200 MHz)", found
    rc, out = playbook("site.yml", *CLOCKS)
    assert rc == 0 and nv_state("spark1")["locked_clocks"] == {"min": 0, "max": 2200}, out[-3000:]


def test_lock_is_applied_again_at_boot():
    # A reboot resets the GPU clocks; emulate that, restart the lab host, and only the unit can relock it.
    sh("spark1", "nvidia-smi -rgc")
    assert nv_state("spark1")["locked_clocks"] is None
    subprocess.run(["podman", "restart", "-t", "5", lab_container("spark1")], check=True, stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        state = sh("spark1", "systemctl is-system-running", check=False).strip()
        if state in ("running", "degraded"):
            break
        time.sleep(1)
    wait_for_ssh("spark1")
    st = nv_state("spark1")
    assert st["locked_clocks"] == {"min": 0, "max": 2200}
    assert st["history"][-1]["argv"][-2:] == ["-lgc", "0,2200"]
    # The role sees the unit's run of this boot (and none of the previous life of the host).
    rc, out = playbook("site.yml", *CLOCKS, "--check")
    assert rc == 0, out[-3000:]
    assert recap(out)["spark1"]["changed"] == 0
    assert verdicts(out)["spark1"].startswith("locked (unit applied 0,2200 at ")
