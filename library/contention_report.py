#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: what on this node competes with the engine for memory and the GPU?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: contention_report
short_description: Report what competes with the SGLang engine for a Spark's unified memory and GPU
description:
  - Read-only inventory of contention on one node, for stage A (reduce spark3 contention). It reports
    the docker containers and their owners, memory use and CPU; the display manager and the default boot target;
    C(/proc/meminfo), memory pressure (PSI) and load; processes that poll C(nvidia-smi) and how often;
    the journal lines matching I(journal_pattern) (C(NV_ERR_NO_MEMORY) by default).
  - Containers come from C(docker ps -a --no-trunc --format '{{json .}}') and, for running ones,
    C(docker stats --no-stream --format '{{json .}}'). A container's owner is its C(owner) label,
    else the inventory's I(owners) entry, else unknown.
  - Nothing that is missing makes the module fail - no docker (C(docker_available=false)), no systemd,
    a kernel without PSI (C(psi=null)), a journal it may not read (C(journal_readable=false)).
  - Commands are run without a shell. Parsing is done by C(module_utils/host/contention.py) and the files it names.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  owners:
    description:
      - Container name -> owner, from the inventory. Used for containers without an C(owner) label.
    type: dict
    default: {}
  serving_prefix:
    description: Containers whose name starts with this are the serving engine (C(dsv41-head), C(dsv41-worker)).
    type: str
    default: dsv41-
  docker_bin:
    description: Docker client to run (name looked up in C(PATH), or a path).
    type: str
    default: docker
  journal_pattern:
    description:
      - Pattern for C(journalctl -g) (a PCRE2 regex; case-insensitive when all lowercase). Where
        C(journalctl) has no pattern matching, the journal is filtered by the module with the same rule.
    type: str
    default: NV_ERR_NO_MEMORY
  journal_since:
    description: C(journalctl --since) value, e.g. C(-7d) or C(2026-09-24 00:00). Default the whole journal.
    type: str
  host_label:
    description: Name used in the result and messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - Without C(-g) support the whole journal (from I(journal_since)) is read into memory; set I(journal_since).
  - Run with become to see every process's unit and the system journal.
"""

EXAMPLES = r"""
- name: What competes with the engine on this node
  contention_report:
    owners: "{{ container_owners | default({}) }}"
    journal_since: -7d
    host_label: "{{ inventory_hostname }}"
  become: true
  register: contention

- ansible.builtin.debug:
    msg: "{{ contention.summary }}"

- name: Stage A precondition - spark3's desktop is off
  ansible.builtin.assert:
    that: not contention.display_manager.active
    fail_msg: "{{ contention.findings }}"
"""

RETURN = r"""
containers:
  description: Every container C(docker ps -a) lists ([] when docker is not available).
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Container name, type: str}
    image: {description: Image reference, type: str}
    status: {description: "docker's Status text, e.g. C(Up 3 days)", type: str}
    state: {description: "running, paused, exited, created, restarting ...", type: str}
    owner: {description: "C(owner) label, else the I(owners) entry, else null", type: str}
    owner_source: {description: "label, inventory or unknown", type: str}
    created: {description: "docker's CreatedAt, e.g. C(2026-09-21 08:14:00 +0000 UTC)", type: str}
    cpu_percent: {description: CPU % from docker stats (null when not running), type: float}
    mem_bytes: {description: Memory in use from docker stats MemUsage (null when not running), type: int}
    serving: {description: The name starts with I(serving_prefix), type: bool}
    labels: {description: All labels, type: dict}
docker_available: {description: docker ps ran and succeeded, returned: always, type: bool}
docker_error: {description: Why docker gave nothing (or why stats are missing), returned: always, type: str}
non_serving_count: {description: Containers that are not serving (any state), returned: always, type: int}
non_serving_running_count: {description: "Of those, running (or paused/restarting)", returned: always, type: int}
serving: {description: Names of serving containers (any state), returned: always, type: list, elements: str}
serving_running: {description: Names of running serving containers, returned: always, type: list, elements: str}
non_serving_mem_bytes: {description: Sum of mem_bytes of non-serving containers, returned: always, type: int}
non_serving_mem_gib: {description: The same in GiB (2 decimals), returned: always, type: float}
non_serving_cpu_percent: {description: Sum of cpu_percent of non-serving containers, returned: always, type: float}
display_manager:
  description: The unit behind display-manager.service.
  returned: always
  type: dict
  contains:
    unit: {description: "e.g. gdm.service; null when there is none", type: str}
    source: {description: systemctl (show -p Id) or link (/etc/systemd/system/display-manager.service), type: str}
    active: {description: systemctl is-active says active, type: bool}
    active_state: {description: systemctl is-active output, type: str}
    enabled: {description: "systemctl is-enabled says enabled, enabled-runtime or alias", type: bool}
    enabled_state: {description: systemctl is-enabled output, type: str}
default_target: {description: systemctl get-default (null without systemd), returned: always, type: str}
memory:
  description: From /proc/meminfo (values null when unreadable).
  returned: always
  type: dict
  contains:
    mem_total_bytes: {description: MemTotal, type: int}
    mem_available_bytes: {description: MemAvailable, type: int}
    mem_total_gib: {description: MemTotal in GiB (2 decimals), type: float}
    mem_available_gib: {description: MemAvailable in GiB (2 decimals), type: float}
psi:
  description: >-
    /proc/pressure/memory as {some: {avg10, avg60, avg300, total}, full: {...}}; null when the
    kernel has no PSI or the file cannot be read.
  returned: always
  type: dict
load:
  description: /proc/loadavg as {load1, load5, load15, running, total}.
  returned: always
  type: dict
gpu_pollers:
  description: Processes running nvidia-smi (not the module's own process tree), by pid.
  returned: always
  type: list
  elements: dict
  contains:
    pid: {description: Process id, type: int}
    user: {description: Process owner, type: str}
    elapsed_s: {description: Seconds since it started, type: int}
    args: {description: Its command line, type: str}
    looping: {description: "It repeats (-l/--loop, -lms/--loop-ms, dmon/pmon, watch)", type: bool}
    interval_s: {description: "Seconds between polls; null for a one-shot query or an unknown interval", type: float}
    unit: {description: "The .service owning the pid (from /proc/PID/cgroup), or null", type: str}
gpu_pollers_source: {description: ps or /proc, returned: always, type: str}
nv_err_events:
  description: Journal lines matching I(journal_pattern).
  returned: always
  type: dict
  contains:
    count: {description: Number of matching lines, type: int}
    lines: {description: The last 50 of them (short-iso), type: list, elements: str}
    truncated: {description: More than 50 matched, type: bool}
    readable: {description: The journal could be read, type: bool}
    method: {description: grep (journalctl -g) or python (journal filtered by the module), type: str}
    note: {description: "Why the journal could not be read, or that it was partial", type: str}
    pattern: {description: I(journal_pattern), type: str}
    since: {description: I(journal_since), type: str}
journal_readable: {description: Same as nv_err_events.readable, returned: always, type: bool}
summary:
  description: >-
    Short dict for run records - host, counts, non-serving GiB and CPU, running serving containers,
    MemAvailable GiB, PSI some avg10, display manager and whether it is active, default target,
    pollers count and the shortest interval, NV_ERR count, journal_readable.
  returned: always
  type: dict
findings:
  description: Human-readable list of what competes with the engine (empty when nothing does).
  returned: always
  type: list
  elements: str
host: {description: I(host_label) or the hostname, returned: always, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host import contention
from ansible.module_utils.base.probe import make_runner


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            owners=dict(type="dict", default={}),
            serving_prefix=dict(type="str", default="dsv41-"),
            docker_bin=dict(type="str", default="docker"),
            journal_pattern=dict(type="str", default="NV_ERR_NO_MEMORY"),
            journal_since=dict(type="str"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = p["host_label"] or os.uname()[1]
    if not p["journal_pattern"]:
        module.fail_json(msg="%s: journal_pattern is empty" % host, changed=False)
    owners = dict((str(k), v if v is None else str(v)) for k, v in (p["owners"] or {}).items())
    result = contention.gather(make_runner(module), owners=owners, serving_prefix=p["serving_prefix"] or "",
                               docker=p["docker_bin"], journal_pattern=p["journal_pattern"],
                               journal_since=p["journal_since"] or None, host=host)
    result["changed"] = False
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
