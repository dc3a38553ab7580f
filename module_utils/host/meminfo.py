# -*- coding: utf-8 -*-
"""``/proc/meminfo``: the one parser of it, for modules (contention) and filters (fleet_status, run_record)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

GIB = 2 ** 30


def parse_meminfo(text):
    """meminfo text -> {key: bytes} (kB lines times 1024; HugePages_* counts as is).

    Lines without a number (a truncated read) are left out rather than guessed.
    """
    out = {}
    for line in (text or "").splitlines():
        key, sep, rest = line.partition(":")
        if not sep or not key.strip():
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            value = int(fields[0])
        except ValueError:
            continue
        if len(fields) > 1 and fields[1].lower() == "kb":
            value *= 1024
        out[key.strip()] = value
    return out


def field_gib(text, field="MemAvailable", digits=2):
    """GiB of one field of meminfo text, rounded; None when the text is empty or has no such line."""
    value = parse_meminfo(text).get(field) if text else None
    return None if value is None else round(value / float(GIB), digits)


def memory_facts(meminfo):
    """MemTotal and MemAvailable of a parsed meminfo, in bytes and GiB (None when missing)."""
    total, avail = meminfo.get("MemTotal"), meminfo.get("MemAvailable")

    def gib(v):
        return None if v is None else round(v / float(GIB), 2)
    return {"mem_total_bytes": total, "mem_available_bytes": avail,
            "mem_total_gib": gib(total), "mem_available_gib": gib(avail)}


def parse_pressure(text):
    """``/proc/pressure/memory`` (PSI) -> {"some": {"avg10", "avg60", "avg300", "total_us"}, "full": {...}}: the
    share of time some (or all) tasks stalled on memory over the last 10/60/300 s, and the stall time in
    microseconds since boot. A line that does not parse is left out; empty text gives {}."""
    out = {}
    for line in (text or "").splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        fields = dict(part.split("=", 1) for part in rest.split() if "=" in part)
        try:
            out[kind] = {"avg10": float(fields["avg10"]), "avg60": float(fields["avg60"]),
                         "avg300": float(fields["avg300"]), "total_us": int(fields["total"])}
        except (KeyError, ValueError):
            continue
    return out
