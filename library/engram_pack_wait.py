#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engram_pack_wait: one round of following a background engram_pack to its end."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engram_pack_wait
short_description: Follow an engram_pack started with async, one round per call
description:
  - Reads the async job's results file and the packer's progress record and reports, in one line
    naming host, rank and layer, whether the packer still runs (bytes done of total, percent, MiB/s,
    ETA), finished, failed (with the packer's own error) or died without a result.
  - Meant for C(until) on C(finished) with C(retries) and C(delay); the engram_pack role's action
    plugin of the same name prints every round's result, so progress shows each round.
  - A packer whose recorded pid is gone is dead whatever the results file says (a SIGKILL to its
    process group leaves that file at "started" forever), so a killed packer ends the wait in the
    next round, never at the time limit. Its C(.partial) is then removed under the destination lock
    (only if no other pack holds it); a final-named shard is never touched.
  - Read-only except for that removal and for stopping (SIGTERM) a packer past its time limit; in
    check mode neither happens.
options:
  results_file:
    description: The async job's results file (C(results_file) of the task started with C(async) and C(poll=0)).
    type: path
    required: true
  progress_file:
    description: The packer's I(progress_file).
    type: path
    required: true
  run_id:
    description: The packer's I(run_id); a progress record with another one is an earlier run's and is ignored.
    type: str
  layer:
    description: Layer being packed (must match the progress record).
    type: int
    required: true
  rank:
    description: Tensor-parallel rank being packed (must match the progress record).
    type: int
    required: true
  host_label:
    description: Name used for this host in messages (the inventory name); defaults to the node name.
    type: str
  time_limit:
    description:
      - Seconds the packer may run (the task's C(async)); 0 means no limit.
      - The async wrapper kills the job at that limit, but can miss the module; a packer still alive
        a minute past it, or after the wrapper gave up, is stopped with SIGTERM (it removes its
        C(.partial)) and the wait fails.
    type: float
    default: 0
  startup_grace:
    description: Seconds a running job may go without writing any progress record before the wait gives up.
    type: float
    default: 120
  cleanup:
    description:
      - Remove the C(.partial) of a packer that died (under the destination lock) and stop a packer
        past its I(time_limit). Off, the wait only reports.
    type: bool
    default: true
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Start packing layer 1 in the background
  engram_pack:
    checkpoint: /models/DeepSeek-V4.1-Flash
    dest: /home/zurih/dsv41-3x-spark/engram
    layer: 1
    rank: 1
    tp_size: 3
    progress_file: /tmp/dsv41-engram-pack-1.json
    run_id: spark2-l1-20260924T101500
  async: 1800
  poll: 0
  register: pack_job

- name: Follow it, one progress line per round, until it ends
  engram_pack_wait:
    results_file: "{{ pack_job.results_file }}"
    progress_file: /tmp/dsv41-engram-pack-1.json
    run_id: spark2-l1-20260924T101500
    layer: 1
    rank: 1
    host_label: "{{ inventory_hostname }}"
    time_limit: 1800
  register: pack_wait
  until: pack_wait.finished | default(true)
  retries: 184
  delay: 10
"""

RETURN = r"""
finished:
  description: Whether the packer has ended (done, failed, killed, timed out); the wait's C(until).
  returned: always
  type: bool
state:
  description: starting, waiting_lock, packing, done, failed, killed, timed_out or lost.
  returned: always
  type: str
msg:
  description: One line naming host, rank and layer; progress while running, otherwise the outcome and the packer's message.
  returned: always
  type: str
  sample: "spark2 (rank 1) layer 1: 38.29% (6,471,680 of 16,900,096 bytes), 1.0 MiB/s, ETA 10 s"
percent:
  description: Percent of the shard written.
  returned: always
  type: float
done_bytes:
  description: Bytes of the shard written so far.
  returned: always
  type: int
total_bytes:
  description: Size of the shard being written.
  returned: always
  type: int
mib_s:
  description: Average write rate since writing began, MiB/s.
  returned: always
  type: float
eta_s:
  description: Seconds left at that rate (null before it is known).
  returned: always
  type: float
max_mib_s:
  description: The packer's rate cap (0 for none).
  returned: always
  type: float
pid:
  description: The packer's pid from its progress record (null before it reported).
  returned: always
  type: int
partial_removed:
  description: Whether the .partial of a dead packer was removed.
  returned: when the packer died without a result or was stopped at its time limit
  type: bool
shard_path:
  description: The published shard.
  returned: when done
  type: str
bytes:
  description: Its size.
  returned: when done
  type: int
seconds:
  description: Wall time of the write.
  returned: when done and the async result was read
  type: float
throughput_mib_s:
  description: Written MiB per second.
  returned: when done and the async result was read
  type: float
state_before:
  description: The shard's state before the pack (missing, partial, stale, complete).
  returned: when done and the async result was read
  type: str
packer_changed:
  description: Whether the packer wrote anything.
  returned: when done and the async result was read
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engram.follow import follow_pack


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results_file=dict(type="path", required=True),
            progress_file=dict(type="path", required=True),
            run_id=dict(type="str"),
            layer=dict(type="int", required=True),
            rank=dict(type="int", required=True),
            host_label=dict(type="str"),
            time_limit=dict(type="float", default=0),
            startup_grace=dict(type="float", default=120),
            cleanup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = follow_pack(params["results_file"], params["progress_file"], params["layer"], params["rank"],
                         run_id=params["run_id"], host_label=params["host_label"],
                         startup_grace=params["startup_grace"], time_limit=params["time_limit"],
                         cleanup=params["cleanup"] and not module.check_mode)
    if result.pop("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
