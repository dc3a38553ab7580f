# -*- coding: utf-8 -*-
"""The space plan of a pack: what each rank must write, what is free and what can be reclaimed
(standard library only).
"""
from __future__ import annotations

import os

from ansible.module_utils.engram.safetensors_index import read_engram_tables, table_rank_range
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.engram.shard_format import (
    ENGRAM_LAYERS, EngramFormatError, EngramPackError, GIB, check_rank, is_int,
)
from ansible.module_utils.engram.provenance import CONTENT_CHECKS, describe_shard


def _gib(value):
    return round(value / GIB, 3)


def check_dest(dest):
    if not os.path.isdir(dest):
        what = "is not a directory" if os.path.exists(dest) else "does not exist"
        raise EngramPackError("host %s: Engram destination %s %s" % (host_label(), dest, what))


def free_bytes(dest):
    st = os.statvfs(dest)
    return st.f_bavail * st.f_frsize


def check_pack_params(checkpoint, rank, tp_size, margin_bytes):
    try:
        check_rank(rank, tp_size)
    except ValueError as exc:
        raise EngramFormatError("%s: %s" % (checkpoint, exc))
    if not is_int(margin_bytes) or margin_bytes < 0:
        raise EngramFormatError("%s: margin_bytes must be an integer >= 0, got %r" % (checkpoint, margin_bytes))


def plan(checkpoint, dest, rank, tp_size, layers=ENGRAM_LAYERS, margin_bytes=0, content_check="identity",
         verified=None):
    """Read-only space verdict for packing ``layers`` for one rank into ``dest``.

    Each complete shard's content is checked against the hash recorded when it was packed
    (``content_check``/``verified``: see shard_provenance.content_verdict); what that check found is the
    shard entry's ``content``.

    A shortfall is a verdict (``fits: False``), not an error; malformed input raises
    EngramFormatError and a missing ``dest`` raises EngramPackError.
    """
    check_dest(dest)
    check_pack_params(checkpoint, rank, tp_size, margin_bytes)
    if content_check not in CONTENT_CHECKS:
        raise EngramFormatError("%s: content_check must be one of %s, got %r"
                                % (dest, ", ".join(CONTENT_CHECKS), content_check))
    layers = list(layers)
    if not layers or len(set(layers)) != len(layers):
        raise EngramFormatError("%s: layers must be a non-empty list without duplicates, got %r"
                                % (checkpoint, layers))
    tables = read_engram_tables(checkpoint, layers)
    shards = []
    required = to_write = reclaimable = 0
    for layer in layers:
        table = tables[layer]
        table_rank_range(table, rank, tp_size)
        status = describe_shard(dest, layer, rank, tp_size, table.rows, table, content_check, verified)
        entry = {"layer": layer, "path": status.path, "lo": status.lo, "hi": status.hi,
                 "rows": status.hi - status.lo, "bytes": status.bytes, "state": status.state,
                 "meta_path": status.meta_path}
        if status.state == "stale":
            entry["stale_reason"] = status.reason
        if status.note:
            entry["verified"] = status.note
        if status.content:
            entry["content"] = status.content
        shards.append(entry)
        required += status.bytes
        if status.state != "complete":
            to_write += status.bytes
            reclaimable += status.reclaimable_bytes
    free = free_bytes(dest)
    deficit = max(0, to_write + margin_bytes - free - reclaimable)
    return {
        "required_bytes": required,
        "shards": shards,
        "to_write_bytes": to_write,
        "reclaimable_bytes": reclaimable,
        "free_bytes": free,
        "margin_bytes": margin_bytes,
        "fits": deficit == 0,
        "deficit_bytes": deficit,
        "required_gib": _gib(required),
        "to_write_gib": _gib(to_write),
        "free_gib": _gib(free),
        "deficit_gib": _gib(deficit),
        "reclaimable_gib": _gib(reclaimable),
    }
