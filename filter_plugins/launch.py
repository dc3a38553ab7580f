# -*- coding: utf-8 -*-
"""Filters over the effective launch (the ``launcher_effective`` module's result).

Which launcher settings move a rank's ``/engram`` is not assumed from names: ``launcher_effective``
changes each candidate setting in turn and evaluates the launch again (``key_effects``). A setting that
moves several ranks at once (one ``WORKER_ENGRAM_DIR`` for every worker) can only point them all at one
directory, so a destination offered through it must have room on each of those ranks.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def dsv41_engram_settings(key_effects, rank):
    """``[{"key": KEY, "ranks": [...]}]``: the settings whose change moves ``/engram`` of ``rank``."""
    out = []
    for key, effect in sorted((key_effects or {}).items()):
        ranks = [str(r) for r in (effect or {}).get("engram_ranks") or []]
        if str(rank) in ranks:
            out.append({"key": key, "ranks": ranks})
    return out


def dsv41_engram_advice(key_effects, ranks):
    """One sentence per rank in ``ranks``: the launcher setting that can give it another destination, and
    which other ranks that setting moves with it (so the new directory needs room on each)."""
    out = []
    for rank in ranks if isinstance(ranks, (list, tuple)) else [ranks]:
        found = dsv41_engram_settings(key_effects, rank)
        if not found:
            out.append("rank %s: no setting the launcher reads moves its /engram; only a change to the launcher "
                       "itself can give it another destination" % rank)
            continue
        parts = []
        for item in found:
            if item["ranks"] == [str(rank)]:
                parts.append("%s (this rank only)" % item["key"])
            else:
                parts.append("%s, which the launcher uses for ranks %s alike: the new directory must have room on "
                             "each of them" % (item["key"], ", ".join(item["ranks"])))
        out.append("rank %s: set %s" % (rank, "; or ".join(parts)))
    return out


def dsv41_launch_lines(result):
    """Lines for a report of a ``launcher_effective`` result: per container in order of start, where it
    runs, its image and ``/engram`` source, then the environment it receives (already masked)."""
    out = []
    for c in (result or {}).get("containers") or []:
        out.append("%s. %s rank %s %s (%s): /engram <- %s" % (c.get("order"), c.get("host"), c.get("rank"),
                                                             c.get("name"), c.get("image"),
                                                             c.get("engram_source") or "nothing"))
        out.append("   " + " ".join("%s=%s" % (k, v) for k, v in (c.get("env") or {}).items()))
    return out


class FilterModule:
    """Effective-launch filters."""

    def filters(self):
        return {"dsv41_engram_settings": dsv41_engram_settings, "dsv41_engram_advice": dsv41_engram_advice,
                "dsv41_launch_lines": dsv41_launch_lines}
