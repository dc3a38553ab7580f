# -*- coding: utf-8 -*-
"""The packer's progress record, its rate cap and the ETA text (standard library only).

The record (pid, state, bytes, rate, its last message or error) is rewritten atomically while packing;
``engram_follow`` reads it.
"""
from __future__ import annotations

import contextlib
import json
import os
import time

from ansible.module_utils.base.process_wait import process_start_ticks
from ansible.module_utils.engram.lock import read_json_file
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.safe_open import OPEN_SAFE
from ansible.module_utils.engram.shard_format import (
    EngramFormatError, EngramPackError, HEADER_BYTES, MIB, ROW_BYTES, is_int,
    os_error_text, write_all,
)
from ansible.module_utils.engram.provenance import remove_own_file

# Clock and sleep of the rate cap (replaced by a fake clock in tests).
_clock = time.monotonic
_sleep = time.sleep


PROGRESS_VERSION = 1


# starting/waiting_lock/packing while the packer runs; done or failed are its last word.
RUNNING_STATES = ("starting", "waiting_lock", "packing")
PROGRESS_STATES = RUNNING_STATES + ("done", "failed")


# A capped pack moves this many seconds' worth of rows per chunk, so its pace and progress are smooth.
THROTTLE_SLICE_S = 0.1


def eta_text(seconds):
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return "%d min %02d s" % (seconds // 60, seconds % 60)
    return "%d s" % seconds


class Progress(object):
    """The packer's progress record, rewritten atomically so a follower never reads half of it.

    JSON object: ``version``, ``run_id`` (chosen by the caller, so a follower can tell this run's
    record from an earlier one at the same path), ``host``, ``pid`` and ``pid_start`` (see
    :func:`pid_alive`), ``layer``, ``rank``, ``tp_size``, ``state`` (starting, waiting_lock,
    packing, done, failed), ``path`` and ``partial_path``, ``done_bytes``, ``total_bytes``,
    ``percent``, ``mib_s`` (average since writing began), ``eta_s``, ``max_mib_s`` (the cap, 0 for
    none), ``started`` and ``updated`` (epoch seconds) and ``message`` (the packer's own words:
    what it is doing, or its error). With no path nothing is written.
    """

    def __init__(self, path, **fields):
        self.path = path
        pid, now = os.getpid(), time.time()
        self.record = {"version": PROGRESS_VERSION, "run_id": None, "host": host_label(), "pid": pid,
                       "pid_start": process_start_ticks(pid), "layer": None, "rank": None, "tp_size": None,
                       "state": "starting", "path": None, "partial_path": None, "done_bytes": 0,
                       "total_bytes": 0, "percent": 0.0, "mib_s": 0.0, "eta_s": None, "max_mib_s": 0,
                       "started": now, "updated": now, "message": "starting"}
        self.record.update(fields)

    def update(self, **fields):
        self.record.update(fields)
        self.record["updated"] = time.time()
        if not self.path:
            return
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        created = False
        try:
            # Created exclusively and never through a symlink: the record usually lives in /tmp.
            remove_own_file(tmp, "left-over progress temp file")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_SAFE, 0o644)
            created = True
            try:
                write_all(fd, memoryview(json.dumps(self.record, sort_keys=True).encode()))
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            if created:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise EngramPackError("host %s: cannot write the progress file %s: %s"
                                  % (host_label(), self.path, os_error_text(exc)))

    def packing(self, done, total, elapsed):
        """Record bytes done of total after ``elapsed`` seconds of writing rows (the 4 KiB header
        is written before the clock starts, so it is left out of the rate)."""
        rate = max(0, done - HEADER_BYTES) / elapsed if elapsed > 0 else 0.0
        self.update(state="packing", done_bytes=done, total_bytes=total,
                    percent=round(100.0 * done / total, 2) if total else 100.0,
                    mib_s=round(rate / MIB, 2),
                    eta_s=round((total - done) / rate, 1) if rate > 0 else None)

    def fail(self, message):
        """Record the packer's error; never masks it with an error of its own."""
        with contextlib.suppress(EngramPackError):
            self.update(state="failed", message=message)


def read_progress(path):
    """The progress record at ``path`` (see :class:`Progress`), or None if there is none readable."""
    record = read_json_file(path)
    if record is None or not is_int(record.get("pid")) or record.get("state") not in PROGRESS_STATES:
        return None
    return record


class RateLimit(object):
    """Caps the packer's transfer rate at ``max_mib_s`` MiB/s; 0 means no cap.

    Every byte read from the checkpoint is written to the shard once, so one cap bounds both the
    NFS reads and the local writes. The average since the first chunk is held at or under the cap
    (bursts of at most one chunk): :meth:`chunk_rows` shrinks chunks to THROTTLE_SLICE_S worth of
    transfer so the pace is smooth and progress moves steadily.
    """

    def __init__(self, max_mib_s=0):
        self.max_mib_s = max_mib_s
        self.bytes_per_s = float(max_mib_s) * MIB
        self._start = None
        self._bytes = 0

    def chunk_rows(self, chunk_rows):
        if not self.bytes_per_s:
            return chunk_rows
        return max(1, min(chunk_rows, int(self.bytes_per_s * THROTTLE_SLICE_S) // ROW_BYTES))

    def start(self):
        self._start, self._bytes = _clock(), 0

    def pace(self, nbytes):
        """Count ``nbytes`` just moved; sleep until the average is back at the cap. Returns the sleep."""
        if not self.bytes_per_s:
            return 0.0
        if self._start is None:
            self.start()
        self._bytes += nbytes
        wait = self._start + self._bytes / self.bytes_per_s - _clock()
        if wait > 0:
            _sleep(wait)
            return wait
        return 0.0


def check_max_mib_s(where, max_mib_s):
    """Raise EngramFormatError unless ``max_mib_s`` is a finite number >= 0 (0: no cap)."""
    if (isinstance(max_mib_s, bool) or not isinstance(max_mib_s, (int, float))
            or not 0 <= max_mib_s < float("inf")):
        raise EngramFormatError("%s: max_mib_s must be a number of MiB/s >= 0 (0 means no cap), got %r"
                                % (where, max_mib_s))
