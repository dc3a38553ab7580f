# -*- coding: utf-8 -*-
"""Relocating foreign Engram shards to make room, run from the head (standard library only).

spark2 holds old TP2 shards (about 101.38 GB) on the filesystem its TP3 shards must go to. With the
operator's opt-in, :func:`relocate` moves named foreign shards to another volume of the same host or to
another host with room, :func:`restore` moves them back (rollback), :func:`delete_disposable` deletes
files the operator named with their sha256. Every run first decides everything for every file
(:mod:`engram_relocate_plan`); one refusal and nothing moves.

Moving one file (:func:`move_file`): the agent's ``send`` on the source host streams it hole-aware into
the agent's ``receive`` on the destination host, the head relaying between the two pipes (workers cannot
reach each other); the receiver writes a temporary name only. Published under the final name (``commit``,
never replacing a file) only when the sender's sha256 of what it read equals the receiver's of what it
reads back, and sizes match. Recorded in the manifest, and only then the source is removed, if it is
still the very file that was sent (inode, size, mtime). Whatever fails, the source stays in place and no
final name is written unverified; the temporary copy is removed (a receiver killed outright leaves it,
and the next run or ``discard`` removes it).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile

from ansible.module_utils.engram.relocate_plan import ANY_HOST, copy_need, plan_delete, plan_move, plan_restore
from ansible.module_utils.engram.relocate_runner import RelocateError, parse_report, utc_now

CHUNK_BYTES = 1 << 20      # bytes per data frame of the sender
RELAY_BYTES = 1 << 20      # bytes per read of the relay on the head
ABORT_WAIT_S = 60          # seconds a receiver gets to clean up after its stream was cut


def _relay(sender, receiver, on_progress):
    """Copy the sender's stdout into the receiver's stdin until the sender closes it; bytes relayed."""
    src_fd, dst_fd, done = sender.stdout.fileno(), receiver.stdin.fileno(), 0
    while True:
        chunk = os.read(src_fd, RELAY_BYTES)
        if not chunk:
            return done
        if on_progress is not None:
            on_progress(done, sender, receiver)
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view):]
        done += len(chunk)


def _stop(sender, receiver):
    """Cut the stream: the receiver sees its input end early and removes its temporary file itself."""
    for pipe in (receiver.stdin, sender.stdout):
        with contextlib.suppress(OSError):
            pipe.close()
    if sender.poll() is None:
        sender.terminate()
    for proc in (receiver, sender):
        try:
            proc.wait(ABORT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def discard_note(runner, host, dest_dir, name):
    """Remove a temporary copy no receiver holds any more; what happened, for the error message."""
    try:
        rep = runner.call(host, "discard", [dest_dir, name])
    except RelocateError as exc:
        return "its temporary copy could not be removed (%s)" % exc
    return "its temporary copy %s was removed" % rep["temp"] if rep["removed"] else "no temporary copy is left"


def _read(handle):
    handle.seek(0)
    return handle.read()


def _tail(handle, limit=300):
    text = _read(handle).decode("utf-8", "replace").strip()
    return text[-limit:] or "no output"


def transfer(runner, src, src_path, size, mtime_ns, dst, dest_dir, name, need, chunk_bytes=CHUNK_BYTES,
             on_progress=None, bandwidth_limit=0):
    """Stream ``src_path`` on ``src`` into the temporary name of ``name`` in ``dest_dir`` on ``dst``.

    Returns the receiver's report (sha256, size, inode and mtime of the verified temporary copy) once the
    sender's and the receiver's sha256 and sizes agree; otherwise removes the temporary copy and raises
    RelocateError naming hosts, file and values. ``on_progress(bytes, sender, receiver)`` is called before
    each relayed chunk. ``bandwidth_limit`` (bytes/s, 0 none) paces the sender's data. Never touches the
    source or the final name.
    """
    slabel, dlabel = runner.label(src), runner.label(dst)
    with tempfile.TemporaryFile() as s_err, tempfile.TemporaryFile() as r_out, tempfile.TemporaryFile() as r_err:
        sender = runner.popen(src, "send", [src_path, size, mtime_ns, chunk_bytes, int(bandwidth_limit or 0)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=s_err, bufsize=0)
        try:
            receiver = runner.popen(dst, "receive", [dest_dir, name, size, need], stdin=subprocess.PIPE,
                                    stdout=r_out, stderr=r_err, bufsize=0)
        except BaseException:
            sender.kill()
            sender.wait()
            raise
        cut = None
        try:
            _relay(sender, receiver, on_progress)
        except BrokenPipeError:
            cut = "the receiver stopped reading"
        except BaseException:
            _stop(sender, receiver)  # a stop signal or error on the head
            raise
        finally:
            if cut is not None:
                _stop(sender, receiver)
        with contextlib.suppress(OSError):
            receiver.stdin.close()
        sender.wait()
        receiver.wait()
        sent, got = parse_report(_read(s_err)), parse_report(_read(r_out))
        problems = []
        if sender.returncode != 0 or not sent or not sent.get("ok"):
            problems.append("%s: sending %s failed: %s" % (slabel, src_path, sent["error"] if sent and "error" in sent
                                                           else "exit %s: %s" % (sender.returncode, _tail(s_err))))
        if receiver.returncode != 0 or not got or not got.get("ok"):
            problems.append("%s: receiving %s into %s failed: %s" % (
                dlabel, name, dest_dir, got["error"] if got and "error" in got else
                "exit %s%s: %s" % (receiver.returncode, ", %s" % cut if cut else "", _tail(r_err))))
        if not problems and ((sent["sha256"], sent["size"]) != (got["sha256"], got["size"]) or
                             (got["sender_sha256"], got["size"]) != (sent["sha256"], size)):
            problems.append("%s -> %s: %s: the copy differs: sent sha256 %s size %d, received sha256 %s size %d"
                            % (slabel, dlabel, name, sent["sha256"], sent["size"], got["sha256"], got["size"]))
    if problems:
        raise RelocateError("; ".join(problems) + "; %s; the source %s was not touched" % (
            discard_note(runner, dst, dest_dir, name), src_path))
    return dict(got, data_bytes=sent["data_bytes"])


def move_file(runner, src, src_path, stat, dst, dest_dir, need, expect_sha=None, chunk_bytes=CHUNK_BYTES,
              on_progress=None, bandwidth_limit=0):
    """Copy one file and publish it under its own name in ``dest_dir``.

    ``stat``: the size and mtime_ns the source must still have (as inspected), and the mode and
    ``publish_mtime_ns`` (default: its mtime_ns) the published file gets. The copy is verified
    (:func:`transfer`) and, with ``expect_sha``, must hash to it. Returns the receiver's report and the
    commit's; raises RelocateError, with the temporary copy removed, otherwise.
    """
    name = os.path.basename(src_path)
    got = transfer(runner, src, src_path, stat["size"], stat["mtime_ns"], dst, dest_dir, name, need, chunk_bytes,
                   on_progress, bandwidth_limit)
    if expect_sha is not None and got["sha256"] != expect_sha:
        raise RelocateError("%s: %s reads as sha256 %s, the manifest records %s; nothing published, %s" % (
            runner.label(src), src_path, got["sha256"], expect_sha, discard_note(runner, dst, dest_dir, name)))
    try:
        done = runner.call(dst, "commit", [dest_dir, name, got["sha256"], got["size"], got["ino"], got["mtime_ns"],
                                           stat["mode"], stat.get("publish_mtime_ns", stat["mtime_ns"])],
                           timeout=None)
    except RelocateError as exc:
        raise RelocateError("%s; %s; the source %s was not touched" % (
            exc, discard_note(runner, dst, dest_dir, name), src_path))
    return got, done


def _remove(runner, host, path, facts):
    return runner.call(host, "remove", [path, facts["size"], facts["mtime_ns"], facts["ino"], facts["dev"]])


def relocate(files, src, dst, dest_dir, active_dir, tp_size, runner, manifest, margin_bytes=0, free_space=None,
             chunk_bytes=CHUNK_BYTES, on_progress=None, create_dest=False, bandwidth_limit=0, dst_active_dir=None):
    """Move ``files`` (paths on host ``src``) into ``dest_dir`` on host ``dst``; ``(plan, manifest entries)``.

    Nothing moves unless :func:`plan_move` refuses nothing. Each entry (file, src_host, src_path, dst_host,
    dst_path, size, sha256, mode, mtime_ns, moved_at, state) is written to ``manifest`` as soon as the copy
    is published (``copied``) and again once the source is removed (``moved``). With ``create_dest`` a
    missing ``dest_dir`` is created first (only once every check has passed).
    """
    plan = plan_move(files, src, dst, dest_dir, active_dir, tp_size, runner, margin_bytes, manifest, free_space,
                     create_dest, dst_active_dir)
    if not plan["ok"]:
        raise RelocateError("; ".join(plan["refusals"]) + "; nothing was moved")
    if plan["destination"]["created"] and any(i["verdict"] == "move" for i in plan["files"]):
        plan["destination"]["created_dirs"] = runner.call(dst, "mkdir", [dest_dir])["created"]
    entries = []
    for item in plan["files"]:
        if item["verdict"] != "move":
            continue
        # The receiver re-checks its room, margin included, when it starts.
        got, done = move_file(runner, src, item["src_path"], item, dst, dest_dir, item["need_bytes"] + margin_bytes,
                              chunk_bytes=chunk_bytes, on_progress=on_progress, bandwidth_limit=bandwidth_limit)
        entry = {"file": item["file"], "src_host": src, "src_path": item["src_path"], "dst_host": dst,
                 "dst_path": done["path"], "size": got["size"], "sha256": got["sha256"], "mode": item["mode"],
                 "mtime_ns": item["mtime_ns"], "moved_at": utc_now(), "state": "copied", "action": "move",
                 "dst_blocks": got["blocks"], "published": done["state"]}
        manifest.record(entry)
        entries.append(entry)
        try:
            _remove(runner, src, item["src_path"], item)
        except RelocateError as exc:
            raise RelocateError("%s; its copy %s on %s is published and verified, so both copies exist (manifest "
                                "state copied)" % (exc, done["path"], runner.label(dst)))
        entry["state"] = "moved"
        manifest.record(entry)
    return plan, entries


def restore(manifest, runner, active_dir, margin_bytes=0, only=None, free_space=None, chunk_bytes=CHUNK_BYTES,
            on_progress=None, bandwidth_limit=0, from_host=ANY_HOST):
    """Move the manifest's moved files (or those in ``only``, or moved from ``from_host``) back where they came
    from, byte-identical by the manifest's sha256, with their mode and mtime; ``(plan, entries restored)``."""
    plan = plan_restore(manifest, runner, active_dir, margin_bytes, only, free_space, from_host)
    if not plan["ok"]:
        raise RelocateError("; ".join(plan["refusals"]) + "; nothing was restored")
    restored = []
    for item in plan["files"]:
        if item["verdict"] != "restore":
            continue
        entry, copy = item["_entry"], item["_copy"]
        stat = {"size": copy["size"], "mtime_ns": copy["mtime_ns"], "mode": entry.get("mode", copy["mode"]),
                "publish_mtime_ns": entry.get("mtime_ns", copy["mtime_ns"])}
        move_file(runner, item["src_host"], item["src_path"], stat, item["dst_host"], os.path.dirname(item["dst_path"]),
                  copy_need(copy, item["dest_block"]) + margin_bytes, expect_sha=entry["sha256"],
                  chunk_bytes=chunk_bytes, on_progress=on_progress, bandwidth_limit=bandwidth_limit)
        entry.update(state="restored", restored_at=utc_now())
        manifest.record(entry)
        restored.append(entry)
        try:
            _remove(runner, item["src_host"], item["src_path"], copy)
        except RelocateError as exc:
            entry["copy_left"] = item["src_path"]
            manifest.record(entry)
            raise RelocateError("%s; %s itself is restored and verified, its copy was left in place" % (
                exc, item["dst_path"]))
    return plan, restored


def delete_disposable(items, src, active_dir, tp_size, runner, manifest):
    """Delete ``items`` ([{path, sha256}]) on host ``src``; ``(plan, manifest entries)``.

    Every file is hashed first (its logical content, holes as zeros); one sha256 that differs from the
    operator's and nothing is deleted. Then each is removed only if it is still the file that was hashed
    (inode, size, mtime), and recorded (state ``deleted``).
    """
    plan = plan_delete(items, src, active_dir, tp_size, runner, manifest)
    if not plan["ok"]:
        raise RelocateError("; ".join(plan["refusals"]) + "; nothing was deleted")
    todo = [item for item in plan["files"] if item["verdict"] == "delete"]
    hashed, wrong = [], []
    for item in todo:
        rep = runner.call(src, "hash", [item["src_path"]], timeout=None)
        hashed.append(rep)
        if rep["sha256"] != item["sha256"]:
            wrong.append("%s: %s has sha256 %s, not the %s named" % (runner.label(src), item["src_path"],
                                                                     rep["sha256"], item["sha256"]))
    plan["sha256_checked"] = True
    if wrong:
        raise RelocateError("; ".join(wrong) + "; nothing was deleted")
    entries = []
    for item, rep in zip(todo, hashed):
        done = _remove(runner, src, item["src_path"], rep)
        entry = {"file": item["file"], "src_host": src, "src_path": item["src_path"], "dst_host": None,
                 "dst_path": None, "size": rep["size"], "sha256": rep["sha256"], "deleted_at": utc_now(),
                 "state": "deleted", "action": "delete", "freed_bytes": done["freed"]}
        manifest.record(entry)
        entries.append(entry)
    return plan, entries
