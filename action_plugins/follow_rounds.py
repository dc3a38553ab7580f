# -*- coding: utf-8 -*-
"""Action plugin of the project's wait modules: every round of a wait shown at the default verbosity, each line once.

A task retried with ``until`` prints only "FAILED - RETRYING ... (N retries left)" for each round unless its
result asks to be shown, and Ansible strips that request (``_ansible_verbose_always``) from module results:
only an action plugin may set it (roles/engram_pack's engram_pack_wait does so for the packer). This one is
not tied to a module: it runs the module the task names, so each wait module that follows this contract
is a link to this file under its own name (decode_bench_wait.py, engine_profile_trace.py).

The contract: a result that carries ``lines`` is a round to show. ``lines`` lists every line so far, oldest
first (what happened: shown before ``msg`` in the sorted dump), and ``msg`` says where things are now. The
plugin keeps in ``lines`` only those no earlier round of the same task showed: the previous round's result
is the task's registered variable when the next round runs (a new plugin instance runs each round), and its
``lines_seen`` (``<arguments digest>:<lines shown>``) says how many were shown for the same arguments (the
same job). So a line appears once however many rounds follow, and ``msg`` every round. A result without
``lines`` (the round that returns what was waited for, which may be large) is shown as any task's.
"""
from __future__ import annotations

import hashlib
import json

from ansible.plugins.action import ActionBase


def _digest(args):
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:12]


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_name=self._task.action, module_args=self._task.args,
                                           task_vars=task_vars))
        lines = result.get("lines")
        if not isinstance(lines, list):
            return result
        digest = _digest(self._task.args)
        previous = task_vars.get(self._task.register) if self._task.register else None
        seen = 0
        if isinstance(previous, dict):
            key, _, count = str(previous.get("lines_seen") or "").partition(":")
            if key == digest and count.isdigit():
                seen = int(count)
        result["lines"] = lines[seen:]
        result["lines_seen"] = "%s:%d" % (digest, len(lines))
        result["_ansible_verbose_always"] = True
        return result
