# -*- coding: utf-8 -*-
"""Ways out for a rank that is short of space, and the fleet's verdict with the operator's choice counted
(controller side; standard library only).

Input is the fleet as the preflight saw it, one dict per rank host:
``{"host", "rank", "target" (ssh target from the head, None for the head itself), "dest", "plan"
(engram_plan's result with ``foreign`` and ``rooms``), "archive" (the room of its archive directory),
"spare" (the rooms of its spare volumes' archive directories)}``. A room is one entry of engram_plan's
``rooms``: ``path``, ``free_bytes``, ``block``, ``same_filesystem`` (as the rank's Engram destination),
``problem``.

The report's arithmetic: spark2 needs 67,586,019,080 bytes plus a 2 GiB margin and has 64,906,600,448
free, short by 4,826,902,280; its old TP2 shards occupy 101,379,024,656 bytes of the same filesystem.
Moving them elsewhere (another host with room, another volume of spark2) or deleting them (only when the
operator names each with its sha256) leaves 64,906,600,448 + 101,379,024,656 free, and it fits. A host
that receives the copies on the filesystem of its own Engram destination must still fit its own pack
afterwards: its margin for the copies is what it has to write plus engram_pack_margin_bytes.
"""
from __future__ import annotations

import json
import os
import shlex

from ansible.module_utils.engram.relocate_plan import copy_need

GIB = float(1 << 30)


def n(value):
    """Bytes as the report prints them (64,906,600,448)."""
    return "{:,}".format(value)


def after(plan, freed=0, taken=0):
    """A rank's verdict once ``freed`` bytes left its destination's filesystem and ``taken`` arrived there."""
    free = plan["free_bytes"] + freed - taken
    deficit = max(0, plan["to_write_bytes"] + plan["margin_bytes"] - free - plan["reclaimable_bytes"])
    return {"free_after_bytes": free, "deficit_after_bytes": deficit, "fits_after": deficit == 0}


def own_need(plan):
    """Free bytes a rank's own pack still needs on its destination's filesystem (to write + margin - reclaimable)."""
    return max(0, plan["to_write_bytes"] + plan["margin_bytes"] - plan["reclaimable_bytes"])


def copies_need(files, block):
    """What copies of ``files`` (engram_plan ``foreign`` entries) may allocate in a directory of ``block``-byte
    blocks, counted as engram_relocate counts it."""
    return sum(copy_need({"size": f["size"], "data_bytes": f["data_bytes"] or 0, "extents": f["extents"] or 0,
                          "allocated": f["allocated_bytes"]}, block or 4096) for f in files)


def room_margin(host, room):
    """Free space the host must keep in ``room`` after the copies: its own pack's need when the room shares its
    Engram destination's filesystem, else its headroom (engram_pack_margin_bytes)."""
    return own_need(host["plan"]) if room.get("same_filesystem") else host["plan"]["margin_bytes"]


def shell_json(value):
    return shlex.quote(json.dumps(value, separators=(", ", ": ")))


def relocate_command(prefix, to, files_by_host, dest_dir=None):
    choice = {"to": to, "files": files_by_host}
    if dest_dir:
        choice["dest_dir"] = dest_dir
    return "%s -e maintenance_window=true -e %s" % (prefix, shell_json({"engram_relocate": choice}))


def delete_commands(prefix, host, paths):
    """The sha256sum to run on ``host`` and the -e form that passes its result (placeholders to fill in)."""
    listed = [{"path": p, "sha256": "<sha256 of %s>" % os.path.basename(p)} for p in paths]
    return ("on %s: sha256sum %s" % (host, " ".join(shlex.quote(p) for p in paths)),
            "%s -e maintenance_window=true -e %s" % (prefix, shell_json({"engram_delete": {host: listed}})))


def _room_option(base, src, dst, room, files, kind):
    """One relocation option into ``room`` of host ``dst``: the destination's free space after the copies and
    whether the destination host keeps room for its own pack."""
    opt = dict(base, kind=kind, to=dst["host"], dest_dir=room["path"])
    if room.get("problem"):
        return dict(opt, possible=False, why_not="%s: %s %s" % (dst["host"], room["path"], room["problem"]))
    if kind == "volume" and room.get("same_filesystem"):
        return dict(opt, possible=False, why_not="%s: %s is on the destination's own filesystem: moving there "
                                                 "frees nothing" % (dst["host"], room["path"]))
    need, margin = copies_need(files, room.get("block")), room_margin(dst, room)
    left = room["free_bytes"] - need
    opt.update(need_bytes=need, dst_free_bytes=room["free_bytes"], dst_margin_bytes=margin, dst_free_after_bytes=left,
               dst_fits=left >= margin, dst_own_pack=bool(room.get("same_filesystem")) and kind == "host")
    why = None
    if not opt["dst_fits"]:
        why = "%s: %s has %s bytes free, the copies need %s and %s must stay free (%s); short by %s bytes" % (
            dst["host"], room["path"], n(room["free_bytes"]), n(need), n(margin),
            "its own pack still to write + margin" if opt["dst_own_pack"] else "headroom", n(margin - left))
    elif not base["fits_after"]:
        why = "%s would still be short by %s bytes" % (src["host"], n(base["deficit_after_bytes"]))
    return dict(opt, possible=why is None, why_not=why)


def options(fleet, prefix, short=None):
    """Every way out for each rank that does not fit (or each host named in ``short``), with its free-space
    outcome and the exact command.

    Kinds: ``host`` (relocate the rank's identified foreign shards to another rank host's archive directory),
    ``volume`` (to a spare volume of the same host), ``delete`` (only with each file's sha256). Options of
    another host come first, the one left with the most room first. All are opt-in: nothing here runs.
    """
    out = []
    for src in fleet:
        plan = src["plan"]
        if (plan["fits"] if short is None else src["host"] not in short):
            continue
        files = [f for f in plan.get("foreign") or [] if f["identified"]]
        freed = sum(f["allocated_bytes"] or 0 for f in files)
        base = dict(after(plan, freed), host=src["host"], rank=src["rank"], files=[f["path"] for f in files],
                    freed_bytes=freed, free_bytes=plan["free_bytes"], deficit_bytes=plan["deficit_bytes"])
        if not files:
            out.append(dict(base, kind="none", possible=False,
                            why_not="no identified foreign Engram file on the filesystem of %s" % src["dest"]))
            continue
        hosts = []
        for dst in fleet:
            if dst["host"] != src["host"]:
                opt = _room_option(base, src, dst, dst["archive"], files, "host")
                opt["command"] = relocate_command(prefix, dst["host"], {src["host"]: base["files"]})
                hosts.append(opt)
        out += sorted(hosts, key=lambda o: (not o["possible"], -o.get("dst_free_after_bytes", 0)))
        for room in src["spare"]:
            opt = _room_option(base, src, src, room, files, "volume")
            opt["command"] = relocate_command(prefix, src["host"], {src["host"]: base["files"]}, room["path"])
            out.append(opt)
        hash_cmd, delete_cmd = delete_commands(prefix, src["host"], base["files"])
        out.append(dict(base, kind="delete", possible=base["fits_after"], hash_command=hash_cmd, command=delete_cmd,
                        why_not=None if base["fits_after"] else "%s would still be short by %s bytes" % (
                            src["host"], n(base["deficit_after_bytes"]))))
    return out


def option_lines(opts, advice=()):
    """The options as the preflight prints them, one block per option; ``advice``: the launcher settings
    that could give a short rank another destination (dsv41_engram_advice)."""
    lines = []
    for o in opts:
        head = "%s (rank %s), %s free, short by %s:" % (o["host"], o["rank"], n(o["free_bytes"]),
                                                       n(o["deficit_bytes"]))
        if o["kind"] == "none":
            lines.append("%s %s." % (head, o["why_not"]))
            continue
        moved = "%d file(s) (%s bytes)" % (len(o["files"]), n(o["freed_bytes"]))
        if o["kind"] == "host":
            what = "relocate %s to %s:%s" % (moved, o["to"], o["dest_dir"])
        elif o["kind"] == "volume":
            what = "relocate %s to its spare volume %s" % (moved, o["dest_dir"])
        else:
            what = "delete %s, only with each one's sha256" % moved
        outcome = "%s free after (%s)" % (n(o["free_after_bytes"]), "fits" if o["fits_after"] else
                                          "still short by %s" % n(o["deficit_after_bytes"]))
        if o["kind"] in ("host", "volume") and o.get("dst_fits"):
            outcome += "; %s keeps %s free in %s (needs %s%s)" % (
                o["to"], n(o["dst_free_after_bytes"]), o["dest_dir"], n(o["dst_margin_bytes"]),
                ", its own pack included" if o["dst_own_pack"] else "")
        lines.append("%s %s -> %s%s" % (head, what, outcome, "" if o["possible"] else " - NOT POSSIBLE: %s" % o["why_not"]))
        if o.get("hash_command"):
            lines.append("    1. %s" % o["hash_command"])
            lines.append("    2. %s" % o["command"])
        elif o["possible"]:
            lines.append("    %s" % o["command"])
    lines += ["another destination the launcher can express: %s" % a for a in advice]
    return lines

