#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module decode_bench_wait: one round of following a background decode_bench to its end."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: decode_bench_wait
short_description: Follow a decode_bench started with async, one round per call
description:
  - Reads the async job's results file and the benchmark's progress record (I(progress_file) of
    M(decode_bench)) and reports whether the benchmark still runs, finished, failed (with its own
    message) or died without a result.
  - C(lines) holds a line for every round finished so far (condition, workload, concurrency,
    repetition i of n, tok/s, elapsed, ETA; warm-ups too) and C(msg) where the benchmark is now (the
    running repetition and its requests done). Meant for C(until) on C(finished) with C(retries), paced
    by I(wait) (C(delay) 0) or by C(delay); the project's action plugin of the same name shows every round at the default verbosity,
    with only the lines no earlier round of the task showed.
  - A benchmark whose recorded pid is gone is dead whatever the results file says, so a killed
    benchmark ends the wait in the next round. One still running a minute past I(time_limit) is
    stopped with SIGTERM (not in check mode). Otherwise read-only.
  - The module's result (figures, raw output) is read afterwards with M(ansible.builtin.async_status);
    a failed benchmark fails the wait with the benchmark's own message.
options:
  results_file:
    description: The async job's results file (C(results_file) of the task started with C(async) and C(poll=0)).
    type: path
    required: true
  progress_file:
    description: The benchmark's I(progress_file).
    type: path
    required: true
  run_id:
    description: The benchmark's I(run_id); a progress record with another one is an earlier run's and is ignored.
    type: str
  host_label:
    description: Name of the load-generating host in every line (the inventory name); defaults to the record's.
    type: str
  time_limit:
    description: Seconds the benchmark may run (the task's C(async)); 0 means no limit.
    type: float
    default: 0
  startup_grace:
    description: Seconds a running job may go without writing any progress record before the wait gives up.
    type: float
    default: 120
  wait:
    description:
      - Seconds one round may wait for the benchmark to end before it reports where it is; it reports as
        soon as the benchmark ends. The rounds are then paced by this (the task's C(delay) 0), and the last
        one ends with the benchmark instead of up to a poll later. 0 reports at once.
    type: float
    default: 0
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Start the decode benchmark in the background
  decode_bench:
    url: "http://spark1:8888"
    prompt_files: {prose: /tmp/bench/prose.json}
    concurrency: [1]
    progress_file: /tmp/bench/baseline.progress.json
    run_id: 20261202T101500Z-stage_c_fence-baseline
    label: baseline
  async: 14400
  poll: 0
  register: bench_job
  delegate_to: spark2

- name: Follow it, a line per finished repetition and one per round, until it ends
  decode_bench_wait:
    results_file: "{{ bench_job.results_file }}"
    progress_file: /tmp/bench/baseline.progress.json
    run_id: 20261202T101500Z-stage_c_fence-baseline
    host_label: spark2
    time_limit: 14400
    wait: 30
  register: bench_wait
  until: bench_wait.finished | default(true)
  retries: 484
  delay: 0
  delegate_to: spark2

- name: Read the benchmark's result
  ansible.builtin.async_status:
    jid: "{{ bench_job.ansible_job_id }}"
  register: bench
  delegate_to: spark2
"""

RETURN = r"""
finished:
  description: Whether the benchmark has ended (done, failed, killed, timed out, lost); the wait's C(until).
  returned: always
  type: bool
state:
  description: starting, running, done, failed, killed, timed_out or lost.
  returned: always
  type: str
msg:
  description: Where the benchmark is (one line with the time), or how it ended.
  returned: always
  type: str
  sample: "14:40:31 UTC spark2 benchmark baseline: prose C1 repetition 3 of 5 running (4 of 8 requests);
    8 of 36 rounds done; elapsed 6 min 32 s, ETA 11 min 02 s"
lines:
  description: A line per round finished so far, oldest first (the action plugin keeps the ones not shown yet).
  returned: always
  type: list
  elements: str
  sample: ["14:40:01 UTC spark2 benchmark baseline: prose C1 repetition 2 of 5 done, 16.9 tok/s (16.9 per stream)
    in 47 s; elapsed 5 min 34 s, ETA 12 min 10 s"]
elapsed_s:
  description: Seconds since the benchmark started.
  returned: once the benchmark has written its progress record
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bench.follow import follow_bench


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            progress_file=dict(type="path", required=True),
            run_id=dict(type="str"),
            host_label=dict(type="str"),
            time_limit=dict(type="float", default=0),
            startup_grace=dict(type="float", default=120),
            wait=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = follow_bench(p["results_file"], p["progress_file"], run_id=p["run_id"], host_label=p["host_label"],
                          time_limit=p["time_limit"], startup_grace=p["startup_grace"],
                          cleanup=not module.check_mode, wait=max(0.0, p["wait"]))
    if result.pop("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
