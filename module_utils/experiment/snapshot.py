# -*- coding: utf-8 -*-
"""The fleet snapshot an experiment starts from, and the proof that the fleet ended equal to it.

One subject: comparing two per-host snapshots. A snapshot is, per host, a flat mapping of what must
come back byte-identical after the run: the launcher ``.env`` hash (head), the image id and digest,
each adapter file's hash, the clock-lock state. The role gathers it with builtin modules
(stat/find/command) and this code only compares, so the same comparison serves the end of a run and
``playbooks/rollback.yml`` finishing an interrupted one.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def flatten(snapshot, prefix=""):
    """{"adapters": {"a.py": "h"}} -> {"adapters/a.py": "h"} (so every difference names its item)."""
    out = {}
    for key, value in (snapshot or {}).items():
        name = "%s/%s" % (prefix, key) if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def compare(before, after):
    """Per host, every item that differs: ``{"equal": bool, "differences": {host: ["item: a -> b"]}}``."""
    diffs = {}
    for host in sorted(set(before) | set(after)):
        a, b = flatten(before.get(host)), flatten(after.get(host))
        items = []
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                items.append("%s: %s -> %s" % (key, _short(a.get(key)), _short(b.get(key))))
        if items:
            diffs[host] = items
    return {"equal": not diffs, "differences": diffs}


def _short(value):
    if value is None:
        return "(absent)"
    text = str(value)
    return text[:19] if len(text) > 19 and all(c in "0123456789abcdef:sha" for c in text) else text
