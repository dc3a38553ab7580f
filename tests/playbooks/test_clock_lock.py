"""clock_lock through site.yml on the lab: idempotent, unlock/relock, and re-applied at boot."""
import json
import re
import subprocess
import time

import pytest

from labhelpers import lab, lab_container, playbook, recap, sh


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("up")
    yield


def applied(host):
    out = sh(host, "nvidia-smi -q -d CLOCK")
    lo = re.search(r"GPU Clock Min\s*:\s*(\d+ MHz|N/A)", out).group(1)
    hi = re.search(r"GPU Clock Max\s*:\s*(\d+ MHz|N/A)", out).group(1)
    return lo, hi


def test_converge_then_second_run_reports_no_change():
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert all(applied(h) == ("0 MHz", "2200 MHz") for h in ("spark1", "spark2", "spark3"))


def test_manual_reset_is_seen_as_drift_in_check_mode_and_fixed_by_converge():
    sh("spark2", "nvidia-smi -rgc")
    rc, out = playbook("site.yml", "--check")
    assert rc == 0, out[-3000:]
    assert recap(out)["spark2"]["changed"] >= 1 and recap(out)["spark1"]["changed"] == 0
    assert applied("spark2") == ("N/A", "N/A")  # check mode changed nothing
    rc, out = playbook("site.yml")
    assert rc == 0 and applied("spark2") == ("0 MHz", "2200 MHz")


def test_unlock_then_lock_again():
    rc, out = playbook("site.yml", "-e", "clock_lock_state=unlocked")
    assert rc == 0, out[-3000:]
    assert applied("spark3") == ("N/A", "N/A")
    assert sh("spark3", "systemctl is-enabled nvidia-clock-lock.service", check=False).strip() == "disabled"
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    assert applied("spark3") == ("0 MHz", "2200 MHz")
    assert sh("spark3", "systemctl is-enabled nvidia-clock-lock.service").strip() == "enabled"


def test_lock_is_applied_again_at_boot():
    # A reboot resets the GPU clocks; emulate that, restart the lab host, and only the unit can relock it.
    sh("spark1", "nvidia-smi -rgc")
    assert applied("spark1") == ("N/A", "N/A")
    subprocess.run(["podman", "restart", "-t", "5", lab_container("spark1")], check=True, stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        state = sh("spark1", "systemctl is-system-running", check=False).strip()
        if state in ("running", "degraded"):
            break
        time.sleep(1)
    assert applied("spark1") == ("0 MHz", "2200 MHz")
    history = json.loads(sh("spark1", "cat /var/lib/lab-nvidia/state.json"))["history"]
    assert history[-1]["argv"][-2:] == ["-lgc", "0,2200"]
