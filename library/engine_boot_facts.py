#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engine_boot_facts: every fact of an engine's latest boot, for run records."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_boot_facts
short_description: Facts of the latest boot of an SGLang engine log (for run records)
description:
  - Reads a rank's engine log (a file, streamed, or the serving container's C(docker logs)) with the
    project's engine log parser and returns the latest boot's facts, namely server arguments (secrets
    masked by the engine), Engram lines, memory and KV pool lines, autotune events, CUDA graph capture shapes,
    fatal errors and readiness.
  - Read-only; runs the same in check mode. A log with no boot at all is a failure naming the source.
extends_documentation_fragment:
  - engine_log_source
options:
  host_label:
    description: Name used in messages (defaults to the host name).
    type: str
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Latest boot of this rank, for the run record
  engine_boot_facts:
    container: dsv41-worker
  register: boot
"""

RETURN = r"""
boot:
  description: The latest boot (see module_utils/engine_log/boot_facts.py BootFacts.to_dict).
  returned: success
  type: dict
  contains:
    boots_seen: {description: Boots found in the log (only with count_boots; else null)., type: int}
    marker_found: {description: The latest boot starts at a boot marker (server_args=)., type: bool}
    marker_form: {description: C(dict) (current builds) or C(ServerArgs) (older builds)., type: str}
    rank: {description: The boot's rank (node_rank of the marker, else the TP tag of its prefixes)., type: int}
    startup: {description: Load-weight and memory-pool start-up lines (avail mem, elapsed, mem usage)., type: dict}
    graphs: {description: CUDA graph capture begin/end lines per pass (target, draft)., type: dict}
    decode: {description: Decode batch lines (count, last, accept lengths)., type: dict}
    partial_last_line: {description: The last line when it was still being written (ignored)., type: str}
    malformed: {description: Lines with a value that is not a number (line, key, value, text)., type: list}
    server_args: {description: Fields of the server_args line., type: dict}
    engram: {description: Start-up Engram line per layer., type: list}
    memory: {description: DSV4 memory calculation fields., type: dict}
    pool: {description: Last DSV4 pool sizes line., type: dict}
    max_total: {description: The max_total_num_tokens line fields., type: dict}
    autotune: {description: Autotune events., type: dict}
    graph_shapes: {description: CUDA graph batch sizes per pass (target, draft)., type: dict}
    fatal: {description: Fatal Engram errors., type: list}
    ready: {description: Whether the head printed its Ready line., type: bool}
    read:
      description:
        - For I(container), how the boot was read (null for I(log_path)) - C(since) (the container's
          start the read began at), C(head_bytes), C(tail_bytes), C(stopped_at) (where the read from
          the start stopped, null when it reached the end) and C(gap) (C(after) and C(before), the
          times between which days of periodic lines were not read, or null).
        - Counts of periodic and decode lines cover what was read.
      type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.engine_log.source import (
    SOURCE_ARGUMENT_SPEC, SOURCE_MUTUALLY_EXCLUSIVE, SOURCE_REQUIRED_ONE_OF, read_boot_params,
)
from ansible.module_utils.base.host_label import host_label


def main():
    module = AnsibleModule(
        argument_spec=dict(SOURCE_ARGUMENT_SPEC, host_label=dict(type="str")),
        mutually_exclusive=SOURCE_MUTUALLY_EXCLUSIVE,
        required_one_of=SOURCE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    try:
        facts = read_boot_params(module.run_command, p)
    except (EngineLogError, OSError) as exc:
        module.fail_json(msg="%s: cannot read the engine log: %s" % (label, exc), changed=False)
    if not facts.marker_found:
        module.fail_json(msg="%s: %s holds no engine boot (no 'server_args=' boot marker)" % (label, facts.source),
                         changed=False, boot=facts.to_dict())
    module.exit_json(changed=False, boot=facts.to_dict())


if __name__ == "__main__":
    main()
