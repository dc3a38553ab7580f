# -*- coding: utf-8 -*-
"""Waiting, for a bounded time, for a process that was asked to stop, and reading its state from /proc
(standard library only)."""
from __future__ import absolute_import, division, print_function

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
