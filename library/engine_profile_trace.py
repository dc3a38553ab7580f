#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: which kernels ran on this rank during the engine's latest profiled window?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_profile_trace
short_description: Read the kernel names of this rank's SGLang profiler trace
description:
  - Read-only. SGLang's C(/start_profile) .. C(/stop_profile) makes every TP rank write
    C(<ts>-TP-<rank>.trace.json) (or C(.json.gz)) into C(SGLANG_TORCH_PROFILER_DIR), C(/tmp) by
    default, inside its own container. This module lists the traces modified at or after I(since)
    in that directory of the rank's container (C(docker exec <container> python3)) and returns the
    kernel names they hold (events with C(cat=kernel), or every complete event when none is marked).
  - The W8 adapters print no per-call counter, so a trace is the evidence that the FP8 wo_a path
    ran for target and draft shapes (stage D). Parsing is C(module_utils/engine_log/profile_trace.py).
  - A rank whose trace is not yet written has C(traces) empty (the caller retries, as the profiler
    writes asynchronously after C(/stop_profile)); a trace still being written is listed in
    C(unreadable), never parsed half. Such a round also returns C(lines) (empty) and C(msg) saying
    what is awaited and for how long, so the project's action plugin of the same name shows every
    waiting round; the round that finds the trace is shown as any task's.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  container:
    description: The rank's serving container (C(dsv41-head) or C(dsv41-worker)).
    type: str
    required: true
  directory:
    description: The profiler directory inside the container (C(SGLANG_TORCH_PROFILER_DIR)).
    type: str
    default: /tmp
  since:
    description: Epoch seconds; only traces modified at or after it count (the window's start).
    type: float
    required: true
  rank:
    description: Keep only traces of this TP rank (the file name's C(TP-<rank>)). Default every rank.
    type: int
  exposed_pattern:
    description:
      - A regular expression of kernel names (for example C(engram)) whose time on the compute stream
        (the stream with the most kernel time) is returned in C(exposed_us). Work a side stream runs
        does not count, which is the exposed time the Engram prefetch should reduce.
    type: str
  profile_patterns:
    description:
      - Name -> regular expression of kernel names. Their time on the compute stream, and its share of that
        stream, is returned in C(step_profile) (stage A's all-rank step profile names C(engram)).
    type: dict
    default: {}
  docker:
    description: The docker client to run.
    type: str
    default: docker
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
"""

EXAMPLES = r"""
- name: Read the kernels of the profiled window on every rank
  engine_profile_trace:
    container: "{{ preflight_container_name }}"
    since: "{{ profile_started }}"
    rank: "{{ dsv41_rank }}"
  register: trace
  until: trace.traces | length > 0
  retries: 30
  delay: 2
"""

RETURN = r"""
traces:
  description: Each trace file read, oldest first.
  returned: always
  type: list
  elements: dict
  sample: [{path: /tmp/1764555000-TP-0.trace.json, rank: 0, mtime: 1764555000.2,
            kernels: ["wo_a_fp8_gemv_g4 (draft)", "wo_a_fp8_gemv_g4 (target)"]}]
kernels:
  description: Kernel names of every trace read, unique and sorted.
  returned: always
  type: list
  elements: str
exposed_us:
  description: With I(exposed_pattern), microseconds of matching kernels on the compute stream (averaged
    over the traces read); None without one.
  returned: always
  type: float
step_profile:
  description:
    - The rank's step profile of the window (C(module_utils/engine_log/profile_trace.py) C(step_profile)), averaged over the
      traces read; None without a trace that has durations. C(compute_us) is the kernel time on the compute stream,
      C(side_us) on the others, C(exposed_us) and C(exposed_share_pct) each I(profile_patterns) name's time on the
      compute stream and its share of it (percent), C(top) the five longest kernels there as [name, us].
  returned: always
  type: dict
  sample: {traces: 1, compute_us: 40780.0, side_us: 0.0, exposed_us: {engram: 1000.0},
           exposed_share_pct: {engram: 2.45}, top: [["moe_b12x_dense", 30000.0], ["flash_attn_verify", 8000.0]]}
unreadable:
  description: Trace files that could not be parsed (still being written, corrupt), with why.
  returned: always
  type: list
  elements: str
msg:
  description: One line naming host and rank, what was found, or what is still awaited and since when.
  returned: always
  type: str
  sample: "14:41:07 UTC spark2 rank 1: no trace in dsv41-worker:/tmp since the profiled window began 35 s ago
    (written asynchronously after /stop_profile); 1 still being written"
lines:
  description: Empty; present only while no trace is found (the action plugin then shows the round).
  returned: when no trace was found
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base.probe import make_runner, tail_text
from ansible.module_utils.engine_log.profile_trace import (LIST_SCRIPT, TraceError, exposed_us, parse_listing, rank_kernels,
                                                step_profile, wait_report)
from ansible.module_utils.base.host_label import host_label


def read_traces(run, docker, container, directory, since, rank=None, label="host", exposed_pattern=None,
                profile_patterns=None):
    """The listing of ``container``'s traces, filtered to ``rank``; raises TraceError naming the source."""
    source = "%s: %s %s:%s" % (label, docker, container, directory)
    rc, out, err = run([docker, "exec", container, "python3", "-c", LIST_SCRIPT, directory, repr(float(since))])
    if rc is None:
        raise TraceError("%s: %s not found" % (source, docker))
    if rc != 0:
        raise TraceError("%s: docker exec exited %s: %s" % (source, rc, tail_text(err or out)))
    listing = parse_listing(out, source)
    if rank is not None:
        listing["traces"] = [t for t in listing["traces"] if t["rank"] == rank]
    listing["kernels"] = rank_kernels(listing)
    listing["exposed_us"] = exposed_us(listing, exposed_pattern) if exposed_pattern else None
    listing["step_profile"] = step_profile(listing, profile_patterns)
    return listing


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", required=True),
            directory=dict(type="str", default="/tmp"),
            since=dict(type="float", required=True),
            rank=dict(type="int"),
            exposed_pattern=dict(type="str"),
            profile_patterns=dict(type="dict", default={}),
            docker=dict(type="str", default="docker"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    patterns = [("exposed_pattern", p["exposed_pattern"])] if p["exposed_pattern"] else []
    patterns += [("profile_patterns.%s" % name, value) for name, value in sorted(p["profile_patterns"].items())]
    for where, value in patterns:
        try:
            re.compile(str(value))
        except re.error as exc:
            module.fail_json(msg="%s: %s is not a regular expression (%s): %r" % (label, where, exc, value),
                             changed=False)
    try:
        listing = read_traces(make_runner(module), p["docker"], p["container"], p["directory"], p["since"],
                              p["rank"], label, p["exposed_pattern"],
                              dict((k, str(v)) for k, v in p["profile_patterns"].items()))
    except TraceError as exc:
        module.fail_json(msg=str(exc), changed=False)
    listing.update(wait_report(listing, label, p["rank"], p["container"], p["directory"], p["since"]))
    module.exit_json(changed=False, **listing)


def main():
    run_module()


if __name__ == "__main__":
    main()
