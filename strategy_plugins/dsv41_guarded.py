# -*- coding: utf-8 -*-
"""Strategy ``dsv41_guarded``: Ansible's ``linear``, after the fleet guard (module_utils/fleet/guard.py).

The project's default strategy (ansible.cfg). Before a play runs any task, it refuses a run that reaches
part of the fleet when the playbook's own file does not allow it, and, on a lab-only control node, any
host reached outside a loopback address and any fleet that is not a lab (``dsv41_fleet_is_lab``). A refused
play breaks the playbook (non-zero exit) before anything is sent to a host. Tags cannot skip it and extra
variables cannot change what it reads.
"""
from __future__ import absolute_import, division, print_function

import gc
import os
import sys

from ansible import context
from ansible.errors import AnsibleError
from ansible.plugins.loader import filter_loader, test_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.template import Templar
from ansible.utils.display import Display

__metaclass__ = type

DOCUMENTATION = """
    name: dsv41_guarded
    short_description: linear, after the fleet guard (whole fleet, lab only)
    description:
        - Ansible's linear strategy, preceded by the project's fleet guard, which neither tags nor extra
          variables can turn off.
    author: DSV41 fleet team
"""

display = Display()


def _guard():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(here, "module_utils")
    import ansible.module_utils as amu
    if path not in list(amu.__path__):
        amu.__path__.append(path)
    from ansible.module_utils.fleet import guard as fleet_guard
    return fleet_guard


def _preload_jinja_plugins():
    """Load every filter and test plugin (and the module_utils they import) in this controller process.

    Ansible forks one worker per host and task; a worker that meets the first filter of its process loads
    every filter file and compiles the project's module_utils behind them, then exits and loses it all. Loaded
    here once, before the first fork, each worker inherits them: on a lab stage run that was an eighth of the
    controller's CPU (bench/bench_controller.py measures it). Loading is idempotent: the loaders keep their
    cache until a plugin directory is added, and a later call reloads then."""
    for loader in (filter_loader, test_loader):
        for _plugin in loader.all():
            pass


def _freeze_before_forks():
    """Collect, then move every object this controller holds into the collector's permanent generation.

    Each worker is a fork that shares the controller's memory copy-on-write; a collection inside a worker
    walks every tracked object it inherited and writes to each one's header, so the kernel copies page after
    page of the parent's heap into a process that lives for one task. Frozen objects are left out of those
    walks (Python's documented recipe for fork without exec). The collection first keeps today's garbage out
    of the frozen set; a later play freezes what it added. bench/bench_controller.py measures it with the
    preload (fleet_status --check: 5.7 -> 4.9 CPU-s on the control node, alternated runs)."""
    gc.collect()
    gc.freeze()


class StrategyModule(LinearStrategyModule):

    def run(self, iterator, play_context):
        _preload_jinja_plugins()
        _freeze_before_forks()
        # The preflight play (playbooks/preflight.yml, read-only) refuses first with the fuller message; the
        # guard holds for every play after it, so a skipped preflight still stops the run before any change.
        path = str(iterator._play.get_path() or "")
        if os.path.basename(path.rsplit(":", 1)[0]) == "preflight.yml":
            return super(StrategyModule, self).run(iterator, play_context)
        problem = self._fleet_guard(iterator._play)
        if problem:
            display.error(problem, wrap_text=False)
            return self._tqm.RUN_FAILED_BREAK_PLAY
        return super(StrategyModule, self).run(iterator, play_context)

    def _fleet_guard(self, play):
        guard = _guard()
        inventory = self._inventory
        extra = self._variable_manager.extra_vars or {}
        playbooks = [a for a in (context.CLIARGS.get("args") or ()) if str(a).endswith((".yml", ".yaml"))]
        groups = inventory.get_groups_dict()
        if playbooks and guard.RANK_GROUP in groups:
            ranks = [h.name for h in inventory.get_hosts(guard.RANK_GROUP, ignore_limits=True, ignore_restrictions=True)]
            reached = [h.name for h in inventory.get_hosts(guard.RANK_GROUP, ignore_restrictions=True)]
            for book in playbooks:
                refusal = guard.partial_refusal(book, guard.playbook_scope(book), ranks, reached,
                                                extra.get("allow_partial_fleet"), context.CLIARGS.get("subset"))
                if refusal:
                    return refusal
        if os.environ.get("DSV41_LAB_ONLY", "") not in ("", "0"):
            targets, fleets = [], set()
            for host in inventory.get_hosts(play.hosts, ignore_restrictions=True):
                hostvars = self._variable_manager.get_vars(play=play, host=host, include_hostvars=False)
                templar = Templar(loader=self._loader, variables=hostvars)
                try:
                    address = templar.template(hostvars.get("ansible_host", host.name))
                    connection = templar.template(hostvars.get("ansible_connection", "ssh"))
                    fleets.add((str(templar.template(hostvars.get("dsv41_fleet_name", ""))),
                                guard.truthy(templar.template(hostvars.get("dsv41_fleet_is_lab", False)))))
                except AnsibleError as exc:
                    return "Fleet guard: cannot tell where %s is reached (%s); nothing was run" % (host.name, exc)
                targets.append((host.name, connection, address))
            return guard.lab_only_refusal(targets, fleets)
        return None
