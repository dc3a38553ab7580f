#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: what KV pool did this rank's engine actually allocate?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kv_pool
short_description: Report the KV pool an SGLang DSV4 engine allocated, and whether the pin was clamped
description:
  - Reads the latest boot of an SGLang engine log (a saved log file or C(docker logs) of the
    rank's container) and reports the KV pool the engine allocated, the memory figures it was
    computed from, and whether the requested pin (C(MAX_TOTAL_TOKENS)) was silently clamped.
  - The engine allocates whole pages of C(page_size) tokens (C(server_args), 256 by default), so a
    request of 3,000,000 allocated as 2,999,808 is page rounding (C(page_rounded)), not a clamp.
    C(clamped) is true only when the pool is smaller than the request rounded down to a page
    (the report's 750,000 -> 491,520).
  - The allocated pool is C(full=) of the LAST C(DSV4 pool sizes:) line of the latest boot (the
    line is printed twice; the last one is what was allocated). When the boot has no pool line,
    C(max_total_num_tokens=) is used instead.
  - Only the latest boot counts, from the last boot marker (C(server_args={...}) in current builds,
    C(server_args=ServerArgs(...)) in older ones) to the end. Workers print the memory and pool lines
    too (not C(max_total_num_tokens), which is rank 0 only), so every rank is verified from its own log.
  - Numbers are read as the engine prints them (thousands separators, GB meaning 2**30 bytes, a bare
    C(available_bytes) being bytes); a malformed value fails naming the source and line; a last
    line still being written is ignored and reported in C(partial_last_line).
  - Read-only; a log file is read in bounded memory whatever its size. Parsing is done by
    C(module_utils/engine_log/source.py), the project's one engine-log reader.
version_added: "0.1.0"
author: TP3 fleet config repo
extends_documentation_fragment:
  - engine_log_source
options:
  requested_tokens:
    description:
      - The pin requested for this node (its C(MAX_TOTAL_TOKENS) setting, 750000 today).
      - When omitted, C(max_total_tokens) of the boot's C(server_args) marker is used
        (None there means no pin was requested; then C(clamped) is None).
    type: int
  min_tokens:
    description:
      - Fail when the allocated pool is smaller than this many tokens. The message gives the
        allocated and requested figures and C(available_bytes).
    type: int
  rank:
    description:
      - This node's tensor-parallel rank, for messages only. Default C(node_rank) of the boot's
        C(server_args) line when it has one.
    type: int
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - A latest boot without the C(DSV4 memory calculation:) line, or without both the
    C(DSV4 pool sizes:) and C(max_total_num_tokens=) lines, fails naming the log source and the
    missing line (e.g. a boot that died with "Not enough memory" before allocating the pool).
"""

EXAMPLES = r"""
- name: Record the KV pool on every rank (stage A acceptance)
  kv_pool:
    container: "{{ 'dsv41-head' if rank == 0 else 'dsv41-worker' }}"
    requested_tokens: "{{ engine_settings.MAX_TOTAL_TOKENS | default(omit) }}"
    rank: "{{ rank }}"
  register: kv

- ansible.builtin.debug:
    msg: >-
      KV pool {{ kv.allocated_tokens }} of {{ kv.requested_tokens }} requested
      (clamped={{ kv.clamped }}, available_bytes={{ kv.available_bytes_printed }})

- name: Refuse a pool that is too small for the planned context
  kv_pool:
    log_path: /var/log/dsv41/dsv41.log
    min_tokens: 600000
"""

RETURN = r"""
allocated_tokens:
  description:
    - The pool that was allocated, C(full=) of the last C(DSV4 pool sizes:) line of the latest boot;
      C(max_total_num_tokens) when the boot has no pool line (see I(allocated_from)).
  returned: always
  type: int
  sample: 491520
allocated_from:
  description: Which line gave I(allocated_tokens), C(pool_sizes) or C(max_total_num_tokens).
  returned: always
  type: str
max_total_num_tokens:
  description: C(max_total_num_tokens=) of the latest boot, None when the boot has no such line.
  returned: always
  type: int
  sample: 491520
requested_tokens:
  description: The requested pin (I(requested_tokens), else C(server_args) C(max_total_tokens)), None when unknown.
  returned: always
  type: int
  sample: 750000
requested_from:
  description: C(parameter), C(server_args) or None.
  returned: always
  type: str
clamped:
  description:
    - I(allocated_tokens) < I(requested_rounded_tokens), that is the engine gave less than the request
      rounded down to a whole page. None when no pin is known.
  returned: always
  type: bool
  sample: true
clamped_by_tokens:
  description: How many tokens short of I(requested_rounded_tokens) the pool is (0 when not clamped).
  returned: always
  type: int
page_size:
  description: Tokens per KV page (C(page_size) of C(server_args), else 256).
  returned: always
  type: int
  sample: 256
page_size_from:
  description: C(server_args) or C(default).
  returned: always
  type: str
requested_rounded_tokens:
  description: The request rounded down to whole pages (what an unclamped pool holds).
  returned: always
  type: int
  sample: 749824
page_rounded:
  description: True when the request was not a whole number of pages and the pool is exactly the rounded request.
  returned: always
  type: bool
partial_last_line:
  description: The log's last line when it was still being written (ignored), else null.
  returned: always
  type: str
available_bytes_printed:
  description: C(available_bytes=) exactly as printed on the C(DSV4 memory calculation:) line.
  returned: always
  type: str
  sample: "1.04 GB"
available_bytes:
  description:
    - C(available_bytes) as an integer byte count. The engine computes its figures as
      bytes / 2**30 and labels them C(GB), so a printed C(GB) is taken as 2**30 bytes (GiB), as in
      C(module_utils/engine_log/lines.py); C("1.04 GB") is round(1.04 * 2**30) = 1116691497. With two
      printed decimals the value is only good to about +-5 MiB.
  returned: always
  type: int
  sample: 1116691497
bytes_per_full_token:
  description: C(bytes_per_full_token=) of the memory line.
  returned: always
  type: float
  sample: 1670.75
max_running_requests:
  description: From the C(max_total_num_tokens=) line, else from C(server_args); None if neither.
  returned: always
  type: int
context_len:
  description: C(context_len=) of the C(max_total_num_tokens=) line, else C(server_args) C(context_length).
  returned: always
  type: int
chunked_prefill_size:
  description: From the C(max_total_num_tokens=) line, else from C(server_args).
  returned: always
  type: int
available_gpu_mem_printed:
  description: C(available_gpu_mem=) of the C(max_total_num_tokens=) line as printed (None if absent).
  returned: always
  type: str
pool:
  description: The last C(DSV4 pool sizes:) line as a dict (full, swa, c128), None when absent.
  returned: always
  type: dict
pool_lines:
  description: Number of C(DSV4 pool sizes:) lines in the latest boot (2 for a normal boot).
  returned: always
  type: int
memory:
  description: All fields of the last C(DSV4 memory calculation:) line (engine_log's view).
  returned: always
  type: dict
boots_seen:
  description: Number of boots found in the log (only with I(count_boots)); only the latest is evaluated.
  returned: always
  type: int
rank:
  description: The rank used in messages (I(rank), else C(server_args) C(node_rank)), None if unknown.
  returned: always
  type: int
source:
  description: The log that was read (a path or C(docker logs <container>)).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_log import source as engine_log_source
from ansible.module_utils.engine_log.kv_pool import KINDS, below_min_message, evaluate
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.base.host_label import host_label


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_log_source.SOURCE_ARGUMENT_SPEC,
            requested_tokens=dict(type="int"),
            min_tokens=dict(type="int"),
            rank=dict(type="int"),
            host_label=dict(type="str"),
        ),
        mutually_exclusive=engine_log_source.SOURCE_MUTUALLY_EXCLUSIVE,
        required_one_of=engine_log_source.SOURCE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    for key in ("requested_tokens", "min_tokens"):
        if p[key] is not None and p[key] < 1:
            module.fail_json(msg="%s: %s must be a positive token count, got %d" % (label, key, p[key]),
                             changed=False)
    try:
        facts = engine_log_source.read_boot_params(module.run_command, p, kinds=KINDS)
        rank = p["rank"] if p["rank"] is not None else facts.rank
        who = label if rank is None else "%s rank %d" % (label, rank)
        result = evaluate(facts, p["requested_tokens"])
    except EngineLogError as exc:
        who = label if p["rank"] is None else "%s rank %d" % (label, p["rank"])
        module.fail_json(msg="%s: %s" % (who, exc), changed=False, source=exc.source,
                         boots_seen=exc.boots_seen)
    result["rank"] = rank
    result["changed"] = False
    if p["min_tokens"] is not None and result["allocated_tokens"] < p["min_tokens"]:
        module.fail_json(msg=below_min_message(who, result, p["min_tokens"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
