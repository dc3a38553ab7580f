# -*- coding: utf-8 -*-
"""Waiting, for a bounded time, for a process that was asked to stop (standard library only)."""
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
