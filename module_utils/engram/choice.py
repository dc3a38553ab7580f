# -*- coding: utf-8 -*-
"""The operator's opt-in room making for stage A, read and counted (controller side; standard library only).

Two extra variables choose it, never a default:

- ``engram_relocate: {"to": HOST, "files": {HOST: [PATH, ...]}, "dest_dir": DIR}``: move the named foreign
  shards of each source host into ``dest_dir`` on ``to`` (default: ``to``'s archive directory);
- ``engram_delete: {HOST: [{"path": PATH, "sha256": HEX}, ...]}``: delete each named file, only if its
  content has that sha256.

:func:`parse_choice` checks their shape against the fleet (errors name the variable, host and value) and
turns them into the engram_relocate calls the head makes (ssh targets, active directories, the margin each
destination keeps for its own pack). :func:`outlook` is every rank's verdict with the choice counted: a
source gains what its moved or deleted files occupy on its destination's filesystem, a destination loses
what the copies need there. The fleet is the list pack_options describes.
"""
from __future__ import annotations

import os
import re

from ansible.module_utils.engram.options import GIB, after, copies_need, n, own_need, room_margin

SHA_RE = re.compile(r"^[0-9a-fA-F]{64}$")


def _abs(path):
    return isinstance(path, str) and os.path.isabs(path) and os.path.normpath(path) == path


def _hosts_text(by):
    return ", ".join(sorted(by))


def _parse_relocate(raw, by, errors):
    if raw in (None, "", {}):
        return []
    if not isinstance(raw, dict):
        errors.append("engram_relocate must be a dict like {\"to\": HOST, \"files\": {HOST: [PATH, ...]}}, got %r"
                      % (raw,))
        return []
    extra = sorted(set(raw) - {"to", "files", "dest_dir"})
    if extra:
        errors.append("engram_relocate: unknown key(s) %s (to, files, dest_dir)" % ", ".join(extra))
    to, files, dest_dir = raw.get("to"), raw.get("files"), raw.get("dest_dir")
    if to not in by:
        errors.append("engram_relocate: to %r is not a rank host of this run (%s)" % (to, _hosts_text(by)))
    if dest_dir is not None and not _abs(dest_dir):
        errors.append("engram_relocate: dest_dir %r must be an absolute, normalised path" % (dest_dir,))
    if not isinstance(files, dict) or not files:
        errors.append("engram_relocate: files must map each source host to the paths to move, got %r" % (files,))
        return []
    moves = []
    for src, paths in sorted(files.items()):
        if src not in by:
            errors.append("engram_relocate: files: %r is not a rank host of this run (%s)" % (src, _hosts_text(by)))
        elif not isinstance(paths, list) or not paths or not all(_abs(p) for p in paths):
            errors.append("engram_relocate: files: %s: %r must be a non-empty list of absolute, normalised paths"
                          % (src, paths))
        elif src == to and dest_dir is None:
            errors.append("engram_relocate: %s would move files within itself: name dest_dir (another volume of %s%s)"
                          % (src, src, ": " + ", ".join(r["path"] for r in by[src]["spare"]) if by[src]["spare"] else ""))
        elif to in by:
            moves.append({"src_host": src, "dst_host": to, "files": list(paths), "dest_dir": dest_dir})
    return moves


def _parse_delete(raw, by, errors):
    if raw in (None, "", {}):
        return []
    if not isinstance(raw, dict):
        errors.append("engram_delete must be a dict like {HOST: [{\"path\": PATH, \"sha256\": HEX}, ...]}, got %r"
                      % (raw,))
        return []
    deletes = []
    for host, items in sorted(raw.items()):
        if host not in by:
            errors.append("engram_delete: %r is not a rank host of this run (%s)" % (host, _hosts_text(by)))
            continue
        good = isinstance(items, list) and items and all(
            isinstance(i, dict) and set(i) == {"path", "sha256"} and _abs(i["path"]) and isinstance(i["sha256"], str)
            and SHA_RE.match(i["sha256"]) for i in items)
        if not good:
            errors.append("engram_delete: %s: %r must be a non-empty list of {path, sha256} with absolute paths and "
                          "64-hex-digit sha256 (from sha256sum on %s)" % (host, items, host))
            continue
        deletes.append({"host": host, "target": by[host]["target"], "active_dir": by[host]["dest"],
                        "files": [{"path": i["path"], "sha256": i["sha256"].lower()} for i in items]})
    return deletes


def _room(host, path):
    return next((r for r in host["plan"].get("rooms") or [] if r["path"] == path), None)


def parse_choice(raw_relocate, raw_delete, fleet):
    """``{"moves": [...], "deletes": [...], "errors": [...]}`` from the two extra variables.

    Each move is one engram_relocate call from the head: ``src_host``/``dst_host`` (inventory names),
    ``src_target``/``dst_target`` (ssh targets, None for the head), ``files``, ``dest_dir``, ``active_dir`` and
    ``dst_active_dir`` (each host's Engram destination), ``margin_bytes`` (what the destination keeps free
    after the copies: its own pack's need when they land on its Engram filesystem, plus copies that
    earlier moves bring to the same directory), ``need_bytes`` (estimated from the source's survey) and
    ``same_filesystem``.
    """
    by = {h["host"]: h for h in fleet}
    errors = []
    moves = _parse_relocate(raw_relocate, by, errors)
    deletes = _parse_delete(raw_delete, by, errors)
    moved = {(m["src_host"], p) for m in moves for p in m["files"]}
    for d in deletes:
        for i in d["files"]:
            if (d["host"], i["path"]) in moved:
                errors.append("%s: %s is named both to relocate and to delete" % (d["host"], i["path"]))
    earlier = {}
    for m in moves:
        src, dst = by[m["src_host"]], by[m["dst_host"]]
        m["dest_dir"] = m["dest_dir"] or dst["archive"]["path"]
        room = _room(dst, m["dest_dir"])
        known = {f["path"]: f for f in src["plan"].get("foreign") or []}
        need = copies_need([known[p] for p in m["files"] if p in known and known[p]["identified"]],
                           room.get("block") if room else None)
        base = room_margin(dst, room) if room else own_need(dst["plan"])
        key = (m["dst_host"], m["dest_dir"])
        m.update(src_target=src["target"], dst_target=dst["target"], active_dir=src["dest"], dst_active_dir=dst["dest"],
                 margin_bytes=base + earlier.get(key, 0), need_bytes=need,
                 same_filesystem=bool(room and room.get("same_filesystem")))
        earlier[key] = earlier.get(key, 0) + need
    return {"moves": moves, "deletes": deletes, "errors": errors}


def _verdict(r, plan, freed_what, taken_from):
    text = "fits" if r["fits_after"] else "SHORT by %s (%s GiB)" % (n(r["deficit_after_bytes"]),
                                                                    round(r["deficit_after_bytes"] / GIB, 3))
    if freed_what:
        text += " %s %s (+%s bytes)" % ("after" if r["fits_after"] else "even after", freed_what, n(r["freed_bytes"]))
    if taken_from:
        text += " with the copies from %s (-%s bytes)" % (", ".join(taken_from), n(r["taken_bytes"]))
    return text


def outlook(fleet, choice, checks=None):
    """{host: verdict with the choice counted}: ``free_after_bytes``, ``deficit_after_bytes``, ``fits_after``,
    ``freed_bytes``, ``taken_bytes``, ``verdict`` (the table's words). ``checks``: {source host: the plan of
    engram_relocate's check-mode run}, whose destination need replaces the estimate."""
    checks = checks or {}
    out = {}
    for host in fleet:
        plan, name = host["plan"], host["host"]
        foreign = {f["path"]: f for f in plan.get("foreign") or [] if f["identified"]}
        moved = [p for m in choice["moves"] if m["src_host"] == name for p in m["files"]]
        deleted = [i["path"] for d in choice["deletes"] if d["host"] == name for i in d["files"]]
        freed = sum(foreign[p]["allocated_bytes"] or 0 for p in moved + deleted if p in foreign)
        taken, sources = 0, []
        for m in choice["moves"]:
            if m["dst_host"] == name and m["same_filesystem"]:
                need = ((checks.get(m["src_host"]) or {}).get("destination") or {}).get("need_bytes", m["need_bytes"])
                taken += need
                sources.append(m["src_host"])
        r = dict(after(plan, freed, taken), freed_bytes=freed, taken_bytes=taken)
        what = " and ".join(x for x in (
            "relocating %d file(s)" % len([p for p in moved if p in foreign]) if moved else "",
            "deleting %d file(s)" % len([p for p in deleted if p in foreign]) if deleted else "") if x)
        r["verdict"] = _verdict(r, plan, what, sources)
        out[name] = r
    return out


def summary(fleet, view, opts, prefix, check_mode, chosen):
    """One line saying where stage A stops and the next command (make demo prints it)."""
    short = [h for h in fleet if not view[h["host"]]["fits_after"]]
    if not short:
        fits = "stage A preflight: every rank fits%s" % (" with the chosen room making" if chosen else "")
        if not check_mode:
            return fits + "; this run goes on (room making, pack, restart, checks, record)"
        if chosen:
            return fits + ". Next: the same command without --check (with -e maintenance_window=true)"
        return fits + ". Next: %s -e maintenance_window=true" % prefix
    first = short[0]
    line = "stage A stops at %s (short by %s bytes)" % (", ".join(h["host"] for h in short),
                                                        n(view[first["host"]]["deficit_after_bytes"]))
    way = next((o for o in opts if o["host"] == first["host"] and o["possible"] and o["kind"] != "delete"), None)
    if way is None:
        return line + ". Next: no relocation frees enough there; see the options above (delete with sha256, " \
                      "or another destination the launcher can express)."
    return line + ". Next: %s (moves %s bytes to %s:%s; %s then has %s free; add --check to see it first)" % (
        way["command"], n(way["freed_bytes"]), way["to"], way["dest_dir"], first["host"], n(way["free_after_bytes"]))


def choice_lines(choice, checks=None, delete_checks=None, check_mode=True):
    """What the chosen room making does, one line per source host (``checks``: {host: engram_relocate's
    check-mode plan} for moves, ``delete_checks`` the same for deletions)."""
    checks, delete_checks, lines = checks or {}, delete_checks or {}, []
    would = "would be" if check_mode else "will be"
    for m in choice["moves"]:
        plan = checks.get(m["src_host"]) or {}
        dest = plan.get("destination") or {}
        files = ", ".join("%s (%s bytes)" % (f["file"], n(f["size"] or 0)) if f["verdict"] == "move" else
                          "%s (%s)" % (f["file"], f["verdict"].replace("_", " ")) for f in plan.get("files") or [])
        lines.append("%s -> %s:%s%s: %s %s relocated, each copy verified by sha256 before its source is removed; "
                     "%s keeps %s bytes free there (margin %s)" % (
                         m["src_host"], m["dst_host"], m["dest_dir"], " (to be created)" if dest.get("created") else "",
                         files or ", ".join(m["files"]), would, m["dst_host"],
                         n(dest.get("free_after_bytes", 0)), n(m["margin_bytes"])))
    for d in choice["deletes"]:
        plan = delete_checks.get(d["host"]) or {}
        files = ", ".join("%s (%s bytes)" % (f["src_path"], n(f["size"] or 0)) for f in plan.get("files") or [])
        lines.append("%s: %s %s deleted if each has the sha256 named (hashed first; one mismatch and none is)"
                     % (d["host"], files or ", ".join(i["path"] for i in d["files"]), would))
    return lines


def restore_groups(manifest, fleet):
    """The rollback's engram_relocate restore runs: ``{"groups": [{host, target, active_dir, files}], "errors",
    "lines"}``, one group per host the manifest's moved files came from (``manifest``: its parsed JSON, None
    when there is none)."""
    if manifest is None:
        return {"groups": [], "errors": [], "lines": ["No relocation manifest on the head: nothing to restore."]}
    by_target = {(h["target"] or None): h for h in fleet}
    entries = manifest.get("entries") or []
    groups, errors, lines = {}, [], []
    for e in entries:
        if e.get("state") not in ("moved", "copied"):
            continue
        host = by_target.get(e.get("src_host"))
        if host is None:
            errors.append("%s was moved from %s, which is not a rank host of this run" % (e.get("src_path"),
                                                                                       e.get("src_host") or "the head"))
            continue
        group = groups.setdefault(host["host"], {"host": host["host"], "target": host["target"],
                                                 "active_dir": host["dest"], "files": []})
        group["files"].append(e["src_path"])
        lines.append("%s: %s back from %s:%s (%s bytes, sha256 %s)" % (
            host["host"], e["src_path"], e.get("dst_host") or "the head", e.get("dst_path"), n(e.get("size") or 0),
            e.get("sha256")))
    done = sum(1 for e in entries if e.get("state") == "restored")
    gone = [e.get("src_path") for e in entries if e.get("state") == "deleted"]
    if not lines:
        lines.append("Nothing to restore: the manifest records no file still relocated (%d restored earlier)." % done)
    if gone:
        lines.append("Deleted, cannot be restored: %s" % ", ".join(gone))
    return {"groups": [groups[h] for h in sorted(groups)], "errors": errors, "lines": lines}
