#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engine_boot_log: the text of an engine's latest boot, both streams, in order."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_boot_log
short_description: Return the latest boot of an SGLang engine log (both streams, in log order)
description:
  - Collects the text of the latest boot of a rank's engine log, the way every role collects boot
    logs (run records, a failed restart's report). The boot is found by the project's engine log
    reader (C(module_utils/engine_log/source.py)), so "latest boot" means the same here as in
    C(engram_packed), C(kv_pool) and C(autotune_status); from the last boot marker to the end.
  - For a container, C(docker logs --timestamps) is read on both streams (the engine's logging goes
    to stderr, C(print) lines such as C(Ready) and the adapters' to stdout) and merged back into log
    order.
  - A boot longer than I(max_bytes) keeps its first and last halves around a line saying how many
    bytes were left out. A last line still being written is left out and reported.
  - Read-only; runs the same in check mode.
extends_documentation_fragment:
  - engine_log_source
options:
  max_bytes:
    description:
      - Largest text returned. A longer boot keeps its first and last halves.
    type: int
    default: 8388608
  tail_lines:
    description:
      - Return only the last this many lines of the latest boot (0, the default, returns the whole
        boot up to I(max_bytes)). Used to show why a restart failed.
    type: int
    default: 0
  keep_since:
    description:
      - For I(container), read every line logged at or after this time (seconds since the epoch, the
        controller's clock less a margin for skew) with no record limit, so a measured window's lines are
        all in I(content) even when the boot's periodic lines outgrow the bounded tail read. Without it
        the latest 2000 records after the boot's head are read. Still capped by I(max_bytes).
    type: float
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
author: TP3 fleet config repo
"""

EXAMPLES = r"""
- name: Keep each rank's latest boot
  engine_boot_log:
    container: "{{ 'dsv41-head' if dsv41_rank == 0 else 'dsv41-worker' }}"
  register: boot_log

- name: Keep every line rank 0 logged while the benchmark ran (its Decode batch lines are judged)
  engine_boot_log:
    container: dsv41-head
    keep_since: "{{ benchmark_started_epoch | float - 120 }}"
  register: measured_boot

- name: Show the last 40 lines of a rank that did not come up
  engine_boot_log:
    container: dsv41-worker
    tail_lines: 40
"""

RETURN = r"""
content:
  description: The latest boot's text (both streams, in log order; prefixes kept).
  returned: success
  type: str
marker_found:
  description: The text starts at a boot marker (C(server_args=)); false means the log has none.
  returned: success
  type: bool
boot_bytes:
  description: Size of the latest boot in bytes (before I(max_bytes) or I(tail_lines) applied).
  returned: success
  type: int
omitted_bytes:
  description: Bytes left out of the middle of a boot longer than I(max_bytes).
  returned: success
  type: int
lines:
  description: Number of lines in I(content).
  returned: success
  type: int
partial_last_line:
  description: The last line when it was still being written (left out), else null.
  returned: success
  type: str
source:
  description: The log read (a path or C(docker logs <container>)).
  returned: always
  type: str
read:
  description:
    - For I(container), how the boot was read - C(since), C(head_bytes), C(tail_bytes), C(stopped_at)
      and C(gap) (see engine_boot_facts). When lines were not read, I(content) has a line saying
      between which times.
  returned: when I(container) is used
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.engine_log.source import (
    SOURCE_ARGUMENT_SPEC, SOURCE_MUTUALLY_EXCLUSIVE, SOURCE_REQUIRED_ONE_OF, read_boot_text,
)
from ansible.module_utils.base.host_label import host_label


def collect(run_command, params):
    """The module result (without ``changed``) for ``params``."""
    text, info = read_boot_text(run_command, log_path=params["log_path"], container=params["container"],
                                docker=params["docker_bin"], timestamps=params["docker_timestamps"],
                                max_bytes=params["max_bytes"], timeout=params["docker_timeout"],
                                keep_since=params.get("keep_since"))
    if params["tail_lines"]:
        text = "".join(text.splitlines(True)[-params["tail_lines"]:])
    info["content"] = text
    info["lines"] = text.count("\n")
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(SOURCE_ARGUMENT_SPEC, max_bytes=dict(type="int", default=8 << 20),
                           tail_lines=dict(type="int", default=0), keep_since=dict(type="float"),
                           host_label=dict(type="str")),
        mutually_exclusive=SOURCE_MUTUALLY_EXCLUSIVE,
        required_one_of=SOURCE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    if p["max_bytes"] < 4096 or p["tail_lines"] < 0:
        module.fail_json(msg="%s: max_bytes must be at least 4096 and tail_lines not negative (got %d, %d)"
                         % (label, p["max_bytes"], p["tail_lines"]), changed=False)
    try:
        result = collect(module.run_command, p)
    except EngineLogError as exc:
        module.fail_json(msg="%s: cannot read the engine log: %s" % (label, exc), changed=False, source=exc.source)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
