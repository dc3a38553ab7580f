# -*- coding: utf-8 -*-
"""Engram files the project did not write, beside a rank's destination, and room elsewhere on the host
(standard library only).

Old shards of another TP size (spark2's TP2 ``engram-l1-r1of2.bin`` and ``engram-l14-r1of2.bin``, about
101.38 GB) can sit on the filesystem the rank's TP3 shards must go to, outside the active ``/engram``
source: moving them elsewhere is what makes room. :func:`survey` lists them, read-only, for the
preflight: files named like Engram shards (``engram-*.bin``) on the destination's filesystem
(``st_dev``), found under the search directories without following symlinks, within a depth and entry
budget, the destination itself left out. Each is identified exactly as engram_relocate identifies the
files it may move: the same agent gathers the facts (its ``inspect``, run on this host without ssh) and
the same :func:`~engram_relocate_plan.shard_verdict` decides. A file named like a shard that does not
pass is listed with the reason and is never offered for moving.

The same inspection measures the ``rooms`` (an archive directory, a spare volume): free bytes of the
directory or, when it does not exist yet, of its nearest existing parent, and whether it shares the
destination's filesystem (then moving there frees nothing).
"""
from __future__ import annotations

import json
import os
import re

from ansible.module_utils.engram.relocate_plan import SHARD_RE, shard_verdict
from ansible.module_utils.engram.relocate_runner import Runner

NAMED_LIKE = re.compile(r"^engram-.*\.bin$")
SEARCH_DEPTH = 4           # directory levels below each search directory
MAX_ENTRIES = 50000        # directory entries looked at per survey (a home with a huge tree is cut short)


def _walk(root, depth, devs, skip_real, budget):
    """Paths named like shards under ``root`` on a device in ``devs``; ``budget`` ([entries left]) is shared.
    Directories on other filesystems (mounts inside the home) and the destination itself are not entered."""
    found, stack = [], [(root, 0)]
    while stack:
        here, level = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue  # unreadable: nothing of ours can be there
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return found
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                if level + 1 <= depth and st.st_dev in devs and os.path.realpath(entry.path) != skip_real:
                    stack.append((entry.path, level + 1))
            elif NAMED_LIKE.match(entry.name) and st.st_dev == devs[0]:
                found.append(entry.path)
    return found


def _name_parts(path):
    match = SHARD_RE.match(os.path.basename(path))
    return dict(zip(("layer", "rank", "tp_size"), (int(x) for x in match.groups()))) if match else {}


def _room(facts, dest_dev):
    """One room as the plan reports it: existing or not, its (or its parent's) free space and filesystem.
    A room on the destination's own filesystem is flagged, not refused: another host's archive there is
    fine (its own pack counts in its margin); a volume of the same host there frees nothing."""
    usable = facts if facts["kind"] is not None else dict(facts.get("ancestor") or {}, kind="directory")
    problem = None
    if facts["kind"] not in (None, "directory"):
        problem = "is a %s, not a directory" % facts["kind"]
    elif facts["in_active"]:
        problem = "lies in the active Engram directory"
    elif facts["kind"] is None and not usable.get("is_dir"):
        problem = "does not exist and %s is not a directory" % usable.get("path")
    elif not usable.get("writable"):
        problem = "is not writable by this user" if facts["kind"] else \
            "does not exist and %s is not writable by this user" % usable.get("path")
    out = {"path": facts["path"], "exists": facts["kind"] is not None, "free_bytes": usable.get("free"),
           "block": usable.get("block"), "measured_at": usable.get("path", facts["path"]), "problem": problem,
           "same_filesystem": usable.get("dev") is not None and usable.get("dev") == dest_dev}
    return out


def survey(dest, tp_size, search=(), rooms=(), depth=SEARCH_DEPTH, max_entries=MAX_ENTRIES, runner=None):
    """Foreign Engram files on ``dest``'s filesystem under ``search`` and the free space of ``rooms``.

    Returns ``{"foreign": [...], "foreign_search": {...}, "rooms": [...]}``, read-only. Each foreign file:
    ``path``, ``size``, ``allocated_bytes`` (what removing it frees), ``data_bytes``, ``extents``,
    ``layer``/``rank``/``tp_size`` (from its name, when it has the shard form), ``identified`` and, when not,
    ``reason``.
    """
    dest_real = os.path.realpath(dest)
    dest_dev = os.stat(dest).st_dev
    budget, candidates, searched = [max_entries], [], []
    for root in search:
        if not os.path.isdir(root) or os.path.islink(root):
            searched.append({"path": root, "searched": False, "why": "not a directory (symlinks are not followed)"})
            continue
        devs = [dest_dev, os.stat(root).st_dev]
        searched.append({"path": root, "searched": True})
        candidates += [p for p in _walk(root, depth, devs, dest_real, budget) if p not in candidates]
    result = {"foreign": [], "rooms": [],
              "foreign_search": {"directories": searched, "depth": depth, "truncated": budget[0] < 0,
                                 "max_entries": max_entries}}
    if not candidates and not rooms:
        return result
    runner = runner or Runner()
    info = runner.call(None, "inspect", [json.dumps({"files": candidates, "active_dir": dest_real,
                                                     "rooms": list(rooms)})])
    for facts in info["files"]:
        shard, why = shard_verdict(facts, tp_size)
        entry = dict(_name_parts(facts["path"]), path=facts["path"], size=facts.get("size"),
                     allocated_bytes=facts.get("allocated"), data_bytes=facts.get("data_bytes"),
                     extents=facts.get("extents"), identified=why is None)
        if shard:
            entry.update(layer=shard["layer"], rank=shard["rank"], tp_size=shard["tp_size"])
        if why:
            entry["reason"] = why
        result["foreign"].append(entry)
    result["rooms"] = [_room(facts, dest_dev) for facts in info["rooms"]]
    return result
