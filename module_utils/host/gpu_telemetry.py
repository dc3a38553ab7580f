# -*- coding: utf-8 -*-
"""GPU telemetry over a measured window: a sampler of nvidia-smi started before the benchmark and stopped
after it, on every rank, and what its samples say (SM clock, power, temperature, clock event reasons).

The report asks for clock experiments with sustained thermal and power measurements: boost that a power or
thermal limit takes back shows as a falling SM clock with ``sw_thermal_slowdown`` or ``sw_power_cap`` among
the active event reasons. The sampler is ``timeout <max> nvidia-smi --query-gpu=... -lms <ms>`` in its own
session, writing CSV to a file the module opens itself (no symlink followed); its pid is kept beside the file
so the stop kills exactly that process group. ``timeout`` bounds it even when nobody stops it.
"""
from __future__ import absolute_import, division, print_function

import contextlib
import errno
import os
import signal
import stat
import statistics
import subprocess

from ansible.module_utils.host.nvidia_smi import TELEMETRY_FIELDS, event_reason_names, parse_telemetry
from ansible.module_utils.base.process_wait import wait_gone
from ansible.module_utils.base.safe_open import OPEN_SAFE, open_read

__metaclass__ = type


def sampler_argv(nvidia_smi, interval_ms, max_seconds):
    return ["timeout", "--signal=TERM", str(int(max_seconds)), nvidia_smi,
            "--query-gpu=" + ",".join(TELEMETRY_FIELDS), "--format=csv,noheader,nounits", "-lms", str(int(interval_ms))]


def _open_new(path):
    """Open path for writing (created or truncated): never through a symlink, never blocking on a FIFO, and
    only a regular file (the descriptor is checked, not the name)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | OPEN_SAFE, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def _read_text(path):
    """The text of a regular file at path ("" when it is missing or not a regular file)."""
    try:
        fd = open_read(path)
    except OSError:
        return ""
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks).decode("utf-8", "replace")
            chunks.append(chunk)
    finally:
        os.close(fd)


def _alive_sampler(pid):
    """pid runs this module's sampler (its command line names nvidia-smi and --query-gpu)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            cmd = fh.read().split(b"\0")
    except (IOError, OSError):
        return False
    return any(c.endswith(b"nvidia-smi") for c in cmd) and any(c.startswith(b"--query-gpu=") for c in cmd)


def _read_pid(pidfile):
    try:
        return int(_read_text(pidfile).strip())
    except ValueError:
        return None


def stop(pidfile, grace=5.0):
    """Stop the sampler whose pid the file holds (its whole process group). True when one was running."""
    pid = _read_pid(pidfile)
    if pid is None or not _alive_sampler(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return False
    if not wait_gone(lambda: _alive_sampler(pid), grace):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    return True


def start(path, nvidia_smi, interval_ms, max_seconds):
    """Start a sampler writing to path (any earlier sampler of the same file is stopped first). Returns its pid."""
    stop(path + ".pid")
    fd = _open_new(path)
    try:
        proc = subprocess.Popen(sampler_argv(nvidia_smi, interval_ms, max_seconds), stdout=fd,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, close_fds=True,
                                start_new_session=True)
    finally:
        os.close(fd)
    with os.fdopen(_open_new(path + ".pid"), "w") as fh:
        fh.write("%d\n" % proc.pid)
    return proc.pid


def summarize(samples):
    """What an operator reads from a window's samples: count, SM clock median [min..max], power and
    temperature median and max, each event reason with the share of samples it was active in."""
    def col(key):
        return [s[key] for s in samples if s[key] is not None]

    def median(values):
        return statistics.median(values) if values else None

    sm, power, temp = col("sm_mhz"), col("power_w"), col("temp_c")
    reasons = {}
    with_bits = [s["reasons"] for s in samples if s["reasons"] is not None]
    for bits in with_bits:
        for name in event_reason_names(bits):
            reasons[name] = reasons.get(name, 0) + 1
    return {"samples": len(samples),
            "sm_mhz": {"median": median(sm), "min": min(sm) if sm else None, "max": max(sm) if sm else None},
            "power_w": {"median": median(power), "max": max(power) if power else None},
            "temp_c": {"median": median(temp), "max": max(temp) if temp else None},
            "reasons": dict((k, round(float(n) / len(with_bits), 3)) for k, n in sorted(reasons.items()))}


def read_summary(path):
    """Summary of the samples in path (None figures when there are none)."""
    return summarize(parse_telemetry(_read_text(path)))


def _f(value, fmt="%.0f"):
    return "-" if value is None else fmt % value


def telemetry_table(conditions, order):
    """Markdown lines: each condition's telemetry per rank; [] when no condition sampled any."""
    rows = []
    for name in order:
        for host, t in sorted(((conditions.get(name) or {}).get("telemetry") or {}).items()):
            if not t:
                continue
            sm = t["sm_mhz"]
            rows.append("| %s | %s | %d | %s [%s..%s] | %s / %s | %s / %s | %s |" % (
                name, host, t["samples"], _f(sm["median"]), _f(sm["min"]), _f(sm["max"]),
                _f(t["power_w"]["median"], "%.1f"), _f(t["power_w"]["max"], "%.1f"), _f(t["temp_c"]["median"]),
                _f(t["temp_c"]["max"]),
                ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in sorted(t["reasons"].items())) or "none"))
    if not rows:
        return []
    return ["", "## GPU telemetry during the measured window (nvidia-smi samples on every rank)", "",
            "| condition | host | samples | SM MHz median [min..max] | power W median / max | temp C median / max "
            "| clock event reasons (share of samples) |", "|---|---|---|---|---|---|---|"] + rows
