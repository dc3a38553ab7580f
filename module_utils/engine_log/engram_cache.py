# -*- coding: utf-8 -*-
"""The Engram row cache, cold and warm, from the engine's own periodic Engram lines.

Each rank prints, per Engram layer and periodically while it serves,
``Engram layer=1 lookups=6040 hit_rate=0.0% reads=6040 cache=0.0GiB(4-way) ... packed=True`` (SPEC
section 3): ``lookups`` and ``reads`` count from the boot, ``hit_rate`` is the cache's share of lookups so far.
A row cache starts empty at every boot, so the first periodic line of a boot shows the cache cold and the
last one (after the correctness checks and the benchmark) shows it warm. Both are read from the latest boot
of each rank (the one scanner, module_utils/engine_log/scan.py), and a record tables them per condition,
rank and layer, so an operator sees whether a cache arm ever warmed and how fast.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.engine_log.scan import scan_text

__metaclass__ = type


def rank_cache_state(text, source="<log>"):
    """[{layer, lines, cache_gib, ways, cold_hit_pct, warm_hit_pct, lookups, reads}] of the latest boot in
    ``text`` (one rank's log), one entry per layer that printed a periodic line; [] when none did."""
    out = []
    for p in scan_text(text or "", name=source).to_dict()["periodic"]:
        first, last = p.get("first") or {}, p.get("last") or {}
        gib = last.get("cache_gib")
        out.append({"layer": p["layer"], "lines": p["count"], "cache_gib": None if gib is None else round(gib, 3),
                    "ways": last.get("cache_ways"), "cold_hit_pct": first.get("hit_rate_pct"),
                    "warm_hit_pct": last.get("hit_rate_pct"), "lookups": last.get("lookups"),
                    "reads": last.get("reads")})
    return out


def fleet_cache_state(logs, ranks):
    """{host: rank_cache_state} for every host whose log was read (``logs``: host -> latest boot text)."""
    return dict((host, rank_cache_state(text, host)) for host, text in (logs or {}).items() if host in (ranks or {}))


def _pct(value):
    return "-" if value is None else "%.1f%%" % value


def cache_table(conditions, order):
    """Markdown lines: the row cache cold (first periodic line) and warm (last) per condition, rank and layer.
    Only where some condition ran a cache (a zero-cache run has nothing to show); [] otherwise."""
    rows = []
    shown = any((e.get("cache_gib") or 0) > 0 for name in order for entries in
                ((conditions.get(name) or {}).get("engram_cache") or {}).values() for e in entries)
    if not shown:
        return []
    for name in order:
        state = (conditions.get(name) or {}).get("engram_cache") or {}
        for host in sorted(state):
            for e in state[host]:
                rows.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    name, host, e["layer"], "-" if e["cache_gib"] is None else "%g GiB, %s-way" % (
                        e["cache_gib"], e["ways"] if e["ways"] is not None else "?"),
                    _pct(e["cold_hit_pct"]), _pct(e["warm_hit_pct"]),
                    "-" if e["lookups"] is None else "{:,}".format(e["lookups"]), e["lines"]))
    return ["", "## Engram row cache, cold and warm (hit rate of the first and the last periodic Engram line of "
            "each rank's boot)", "",
            "| condition | host | layer | cache | cold | warm | lookups | lines |",
            "|---|---|---|---|---|---|---|---|"] + rows + speed_rows(conditions, order)


def _rate(value):
    return "-" if value is None else "%.2f" % value


def speed_rows(conditions, order):
    """Markdown lines: per condition, the speed of the first round after its boot (the cache cold: the first
    warm-up round of the first workload and concurrency run) beside that workload's measured median (warm).
    One cold round: reported, never judged."""
    rows = []
    for name in order:
        results = (conditions.get(name) or {}).get("results") or []
        if not results:
            continue
        # the first workload and concurrency run after the boot: the earliest measured window (the list is in
        # the plan's order, which need not be the order run)
        first = min(results, key=lambda r: ((r.get("window") or {}).get("start") or float("inf")))
        if not first.get("warmup_per_stream_tok_s"):
            continue        # nothing ran before the measured rounds: no round saw the cache cold alone
        cold, warm = first["warmup_per_stream_tok_s"][0], (first.get("per_stream_tok_s") or {}).get("median")
        rows.append("| %s | %s C%s | %s | %s | %s |" % (
            name, first.get("workload"), first.get("concurrency"), _rate(cold), _rate(warm),
            "%+.1f%%" % ((warm / cold - 1.0) * 100.0) if cold and warm else "-"))
    if not rows:
        return []
    return ["", "Per-stream tok/s of the first round after each boot (cache cold; a warm-up, one round, not judged) "
            "and the measured median of the same workload (cache warm):", "",
            "| condition | workload | first round (cold) | measured median (warm) | warm vs cold |",
            "|---|---|---|---|---|"] + rows
