# -*- coding: utf-8 -*-
"""External commands run under a time limit (standard library only).

:func:`bounded` wraps a command in coreutils ``timeout``; :func:`make_runner` turns
``AnsibleModule.run_command`` into ``run(args) -> (rc, out, err)`` for read-only probes (rc None when
the executable does not exist). contention_report, clock_lock_status and every ``docker logs`` read
share them, so no external command can hold a play forever.
"""
from __future__ import absolute_import, division, print_function

import os
import shutil

__metaclass__ = type

COMMAND_TIMEOUT = 60      # seconds any probe command may take (docker, journalctl, systemctl, nvidia-smi)
KILL_AFTER = 10           # seconds between timeout's TERM and its KILL
TIMED_OUT = (124, 137)    # timeout's exit status after TERM, and after KILL


def tail_text(text, n=300):
    return (text or "").strip()[-n:]


def bounded(args, seconds):
    """``args`` run under coreutils ``timeout`` (TERM at the limit, KILL 10 s later) where it exists,
    so an external command that stops answering cannot hold a play forever."""
    tool = shutil.which("timeout") if seconds else None
    return ([tool, "--kill-after=%d" % KILL_AFTER, "%ds" % int(seconds)] if tool else []) + list(args)


def make_runner(module, timeout=COMMAND_TIMEOUT):
    """``run(args) -> (rc, out, err)`` over ``module.run_command``; rc is None when the executable
    does not exist. Each command runs under coreutils ``timeout`` (:func:`bounded`) where the
    command exists: a probe that hangs (a docker daemon that stops answering) ends with rc 124 and
    its own name in the error."""
    def run(args):
        args = list(args)
        exists = os.path.exists(args[0]) or shutil.which(args[0])
        cmd = bounded(args, timeout) if exists else args
        try:
            rc, out, err = module.run_command(cmd, expand_user_and_vars=False, handle_exceptions=False)
        except (IOError, OSError) as exc:
            return None, "", "%s: %s" % (args[0], exc)
        if len(cmd) > len(args) and rc in TIMED_OUT:
            return rc, out, "%s: no answer within %d s (killed)" % (args[0], timeout)
        return rc, out, err
    return run
