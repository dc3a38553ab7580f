"""drift.yml refuses to run without --check, and names what moved away from the declaration."""
import json

import pytest

from labhelpers import changed_tasks, lab, playbook, recap, sh


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("reset")
    rc, out = playbook("site.yml")  # converge once: from here on the fleet is what the repo declares
    assert rc == 0, out[-3000:]
    yield


def test_refuses_without_check_mode():
    rc, out = playbook("drift.yml")
    assert rc != 0 and "drift.yml only reports; run it with --check" in out


def test_no_drift_after_a_converge():
    rc, out = playbook("drift.yml", "--check")
    assert rc == 0, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)


def test_manual_changes_show_as_drift_and_are_left_alone():
    sh("spark2", "sudo -n nvidia-smi -rgc", user="zurih")  # through sudo: the journal shows who reset the clocks
    sh("spark1", "sed -i 's/^MAX_RUNNING_REQUESTS=4$/MAX_RUNNING_REQUESTS=6/' /home/mia/dsv41-3x-spark/.env")
    rc, out = playbook("drift.yml", "--check", "--diff")
    assert rc == 0, out[-3000:]
    assert recap(out)["spark2"]["changed"] >= 1
    assert "Re-apply the lock when it drifted from the inventory (e.g. a manual -rgc)" in " ".join(changed_tasks(out))
    assert "MAX_RUNNING_REQUESTS: 6 -> 4" in out
    # read-only: the drift is still there afterwards
    assert json.loads(sh("spark2", "cat /var/lib/lab-nvidia/state.json"))["locked_clocks"] is None  # lab-only record
    assert "MAX_RUNNING_REQUESTS=6" in sh("spark1", "cat /home/mia/dsv41-3x-spark/.env")
