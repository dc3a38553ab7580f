# -*- coding: utf-8 -*-
"""Processes by pid (standard library only): whether one still runs and is the same process, its state and start
time from /proc, and waiting a bounded time for one asked to stop."""
from __future__ import absolute_import, division, print_function

import os
import time

__metaclass__ = type


def wait_gone(alive, wait, step=0.05):
    """Poll ``alive()`` until it is false or ``wait`` seconds have passed; True when the process is gone.
    (After a SIGTERM: the packer unwinding, a telemetry sampler exiting.)"""
    deadline = time.monotonic() + wait
    while alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


def proc_stat(pid):
    """(state letter, start time in clock ticks since boot) from /proc/PID/stat, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # Field 2 (the command) is parenthesised and may itself contain spaces or ")": split after the last ")".
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def process_start_ticks(pid):
    """Start time of ``pid`` (clock ticks since boot), or None where /proc cannot tell.

    Recorded next to a pid so that a later reader can tell the process from a newer one that
    reused its number."""
    stat = proc_stat(pid)
    return stat[1] if stat else None


def pid_alive(pid, start_ticks=None):
    """Whether ``pid`` still runs, and (when ``start_ticks`` is known) is the same process.

    A zombie (exited, not yet reaped by its parent) counts as gone: it holds no files or locks.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists but belongs to another user
    stat = proc_stat(pid)
    if stat is None:
        # No /proc entry although the signal test passed: it exited in between, or there is no
        # procfs at all (then the signal test is all there is).
        return not os.path.isdir("/proc/self")
    state, started = stat
    if state == "Z":
        return False
    return start_ticks is None or started == start_ticks
