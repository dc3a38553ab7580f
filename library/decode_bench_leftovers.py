#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module decode_bench_leftovers: the benchmarks an interrupted experiment run left on a host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: decode_bench_leftovers
short_description: Stop the benchmarks an interrupted experiment run left running, and read what they measured
description:
  - An experiment runs each benchmark as an async job on the load-generating worker. When the run's
    controller is killed (a lost terminal, C(kill -9)) the job goes on without it, loading the engine up to its
    time limit (hours on the fleet), through the rollback's boot and into whatever runs next.
  - This module finds the progress records (M(decode_bench)'s I(progress_file)) of run I(run) in
    I(directory), stops each benchmark whose process still runs with SIGTERM (only when the recorded pid is
    still the same process, by its start time, so a recycled pid is never signalled), and returns every
    round each benchmark finished, so the interrupted run's record keeps the repetitions it measured.
  - In check mode nothing is stopped; the result says what would be. Records of other runs, symlinks and
    unreadable files are left alone. Nothing is deleted.
options:
  directory:
    description: The benchmarks' working directory on this host (the experiment role's C(experiment_bench_dir)).
    type: path
    required: true
  run:
    description: The experiment run id; its benchmarks' run ids are C(<run>-<condition>).
    type: str
    required: true
  host_label:
    description: Name of this host in the lines (the inventory name).
    type: str
    default: this host
  stop:
    description: Stop the benchmarks still running. C(false) only reads.
    type: bool
    default: true
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Stop what the interrupted run left running on the load-generating worker, and read what it measured
  decode_bench_leftovers:
    directory: /tmp/dsv41-experiment
    run: 20261204T140905Z-stage_c_fence
    host_label: spark2
  delegate_to: spark2
  register: leftovers
"""

RETURN = r"""
benchmarks:
  description: One entry per benchmark of the run, oldest first.
  returned: always
  type: list
  elements: dict
  contains:
    label:
      description: The condition (baseline or an arm) or the check the benchmark served.
      type: str
    state:
      description: What its progress record says (running, done, failed).
      type: str
    running:
      description: Whether its process was still running before this call.
      type: bool
    stopped:
      description: Whether this call stopped it.
      type: bool
    finished:
      description: Whether it ended by itself with every round done (its figures are in its condition's results).
      type: bool
    rounds:
      description: Every round it finished (workload, concurrency, kind, number, of, aggregate_tok_s,
        per_stream_tok_s, wall_s, failed, at).
      type: list
      elements: dict
    plan_rounds:
      description: The warm-ups and repetitions it had planned.
      type: int
lines:
  description: One line per benchmark, for the operator.
  returned: always
  type: list
  elements: str
  sample: ["spark2 benchmark baseline was still running (pid 1156): stopped with SIGTERM; 4 of 24 rounds
    finished, 3 measured repetition(s) kept in the record: code C1 #1 25.9 tok/s, code C1 #2 25.9 tok/s,
    code C1 #3 25.9 tok/s"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bench.follow import leftover_lines, leftovers


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type="path", required=True),
            run=dict(type="str", required=True),
            host_label=dict(type="str", default="this host"),
            stop=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["run"].strip() or "/" in p["run"]:
        module.fail_json(msg="run %r is not an experiment run id" % p["run"])
    entries = leftovers(p["directory"], p["run"], stop=p["stop"] and not module.check_mode)
    module.exit_json(changed=any(e["stopped"] for e in entries) or (
        module.check_mode and p["stop"] and any(e["running"] for e in entries)),
        benchmarks=entries, lines=leftover_lines(entries, p["host_label"], check_mode=module.check_mode))


if __name__ == "__main__":
    main()
