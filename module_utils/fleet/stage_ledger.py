# -*- coding: utf-8 -*-
"""The stage ledger: which rollout stages passed on which engine image (standard library only).

One subject: the entries a passing stage proposes for ``dsv41_stages_passed`` (committed by the operator in
the inventory, as validations are), ``{name: stage_<x>, image_digest, record}``. Definitions from stage C on
require stage_a and stage_b for the running image (``experiment_checks.preconditions``), so the report's
order holds: pack and a quiet, clean baseline (A), a stable autotune cache (B), then kernel tests.

A stage that rebuilds the image (stage B adds the autotune retention adapter) may carry named entries from
the image it started on to the image it ends on: the packing and the contention work of stage A do not
depend on the image, but an entry never moves to an image it was not carried to by a run.
"""
from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

STAGE_NAME = re.compile(r"^stage_[a-z]$")


class LedgerError(ValueError):
    pass


def entries_for(ledger, digest):
    """Names the ledger holds for one image digest (entries of another shape are ignored)."""
    return sorted(set(e.get("name") for e in (ledger or []) if isinstance(e, dict)
                      and e.get("image_digest") == digest and isinstance(e.get("name"), str)))


def proposal(ledger, stage, digest, record, carry=(), start_digest=None):
    """``{"entries": [...], "new": [...], "carried": [...]}``: the entries this passing run stands for
    (``stage`` for ``digest``, and each name of ``carry`` the ledger holds for ``start_digest``), and those
    of them the ledger does not hold yet (what the operator commits)."""
    if not STAGE_NAME.match(stage or ""):
        raise LedgerError("stage ledger: %r is not a stage name (stage_a .. stage_i)" % (stage,))
    if not digest:
        raise LedgerError("stage ledger: no image digest to key %s to (the running image could not be read)" % stage)
    had_at_start = entries_for(ledger, start_digest) if start_digest else []
    carried = [name for name in carry if name in had_at_start and name != stage]
    entries = []
    for name in [stage] + carried:
        entry = {"name": name, "image_digest": digest, "record": record}
        if name in carried and start_digest != digest:
            entry["carried_from"] = start_digest
        entries.append(entry)
    have = entries_for(ledger, digest)
    return {"entries": entries, "new": [e for e in entries if e["name"] not in have], "carried": carried}
