#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: did this rank's latest boot reuse or retune its FlashInfer autotune cache?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: autotune_status
short_description: Report a rank's FlashInfer autotune outcome and its autotune cache files
description:
  - >-
    Reads the latest boot of an SGLang engine log (a saved log file or C(docker logs) of the
    rank's container) and reports the autotune events of that boot. Stock engine:
    C(FlashInfer autotune: per-rank caches disagree ...) (disagreements), C(Running FlashInfer
    autotune with cache: <path>) and C(FlashInfer autotune completed.) (twice per boot: target
    and draft graphs). With the retention adapter: C([autotune_keep] armed), then per pass
    C([autotune_keep] reused <hash>/<file>) or C([autotune_keep] tuned and saved <hash>/<file>)
    (the adapter prints the tuning-hash directory and file name only; the engine's own
    C(Running FlashInfer autotune with cache:) line prints the full container path); a missing
    engine symbol fails the boot with C(DSV41_AUTOTUNE_KEEP: <name> is gone; engine drifted).
  - Lists the rank's cache files C(<cache_root>/<flashinfer version>/<sm>/<hash>/rank_tp{r}_pp0_dp0.json)
    with size, sha256, mtime and the retention adapter's C(.launch) sidecar (the launch
    fingerprint) beside each, and which of them the latest boot used.
  - Read-only. Parsing is done by C(module_utils/engine_log/source.py), the project's one engine-log
    parser; only the latest boot counts.
version_added: "0.1.0"
author: TP3 fleet config repo
extends_documentation_fragment:
  - engine_log_source
options:
  rank:
    description: This node's tensor-parallel rank; selects the C(rank_tp{rank}) cache files.
    type: int
    required: true
  cache_root:
    description:
      - The node's autotune cache directory (the container sees it through the C(~/.cache)
        mount as C(/root/.cache/sglang/flashinfer/autotune)). C(~) is the remote user's home.
    type: path
    default: ~/.cache/sglang/flashinfer/autotune
  expect:
    description:
      - Fail unless the verdict is one of these (e.g. C([reused]) on a repeat boot, C([tuned])
        after an incompatible change). The message names the host, rank, verdict and counts.
    type: list
    elements: str
    choices: [reused, tuned, mixed, failed, none]
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - A latest boot without any autotune line always fails, naming the log source.
  - "Verdicts: C(failed) - the retention adapter reported engine drift; C(reused) - the adapter
    reused the cache on every pass, no disagreement; C(tuned) - every pass tuned and saved, or a
    stock engine ran its autotune; C(mixed) - some passes reused and others tuned (or a
    disagreement beside a reuse); C(none) - the adapter armed but no pass outcome yet."
"""

EXAMPLES = r"""
- name: Repeat boot reuses the cache on every rank (stage B acceptance)
  autotune_status:
    container: "{{ 'dsv41-head' if dsv41_rank == 0 else 'dsv41-worker' }}"
    rank: "{{ dsv41_rank }}"
    expect: [reused]

- name: Report from a saved boot log
  autotune_status:
    log_path: /home/mia/dsv41-3x-spark/logs/dsv41.log
    rank: 0
  register: autotune

- ansible.builtin.debug:
    msg: "{{ autotune.verdict }}: {{ autotune.disagreements }} disagreement(s), {{ autotune.cache_files | length }} cache file(s)"
"""

RETURN = r"""
verdict:
  description: One of C(reused), C(tuned), C(mixed), C(failed), C(none) (see notes).
  returned: always
  type: str
armed:
  description: The retention adapter armed in the latest boot.
  returned: always
  type: bool
reused:
  description: Cache files the adapter reused, as it prints them (C(<hash>/<file>)), in log order.
  returned: always
  type: list
  elements: str
tuned_saved:
  description: Cache paths the adapter tuned and saved.
  returned: always
  type: list
  elements: str
reused_count: {description: Number of reused passes, returned: always, type: int}
tuned_count:
  description: Passes that tuned - tuned-and-saved passes with the adapter, autotune runs without it.
  returned: always
  type: int
disagreements: {description: Stock engine "per-rank caches disagree" events, returned: always, type: int}
runs:
  description: Cache paths of the C(Running FlashInfer autotune with cache:) lines.
  returned: always
  type: list
  elements: str
completed: {description: C(FlashInfer autotune completed.) lines, returned: always, type: int}
drift:
  description: Engine drift errors of the retention adapter (one message per missing symbol).
  returned: always
  type: list
  elements: str
drift_symbols: {description: The missing engine symbols, returned: always, type: list, elements: str}
cache_files:
  description: The rank's cache files under I(cache_root), sorted by path.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: Path on the node, type: str}
    size: {description: Bytes, type: int}
    sha256: {description: sha256 of the file, type: str}
    mtime: {description: Modification time (epoch seconds), type: float}
    sidecar: {description: Path of the C(.launch) sidecar, or null, type: str}
    sidecar_sha256: {description: sha256 of the sidecar file, or null, type: str}
    fingerprint: {description: The launch fingerprint stored in the sidecar (stripped), or null, type: str}
    flashinfer_version: {description: Path component after the cache root, type: str}
    sm: {description: GPU architecture component (e.g. sm121), type: str}
    hash: {description: Configuration hash directory, type: str}
    in_latest_boot: {description: The latest boot named this file, type: bool}
    outcome: {description: reused, tuned_saved, run (stock) or null, type: str}
flashinfer_version:
  description: FlashInfer version of the cache the latest boot used (else of the newest cache file).
  returned: always
  type: str
sm:
  description: GPU architecture directory (e.g. C(sm121)) taken the same way.
  returned: always
  type: str
cache_root: {description: The cache directory read, returned: always, type: str}
cache_root_exists: {description: Whether it exists, returned: always, type: bool}
problems:
  description: Human-readable notes (drift, a log naming another rank's files, runs without completion).
  returned: always
  type: list
  elements: str
boots_seen: {description: Boots found in the log; only the latest is evaluated, returned: always, type: int}
source: {description: The log that was read, returned: always, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_log import lines as engine_log_lines, source as engine_log_source
from ansible.module_utils.engine_log.autotune import VERDICTS, evaluate, expect_message
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.base.host_label import host_label


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_log_source.SOURCE_ARGUMENT_SPEC,
            rank=dict(type="int", required=True),
            cache_root=dict(type="path", default="~/.cache/sglang/flashinfer/autotune"),
            expect=dict(type="list", elements="str", choices=list(VERDICTS)),
            host_label=dict(type="str"),
        ),
        mutually_exclusive=engine_log_source.SOURCE_MUTUALLY_EXCLUSIVE,
        required_one_of=engine_log_source.SOURCE_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    who = "%s rank %d" % (label, p["rank"])
    if p["rank"] < 0:
        module.fail_json(msg="%s: rank must be >= 0" % who, changed=False)
    cache_root = os.path.expanduser(p["cache_root"])
    try:
        facts = engine_log_source.read_boot_params(module.run_command, p, kinds=[engine_log_lines.KIND_AUTOTUNE])
        result = evaluate(facts, p["rank"], cache_root)
    except EngineLogError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False, source=exc.source, boots_seen=exc.boots_seen)
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot read the autotune cache under %s: %s" % (who, cache_root, exc),
                         changed=False)
    result["changed"] = False
    if p["expect"] and result["verdict"] not in p["expect"]:
        module.fail_json(msg=expect_message(who, result, p["expect"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
