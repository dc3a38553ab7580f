"""The lab's nvidia-smi prints what the real one prints (driver 580.x on a GB10, SPEC section 3 "Clocks").

Run on the control machine against a private state directory (``LAB_NVIDIA_STATE_DIR``);
``LAB_NVIDIA_BUSY`` fixes whether an engine counts as running, whatever else runs on this machine.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NVSMI = Path(__file__).resolve().parents[3] / "lab" / "standins" / "nvidia-smi"
BUS = "0000000F:01:00.0"
NO_PERMISSION = "The current user does not have permission to change clocks for GPU 0000000F:01:00.0.\n"
CLOCK_SECTIONS = ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
                  "Max Customer Boost Clocks", "Clock Policy", "Clocks Event Reasons"]


@pytest.fixture
def smi(tmp_path):
    env = dict(os.environ, LAB_NVIDIA_STATE_DIR=str(tmp_path / "nv"), LAB_NVIDIA_BUSY="0")

    def run(*args, check=True, extra_env=None, timeout=30):
        p = subprocess.run([sys.executable, str(NVSMI)] + list(args), env=dict(env, **(extra_env or {})),
                           text=True, capture_output=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("nvidia-smi %s failed (%d): %s%s" % (args, p.returncode, p.stdout, p.stderr))
        return p

    run.state = tmp_path / "nv" / "state.json"
    run.dir = tmp_path / "nv"
    run.env = env
    return run


def recorded(smi):
    return json.loads(smi.state.read_text())


def test_lock_prints_the_real_message_and_records_it(smi):
    p = smi("-lgc", "0,2200")
    assert p.stdout == 'GPU clocks set to "(gpuClkMin 0, gpuClkMax 2200)" for GPU 0000000F:01:00.0\nAll done.\n'
    assert p.stderr == ""
    st = recorded(smi)
    assert st["locked_clocks"] == {"min": 0, "max": 2200}
    assert st["history"][-1]["argv"] == ["nvidia-smi", "-lgc", "0,2200"]
    assert smi("--lock-gpu-clocks=0,1800").stdout.startswith('GPU clocks set to "(gpuClkMin 0, gpuClkMax 1800)"')
    # a single value locks min = max, as the real -lgc accepts
    assert smi("-lgc", "1500").stdout.startswith('GPU clocks set to "(gpuClkMin 1500, gpuClkMax 1500)"')
    assert recorded(smi)["locked_clocks"] == {"min": 1500, "max": 1500}
    p = smi("-lgc", "2200,0", check=False)
    assert p.returncode == 2 and recorded(smi)["locked_clocks"] == {"min": 1500, "max": 1500}


def test_reset_prints_all_done_and_clears_the_record(smi):
    smi("-lgc", "0,2200")
    assert smi("-rgc").stdout == "All done.\n"
    assert recorded(smi)["locked_clocks"] is None
    assert smi("--reset-gpu-clocks").stdout == "All done.\n"
    assert recorded(smi)["history"][-1]["argv"] == ["nvidia-smi", "--reset-gpu-clocks"]


def test_without_privilege_the_real_permission_message_and_exit_4(smi):
    smi("-lgc", "0,2200")
    for args in (("-rgc",), ("-lgc", "0,1000")):
        p = smi(*args, check=False, extra_env={"LAB_NVIDIA_EUID": "1000"})
        assert (p.returncode, p.stdout) == (4, NO_PERMISSION), p
    assert recorded(smi)["locked_clocks"] == {"min": 0, "max": 2200}
    # queries work for anyone
    assert smi("--query-gpu=name", "--format=csv,noheader", extra_env={"LAB_NVIDIA_EUID": "1000"}).stdout == "NVIDIA GB10\n"
    # the fault knob: root without the privilege (e.g. no CAP_SYS_ADMIN) gets the same answer
    smi.dir.joinpath("deny-clock-changes").touch()
    p = smi("-lgc", "0,2200", check=False)
    assert (p.returncode, p.stdout) == (4, NO_PERMISSION)
    smi.dir.joinpath("deny-clock-changes").unlink()
    assert smi("-rgc").returncode == 0
    if os.geteuid() == 0 and shutil.which("setpriv"):
        os.chmod(smi.dir.parent, 0o755)
        p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                            sys.executable, str(NVSMI), "-lgc", "0,1000"], env=smi.env, text=True,
                           capture_output=True, timeout=30)
        assert (p.returncode, p.stdout) == (4, NO_PERMISSION)


def _clock_report(smi, **env):
    out = smi("-q", "-d", "CLOCK", extra_env=env).stdout
    return re.sub(r"(?m)^Timestamp .*$", "Timestamp", out)


def test_clock_report_has_the_real_sections_and_no_lock_read_back(smi):
    smi("-lgc", "0,2200")
    out = smi("-q", "-d", "CLOCK").stdout
    assert out.startswith("\n==============NVSMI LOG==============\n\n")
    assert "GPU 0000000F:01:00.0\n" in out
    sections = [ln.strip() for ln in out.splitlines() if re.fullmatch(r"    \S.*", ln) and ":" not in ln]
    assert sections == CLOCK_SECTIONS
    kv = [ln for ln in out.splitlines() if " : " in ln]
    assert kv and all(ln.index(" : ") == 54 for ln in kv), [ln for ln in kv if ln.index(" : ") != 54]
    assert "Locked Clocks" not in out and "GPU Clock" not in out and "2200" not in out
    assert "        Max Customer Boost Clocks" not in out  # a section header sits at 4 spaces
    # idle, the report is the same with or without a lock: there is nothing to read back
    locked = _clock_report(smi)
    smi("-rgc")
    assert _clock_report(smi) == locked


def test_a_lock_shows_only_in_the_clock_of_a_busy_gpu(smi):
    busy = {"LAB_NVIDIA_BUSY": "4174"}
    assert "        Graphics                                       : 2418 MHz\n" in _clock_report(smi, **busy)
    smi("-lgc", "0,2200")
    assert "        Graphics                                       : 2200 MHz\n" in _clock_report(smi, **busy)
    q = smi("--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader", extra_env=busy).stdout
    assert q == "2200 MHz, 3003 MHz\n"   # clocks.max.sm is the hardware maximum, lock or no lock


def test_old_lock_parsing_finds_nothing_on_real_output(smi):
    """What roles/clock_lock/tasks/read_lock.yml did: it would have read a lock of None,None."""
    smi("-lgc", "0,2200")
    out = smi("-q", "-d", "CLOCK").stdout + smi("-q").stdout
    assert re.findall(r"GPU Clock Min\s*:\s*(\d+|N/A)", out) == []
    assert re.findall(r"GPU Clock Max\s*:\s*(\d+|N/A)", out) == []
    assert not re.search(r"^\s*GPU Clock (Min|Max)\s*:\s*(?:(\d+) MHz|N/A)\s*$", out, re.M)
    assert "Locked Clocks" not in out


def test_query_gpu_memory_is_not_available_on_unified_memory(smi):
    smi("-lgc", "0,2200")
    q = smi("--query-gpu=name,driver_version,pci.bus_id,clocks.max.sm,memory.used,memory.total,memory.free",
            "--format=csv").stdout
    head, row = q.splitlines()
    assert head == ("name, driver_version, pci.bus_id, clocks.max.sm [MHz], memory.used [MiB], memory.total [MiB], "
                    "memory.free [MiB]")
    assert row == "NVIDIA GB10, 580.95.05, 0000000F:01:00.0, 3003 MHz, [N/A], [N/A], [N/A]"
    assert smi("--query-gpu=clocks.sm", "--format=csv,noheader,nounits").stdout == "208\n"


def test_table_as_the_580_driver_prints_it_on_a_gb10(smi):
    lines = smi().stdout.splitlines()
    assert lines[2] == "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |"
    assert lines[8] == "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0  On |                  N/A |"
    assert re.fullmatch(r"\| N/A   \d\dC    P8             \d+W /  N/A  \| Not Supported          \|      0%      Default \|",
                        lines[9]), lines[9]
    assert all(len(ln) == 91 for ln in lines[1:12])


def test_bad_field_and_loop(smi):
    p = smi("--query-gpu=bogus", "--format=csv", check=False)
    assert p.returncode == 2 and 'Field "bogus" is not a valid field to query.' in p.stderr
    proc = subprocess.Popen([sys.executable, str(NVSMI), "--query-gpu=utilization.gpu,clocks.sm,temperature.gpu",
                             "--format=csv,noheader", "-l", "0.2"], env=smi.env, stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.kill()
        proc.wait()
    assert all(re.fullmatch(r"\d+ %, \d+ MHz, \d+\n", ln) for ln in lines)


def test_history_bounded(smi):
    st = {"gpu_name": "NVIDIA GB10", "driver_version": "580.95.05", "locked_clocks": None,
          "history": [{"ts": "x", "argv": ["nvidia-smi", "-rgc"], "uid": 0}] * 200}
    smi.dir.mkdir(parents=True)
    smi.state.write_text(json.dumps(st))
    smi("-lgc", "0,2200")
    hist = recorded(smi)["history"]
    assert len(hist) == 200 and hist[-1]["argv"][1] == "-lgc"


def test_a_sustained_busy_gpu_heats_and_boost_is_taken_back_only_without_the_lock(smi):
    q = ("--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
         "--format=csv,noheader,nounits")
    busy = {"LAB_NVIDIA_BUSY": str(os.getpid())}        # this test process stands for an engine running a while
    # without the thermal knob (every other lab test): a busy GPU's figures at once, boost kept
    assert smi(*q, extra_env=busy).stdout == "2418, 38.47, 71, 0x0000000000000000\n"
    # heated through (a tiny time constant): at boost the GPU passes 83 C and the driver takes boost back
    hot = smi(*q, extra_env=dict(busy, LAB_NVIDIA_THERMAL_SECONDS="0.001")).stdout
    assert hot == "2268, 41.60, 86, 0x0000000000000020\n"
    # a time constant of 0 is the model at its limit (hot at once), not the model switched off
    assert smi(*q, extra_env=dict(busy, LAB_NVIDIA_THERMAL_SECONDS="0")).stdout == hot
    smi("-lgc", "0,2200")
    locked = smi(*q, extra_env=dict(busy, LAB_NVIDIA_THERMAL_SECONDS="0.001")).stdout
    assert locked == "2200, 38.47, 71, 0x0000000000000000\n"
    # just started (a long time constant): still near idle temperature, boost not yet taken back
    smi("-rgc")
    cold = smi(*q, extra_env=dict(busy, LAB_NVIDIA_THERMAL_SECONDS="100000")).stdout
    assert cold == "2418, 44.12, 42, 0x0000000000000000\n"
    # the real tool's millisecond loop
    proc = subprocess.Popen([sys.executable, str(NVSMI), *q, "-lms", "100"], env=smi.env, stdout=subprocess.PIPE,
                            text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.kill()
        proc.wait()
    assert lines == ["208, 11.23, 42, 0x0000000000000001\n"] * 3
