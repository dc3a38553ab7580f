"""The lab reproduces the fleet state of the 2026-09-24 report (SPEC sections 1 and 5).

Run against the lab after `make lab-up` (read-only; `make lab-tests` does both):
    pytest tests/testinfra --hosts=ansible://dsv41_ranks --ansible-inventory=inventory/lab --connection=ansible
"""
import json
import re

import pytest

from ansible.module_utils.engine_log import scan

GIB = 1 << 30
REPORT_MEM_AVAILABLE_GIB = {"spark1": 3.07, "spark2": 7.55, "spark3": 4.13}
REPORT_SETTINGS = {
    "TP_SIZE": "3", "EP_SIZE": "3", "DSPARK_BLOCK_SIZE": "3", "MAX_RUNNING_REQUESTS": "4",
    "CHUNKED_PREFILL_SIZE": "1024", "MAX_TOTAL_TOKENS": "750000", "MEM_FRACTION_STATIC": "0.95",
    "MOE_RUNNER_BACKEND": "b12x", "DSV41_CACHE_GIB": "0",
}
ADAPTER_SWITCHES = ("DSV41_AUTOTUNE_KEEP", "DSV41_FOLDED_FENCE", "DSV41_WO_A_W8", "DSV41_WO_A_W8_MID",
                    "DSV41_WO_A_W8_DROP", "DSV41_ENGRAM_PREFETCH", "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY")


def hostvars(host):
    return host.ansible.get_variables()


def test_systemd_running_and_own_hostname(host):
    assert host.check_output("hostname") == host.backend.get_hostname()
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state == "running", host.run("systemctl --failed --no-legend").stdout


def test_login_user_matches_inventory(host):
    assert host.check_output("id -un") == hostvars(host)["dsv41_login_user"]
    assert host.user(hostvars(host)["dsv41_login_user"]).uid == 1000


def test_mem_available_matches_report(host):
    name = host.backend.get_hostname()
    meminfo = dict(line.split(":", 1) for line in host.file("/proc/meminfo").content_string.splitlines())
    avail_kb = int(meminfo["MemAvailable"].split()[0])
    assert round(avail_kb * 1024 / GIB, 2) == REPORT_MEM_AVAILABLE_GIB[name]


def test_clock_lock_unit_active_and_enabled(host):
    unit = host.service("nvidia-clock-lock.service")
    assert unit.is_running or host.run("systemctl is-active nvidia-clock-lock.service").stdout.strip() == "active"
    assert unit.is_enabled
    assert "ExecStart=/usr/bin/nvidia-smi -lgc 0,2200" in host.file("/etc/systemd/system/nvidia-clock-lock.service").content_string


def test_serving_container_mounts_the_declared_engram_dir(host):
    hv = hostvars(host)
    name = "dsv41-head" if hv["dsv41_rank"] == 0 else "dsv41-worker"
    info = json.loads(host.check_output(f"docker inspect {name}"))[0]
    sources = [m["Source"] for m in info["Mounts"] if m["Destination"] == "/engram"]
    assert sources == [hv["dsv41_engram_dir"]]


def test_engram_dirs_hold_no_tp3_shard(host):
    engram_dir = hostvars(host)["dsv41_engram_dir"]
    assert host.file(engram_dir).is_directory
    assert not [f for f in host.file(engram_dir).listdir() if re.match(r"engram-l\d+-r\d+of3\.bin$", f)]


@pytest.mark.parametrize("host_name", ["spark2"])
def test_spark2_free_space_is_the_report_figure(host, host_name):
    if host.backend.get_hostname() != host_name:
        pytest.skip("spark2 only")
    free = host.check_output(
        "python3 -c 'import os; s=os.statvfs(\"/home/zurih/dsv41-3x-spark/engram\"); print(s.f_bavail*s.f_frsize)'")
    assert int(free) == 64_906_600_448


def test_spark2_tp2_shards_outside_engram_source(host):
    if host.backend.get_hostname() != "spark2":
        pytest.skip("spark2 only")
    files = {f: host.file(f"/home/zurih/dsv41-engram/{f}").size for f in ("engram-l1-r1of2.bin", "engram-l14-r1of2.bin")}
    assert sum(files.values()) == 101_379_024_656  # about 101.38 GB, as the report says
    info = json.loads(host.check_output("docker inspect dsv41-worker"))[0]
    source = [m["Source"] for m in info["Mounts"] if m["Destination"] == "/engram"][0]
    assert not source.startswith("/home/zurih/dsv41-engram")


def test_spark3_desktop_and_contention(host):
    if host.backend.get_hostname() != "spark3":
        pytest.skip("spark3 only")
    assert host.run("systemctl is-active display-manager.service").stdout.strip() == "active"
    assert host.check_output("systemctl get-default") == "graphical.target"
    names = host.check_output("docker ps --format '{{.Names}}'").split()
    non_serving = [n for n in names if not n.startswith("dsv41-")]
    assert len(non_serving) == 19, names
    assert "dsv41-worker" in names


def test_other_hosts_boot_to_multi_user(host):
    if host.backend.get_hostname() == "spark3":
        pytest.skip("spark3 is the desktop host")
    assert host.check_output("systemctl get-default") == "multi-user.target"


def test_head_launcher_env_holds_report_configuration(host):
    if hostvars(host)["dsv41_rank"] != 0:
        pytest.skip("head only")
    env_file = host.file("/home/mia/dsv41-3x-spark/.env")
    assert env_file.mode == 0o600
    settings = {}
    for line in env_file.content_string.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            settings[key] = value.strip('"')
    for key, value in REPORT_SETTINGS.items():
        assert settings.get(key) == value, key
    for switch in ADAPTER_SWITCHES:
        assert settings.get(switch, "0") == "0", switch


def test_head_saved_boot_log_matches_report(host):
    if hostvars(host)["dsv41_rank"] != 0:
        pytest.skip("head only")
    text = host.file("/home/mia/dsv41-3x-spark/logs/dsv41.log").content_string
    # read with the project's one engine-log reader: the latest boot, in the real engine's format
    facts = scan.scan_text(text, name="spark1:logs/dsv41.log", count_boots=True)
    assert facts.marker_found and facts.boots_seen >= 2
    assert facts.pool["full"] == 491520 and facts.pool_count == 2
    assert facts.max_total["max_total_num_tokens"] == 491520
    assert facts.server_args["max_total_tokens"] == 750000
    assert facts.memory["available_bytes"] == "1.04 GB"
    assert facts.autotune["disagree"] == 2
    assert [facts.engram[layer]["packed"] for layer in (1, 14)] == [False, False]
