"""gpu_telemetry, module_utils/host/gpu_telemetry.py and the telemetry parser in module_utils/host/nvidia_smi.py: the GPU's
clock, power, heat and clock event reasons over a measured window.

The module runs a real sampler process: a stand-in ``nvidia-smi`` script in the test's directory prints one CSV
sample per 50 ms, as ``nvidia-smi --query-gpu=... -lms`` would."""
import os
import stat
import time

from ansible.module_utils.host import gpu_telemetry as gt
from ansible.module_utils.host import nvidia_smi as ns
from modrun import run_module

import gpu_telemetry as mod

SAMPLES = ("2418, 44.12, 80, 0x0000000000000000\n"
           "2268, 41.60, 84, 0x0000000000000020\n"
           "2268, 41.60, 85, 0x0000000000000020\n"
           "[N/A], 41.60, 85, 0x0000000000000024\n"
           "2268, 41.6")                          # the half-written line of a sampler that was stopped


def test_samples_are_parsed_and_a_half_written_line_is_skipped():
    samples = ns.parse_telemetry(SAMPLES)
    assert samples[0] == {"sm_mhz": 2418.0, "power_w": 44.12, "temp_c": 80.0, "reasons": 0}
    assert len(samples) == 4 and samples[3]["sm_mhz"] is None and samples[3]["reasons"] == 0x24
    assert ns.parse_telemetry("No devices were found\n") == []
    # a last line cut inside its last field has four fields, and is still not a sample
    assert ns.parse_telemetry("2418, 44.12, 80, 0x0000000000000000\n2268, 41.60, 84, 0x00") == [samples[0]]
    assert ns.event_reason_names(0x24) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert ns.event_reason_names(0x1000) == ["0x1000"]


def test_the_summary_an_operator_reads():
    s = gt.summarize(ns.parse_telemetry(SAMPLES))
    assert s == {"samples": 4, "sm_mhz": {"median": 2268.0, "min": 2268.0, "max": 2418.0},
                 "power_w": {"median": 41.6, "max": 44.12}, "temp_c": {"median": 84.5, "max": 85.0},
                 "reasons": {"sw_power_cap": 0.25, "sw_thermal_slowdown": 0.75}}
    assert gt.summarize([])["sm_mhz"] == {"median": None, "min": None, "max": None}


def test_the_record_table_per_condition_and_rank():
    s = gt.summarize(ns.parse_telemetry(SAMPLES))
    lines = gt.telemetry_table({"baseline": {"telemetry": {"spark1": {}}}, "unlocked": {"telemetry": {"spark1": s}}},
                               ["baseline", "unlocked"])
    assert lines[1] == "## GPU telemetry during the measured window (nvidia-smi samples on every rank)"
    assert lines[-1] == ("| unlocked | spark1 | 4 | 2268 [2268..2418] | 41.6 / 44.1 | 84 / 85 | "
                         "sw_power_cap 25%, sw_thermal_slowdown 75% |")
    assert gt.telemetry_table({"baseline": {"telemetry": {}}}, ["baseline"]) == []


def fake_smi(tmp_path):
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\ni=0\nwhile :; do echo \"2418, 44.12, $((70 + i)), 0x0000000000000000\"; "
                    "i=$((i + 1)); sleep 0.05; done\n")
    path.chmod(0o755)
    return str(path)


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open("/proc/%d/stat" % pid) as fh:
        return fh.read().split(")")[1].split()[0] != "Z"


def test_start_then_stop_samples_the_window_and_leaves_nothing_running(tmp_path):
    smi, path = fake_smi(tmp_path), str(tmp_path / "tele" / "run-unlocked.csv")
    started = run_module(mod.main, {"state": "started", "path": path, "interval_ms": 100, "max_seconds": 60,
                                    "nvidia_smi": smi})
    assert not started.get("failed") and started["changed"] is False, started
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    time.sleep(0.6)
    assert alive(started["pid"])
    stopped = run_module(mod.main, {"state": "stopped", "path": path})
    assert stopped["stopped"] is True and stopped["changed"] is False
    s = stopped["summary"]
    assert s["samples"] >= 4 and s["temp_c"]["max"] > s["temp_c"]["median"] >= 70 and s["reasons"] == {}
    time.sleep(0.2)
    assert not alive(started["pid"]) and not os.path.exists(path) and not os.path.exists(path + ".pid")
    again = run_module(mod.main, {"state": "stopped", "path": path})
    assert again["stopped"] is False and again["summary"]["samples"] == 0


def test_a_pid_file_naming_another_process_is_never_killed(tmp_path):
    path = str(tmp_path / "w.csv")
    with open(path + ".pid", "w") as fh:
        fh.write("%d\n" % os.getpid())                   # this test's own process: not a sampler
    out = run_module(mod.main, {"state": "stopped", "path": path})
    assert out["stopped"] is False and alive(os.getpid())


def test_a_symlink_at_the_path_is_refused_naming_host_and_path(tmp_path):
    smi, target = fake_smi(tmp_path), tmp_path / "elsewhere"
    target.write_text("keep me\n")
    link = tmp_path / "w.csv"
    link.symlink_to(target)
    out = run_module(mod.main, {"state": "started", "path": str(link), "nvidia_smi": smi, "host_label": "spark2"})
    assert out["failed"] and out["msg"].startswith("spark2: cannot start the GPU sampler into %s" % link), out
    assert target.read_text() == "keep me\n"


def test_check_mode_starts_nothing_and_bad_values_are_refused(tmp_path):
    smi, path = fake_smi(tmp_path), str(tmp_path / "w.csv")
    out = run_module(mod.main, {"state": "started", "path": path, "nvidia_smi": smi}, check_mode=True)
    assert out["changed"] is False and not os.path.exists(path) and "pid" not in out
    bad = run_module(mod.main, {"state": "started", "path": path, "nvidia_smi": smi, "interval_ms": 5,
                                "host_label": "spark3"})
    assert bad["failed"] and bad["msg"] == ("spark3: interval_ms must be at least 100 and max_seconds at least 1 "
                                            "(got 5, 7200)")
    missing = run_module(mod.main, {"state": "started", "path": path, "nvidia_smi": "no-such-smi-here",
                                    "host_label": "spark3"})
    assert missing["failed"] and missing["msg"] == "spark3: no-such-smi-here not found on PATH"


def test_the_sampler_is_bounded_by_timeout():
    argv = gt.sampler_argv("/usr/bin/nvidia-smi", 1000, 14400)
    assert argv == ["timeout", "--signal=TERM", "14400", "/usr/bin/nvidia-smi",
                    "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                    "--format=csv,noheader,nounits", "-lms", "1000"]


def test_a_fifo_at_the_path_is_refused_and_never_waited_on(tmp_path):
    smi, fifo = fake_smi(tmp_path), tmp_path / "w.csv"
    os.mkfifo(fifo)
    out = run_module(mod.main, {"state": "started", "path": str(fifo), "nvidia_smi": smi, "host_label": "spark2"})
    assert out["failed"] and out["msg"].startswith("spark2: cannot start the GPU sampler into %s" % fifo), out
    # the stop reads no FIFO either (it would block until someone writes): no samples, no wait
    assert gt.read_summary(str(fifo))["samples"] == 0
    stopped = run_module(mod.main, {"state": "stopped", "path": str(fifo)})
    assert stopped["summary"]["samples"] == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode), "not its own: left alone"
