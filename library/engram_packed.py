#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: did this rank's engine start with packed Engram shards?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engram_packed
short_description: Check from the engine log that each Engram layer runs from a packed shard
description:
  - Reads the latest boot of an SGLang engine log (a saved log file or C(docker logs) of the
    rank's container) and reports, for each Engram layer, the C(packed=) flag and the row range of
    the C(Exact nvme Engram layer=L ...) start-up line, plus the periodic C(Engram layer=L ...
    packed=) lines of the same boot and any fatal packed-shard errors.
  - Only the latest boot counts, from the last boot marker (a message that is C(server_args={...}),
    or C(server_args=ServerArgs(...)) in older builds) to the end. A latest boot that died after its
    marker, before its Engram lines, fails even when an earlier boot in the same log was fully
    packed. Text that merely contains these words (an echoed request) starts no boot and cannot
    stand in for an C(Exact ... packed=True) line.
  - Fatal Engram errors (C(Engram retrieval failed) lines) name no file; they are attributed to the
    rank of the boot and to the first requested layer not attached before them.
  - "Older engine builds print no C(packed=) flag: packed is then unknown, never true."
  - Compares each layer's rows with the rank's expected range, rows N*r//tp up to N*(r+1)//tp
    (exclusive), when the layer's row count N is known (I(rows_total) or I(checkpoint)).
  - Read-only; a log file is read in bounded memory whatever its size. Parsing is done by
    C(module_utils/engine_log/source.py), the project's one engine-log reader.
version_added: "0.1.0"
author: TP3 fleet config repo
extends_documentation_fragment:
  - engine_log_source
options:
  rank:
    description: This node's tensor-parallel rank.
    type: int
    required: true
  tp_size:
    description: Tensor-parallel size of the fleet (3 for the TP3 fleet).
    type: int
    required: true
  layers:
    description: Engram layers that must be reported.
    type: list
    elements: int
    default: [1, 14]
  rows_total:
    description:
      - Total rows N per layer (mapping layer -> N), to check each layer's logged row range.
      - Mutually exclusive with I(checkpoint).
    type: dict
  checkpoint:
    description:
      - Checkpoint directory; N per layer is read from its C(model.safetensors.index.json) and
        safetensors headers (header only) with C(safetensors_index.read_engram_tables).
      - Mutually exclusive with I(rows_total).
    type: path
  require_packed:
    description:
      - Fail unless every layer is C(packed=True) in the latest boot (start-up line and every
        periodic line), its logged rank and rows match the expected ones, and no fatal packed-shard
        error was logged. The message names the host, the rank and each failing layer.
    type: bool
    default: false
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - A missing C(Exact nvme Engram layer=L) line for a requested layer always fails, naming the log
    source and the layer.
"""

EXAMPLES = r"""
- name: Require packed shards on this rank (stage A acceptance)
  engram_packed:
    container: "{{ 'dsv41-head' if rank == 0 else 'dsv41-worker' }}"
    rank: "{{ rank }}"
    tp_size: "{{ groups['ranks'] | length }}"
    layers: [1, 14]
    checkpoint: /srv/models/DeepSeek-V4.1-Flash
    require_packed: true

- name: Report only, from a saved boot log, with known row counts
  engram_packed:
    log_path: /var/log/dsv41/dsv41.log
    rank: 1
    tp_size: 3
    rows_total: {1: 128002056, 14: 128002056}
  register: packed

- ansible.builtin.debug:
    msg: "all packed: {{ packed.all_packed }} ({{ packed.problems | join('; ') }})"
"""

RETURN = r"""
layers:
  description: One entry per requested layer, in the order requested.
  returned: always
  type: list
  elements: dict
  contains:
    layer: {description: Engram layer, type: int}
    packed: {description: C(packed=) of the start-up line (None if the line has no flag), type: bool}
    periodic_packed:
      description: C(packed=) of the last periodic line of the boot, None if there was none.
      type: bool
    periodic_lines: {description: Number of periodic lines for the layer in the boot, type: int}
    periodic_unpacked: {description: Periodic lines with C(packed=False), type: int}
    lo: {description: First row of the logged range, type: int}
    hi: {description: End (exclusive) of the logged range, type: int}
    rank: {description: Rank printed on the start-up line, type: int}
    rank_ok: {description: Logged rank equals I(rank), type: bool}
    expected_lo: {description: Expected first row (None when N is unknown), type: int}
    expected_hi: {description: Expected end row (None when N is unknown), type: int}
    rows_ok: {description: Logged rows equal the expected ones (None when N is unknown), type: bool}
    rows_total: {description: N used for the expectation, type: int}
    shard: {description: Expected packed shard file name, e.g. engram-l14-r1of3.bin, type: str}
    io_threads: {description: io_threads of the start-up line, type: int}
    cache_gib: {description: Row cache size printed on the start-up line, type: float}
    line: {description: The start-up line (prefix and colours removed), type: str}
all_packed:
  description: Every requested layer is packed at start-up and no periodic line says otherwise.
  returned: always
  type: bool
all_ok:
  description: I(all_packed), every rank/rows check that could be made passed, and no fatal error.
  returned: always
  type: bool
boots_seen:
  description: Number of boots found in the log (only with I(count_boots)); only the latest is evaluated.
  returned: always
  type: int
fatal:
  description:
    - Fatal Engram errors of the latest boot (reason, errno, line, rank, attached_layers, and
      C(layer), the first requested layer not attached before the error).
  returned: always
  type: list
  elements: dict
partial_last_line:
  description: The log's last line when it was still being written (ignored), else null.
  returned: always
  type: str
problems:
  description: Human-readable list of what is not packed or not matching (empty when all_ok).
  returned: always
  type: list
  elements: str
source:
  description: The log that was read (a path or C(docker logs <container>)).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_log import lines as engine_log_lines, source as engine_log_source
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.engine_log.packed import evaluate, not_ok_message, rows_total_map
from ansible.module_utils.base.host_label import host_label


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_log_source.SOURCE_ARGUMENT_SPEC,
            rank=dict(type="int", required=True),
            tp_size=dict(type="int", required=True),
            layers=dict(type="list", elements="int", default=[1, 14]),
            rows_total=dict(type="dict"),
            checkpoint=dict(type="path"),
            require_packed=dict(type="bool", default=False),
            host_label=dict(type="str"),
        ),
        mutually_exclusive=engine_log_source.SOURCE_MUTUALLY_EXCLUSIVE + [("rows_total", "checkpoint")],
        required_one_of=engine_log_source.SOURCE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    who = "%s rank %d" % (label, p["rank"])
    if p["tp_size"] < 1 or not 0 <= p["rank"] < p["tp_size"]:
        module.fail_json(msg="%s: rank %d is outside 0..%d for tp_size %d"
                         % (who, p["rank"], p["tp_size"] - 1, p["tp_size"]), changed=False)
    layers = list(p["layers"])
    if not layers:
        module.fail_json(msg="%s: layers is empty" % who, changed=False)
    try:
        rows_total = rows_total_map(p["rows_total"], p["checkpoint"], layers)
    except Exception as exc:  # checkpoint reading errors name the file
        module.fail_json(msg="%s: cannot get the Engram row counts: %s" % (who, exc), changed=False)
    try:
        facts = engine_log_source.read_boot_params(module.run_command, p, kinds=engine_log_lines.ENGRAM_KINDS)
        result = evaluate(facts, p["rank"], p["tp_size"], layers, rows_total)
    except EngineLogError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False, source=exc.source,
                         boots_seen=exc.boots_seen)
    except ValueError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False)
    result["changed"] = False
    if p["require_packed"] and not result["all_ok"]:
        module.fail_json(msg=not_ok_message(who, result), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
