"""clock_lock: the managed unit is enabled and active, and the driver reports the inventory's lock."""
import re


def test_unit_is_managed_enabled_and_active(host):
    unit = host.file("/etc/systemd/system/nvidia-clock-lock.service")
    assert unit.content_string.startswith("# Ansible managed")
    assert "ExecStart=/usr/bin/nvidia-smi -lgc 0,2200" in unit.content_string
    assert "RemainAfterExit=yes" in unit.content_string
    assert host.run("systemctl is-enabled nvidia-clock-lock.service").stdout.strip() == "enabled"
    assert host.run("systemctl is-active nvidia-clock-lock.service").stdout.strip() == "active"


def test_driver_reports_the_lock(host):
    out = host.check_output("nvidia-smi -q -d CLOCK")
    assert re.search(r"GPU Clock Min\s*:\s*0 MHz", out)
    assert re.search(r"GPU Clock Max\s*:\s*2200 MHz", out)
