"""clock_lock: the managed unit is enabled and active, and this boot's journal shows it applied the inventory's lock."""
import json


def test_unit_is_managed_enabled_and_active(host):
    unit = host.file("/etc/systemd/system/nvidia-clock-lock.service")
    assert unit.content_string.startswith("# Ansible managed")
    assert "ExecStart=/usr/bin/nvidia-smi -lgc 0,2200" in unit.content_string
    assert "RemainAfterExit=yes" in unit.content_string
    assert host.run("systemctl is-enabled nvidia-clock-lock.service").stdout.strip() == "enabled"
    assert host.run("systemctl is-active nvidia-clock-lock.service").stdout.strip() == "active"
    assert not host.file("/etc/systemd/system/nvidia-clock-reset.service").exists


def test_journal_shows_the_units_lock_this_boot(host):
    # The driver has no read-back of a lock: the evidence is the unit's own line in this boot's journal.
    with host.sudo():
        out = host.check_output("journalctl -b 0 --no-pager -o cat -u nvidia-clock-lock.service")
    assert 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2200)" for GPU 0000000F:01:00.0' in out
    assert "Locked Clocks" not in host.check_output("nvidia-smi -q -d CLOCK")


def test_lab_gpu_is_locked(host):
    # Lab only: the stand-in's own record of what was set (it prints none of it).
    state = json.loads(host.file("/var/lib/lab-nvidia/state.json").content_string)
    assert state["locked_clocks"] == {"min": 0, "max": 2200}
    assert state["history"][-1]["argv"] == ["nvidia-smi", "-lgc", "0,2200"]
