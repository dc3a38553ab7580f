"""Filters of the engram_pack role: the fleet's space table, its notes and refusals, the time limit.

Unit-tested in tests/unit/test_engram_pack_filters.py.
"""
import math


def _n(value):
    """Bytes with thousands separators, as the report prints them (67,586,019,080)."""
    return "{:,}".format(value)


def _who(host, hostvars):
    return "%s (rank %s)" % (host, hostvars[host]["dsv41_rank"])


def dsv41_pack_plan_rows(hosts, hostvars):
    """One row per host of the play from its ``engram_pack_plan`` (engram_plan) result."""
    rows = []
    for host in hosts:
        p = hostvars[host]["engram_pack_plan"]
        rows.append({
            "host": host, "rank": hostvars[host]["dsv41_rank"], "dest": hostvars[host]["engram_pack_destination"],
            "required": "%s (%s GiB)" % (_n(p["required_bytes"]), p["required_gib"]),
            "to_write": _n(p["to_write_bytes"]),
            "free": "%s (%s GiB)" % (_n(p["free_bytes"]), p["free_gib"]),
            "reclaimable": _n(p["reclaimable_bytes"]), "margin": _n(p["margin_bytes"]),
            "verdict": "fits" if p["fits"] else "SHORT by %s (%s GiB)" % (_n(p["deficit_bytes"]), p["deficit_gib"]),
        })
    return rows


def dsv41_pack_plan_notes(hosts, hostvars):
    """Why each stale shard is repacked, and which complete shards were trusted on what evidence."""
    out = []
    for host in hosts:
        for s in hostvars[host]["engram_pack_plan"]["shards"]:
            if s["state"] == "stale":
                out.append("%s %s: stale: %s" % (_who(host, hostvars), s["path"], s["stale_reason"]))
            elif s.get("verified"):
                out.append("%s %s: complete (%s)" % (_who(host, hostvars), s["path"], s["verified"]))
    return out


def dsv41_pack_plan_short(hosts, hostvars):
    """One message per rank whose destination cannot hold its shards (empty: every rank fits)."""
    out = []
    for host in hosts:
        p = hostvars[host]["engram_pack_plan"]
        if p["fits"]:
            continue
        reclaimable = " + %s reclaimable" % _n(p["reclaimable_bytes"]) if p["reclaimable_bytes"] else ""
        out.append("%s needs %s bytes (%s GiB) plus a %s-byte margin in %s and has %s free%s: deficit %s bytes (%s GiB)"
                   % (_who(host, hostvars), _n(p["to_write_bytes"]), p["to_write_gib"], _n(p["margin_bytes"]),
                      hostvars[host]["engram_pack_destination"], _n(p["free_bytes"]), reclaimable,
                      _n(p["deficit_bytes"]), p["deficit_gib"]))
    return out


def dsv41_pack_time_limit(plan, layer, layer_timeout, max_mib_s=0):
    """Seconds the pack of ``layer`` may take: ``layer_timeout``, or, when a rate cap slows the pack
    down on purpose, at least twice what the cap allows for the shard plus 600 s."""
    layer = int(layer)
    shard = next((s for s in plan["shards"] if s["layer"] == layer), None)
    if shard is None:
        from ansible.errors import AnsibleFilterError
        raise AnsibleFilterError("layer %s is not in the pack plan (layers %s)"
                                 % (layer, ", ".join(str(s["layer"]) for s in plan["shards"]) or "none"))
    rate = float(max_mib_s or 0)
    capped = int(math.ceil(2 * shard["bytes"] / (rate * 1048576) + 600)) if rate > 0 else 0
    return max(int(layer_timeout), capped)


class FilterModule:
    """Engram pack filters."""

    def filters(self):
        return {
            "dsv41_pack_plan_rows": dsv41_pack_plan_rows,
            "dsv41_pack_plan_notes": dsv41_pack_plan_notes,
            "dsv41_pack_plan_short": dsv41_pack_plan_short,
            "dsv41_pack_time_limit": dsv41_pack_time_limit,
        }
