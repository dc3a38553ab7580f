"""The contention report's parsers (module_utils/host/contention.py, docker_ps, gpu_pollers, nvidia_smi,
journal_search, host_files, probe_runner) and the contention_report module (run through its entry point).

Command output is what the real tools print (docker 27 JSON lines, systemd 252, procps-ng ps);
the docker stand-in is also run for real to show the parser reads its ``ps``/``stats`` JSON.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import time
import pytest

from modrun import run_module

from ansible.module_utils.host import contention as ct
from ansible.module_utils.base import host_files
from ansible.module_utils.host import docker_ps, gpu_pollers, journal, nvidia_smi

import contention_report

ROOT = Path(__file__).resolve().parents[4]
DOCKER = ROOT / "lab" / "standins" / "docker"
SEED = ROOT / "lab" / "seed" / "host_seed.py"
GIB = 2 ** 30
MIB = 2 ** 20

# --------------------------------------------------------------------------------------------
# realistic outputs (spark3 as the report and host_seed.py describe it)
# --------------------------------------------------------------------------------------------
PS_JSON = "\n".join(json.dumps(r, separators=(",", ":")) for r in [
    {"Command": "\"python3 -m sglang.launch_server --model-path /srv/models/DeepSeek-V4.1-Flash\"",
     "CreatedAt": "2026-09-24 02:38:39 +0000 UTC", "ID": "a" * 64, "Image": "dsv41-sglang:tp3",
     "Labels": "", "LocalVolumes": "0", "Mounts": "/home/zurih/dsv41-3x-spark/engram,/srv/models",
     "Names": "dsv41-worker", "Networks": "host", "Ports": "", "RunningFor": "2 hours ago", "Size": "0B",
     "State": "running", "Status": "Up 2 hours"},
    {"Command": "\"/run.sh\"", "CreatedAt": "2026-08-30 09:14:02 +0000 UTC", "ID": "b" * 64,
     "Image": "grafana/grafana:11.2.0",
     "Labels": "com.docker.compose.project=monitoring,com.docker.compose.service=grafana,owner=ops",
     "LocalVolumes": "1", "Mounts": "grafana-data", "Names": "grafana", "Networks": "bridge",
     "Ports": "0.0.0.0:3000->3000/tcp", "RunningFor": "3 weeks ago", "Size": "0B", "State": "running",
     "Status": "Up 3 days"},
    {"Command": "\"/usr/bin/cadvisor -logtostderr\"", "CreatedAt": "2026-09-15 10:22:37 +0000 UTC",
     "ID": "c" * 64, "Image": "gcr.io/cadvisor/cadvisor:v0.49.1",
     "Labels": "com.docker.compose.project=monitoring,com.docker.compose.service=cadvisor",
     "LocalVolumes": "1", "Mounts": "cadvisor-data", "Names": "cadvisor", "Networks": "bridge",
     "Ports": "0.0.0.0:8081->8080/tcp", "RunningFor": "9 days ago", "Size": "0B", "State": "running",
     "Status": "Up 3 days"},
    {"Command": "\"start-notebook.py\"", "CreatedAt": "2026-09-09 13:31:08 +0000 UTC", "ID": "d" * 64,
     "Image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11", "Labels": "owner=zurih",
     "LocalVolumes": "1", "Mounts": "jupyterlab-data", "Names": "jupyterlab", "Networks": "bridge",
     "Ports": "", "RunningFor": "2 weeks ago", "Size": "0B", "State": "paused", "Status": "Up 3 days (Paused)"},
    {"Command": "\"postgres\"", "CreatedAt": "2026-09-21 08:14:00 +0000 UTC", "ID": "e" * 64,
     "Image": "postgres:16.4", "Labels": "", "LocalVolumes": "1", "Mounts": "postgres-data",
     "Names": "postgres", "Networks": "bridge", "Ports": "", "RunningFor": "3 days ago", "Size": "0B",
     "State": "exited", "Status": "Exited (0) 5 hours ago"},
]) + "\n"

STATS_JSON = "\n".join(json.dumps(r, separators=(",", ":")) for r in [
    {"BlockIO": "0B / 0B", "CPUPerc": "312.40%", "Container": "aaaaaaaaaaaa", "ID": "aaaaaaaaaaaa",
     "MemPerc": "92.10%", "MemUsage": "110.2GiB / 119.7GiB", "Name": "dsv41-worker", "NetIO": "0B / 0B",
     "PIDs": "212"},
    {"BlockIO": "12MB / 3MB", "CPUPerc": "0.41%", "Container": "bbbbbbbbbbbb", "ID": "bbbbbbbbbbbb",
     "MemPerc": "0.17%", "MemUsage": "212MiB / 119.7GiB", "Name": "grafana", "NetIO": "48MB / 9.1MB",
     "PIDs": "3"},
    {"BlockIO": "78MB / 14MB", "CPUPerc": "4.72%", "Container": "cccccccccccc", "ID": "cccccccccccc",
     "MemPerc": "0.12%", "MemUsage": "141.3MiB / 119.7GiB", "Name": "cadvisor", "NetIO": "1kB / 2kB",
     "PIDs": "31"},
    {"BlockIO": "--", "CPUPerc": "--", "Container": "dddddddddddd", "ID": "dddddddddddd",
     "MemPerc": "--", "MemUsage": "-- / --", "Name": "jupyterlab", "NetIO": "--", "PIDs": "--"},
]) + "\n"

MEMINFO = """MemTotal:       125523316 kB
MemFree:         2315012 kB
MemAvailable:    4330292 kB
Buffers:          102400 kB
Cached:          3011200 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""
PSI = """some avg10=12.50 avg60=8.31 avg300=3.02 total=98811234
full avg10=4.10 avg60=2.22 avg300=0.90 total=41236870
"""
LOADAVG = "3.52 3.18 2.97 4/1287 99120\n"

SELF = 4242          # the module's pid in the fake process table
PS_OUT = """      1       0 root            86400 /sbin/init
    812       1 zurih           81234 /usr/bin/python3 /usr/bin/nvidia-smi --query-gpu=utilization.gpu,clocks.sm,temperature.gpu --format=csv,noheader -l 2
    901       1 root            80000 /usr/sbin/gdm3
    950     901 mia             70000 watch -n 5 nvidia-smi
    977       1 zurih            6000 nvidia-smi dmon -d 3
   1001     990 zurih             120 grep --color=auto nvidia-smi
   1002       1 ops               300 sh -c nvidia-smi --loop-ms=500 >/dev/null
   1003       1 root               10 /usr/bin/nvidia-smi -lgc 0,2200
   4000       1 root               50 /usr/bin/python3 /root/.ansible/tmp/AnsiballZ_contention_report.py
   4242    4000 root               49 /usr/bin/python3 /root/.ansible/tmp/ansible_contention_report_payload.zip
   4300    4242 root                0 nvidia-smi -l 1
   4301    4242 root                0 ps -eo pid,ppid,user:32,etimes,args --no-headers
"""
CGROUPS = {
    812: "0::/system.slice/gpu-dashboard.service\n",
    950: "0::/user.slice/user-1001.slice/session-4.scope\n",
    977: "12:pids:/user.slice\n1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/smi-dmon.service\n",
}
JOURNAL_HIT = ("2026-09-24T01:33:54+0000 spark3 kernel[2211]: NVRM: _memdescAllocInternal: Out of memory: "
               "graphics context allocation failed [NV_ERR_NO_MEMORY] (0x00000051) at 01:33:54")


def fake_tree(tmp_path, psi=True, pids=CGROUPS):
    root = tmp_path / "root"
    (root / "proc" / "pressure").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text(MEMINFO)
    (root / "proc" / "loadavg").write_text(LOADAVG)
    if psi:
        (root / "proc" / "pressure" / "memory").write_text(PSI)
    for pid, text in pids.items():
        (root / "proc" / str(pid)).mkdir()
        (root / "proc" / str(pid) / "cgroup").write_text(text)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    return root


class FakeHost(object):
    """Dispatches argv lists to canned (rc, out, err); records every call."""

    def __init__(self, **over):
        self.calls = []
        self.table = {
            "docker ps": (0, PS_JSON, ""),
            "docker stats": (0, STATS_JSON, ""),
            "systemctl show": (0, "gdm.service\n", ""),
            "systemctl is-active": (0, "active\n", ""),
            "systemctl is-enabled": (0, "enabled\n", ""),
            "systemctl get-default": (0, "graphical.target\n", ""),
            "ps -eo": (0, PS_OUT, ""),
            "journalctl -g": (0, "-- Boot 3c1f --\n" + JOURNAL_HIT + "\n", ""),
            "journalctl all": (0, "", ""),
        }
        self.table.update(over)

    def key(self, args):
        exe = os.path.basename(args[0])
        if exe == "journalctl":
            return "journalctl -g" if "-g" in args else "journalctl all"
        return "%s %s" % ("docker" if args[0].endswith("docker") else exe, args[1])

    def __call__(self, args):
        self.calls.append(list(args))
        value = self.table.get(self.key(args), (None, "", "not found"))
        if isinstance(value, Exception):
            raise value
        return value


@pytest.fixture
def fsroot(tmp_path, monkeypatch):
    root = fake_tree(tmp_path)
    monkeypatch.setattr(host_files, "FS_ROOT", str(root))
    return root


# --------------------------------------------------------------------------------------------
# docker parsers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("1.2GiB / 119.7GiB", int(round(1.2 * GIB))),
    ("110.2GiB / 119.7GiB", int(round(110.2 * GIB))),
    ("141.3MiB / 119.7GiB", int(round(141.3 * MIB))),
    ("512KiB / 1GiB", 512 * 1024),
    ("0B / 0B", 0),
    ("17B / 1GiB", 17),
    ("12.3kB / 1GB", 12300),
    ("1.5MB / 2GB", 1500000),
    ("2GB / 4GB", 2 * 10 ** 9),
    ("1.1TiB / 2TiB", int(round(1.1 * 2 ** 40))),
    ("-- / --", None),
    ("--", None),
    ("", None),
    (None, None),
])
def test_mem_usage_units(text, expected):
    assert docker_ps.parse_mem_usage(text) == expected


def test_percent_and_size():
    assert docker_ps.parse_percent("312.40%") == 312.4 and docker_ps.parse_percent("0.00%") == 0.0
    assert docker_ps.parse_percent("--") is None and docker_ps.parse_percent(None) is None
    assert docker_ps.parse_size("3.5 GiB") == int(3.5 * GIB) and docker_ps.parse_size("7XB") is None


@pytest.mark.parametrize("text,expected", [
    ("", {}),
    ("owner=ops", {"owner": "ops"}),
    ("com.docker.compose.project=monitoring,com.docker.compose.service=grafana,owner=ops",
     {"com.docker.compose.project": "monitoring", "com.docker.compose.service": "grafana", "owner": "ops"}),
    ("owner=,team=ml", {"owner": "", "team": "ml"}),
    ("url=http://x/?a=b,owner=mia", {"url": "http://x/?a=b", "owner": "mia"}),
    ("hosts=a,b,c,owner=mia", {"hosts": "a,b,c", "owner": "mia"}),       # a comma inside a value
    ({"owner": "zurih"}, {"owner": "zurih"}),
])
def test_labels(text, expected):
    assert docker_ps.parse_labels(text) == expected


def test_parse_ps_realistic():
    rows = docker_ps.parse_ps(PS_JSON + "\nnot json\n")
    assert [r["name"] for r in rows] == ["dsv41-worker", "grafana", "cadvisor", "jupyterlab", "postgres"]
    g = rows[1]
    assert g["labels"]["owner"] == "ops" and g["labels"]["com.docker.compose.service"] == "grafana"
    assert g["created"] == "2026-08-30 09:14:02 +0000 UTC" and g["status"] == "Up 3 days"
    assert rows[4]["created"] == "2026-09-21 08:14:00 +0000 UTC" and rows[4]["state"] == "exited"
    assert rows[3]["state"] == "paused"


def test_ps_names_and_state_fallback():
    line = json.dumps({"Names": "web,proxy/web", "Status": "Up 2 hours (Paused)", "Labels": "",
                       "Image": "nginx", "CreatedAt": "2026-09-21 08:14:00 +0000 UTC"})
    (row,) = docker_ps.parse_ps(line)
    assert row["name"] == "web" and row["state"] == "paused"
    assert docker_ps._state_from_status("Exited (137) 2 days ago") == "exited"
    assert docker_ps._state_from_status("Up 5 seconds") == "running"


def test_container_records_owner_and_stats():
    recs = docker_ps.container_records(docker_ps.parse_ps(PS_JSON), docker_ps.parse_stats(STATS_JSON),
                                owners={"cadvisor": "ops", "postgres": "mia", "grafana": "ignored"})
    by = dict((r["name"], r) for r in recs)
    assert (by["grafana"]["owner"], by["grafana"]["owner_source"]) == ("ops", "label")
    assert (by["cadvisor"]["owner"], by["cadvisor"]["owner_source"]) == ("ops", "inventory")
    assert (by["postgres"]["owner"], by["postgres"]["owner_source"]) == ("mia", "inventory")
    assert by["dsv41-worker"]["owner"] is None and by["dsv41-worker"]["owner_source"] == "unknown"
    assert by["dsv41-worker"]["serving"] is True and by["grafana"]["serving"] is False
    assert by["cadvisor"]["cpu_percent"] == 4.72 and by["cadvisor"]["mem_bytes"] == int(round(141.3 * MIB))
    assert by["postgres"]["cpu_percent"] is None and by["postgres"]["mem_bytes"] is None   # exited
    assert by["jupyterlab"]["cpu_percent"] is None and by["jupyterlab"]["mem_bytes"] is None  # "--"
    tot = docker_ps.docker_totals(recs)
    assert tot["non_serving_count"] == 4 and tot["non_serving_running_count"] == 3
    assert tot["serving"] == ["dsv41-worker"] and tot["serving_running"] == ["dsv41-worker"]
    assert tot["non_serving_mem_bytes"] == 212 * MIB + int(round(141.3 * MIB))
    assert tot["non_serving_cpu_percent"] == 5.13


def test_docker_missing_and_daemon_down():
    miss = docker_ps.gather_docker(FakeHost(**{"docker ps": (None, "", "docker: not found")}))
    assert miss["docker_available"] is False and miss["containers"] == [] and miss["non_serving_count"] == 0
    assert "not found" in miss["docker_error"]
    down = docker_ps.gather_docker(FakeHost(**{"docker ps": (1, "", "Cannot connect to the Docker daemon at "
                                                             "unix:///var/run/docker.sock.")}))
    assert down["docker_available"] is False and "Cannot connect" in down["docker_error"]
    nostats = docker_ps.gather_docker(FakeHost(**{"docker stats": (1, "", "boom")}))
    assert nostats["docker_available"] is True and len(nostats["containers"]) == 5
    assert all(c["cpu_percent"] is None for c in nostats["containers"]) and "stats" in nostats["docker_error"]


def test_no_stats_call_without_running_containers():
    host = FakeHost(**{"docker ps": (0, PS_JSON.splitlines()[-1] + "\n", "")})
    res = docker_ps.gather_docker(host)
    assert [c[1] for c in host.calls] == ["ps"] and res["non_serving_running_count"] == 0


# --------------------------------------------------------------------------------------------
# /proc, systemd
# --------------------------------------------------------------------------------------------
def test_loadavg():
    assert ct.parse_loadavg(LOADAVG) == {"load1": 3.52, "load5": 3.18, "load15": 2.97, "running": 4, "total": 1287}
    assert ct.parse_loadavg("") is None


def test_psi_present_and_absent(tmp_path, monkeypatch):
    psi = ct.parse_psi(PSI)
    assert psi["some"] == {"avg10": 12.5, "avg60": 8.31, "avg300": 3.02, "total": 98811234}
    assert psi["full"]["total"] == 41236870 and psi["full"]["avg10"] == 4.1
    assert ct.parse_psi("") is None and ct.parse_psi(None) is None
    root = fake_tree(tmp_path, psi=False)
    monkeypatch.setattr(host_files, "FS_ROOT", str(root))
    assert host_files.read_text("/proc/pressure/memory") is None
    (root / "proc" / "pressure" / "memory").mkdir()             # unreadable as a file
    assert ct.parse_psi(host_files.read_text("/proc/pressure/memory")) is None


@pytest.mark.parametrize("text,unit", [
    ("0::/system.slice/gpu-dashboard.service\n", "gpu-dashboard.service"),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/smi.service\n", "smi.service"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/gpu-dashboard.service\n",
     "gpu-dashboard.service"),
    ("0::/\n", None),
    ("", None),
])
def test_unit_from_cgroup(text, unit):
    assert gpu_pollers.unit_from_cgroup(text) == unit


def test_display_manager_paths(fsroot):
    dm = ct.gather_display_manager(FakeHost())
    assert dm == {"unit": "gdm.service", "source": "systemctl", "active": True, "active_state": "active",
                  "enabled": True, "enabled_state": "enabled"}
    old = ct.gather_display_manager(FakeHost(**{"systemctl show": (0, "Id=lightdm.service\n", "")}))
    assert old["unit"] == "lightdm.service"
    # systemctl knows no alias: the symlink names the unit
    os.symlink("/usr/lib/systemd/system/gdm3.service", str(fsroot / "etc/systemd/system/display-manager.service"))
    host = FakeHost(**{"systemctl show": (0, "display-manager.service\n", ""),
                       "systemctl is-active": (3, "inactive\n", ""),
                       "systemctl is-enabled": (1, "disabled\n", "")})
    dm = ct.gather_display_manager(host)
    assert dm["unit"] == "gdm3.service" and dm["source"] == "link"
    assert dm["active"] is False and dm["active_state"] == "inactive" and dm["enabled"] is False
    assert ["systemctl", "is-active", "gdm3.service"] in host.calls


def test_no_display_manager_no_systemd(tmp_path, monkeypatch):
    monkeypatch.setattr(host_files, "FS_ROOT", str(fake_tree(tmp_path)))
    host = FakeHost(**{"systemctl show": (None, "", ""), "systemctl get-default": (None, "", "")})
    assert ct.gather_display_manager(host)["unit"] is None
    assert ct.gather_default_target(host) is None
    assert ct.gather_default_target(FakeHost()) == "graphical.target"


# --------------------------------------------------------------------------------------------
# pollers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,expected", [
    (["--query-gpu=utilization.gpu", "--format=csv,noheader", "-l", "2"], (True, 2.0)),
    (["-l", "0.5"], (True, 0.5)),
    (["-l=7"], (True, 7.0)),
    (["--loop=5"], (True, 5.0)),
    (["--loop", "5"], (True, 5.0)),
    (["-lms", "500"], (True, 0.5)),
    (["-lms=250"], (True, 0.25)),
    (["--loop-ms=250"], (True, 0.25)),
    (["--loop-ms", "100"], (True, 0.1)),
    (["-q", "-d", "CLOCK", "-l", "10"], (True, 10.0)),
    (["-l"], (True, None)),
    (["dmon"], (True, 1.0)),
    (["dmon", "-s", "u", "-d", "3"], (True, 3.0)),
    (["pmon", "-d", "2", "-c", "5"], (True, 2.0)),
    ([], (False, None)),
    (["--query-gpu=name", "--format=csv"], (False, None)),
    (["-lgc", "0,2200"], (False, None)),
    (["-q", "-d", "PERFORMANCE"], (False, None)),
])
def test_smi_interval_all_flag_forms(args, expected):
    assert nvidia_smi.smi_interval(args) == expected


@pytest.mark.parametrize("argv,smi_args", [
    (["nvidia-smi", "-l", "2"], ["-l", "2"]),
    (["/usr/bin/nvidia-smi"], []),
    (["/usr/bin/python3", "/usr/bin/nvidia-smi", "-l", "2"], ["-l", "2"]),          # the lab stand-in
    (["sh", "-c", "nvidia-smi --loop-ms=500 >/dev/null"], ["--loop-ms=500", ">/dev/null"]),
    (["watch", "-n", "5", "nvidia-smi"], []),
    (["watch", "-n", "5", "nvidia-smi -q"], ["-q"]),
    (["sudo", "-u", "zurih", "/usr/bin/nvidia-smi", "-lms", "200"], ["-lms", "200"]),
    (["grep", "--color=auto", "nvidia-smi"], None),
    (["less", "/tmp/nvidia-smi.log"], None),
    (["bash", "-c", "echo nvidia-smi"], None),
    ([], None),
])
def test_smi_invocation(argv, smi_args):
    inv = nvidia_smi.smi_invocation(argv)
    assert (inv[1] if inv else None) == smi_args


def test_watch_interval():
    assert nvidia_smi.watch_interval(["watch", "-n", "5"]) == 5.0
    assert nvidia_smi.watch_interval(["/usr/bin/watch", "--interval=0.5"]) == 0.5
    assert nvidia_smi.watch_interval(["watch", "-n1"]) == 1.0
    assert nvidia_smi.watch_interval(["watch"]) == 2.0
    assert nvidia_smi.watch_interval(["sudo"]) is None and nvidia_smi.watch_interval([]) is None


def test_find_pollers_excludes_own_tree(fsroot):
    procs = gpu_pollers.parse_ps_procs(PS_OUT)
    assert procs[1] == {"pid": 812, "ppid": 1, "user": "zurih", "elapsed_s": 81234, "argv": None,
                        "args": "/usr/bin/python3 /usr/bin/nvidia-smi --query-gpu=utilization.gpu,clocks.sm,"
                                "temperature.gpu --format=csv,noheader -l 2"}
    tree = gpu_pollers.own_tree(procs, SELF)
    assert {4000, 4242, 4300, 4301, 1} <= tree and 812 not in tree
    pollers = gpu_pollers.find_pollers(procs, tree)
    by = dict((p["pid"], p) for p in pollers)
    assert sorted(by) == [812, 950, 977, 1002, 1003]            # grep and the module's child left out
    assert (by[812]["interval_s"], by[812]["unit"], by[812]["user"]) == (2.0, "gpu-dashboard.service", "zurih")
    assert (by[950]["interval_s"], by[950]["unit"]) == (5.0, None)          # watch -n 5
    assert (by[977]["interval_s"], by[977]["unit"]) == (3.0, "smi-dmon.service")
    assert by[1002]["interval_s"] == 0.5
    assert by[1003]["looping"] is False and by[1003]["interval_s"] is None  # one-shot -lgc


def test_pollers_prefer_proc_cmdline(fsroot):
    (fsroot / "proc" / "812" / "cmdline").write_bytes(b"/usr/bin/nvidia-smi\0--loop-ms=1500\0")
    (p,) = gpu_pollers.find_pollers(gpu_pollers.parse_ps_procs(PS_OUT.splitlines()[1]))
    assert p["interval_s"] == 1.5


def test_pollers_from_proc_when_ps_is_missing(fsroot):
    (fsroot / "proc" / "uptime").write_text("90000.00 1000.00\n")
    d = fsroot / "proc" / "812"
    (d / "cmdline").write_bytes(b"/usr/bin/python3\0/usr/bin/nvidia-smi\0--format=csv\0-l\0002\0")
    (d / "stat").write_text("812 (python3) S 1 812 812 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n"
                            % (8000 * os.sysconf("SC_CLK_TCK")))
    (fsroot / "proc" / "13").mkdir()
    (fsroot / "proc" / "13" / "cmdline").write_bytes(b"")         # a kernel thread
    pollers, source = gpu_pollers.gather_pollers(FakeHost(**{"ps -eo": (None, "", "")}), self_pid=SELF)
    assert source == "/proc"
    (p,) = pollers
    assert (p["pid"], p["interval_s"], p["elapsed_s"], p["unit"]) == (812, 2.0, 82000, "gpu-dashboard.service")
    assert p["args"] == "/usr/bin/python3 /usr/bin/nvidia-smi --format=csv -l 2"


# --------------------------------------------------------------------------------------------
# journal
# --------------------------------------------------------------------------------------------
def test_journal_grep():
    host = FakeHost()
    ev = journal.gather_journal(host, "NV_ERR_NO_MEMORY", "-7d")
    assert host.calls == [["journalctl", "--no-pager", "-o", "short-iso", "--since", "-7d", "-g", "NV_ERR_NO_MEMORY"]]
    assert ev["readable"] is True and ev["method"] == "grep" and ev["count"] == 1
    assert ev["lines"] == [JOURNAL_HIT] and ev["since"] == "-7d"


def test_journal_no_match_is_readable():
    ev = journal.gather_journal(FakeHost(**{"journalctl -g": (1, "-- No entries --\n", "")}), "NV_ERR_NO_MEMORY")
    assert ev["readable"] is True and ev["count"] == 0 and ev["lines"] == []


@pytest.mark.parametrize("err", ["Compiled without pattern matching support",
                                 "journalctl: invalid option -- 'g'",
                                 "Pattern matching not supported"])
def test_journal_fallback_without_grep(err):
    whole = "\n".join(["-- Logs begin at Mon 2026-09-21 06:02:00 UTC. --",
                       "2026-09-24T01:30:00+0000 spark3 systemd[1]: Started gpu-dashboard.service.",
                       JOURNAL_HIT,
                       "2026-09-24T01:40:00+0000 spark3 kernel[2211]: nv_err_no_memory lowercase",
                       "-- Reboot --"]) + "\n"
    host = FakeHost(**{"journalctl -g": (1, "", err + "\n"), "journalctl all": (0, whole, "")})
    ev = journal.gather_journal(host, "NV_ERR_NO_MEMORY", "-7d")
    assert ev["method"] == "python" and ev["readable"] is True
    assert ev["lines"] == [JOURNAL_HIT] and ev["count"] == 1             # upper-case pattern: case-sensitive
    assert host.calls[1] == ["journalctl", "--no-pager", "-o", "short-iso", "--since", "-7d"]
    host = FakeHost(**{"journalctl -g": (1, "", err + "\n"), "journalctl all": (0, whole, "")})
    assert journal.gather_journal(host, "nv_err_no_memory")["count"] == 2     # lower-case: smart case
    host = FakeHost(**{"journalctl -g": (1, "", err + "\n"), "journalctl all": (0, whole, "")})
    assert journal.gather_journal(host, "[NV_ERR")["count"] == 1              # bad regex: literal


def test_journal_unreadable_or_missing():
    denied = FakeHost(**{"journalctl -g": (1, "", "No journal files were opened due to insufficient permissions.\n")})
    ev = journal.gather_journal(denied, "NV_ERR_NO_MEMORY")
    assert ev["readable"] is False and ev["count"] == 0 and "insufficient permissions" in ev["note"]
    ev = journal.gather_journal(FakeHost(**{"journalctl -g": (None, "", "")}), "NV_ERR_NO_MEMORY")
    assert ev["readable"] is False and "not found" in ev["note"]
    hint = ("Hint: You are currently not seeing messages from other users and the system.\n"
            "      Users in groups 'adm', 'systemd-journal' can see all messages.\n")
    ev = journal.gather_journal(FakeHost(**{"journalctl -g": (0, "-- No entries --\n", hint)}), "NV_ERR_NO_MEMORY")
    assert ev["readable"] is True and ev["note"].startswith("partial journal")


def test_journal_lines_capped():
    many = "".join("2026-09-24T01:%02d:00+0000 spark3 kernel: NV_ERR_NO_MEMORY %d\n" % (i % 60, i) for i in range(120))
    ev = journal.gather_journal(FakeHost(**{"journalctl -g": (0, many, "")}), "NV_ERR_NO_MEMORY")
    assert ev["count"] == 120 and len(ev["lines"]) == journal.MAX_EVENT_LINES and ev["truncated"] is True
    assert ev["lines"][-1].endswith(" 119")


# --------------------------------------------------------------------------------------------
# the module through its entry point
# --------------------------------------------------------------------------------------------
def run(monkeypatch, args, host, check_mode=False):
    monkeypatch.setattr(os, "getpid", lambda: SELF)
    out = run_module(contention_report.main, args, check_mode=check_mode, run_command=host)
    assert all(isinstance(c, list) and not kw.get("use_unsafe_shell") for c, kw in zip(out["_calls"], out["_kwargs"]))
    return out


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_spark3(monkeypatch, fsroot, check_mode):
    host = FakeHost()
    res = run(monkeypatch, {"owners": {"cadvisor": "ops"}, "journal_since": "-7d",
                                    "host_label": "spark3"}, host, check_mode=check_mode)
    assert not res.get("failed") and res["changed"] is False
    assert res["docker_available"] is True and len(res["containers"]) == 5
    c = dict((x["name"], x) for x in res["containers"])["cadvisor"]
    assert (c["owner"], c["owner_source"], c["state"], c["status"]) == ("ops", "inventory", "running", "Up 3 days")
    assert c["created"] == "2026-09-15 10:22:37 +0000 UTC"
    assert res["non_serving_count"] == 4 and res["non_serving_running_count"] == 3
    assert res["serving"] == ["dsv41-worker"] and res["non_serving_cpu_percent"] == 5.13
    assert res["display_manager"]["unit"] == "gdm.service" and res["display_manager"]["active"] is True
    assert res["default_target"] == "graphical.target"
    assert res["memory"]["mem_available_gib"] == 4.13 and res["psi"]["some"]["avg10"] == 12.5
    assert res["load"]["total"] == 1287
    assert [p["pid"] for p in res["gpu_pollers"]] == [812, 950, 977, 1002, 1003]
    assert res["nv_err_events"]["count"] == 1 and res["journal_readable"] is True
    s = res["summary"]
    assert s == {"host": "spark3", "docker_available": True, "containers": 5, "non_serving": 4,
                 "non_serving_running": 3, "non_serving_mem_gib": res["non_serving_mem_gib"],
                 "non_serving_cpu_percent": 5.13, "serving_running": ["dsv41-worker"],
                 "mem_available_gib": 4.13, "psi_some_avg10": 12.5, "display_manager": "gdm.service",
                 "display_manager_active": True, "default_target": "graphical.target", "gpu_pollers": 5,
                 "min_poll_interval_s": 0.5, "nv_err_count": 1, "journal_readable": True}
    assert any("gdm.service is active" in f for f in res["findings"])
    assert any("gpu-dashboard.service" in f for f in res["findings"])
    # read-only commands only, never through a shell, "$" and "~" left alone
    verbs = sorted(set(" ".join(cmd[:2]) for cmd in host.calls))
    assert verbs == ["docker ps", "docker stats", "journalctl --no-pager", "ps -eo", "systemctl get-default",
                     "systemctl is-active", "systemctl is-enabled", "systemctl show"]
    assert all(kw.get("expand_user_and_vars") is False for kw in res["_kwargs"])


def test_module_without_docker_psi_or_journal(monkeypatch, tmp_path):
    monkeypatch.setattr(host_files, "FS_ROOT", str(fake_tree(tmp_path, psi=False)))
    host = FakeHost(**{"docker ps": OSError(2, "No such file or directory"),
                       "journalctl -g": (1, "", "No journal files were opened due to insufficient permissions.\n")})
    res = run(monkeypatch, {"docker_bin": "/opt/nodocker/docker", "host_label": "spark1"}, host,
              check_mode=True)
    assert not res.get("failed") and res["changed"] is False
    assert res["docker_available"] is False and res["containers"] == [] and res["non_serving_count"] == 0
    assert "/opt/nodocker/docker" in res["docker_error"]
    assert res["psi"] is None and res["summary"]["psi_some_avg10"] is None
    assert res["journal_readable"] is False and res["nv_err_events"]["count"] == 0
    assert res["summary"]["nv_err_count"] == 0 and res["summary"]["containers"] == 0


def test_module_rejects_unknown_and_empty(monkeypatch, fsroot):
    res = run(monkeypatch, {"bogus": 1}, FakeHost())
    assert res["failed"] is True and "bogus" in res["msg"]
    res = run(monkeypatch, {"journal_pattern": "", "host_label": "spark3"}, FakeHost())
    assert res["failed"] is True and res["msg"] == "spark3: journal_pattern is empty"


# --------------------------------------------------------------------------------------------
# the lab docker stand-in, for real (its ps/stats JSON is what the real docker prints)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark3_docker(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark3")
    subprocess.run([sys.executable, str(SEED), "--host", "spark3", "--root", str(root)], check=True,
                   capture_output=True, text=True, timeout=120)
    env = dict(os.environ, LAB_DOCKER_STATE_DIR=str(root / "var" / "lib" / "lab-docker"))

    def docker(*args):
        p = subprocess.run([sys.executable, str(DOCKER)] + list(args), env=env, text=True,
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout
    docker.env = env
    return docker


def test_standin_ps_and_stats_parse(spark3_docker):
    rows = docker_ps.parse_ps(spark3_docker("ps", "-a", "--no-trunc", "--format", "{{json .}}"))
    stats = docker_ps.parse_stats(spark3_docker("stats", "--no-stream", "--format", "{{json .}}"))
    recs = docker_ps.container_records(rows, stats, owners={"netdata": "ops"})
    by = dict((r["name"], r) for r in recs)
    assert len(recs) == 20 and by["dsv41-worker"]["serving"] and by["dsv41-worker"]["state"] == "exited"
    non = [r for r in recs if not r["serving"]]
    assert len(non) == 19 and all(r["state"] == "running" for r in non)
    assert sum(1 for r in non if r["owner_source"] == "label") == 12
    assert (by["netdata"]["owner"], by["netdata"]["owner_source"]) == ("ops", "inventory")
    assert by["grafana"]["labels"]["com.docker.compose.project"] == "monitoring"
    assert by["cadvisor"]["cpu_percent"] == 4.72 and by["prometheus"]["cpu_percent"] == 0.83
    # host_seed: 1126 MiB + 1024 * (37 * 1 % 997) bytes, printed as "1.1GiB" (4 significant digits)
    assert abs(by["prometheus"]["mem_bytes"] - (1126 * MIB + 37 * 1024)) < 0.001 * GIB
    assert all(isinstance(r["mem_bytes"], int) and r["mem_bytes"] > 0 for r in non)
    assert by["dsv41-worker"]["cpu_percent"] is None
    assert by["redis"]["created"] == "2026-09-17 07:51:26 +0000 UTC"
    assert by["grafana"]["status"].startswith("Up ")


def test_standin_through_the_module(monkeypatch, fsroot, spark3_docker):
    """docker commands go to the stand-in for real; the rest is canned."""
    monkeypatch.setenv("LAB_DOCKER_STATE_DIR", spark3_docker.env["LAB_DOCKER_STATE_DIR"])
    host = FakeHost()

    def run_command(cmd):
        if cmd[0] == str(DOCKER):
            res = subprocess.run([sys.executable] + cmd, capture_output=True, text=True, timeout=60)
            return res.returncode, res.stdout, res.stderr
        return host(cmd)
    res = run_module(contention_report.main, {"docker_bin": str(DOCKER), "host_label": "spark3"},
                     check_mode=True, run_command=run_command)
    calls = res["_calls"]
    assert not res.get("failed"), res.get("msg")
    assert res["docker_available"] is True and res["docker_error"] is None
    assert res["non_serving_count"] == 19 and res["non_serving_running_count"] == 19
    assert res["serving"] == ["dsv41-worker"] and res["serving_running"] == []
    assert 9.0 < res["non_serving_mem_gib"] < 11.0
    assert res["summary"]["non_serving_running"] == 19
    assert [c[1] for c in calls if c[0] == str(DOCKER)] == ["ps", "stats"]


def test_ansible_invocation_lines_are_not_events():
    from ansible.module_utils.host import journal
    out = ("2026-11-29T09:59:47+0000 spark1 ansible-contention_report[565]: Invoked with journal_pattern=NV_ERR_NO_MEMORY\n"
           "2026-11-29T09:21:33+0000 spark3 kernel[1]: NVRM: graphics context allocation failed [NV_ERR_NO_MEMORY] at 01:33:54\n")
    lines = journal.journal_lines(out)
    assert len(lines) == 1 and "kernel[1]" in lines[0]


def test_probe_commands_run_under_a_time_limit(tmp_path):
    import shutil
    from ansible.module_utils.base.probe import make_runner
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout is not installed here")
    calls = []

    class Module(object):
        def run_command(self, args, **kw):
            calls.append(args)
            return 124, "", ""

    rc, out, err = make_runner(Module(), timeout=5)(["sleep", "100"])
    assert calls[0][1:3] == ["--kill-after=10", "5s"] and calls[0][3:] == ["sleep", "100"]
    assert rc == 124 and err == "sleep: no answer within 5 s (killed)"


    class RealModule(object):
        def run_command(self, args, **kw):
            res = subprocess.run(args, capture_output=True, text=True)
            return res.returncode, res.stdout, res.stderr

    t0 = time.monotonic()
    rc, _out, err = make_runner(RealModule(), timeout=1)(["sleep", "30"])
    assert rc == 124 and "no answer within 1 s" in err and time.monotonic() - t0 < 15
