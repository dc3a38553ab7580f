# -*- coding: utf-8 -*-
"""nvidia-smi: how it is invoked and what it prints (standard library only).

One place reads nvidia-smi for every module: its command lines (a poller's loop interval, under
wrappers, shells and interpreters) and its output (``--query-gpu=clocks.sm`` samples, the
``GPU clocks set to`` line of ``-lgc``/``-rgc`` and the permission message).
"""
from __future__ import absolute_import, division, print_function

import re
import shlex

__metaclass__ = type
SMI = "nvidia-smi"
SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ash", "ksh"))
WRAPPERS = frozenset(("env", "nice", "ionice", "timeout", "stdbuf", "setsid", "sudo", "runuser",
                      "chrt", "taskset", "nohup", "unbuffer", "watch", "doas", "systemd-run"))

_INTERP_RE = re.compile(r"^(python[0-9.]*|perl|ruby)$")
_NUM_RE = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")


def program_name(tok):
    return tok.rsplit("/", 1)[-1]


def split_command(cmd):
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def smi_invocation(argv, depth=0):
    """``(wrapper_argv, smi_args)`` when ``argv`` runs nvidia-smi, else None.

    nvidia-smi itself, under an interpreter (the lab stand-in is ``python3 /usr/bin/nvidia-smi``),
    under wrappers such as ``watch``/``timeout``/``sudo``, or in ``sh -c '...'``. A program that
    merely mentions it (``grep nvidia-smi``, ``less nvidia-smi.log``) is not a poller.
    """
    if not argv or depth > 4:
        return None
    first = program_name(argv[0])
    if first == SMI:
        return [], list(argv[1:])
    if not (first in SHELLS or first in WRAPPERS or _INTERP_RE.match(first)):
        return None
    if first in SHELLS:
        if "-c" in argv[1:]:
            i = argv.index("-c", 1)
            if i + 1 < len(argv):
                inner = smi_invocation(split_command(argv[i + 1]), depth + 1)
                if inner is not None:
                    return [argv[0]] + inner[0], inner[1]
        return None
    for i in range(1, len(argv)):
        tok = argv[i]
        if program_name(tok) == SMI:
            return list(argv[:i]), list(argv[i + 1:])
        if " " in tok and not tok.startswith("-"):       # watch 'nvidia-smi -q'
            inner = smi_invocation(split_command(tok), depth + 1)
            if inner is not None:
                return list(argv[:i]) + inner[0], inner[1] + list(argv[i + 1:])
    return None


def _num(tok):
    return float(tok) if tok is not None and _NUM_RE.match(tok) else None


def smi_interval(args):
    """nvidia-smi arguments -> (looping, interval seconds or None).

    ``-l N``/``--loop=N``/``--loop N`` seconds; ``-lms N``/``--loop-ms=N`` milliseconds;
    ``dmon``/``pmon`` loop every ``-d N`` seconds (default 1). A one-shot query gives (False, None).
    """
    args = list(args)
    if args and args[0] in ("dmon", "pmon"):
        interval = 1.0
        for i, tok in enumerate(args):
            if tok == "-d" and i + 1 < len(args) and _num(args[i + 1]) is not None:
                interval = _num(args[i + 1])
        return True, interval
    looping, interval = False, None
    for i, tok in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        for names, scale in ((("-lms", "--loop-ms"), 1000.0), (("-l", "--loop"), 1.0)):
            value = None
            if tok in names:
                value = nxt
            else:
                for name in names:
                    if tok.startswith(name + "="):
                        value = tok[len(name) + 1:]
            if tok in names or value is not None:
                looping = True
                n = _num(value)
                interval = None if n is None else n / scale
                break
    return looping, interval


def watch_interval(wrapper):
    """``watch -n N`` / ``--interval=N`` / ``-nN`` -> seconds (watch's default 2), else None."""
    if not wrapper or "watch" not in [program_name(t) for t in wrapper]:
        return None
    start = [program_name(t) for t in wrapper].index("watch")
    toks = wrapper[start + 1:]
    interval = 2.0
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok in ("-n", "--interval") and _num(nxt) is not None:
            interval = _num(nxt)
        elif tok.startswith("--interval=") and _num(tok[11:]) is not None:
            interval = _num(tok[11:])
        elif tok.startswith("-n") and len(tok) > 2 and _num(tok[2:]) is not None:
            interval = _num(tok[2:])
    return interval


# What ``nvidia-smi -lgc MIN,MAX`` prints on success, and when the caller may not change clocks.
CLOCKS_SET_RE = re.compile(r'GPU clocks set to "\(gpuClkMin (\d+), gpuClkMax (\d+)\)" for GPU (\S+)')
NO_PERMISSION_RE = re.compile(r"does not have permission to change clocks")


def parse_clocks_set(text):
    """``{min, max, gpu}`` from a ``GPU clocks set to "(gpuClkMin A, gpuClkMax B)" for GPU X`` line, else None."""
    m = CLOCKS_SET_RE.search(text or "")
    if not m:
        return None
    return {"min": int(m.group(1)), "max": int(m.group(2)), "gpu": m.group(3)}


def says_no_permission(text):
    """True when nvidia-smi said the caller may not change clocks."""
    return bool(NO_PERMISSION_RE.search(text or ""))


def parse_sm_clock(text):
    """``nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits`` -> MHz (first GPU) or None."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            try:
                return int(line.split(",")[0].strip())
            except ValueError:
                return None
    return None


DRIVER_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")


def parse_driver_version(text):
    """``nvidia-smi --query-gpu=driver_version --format=csv,noheader`` -> "580.95.05" (first GPU), or None
    when the first line is not a version (an error message, ``[N/A]``, nothing)."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            version = line.split(",")[0].strip()
            return version if DRIVER_RE.match(version) else None
    return None


# The fields a GPU telemetry sample queries, in this order (nvidia-smi --query-gpu=... --format=csv,noheader,
# nounits): the SM clock, the power draw, the temperature and the active clock event (throttle) reasons.
TELEMETRY_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")
# clocks_event_reasons bits (NVML's nvmlClocksEventReason*): why the clock is below its maximum.
EVENT_REASONS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                 (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                 (0x100, "display_clock_setting"))


def _number(text):
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None          # [N/A], [Not Supported], a cut value


def parse_telemetry(text):
    """Samples of ``nvidia-smi --query-gpu=<TELEMETRY_FIELDS> --format=csv,noheader,nounits -lms N`` output:
    [{"sm_mhz", "power_w", "temp_c", "reasons"}], one per complete (newline-terminated) line. An unterminated
    last line (the sampler was stopped while writing it) and a line that is not four fields (a message) are
    skipped; a field nvidia-smi cannot read (``[N/A]``) is None."""
    samples = []
    lines = (text or "").split("\n")
    # the last element is "" after a final newline, or a line the sampler was still writing when it stopped
    # (which may have all four fields and a cut last value): never a sample
    for line in lines[:-1]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(TELEMETRY_FIELDS):
            continue
        sm, power, temp, reasons = parts
        try:
            bits = int(reasons, 16) if reasons.lower().startswith("0x") else None
        except ValueError:
            bits = None
        sample = {"sm_mhz": _number(sm), "power_w": _number(power), "temp_c": _number(temp), "reasons": bits}
        if all(v is None for v in sample.values()):
            continue
        samples.append(sample)
    return samples


def event_reason_names(bits):
    """0x20 -> ["sw_thermal_slowdown"]; unknown bits as hex."""
    names = [name for bit, name in EVENT_REASONS if bits & bit]
    rest = bits & ~sum(bit for bit, _ in EVENT_REASONS)
    return names + (["0x%X" % rest] if rest else [])
