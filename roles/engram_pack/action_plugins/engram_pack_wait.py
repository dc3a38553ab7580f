# -*- coding: utf-8 -*-
"""Action plugin for engram_pack_wait: run the module and show every round's result.

A task retried with ``until`` prints only "FAILED - RETRYING ... (N retries left)" for each round
unless its result asks to be shown, and Ansible strips that request (``_ansible_verbose_always``)
from module results; only an action plugin may set it. So the wait prints bytes done of total,
percent, MiB/s and ETA every round at the default verbosity. Everything else is the module's.
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_name="engram_pack_wait", module_args=self._task.args,
                                           task_vars=task_vars))
        result["_ansible_verbose_always"] = True
        return result
