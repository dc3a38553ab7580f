# -*- coding: utf-8 -*-
"""The packer's lock on a destination and the processes that may hold it (standard library only).

A kernel flock on ``.engram-pack.lock`` with the holder's pid, start time and host written inside, so a
waiter can name who holds it and tell a live holder from a dead one.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time

from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.process_wait import process_start_ticks
from ansible.module_utils.base.safe_open import OPEN_SAFE, open_read
from ansible.module_utils.engram.shard_format import EngramPackError, file_kind, os_error_text

# Clock of the lock wait (replaced by a fake clock in tests).
_clock = time.monotonic


LOCK_NAME = ".engram-pack.lock"


def read_json_file(path):
    """A JSON object from ``path``; None if the file is missing, empty or not a JSON object."""
    try:
        fd = open_read(path)  # a FIFO or symlink planted at the name is not read (nor waited on)
        try:
            raw = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    except OSError:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def utc_text(epoch):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)) if isinstance(epoch, (int, float)) else "?"


def describe_lock_holder(record):
    """One line naming a lock holder from its record, for refusals and reports."""
    if not record:
        return "holder unknown: it left no record"
    what = []
    if record.get("layer") is not None:
        what.append("layer %s" % record["layer"])
    if record.get("rank") is not None:
        what.append("rank %s" % record["rank"])
    if record.get("purpose"):
        what.append(record["purpose"])
    text = "pid %s on %s" % (record.get("pid", "?"), record.get("host", "?"))
    if what:
        text += " (%s)" % ", ".join(what)
    text += " since %s" % utc_text(record.get("since"))
    if record.get("progress_file"):
        text += "; progress in %s" % record["progress_file"]
    return text


@contextlib.contextmanager
def dest_lock(dest, timeout=0, owner=None):
    """Exclusive flock on ``dest/.engram-pack.lock``, waiting at most ``timeout`` seconds.

    The kernel releases a flock when its holder exits, however it dies (SIGKILL included), so a
    dead packer never blocks the next one, and a live one is always respected. While held, the file
    records the holder (pid, its start time, host and ``owner``: layer, rank, progress file) so a
    refusal names the live holder; a record found on acquiring was left by a holder that died
    (a clean release empties it) and is yielded as ``reclaimed``. Yields ``{"path", "reclaimed"}``.
    """
    path = os.path.join(dest, LOCK_NAME)
    try:
        # Never through a symlink, never blocking on a FIFO someone left at the name.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_SAFE, 0o644)
    except OSError as exc:
        raise EngramPackError("host %s: cannot open lock file %s: %s" % (host_label(), path, os_error_text(exc)))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        kind = file_kind(os.fstat(fd))
        os.close(fd)
        raise EngramPackError("host %s: lock file %s is a %s, not a regular file; refusing to use it (nothing was "
                              "written). Move it out of the way and rerun" % (host_label(), path, kind))
    held = False
    try:
        deadline = _clock() + max(0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                remaining = deadline - _clock()
                if remaining <= 0:
                    raise EngramPackError(
                        "host %s: another engram pack holds %s (%s; waited %ss); refusing to pack into %s "
                        "concurrently. Wait for it to finish, or stop that process if it is not wanted"
                        % (host_label(), path, describe_lock_holder(read_json_file(path)), timeout, dest))
                time.sleep(min(0.1, remaining))
        reclaimed = read_json_file(path)
        pid = os.getpid()
        record = dict(owner or {}, pid=pid, pid_start=process_start_ticks(pid), host=host_label(), since=time.time())
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record, sort_keys=True).encode(), 0)
        yield {"path": path, "reclaimed": reclaimed}
    finally:
        if held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # a clean release leaves no holder record behind
        os.close(fd)  # closing the descriptor releases the flock
