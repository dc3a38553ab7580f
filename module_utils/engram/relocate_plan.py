# -*- coding: utf-8 -*-
"""The verdicts of engram_relocate, read-only (standard library only).

What may move, to where, and whether it fits, decided on the head from facts the agent gathers on each
host (``inspect``: lstat, shard header, data extents, free space, the active Engram directory resolved
there). Used as is by check mode and, before anything moves, by every real run: a refusal of any file
stops the whole run.

A file may be relocated or deleted only if it is a packed Engram shard of another TP size than the
fleet's, identified by its name (``engram-l{L}-r{r}of{tp}.bin``), its header (magic, layer, the rank's row
range of N, 264 row bytes, zero padding) and its exact size (4096 + rows * 264): e.g. spark2's TP2
``engram-l1-r1of2.bin`` in a TP3 fleet. Never a symlink, never a file in the active Engram directory
(the source of a container's ``/engram``), never a shard of the fleet's own TP size.
"""
from __future__ import annotations

import json
import os
import re

from ansible.module_utils.engram.relocate_runner import RelocateError
from ansible.module_utils.engram.shard_format import MAGIC, ROW_BYTES, rank_row_range, shard_bytes

SHARD_RE = re.compile(r"^engram-l(\d+)-r(\d+)of(\d+)\.bin$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def shard_verdict(facts, tp_size):
    """``(shard, None)`` for a packed Engram shard of another TP size than ``tp_size``, else ``(None, why not)``."""
    kind = facts.get("kind")
    if kind is None:
        return None, "does not exist"
    if kind == "symlink":
        return None, "is a symlink (to %s), not a regular file; only a file itself is moved" % facts.get("target")
    if kind != "regular":
        return None, "is a %s, not a regular file" % kind
    match = SHARD_RE.match(os.path.basename(facts["path"]))
    if not match:
        return None, "is not named engram-l{layer}-r{rank}of{tp}.bin: not a packed Engram shard the project knows"
    layer, rank, tp = (int(x) for x in match.groups())
    if tp == tp_size:
        return None, "is a shard of the fleet's own TP size (of%d): never relocated or deleted" % tp
    header = facts.get("header")
    if not header:
        return None, "has no shard header (%d bytes)" % facts["size"]
    magic, h_layer, lo, hi, rows, row_bytes = header
    if magic != MAGIC:
        return None, "has magic 0x%016X, not a packed shard's 0x%016X" % (magic, MAGIC)
    if (h_layer, row_bytes) != (layer, ROW_BYTES):
        return None, "header says layer %d, row bytes %d; its name says layer %d (row bytes %d)" % (
            h_layer, row_bytes, layer, ROW_BYTES)
    try:
        want = rank_row_range(rows, rank, tp)
    except ValueError as exc:
        return None, "header does not fit its name: %s" % exc
    if (lo, hi) != want:
        return None, "header rows [%d, %d) are not rank %d of %d's rows [%d, %d) of N=%d" % (
            lo, hi, rank, tp, want[0], want[1], rows)
    if not facts.get("padding_zero"):
        return None, "header padding is not zero"
    if facts["size"] != shard_bytes(lo, hi):
        return None, "is %d bytes, not 4096 + %d rows * 264 = %d" % (facts["size"], hi - lo, shard_bytes(lo, hi))
    return {"layer": layer, "rank": rank, "tp_size": tp, "lo": lo, "hi": hi, "rows": rows}, None


def copy_need(facts, block):
    """Bytes a hole-aware copy may allocate at the destination: each data extent rounded out to whole blocks,
    and at least what the source occupies (its allocated blocks: a filesystem that allocates holes counts
    them at the destination too), at most the whole file in blocks, plus 1/1024 of the data for the
    filesystem's block maps. For a file without holes (a real shard) that is its size plus 0.1%."""
    whole = -(-facts["size"] // block) * block
    extents = max(facts["data_bytes"] + 2 * block * facts["extents"], facts.get("allocated") or 0)
    return min(whole, extents) + facts["data_bytes"] // 1024


def check_path(what, path):
    if not isinstance(path, str) or not os.path.isabs(path) or os.path.normpath(path) != path:
        raise RelocateError("%s %r must be an absolute, normalised path (no trailing /, no . or ..)" % (what, path))


def check_files(paths):
    for path in paths:
        check_path("file", path)
    names = [os.path.basename(p) for p in paths]
    dups = sorted(set(n for n in names if names.count(n) > 1))
    if not paths or dups:
        raise RelocateError("files: %s" % ("name at least one file" if not paths else
                                           "%s named more than once (one destination name each)" % ", ".join(dups)))


def dest_refusal(dest, label, create=False):
    """Why the destination directory cannot take files (or, with ``create``, be created), or None."""
    if dest["kind"] is None and create:
        anc = dest["ancestor"]
        if dest["in_active"]:
            return "%s: destination %s would lie in the active Engram directory; relocated shards never go there" % (
                label, dest["path"])
        if not anc["is_dir"] or not anc["writable"]:
            return "%s: destination %s does not exist and cannot be created: %s is %s" % (
                label, dest["path"], anc["path"], "not a directory" if not anc["is_dir"] else "not writable by this user")
        return None
    if dest["kind"] != "directory":
        return "%s: destination %s %s" % (label, dest["path"], "does not exist" if dest["kind"] is None else
                                          "is a %s, not a directory" % dest["kind"])
    if dest["in_active"]:
        return "%s: destination %s lies in the active Engram directory; relocated shards never go there" % (
            label, dest["path"])
    if not dest["writable"]:
        return "%s: destination %s is not writable by this user" % (label, dest["path"])
    return None


def usable_dest(dest):
    """The destination as the copies will find it: itself, or for one still to be created (``kind`` None),
    its nearest existing ancestor's filesystem (free space, block size, device) with no names taken."""
    if dest["kind"] is not None:
        return dest
    anc = dest["ancestor"]
    return dict(dest, dev=anc.get("dev"), free=anc.get("free"), block=anc.get("block"), names={}, created=True)


def room(label, dest, need, margin_bytes, free_space=None):
    """Room verdict of one destination directory; ``free_space(label, dir, reported)`` replaces its free bytes."""
    free = dest["free"] if free_space is None else free_space(label, dest["path"], dest["free"])
    deficit = max(0, need + margin_bytes - free)
    verdict = {"host": label, "dest_dir": dest["path"], "free_bytes": free, "need_bytes": need,
               "margin_bytes": margin_bytes, "fits": deficit == 0, "deficit_bytes": deficit,
               "free_after_bytes": free - need, "dev": dest.get("dev"), "created": bool(dest.get("created"))}
    why = None
    if deficit:
        why = "%s: no room in %s: %s bytes free, the copies need %s + margin %s; short by %s bytes" % (
            label, dest["path"], "{:,}".format(free), "{:,}".format(need), "{:,}".format(margin_bytes),
            "{:,}".format(deficit))
    return verdict, why


def src_filesystems(items, facts_list, verdict):
    """Per source filesystem: free bytes now, bytes the planned files free (allocated size), free after."""
    by_dev = {}
    for item, facts in zip(items, facts_list):
        if facts.get("kind") != "regular":
            continue
        fs = by_dev.setdefault(facts["dev"], {"dev": facts["dev"], "free_bytes": facts["free"], "freed_bytes": 0,
                                              "files": []})
        if item["verdict"] == verdict:
            fs["freed_bytes"] += facts["allocated"]
            fs["files"].append(item["src_path"])
    for fs in by_dev.values():
        fs["free_after_bytes"] = fs["free_bytes"] + fs["freed_bytes"]
    return [by_dev[k] for k in sorted(by_dev)]


def _inspect(runner, host, active_dir, refusals, **spec):
    info = runner.call(host, "inspect", [json.dumps(dict(spec, active_dir=active_dir))])
    if not info["active_exists"]:
        refusals.append("%s: active_dir %s does not exist there; cannot tell the active Engram directory"
                        % (runner.label(host), active_dir))
    return info


def _target_refusal(target, facts, dst_path, dest_dir):
    """Why the destination name of a file is taken, or None (the same size: content compared on publishing)."""
    if target["temp"] not in (None, "regular"):
        return "its temporary name in %s is taken by a %s" % (dest_dir, target["temp"])
    if target["final"] is not None and (target["final"] != "regular" or target["final_size"] != facts["size"]):
        return "%s already holds a different %s (%s bytes)" % (dst_path, target["final"], target["final_size"])
    return None


def plan_move(files, src, dst, dest_dir, active_dir, tp_size, runner, margin_bytes=0, manifest=None,
              free_space=None, create_dest=False, dst_active_dir=None):
    """Every verdict of moving ``files`` from host ``src`` into ``dest_dir`` on host ``dst``, read-only.

    Refusals are listed in ``refusals`` (each naming host, file and value); ``ok`` is true when there is
    none. A file already gone whose move the manifest records, with its copy in place, is ``already_moved``.
    With ``create_dest`` a missing ``dest_dir`` is judged on its nearest existing ancestor and the plan says
    it will be created (``destination.created``). ``dst_active_dir``: the active Engram directory of ``dst``
    when it differs from the source's (``active_dir``).
    """
    check_files(files)
    check_path("dest_dir", dest_dir)
    check_path("active_dir", active_dir)
    check_path("dst_active_dir", dst_active_dir or active_dir)
    slabel, dlabel = runner.label(src), runner.label(dst)
    refusals = [manifest.refusal()] if manifest and manifest.refusal() else []
    src_info = _inspect(runner, src, active_dir, refusals, files=list(files))
    dst_info = _inspect(runner, dst, dst_active_dir or active_dir, refusals, dest_dir=dest_dir,
                        names=[os.path.basename(f) for f in files])
    bad_dest = dest_refusal(dst_info["dest"], dlabel, create_dest)
    refusals += [bad_dest] if bad_dest else []
    dest = usable_dest(dst_info["dest"]) if bad_dest is None else dst_info["dest"]
    same_machine = src_info["machine_id"] == dst_info["machine_id"] if src_info["machine_id"] else src == dst
    items = []
    for facts in src_info["files"]:
        path, name = facts["path"], os.path.basename(facts["path"])
        item = {"file": name, "src_path": path, "dst_path": os.path.join(dest_dir, name), "size": facts.get("size"),
                "allocated_bytes": facts.get("allocated"), "verdict": "move"}
        items.append(item)
        target = (dest.get("names") or {}).get(name)
        if facts["kind"] is None and target and target["final"] == "regular" and manifest and manifest.find(
                "moved", src_host=src, src_path=path, dst_host=dst, dst_path=item["dst_path"]):
            item["verdict"] = "already_moved"
            continue
        shard, why = shard_verdict(facts, tp_size)
        if why is None and facts["in_active"]:
            why = "lies in the active Engram directory %s; never relocated" % active_dir
        if why is None and same_machine and facts["dev"] == dest.get("dev"):
            why = "is on the same filesystem as %s: moving it there frees nothing" % dest_dir
        if why is None and target is not None:
            why = _target_refusal(target, facts, item["dst_path"], dest_dir)
        if why:
            item.update(verdict="refused", reason=why)
            refusals.append("%s: %s %s" % (slabel, path, why))
            continue
        item.update(shard=shard, mtime_ns=facts["mtime_ns"], mode=facts["mode"], ino=facts["ino"], dev=facts["dev"],
                    data_bytes=facts["data_bytes"], dst_exists=target is not None and target["final"] is not None,
                    need_bytes=copy_need(facts, dest.get("block") or 4096))
    plan = {"action": "move", "src_host": src, "dst_host": dst, "dest_dir": dest_dir, "files": items,
            "src_filesystems": src_filesystems(items, src_info["files"], "move")}
    if bad_dest is None:
        need = sum(i["need_bytes"] for i in items if i["verdict"] == "move")
        verdict, why = room(dlabel, dest, need, margin_bytes, free_space)
        plan["destination"] = verdict
        refusals += [why] if why else []
    plan.update(refusals=refusals, ok=not refusals)
    return plan


ANY_HOST = object()


def plan_restore(manifest, runner, active_dir, margin_bytes=0, only=None, free_space=None, from_host=ANY_HOST):
    """Verdicts of moving the manifest's ``moved`` files (those named in ``only``, by name or original path, or
    all; those moved from ``from_host`` only, when given) back from their copies to where they came from,
    read-only."""
    check_path("active_dir", active_dir)
    refusals = [manifest.refusal()] if manifest.refusal() else []
    wanted = set(only or ())
    chosen = [e for e in manifest.entries if e.get("state") in ("moved", "copied", "restored") and
              (not wanted or e["file"] in wanted or e["src_path"] in wanted) and
              (from_host is ANY_HOST or e.get("src_host") == from_host)]
    known = set(e["file"] for e in manifest.entries) | set(e["src_path"] for e in manifest.entries)
    for name in sorted(wanted - known):
        refusals.append("%s: %s is not in manifest %s" % (runner.label(None), name, manifest.path))
    items, groups = [], {}
    for entry in chosen:
        item = {"file": entry["file"], "src_host": entry["dst_host"], "src_path": entry["dst_path"],
                "dst_host": entry["src_host"], "dst_path": entry["src_path"], "size": entry["size"],
                "sha256": entry["sha256"], "verdict": "restore", "_entry": entry}
        items.append(item)
        if entry["state"] != "moved":
            item["verdict"] = "already_restored" if entry["state"] == "restored" else "refused"
            if entry["state"] == "copied":
                item["reason"] = "was copied but its original was left in place; both copies exist"
                refusals.append("%s: %s %s" % (runner.label(entry["src_host"]), entry["src_path"], item["reason"]))
            continue
        groups.setdefault((entry["dst_host"], "copies"), []).append(item)
        groups.setdefault((entry["src_host"], os.path.dirname(entry["src_path"])), []).append(item)
    destinations = []
    # The copies first: each destination's room is what its copies need.
    for (host, where), members in sorted(groups.items(), key=lambda kv: (kv[0][1] != "copies", str(kv[0]))):
        label = runner.label(host)
        if where == "copies":
            info = runner.call(host, "inspect", [json.dumps({"files": [i["src_path"] for i in members]})])
            for item, facts in zip(members, info["files"]):
                item["_copy"] = facts
                if facts["kind"] != "regular" or facts["size"] != item["size"]:
                    item.update(verdict="refused", reason="the copy is %s" % (
                        "missing" if facts["kind"] is None else "a %s of %s bytes, expected a regular file of %d"
                        % (facts["kind"], facts.get("size"), item["size"])))
                    refusals.append("%s: %s %s" % (label, item["src_path"], item["reason"]))
            continue
        info = _inspect(runner, host, active_dir, refusals, dest_dir=where,
                        names=[os.path.basename(i["dst_path"]) for i in members])
        bad = dest_refusal(info["dest"], label)
        if bad:
            refusals.append(bad)
            continue
        for item in members:
            item["dest_block"] = info["dest"]["block"]
            why = _target_refusal(info["dest"]["names"][item["file"]], item, item["dst_path"], where)
            if why:
                item.update(verdict="refused", reason=why)
                refusals.append("%s: %s" % (label, why))
        ready = [i for i in members if i["_copy"]["kind"] == "regular"]
        verdict, why = room(label, info["dest"], sum(copy_need(i["_copy"], i["dest_block"]) for i in ready),
                            margin_bytes, free_space)
        destinations.append(verdict)
        refusals += [why] if why else []
    plan = {"action": "restore", "manifest": manifest.path, "files": items, "destinations": destinations,
            "refusals": refusals, "ok": not refusals,
            "not_restorable": ["%s (deleted %s)" % (e["src_path"], e.get("deleted_at")) for e in manifest.entries
                               if e.get("state") == "deleted" and (not wanted or e["file"] in wanted or
                                                                   e["src_path"] in wanted)]}
    return plan


def plan_delete(items, src, active_dir, tp_size, runner, manifest=None):
    """Verdicts of deleting ``items`` ([{path, sha256}]) on host ``src``, read-only (nothing is hashed)."""
    paths = [i["path"] for i in items]
    check_files(paths)
    check_path("active_dir", active_dir)
    slabel = runner.label(src)
    refusals = [manifest.refusal()] if manifest and manifest.refusal() else []
    for item in items:
        if not isinstance(item.get("sha256"), str) or not SHA_RE.match(item["sha256"].lower()):
            raise RelocateError("%s: %s: sha256 %r is not 64 hex digits; delete needs each file's sha256"
                                % (slabel, item["path"], item.get("sha256")))
    info = _inspect(runner, src, active_dir, refusals, files=paths)
    planned = []
    for item, facts in zip(items, info["files"]):
        sha = item["sha256"].lower()
        entry = {"file": os.path.basename(item["path"]), "src_path": item["path"], "size": facts.get("size"),
                 "allocated_bytes": facts.get("allocated"), "sha256": sha, "verdict": "delete"}
        planned.append(entry)
        if facts["kind"] is None and manifest and manifest.find("deleted", src_host=src, src_path=item["path"],
                                                                sha256=sha):
            entry["verdict"] = "already_deleted"
            continue
        shard, why = shard_verdict(facts, tp_size)
        if why is None and facts["in_active"]:
            why = "lies in the active Engram directory %s; never deleted" % active_dir
        if why:
            entry.update(verdict="refused", reason=why)
            refusals.append("%s: %s %s" % (slabel, item["path"], why))
            continue
        entry.update(shard=shard)
    return {"action": "delete", "src_host": src, "files": planned, "refusals": refusals, "ok": not refusals,
            "src_filesystems": src_filesystems(planned, info["files"], "delete"), "sha256_checked": False}
