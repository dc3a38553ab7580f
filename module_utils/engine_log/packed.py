# -*- coding: utf-8 -*-
"""Whether a rank's engine attached its Engram layers packed, judged per layer from the facts of its
latest boot (standard library only).

Each rank prints, per Engram layer, one start-up ``Exact ... Engram layer=N`` line (its rank, its row range
[lo, hi) and, in current builds, ``packed=``) and, while it serves, periodic ``Engram layer=N ...
packed=`` lines; :class:`boot_facts.BootFacts` gathers them and the boot's fatal Engram errors. A layer is
packed when its start-up line says ``packed=True`` and no periodic line says ``packed=False``; the logged
rank and rows must be the rank's own share of the layer (``engram/shard_format.py``'s split).
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.engine_log.source import boots_label
from ansible.module_utils.engram import safetensors_index, shard_format

__metaclass__ = type


def rows_total_map(rows_total, checkpoint, layers):
    """{layer: N or None}: each layer's row count, from the checkpoint's tables or from ``rows_total``
    ({layer: N}, keys and values given as integers or their text). Raises ValueError on a bad entry and the
    checkpoint reader's errors (they name the file)."""
    if checkpoint:
        tables = safetensors_index.read_engram_tables(checkpoint, layers)
        return dict((layer, tables[layer].rows) for layer in layers)
    out = dict((layer, None) for layer in layers)
    for key, value in (rows_total or {}).items():
        try:
            layer, n = int(key), int(value)
        except (TypeError, ValueError):
            raise ValueError("rows_total: %r: %r is not an integer layer -> row count" % (key, value))
        if layer in out:
            out[layer] = n
    return out


def _expected_range(n_rows, rank, tp_size):
    if n_rows is None:
        return None, None
    return shard_format.rank_row_range(n_rows, rank, tp_size)


def evaluate(facts, rank, tp_size, layers, rows_total):
    """Turn :class:`boot_facts.BootFacts` into the ``engram_packed`` module result (without ``changed``).

    Raises :class:`EngineLogError` when the log has no boot marker or a requested layer has no
    start-up line in the latest boot (the message carries the fatal errors that explain it).
    """
    facts.require_marker()
    fatal = facts.fatal_attributed(layers, rank)
    fatal_text = facts.fatal_text(fatal)
    out_layers = []
    problems = []        # not-packed layers first, then rank/row mismatches, then fatal errors
    mismatches = []
    all_packed = True
    all_ok = True
    for layer in layers:
        f = facts.require_engram(layer, layers, rank)
        per = facts.periodic.get(layer)
        periodic_packed = per["last"]["packed"] if per and per["last"] else None
        periodic_unpacked = per["packed_false"] if per else 0
        exp_lo, exp_hi = _expected_range(rows_total.get(layer), rank, tp_size)
        rows_ok = None if exp_lo is None else (f["lo"], f["hi"]) == (exp_lo, exp_hi)
        rank_ok = f["rank"] == rank
        packed = f["packed"]
        entry = {
            "layer": layer, "packed": packed, "periodic_packed": periodic_packed,
            "periodic_lines": per["count"] if per else 0, "periodic_unpacked": periodic_unpacked,
            "lo": f["lo"], "hi": f["hi"], "rank": f["rank"], "rank_ok": rank_ok,
            "expected_lo": exp_lo, "expected_hi": exp_hi, "rows_ok": rows_ok,
            "rows_total": rows_total.get(layer), "shard": shard_format.shard_name(layer, rank, tp_size),
            "io_threads": f["io_threads"], "cache_gib": f["cache_gib"], "mode": f["mode"], "line": f["line"],
        }
        out_layers.append(entry)
        layer_packed = packed is True and periodic_unpacked == 0
        if not layer_packed:
            all_packed = False
            all_ok = False
            if packed is None:
                msg = "layer %d packed=unknown (this engine build prints no packed= flag)" % layer
            else:
                msg = "layer %d packed=%s" % (layer, packed)
            if packed is True and periodic_unpacked:
                msg += " at start but %d periodic line(s) packed=False" % periodic_unpacked
            problems.append(msg)
        if not rank_ok:
            all_ok = False
            mismatches.append("layer %d logged rank=%s, expected %d" % (layer, f["rank"], rank))
        if rows_ok is False:
            all_ok = False
            mismatches.append("layer %d rows [%s,%s) expected [%d,%d)"
                              % (layer, f["lo"], f["hi"], exp_lo, exp_hi))
    problems.extend(mismatches)
    if fatal_text:
        all_ok = False
        problems.extend(fatal_text)
    return {
        "source": facts.source,
        "layers": out_layers,
        "all_packed": all_packed,
        "all_ok": all_ok,
        "boots_seen": facts.boots_seen,
        "fatal": fatal,
        "problems": problems,
        "partial_last_line": facts.partial_last_line,
    }


def not_ok_message(who, result):
    """The refusal of a boot whose layers are not all packed and matching (``result``: :func:`evaluate`'s)."""
    return ("%s: %s (%s, %s)" % (who, "; ".join(result["problems"]), result["source"],
                                 boots_label(result["boots_seen"])))
