# -*- coding: utf-8 -*-
"""The packer: one Engram layer's rows written into this rank's shard (standard library only).

:func:`pack_layer` writes ``.partial``, fsyncs, renames and fsyncs the directory, so a final-named file
is always complete. While packing it keeps a :class:`~pack_progress.Progress` record (pid, state, bytes,
rate, its last message or error) that a follower reads, can be capped in rate
(:class:`~pack_progress.RateLimit`), holds a kernel flock on the destination
(:func:`~pack_lock.dest_lock`) and, inside :func:`stop_signals_unwind`, turns SIGTERM/SIGINT into a clean
stop that removes its ``.partial``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time

from ansible.module_utils.engram.lock import LOCK_NAME, describe_lock_holder, dest_lock
from ansible.module_utils.engram.plan import check_pack_params, check_dest, free_bytes
from ansible.module_utils.engram.progress import Progress, RateLimit, check_max_mib_s
from ansible.module_utils.engram.safetensors_index import read_engram_tables, table_rank_range
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.safe_open import OPEN_SAFE
from ansible.module_utils.engram.shard_format import (
    EngramError, EngramFormatError, EngramPackError, GIB, HEADER_BYTES, MIB, ROW_BYTES, SCALE_BYTES,
    WEIGHT_BYTES, check_regular, encode_shard_header, fsync_dir, is_int,
    os_error_text, partial_name, shard_name, write_all,
)
from ansible.module_utils.engram.provenance import (
    NOTE_IDENTITY_CHANGED, NOTE_NO_CONTENT_HASH, NOTE_NO_METADATA, _shard_sample_sha256_fd, content_identity,
    content_record, content_sha256, describe_shard, remove_own_file, shard_provenance, write_meta,
)

# A complete shard whose metadata the pack (re)writes without touching the shard: packed before metadata
# existed, or before content hashes were recorded, or moved or touched since (its bytes verified in full).
REFRESH_NOTES = (NOTE_NO_METADATA, NOTE_NO_CONTENT_HASH, NOTE_IDENTITY_CHANGED)


DEFAULT_CHUNK_BYTES = 8 * MIB


# Dirty pages are forced out and dropped from the page cache at least this often: host RAM is
# GPU memory on a DGX Spark, so a multi-GiB pack must not sit in the cache.
DEFAULT_SYNC_BYTES = 128 * MIB
PROGRESS_INTERVAL_S = 0.5


# Clock and sleep of the packer's timing and rate cap (replaced by a fake clock in tests).
_clock = time.monotonic
_sleep = time.sleep
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 0
_IOV_MAX = _IOV_MAX if _IOV_MAX > 0 else 1024  # buffers per preadv call (1024 on Linux)


class PackStopped(EngramPackError):
    """A stop signal (SIGTERM, SIGINT) arrived while packing."""

    def __init__(self, signum):
        self.signum = signum
        EngramPackError.__init__(self, "stopped by %s" % signal.Signals(signum).name)


@contextlib.contextmanager
def stop_signals_unwind(signals=(signal.SIGTERM, signal.SIGINT)):
    """While inside, a stop signal unwinds the packer through its cleanup (main thread only).

    The packer then removes its .partial and writes its error into the progress record before
    exiting, instead of dying with a half-written .partial. Only the first signal unwinds; further
    ones are ignored so they cannot interrupt the cleanup (SIGKILL still ends the process). The
    previous handlers are restored on the way out.
    """
    def handler(signum, frame):
        for other in signals:
            signal.signal(other, signal.SIG_IGN)
        raise PackStopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _preadv_exact(fd, views, slot_bytes, offset, path):
    """Scatter ``len(views) * slot_bytes`` bytes at ``offset`` straight into ``views``,
    IOV_MAX slots per system call."""
    length = len(views) * slot_bytes
    got = 0
    for start in range(0, len(views), _IOV_MAX):
        batch = views[start:start + _IOV_MAX]
        count = os.preadv(fd, batch, offset + got)
        got += count
        if count != len(batch) * slot_bytes:
            raise EngramFormatError("%s: is truncated: wanted %d bytes at offset %d, got %d"
                                    % (path, length, offset, got))


def _drop_cache(fd, offset=0, length=0):
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _copy_rows(table, status, out_fd, in_fd, chunk_rows, sync_bytes, progress, limit, digest=None):
    """Write header and rows lo..hi-1 into ``out_fd``; return bytes written. ``digest`` (a hashlib
    object) is fed every byte written, in order: the shard's content hash without a second read.

    Per chunk: the weights are scattered by the kernel straight into their 256-byte slots of the
    row buffer (preadv), the scales are read in one piece and dropped into the 8-byte slot at the
    end of each row with a single strided 8-byte-word copy (264 = 33 words), then the whole chunk
    is written at once. No per-row Python work.
    """
    lo, hi, total = status.lo, status.hi, status.bytes
    header = encode_shard_header(table.layer, lo, hi, table.rows)
    write_all(out_fd, memoryview(header))
    if digest is not None:
        digest.update(header)
    buf = memoryview(bytearray(chunk_rows * ROW_BYTES))
    words = buf.cast("Q")
    row_words, scale_word = ROW_BYTES // 8, WEIGHT_BYTES // 8
    weight_slots = [buf[i * ROW_BYTES:i * ROW_BYTES + WEIGHT_BYTES] for i in range(chunk_rows)]
    scales = memoryview(bytearray(chunk_rows * SCALE_BYTES))
    scale_words = scales.cast("Q")
    started = _clock()
    done, synced, synced_row, last_progress = HEADER_BYTES, 0, lo, started
    limit.start()
    row = lo
    while row < hi:
        n = min(chunk_rows, hi - row)
        _preadv_exact(in_fd, weight_slots[:n], WEIGHT_BYTES,
                      table.weight_offset + row * WEIGHT_BYTES, table.shard_path)
        _preadv_exact(in_fd, [scales[:n * SCALE_BYTES]], n * SCALE_BYTES,
                      table.scale_offset + row * SCALE_BYTES, table.shard_path)
        words[scale_word:n * row_words:row_words] = scale_words[:n]
        write_all(out_fd, buf[:n * ROW_BYTES])
        if digest is not None:
            digest.update(buf[:n * ROW_BYTES])
        row += n
        done += n * ROW_BYTES
        if done - synced >= sync_bytes or row == hi:
            # fdatasync makes the written pages clean so DONTNEED can actually drop them; the
            # source rows read since the last sync are dropped too (possibly an NFS client cache).
            os.fdatasync(out_fd)
            _drop_cache(out_fd, synced, done - synced)
            _drop_cache(in_fd, table.weight_offset + synced_row * WEIGHT_BYTES, (row - synced_row) * WEIGHT_BYTES)
            _drop_cache(in_fd, table.scale_offset + synced_row * SCALE_BYTES, (row - synced_row) * SCALE_BYTES)
            synced, synced_row = done, row
        else:
            # DONTNEED on dirty pages starts their writeback without waiting, which keeps the
            # disk busy between the periodic fdatasyncs.
            _drop_cache(out_fd, done - n * ROW_BYTES, n * ROW_BYTES)
        limit.pace(n * ROW_BYTES)
        now = _clock()
        if now - last_progress >= PROGRESS_INTERVAL_S or row == hi:
            progress.packing(done, total, now - started)
            last_progress = now
    _drop_cache(out_fd)  # whole file: pages still under writeback at an earlier drop
    return done


def _write_shard(table, status, meta, chunk_rows, sync_bytes, progress, limit):
    """Write the .partial, fsync, rename over the final name, fsync the directory, then publish
    the metadata ``meta`` beside it the same way, with the content hash of every byte written and the
    published file's identity (``content``).

    The .partial is created with O_EXCL|O_NOFOLLOW, so the packer only ever writes a file it has
    just created itself; a left-over one is removed first only if it is a regular file of ours.
    On any failure (a stop signal included) the .partial is removed, and no final-named file is
    created. The old metadata is removed before the shard is replaced, so a shard never pairs
    with metadata of another checkpoint; a crash between the rename and the metadata leaves a
    shard without metadata, which is trusted only after its sampled rows are verified.
    """
    dest = os.path.dirname(status.path)
    out_fd = in_fd = None
    created = False
    try:
        remove_own_file(status.partial_path)
        check_regular(status.meta_path, "shard metadata")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(status.meta_path)
        if status.state == "stale":
            # Free the stale file's space before writing (the space check counted on it); it is
            # unusable for this rank anyway, and its name means it can only be ours.
            check_regular(status.path, "packed shard")
            os.unlink(status.path)
        progress.packing(0, status.bytes, 0)
        out_fd = os.open(status.partial_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | OPEN_SAFE, 0o644)
        created = True
        in_fd = os.open(table.shard_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        digest = hashlib.sha256()
        written = _copy_rows(table, status, out_fd, in_fd, chunk_rows, sync_bytes, progress, limit, digest)
        if written != status.bytes or os.fstat(out_fd).st_size != status.bytes:
            raise EngramPackError("host %s: %s: wrote %d bytes, expected %d"
                                  % (host_label(), status.partial_path, written, status.bytes))
        # The metadata's sample was read before the copy: equal rows in what was written mean the
        # checkpoint did not change under the pack (at least where it is sampled).
        if _shard_sample_sha256_fd(out_fd, status.lo, status.hi, status.partial_path) != meta["sampled_rows"]["sha256"]:
            raise EngramPackError("host %s: %s changed while layer %d was being packed (sampled rows differ from "
                                  "those read before writing); nothing was published, rerun the pack"
                                  % (host_label(), table.shard_path, table.layer))
        os.fsync(out_fd)
        written_as = content_identity(os.fstat(out_fd))
        os.close(out_fd)
        out_fd = None
        os.replace(status.partial_path, status.path)
        created = False
        fsync_dir(dest)
        # The identity is read again at the final name: the same inode, size and mtime as the descriptor
        # written means nothing wrote to it in between.
        content = content_record(status.path, digest.hexdigest())
        if any(content[k] != written_as[k] for k in written_as):
            raise EngramPackError("host %s: %s changed between its last write and its publication; its "
                                  "metadata was not written, the next plan reads it in full"
                                  % (host_label(), status.path))
        meta = dict(meta, content=content)
    except BaseException as exc:
        if out_fd is not None:
            os.close(out_fd)
        if created:
            with contextlib.suppress(OSError):
                os.unlink(status.partial_path)
        if isinstance(exc, OSError):
            raise EngramPackError("host %s: packing layer %d into %s failed at %s: %s; nothing was published"
                                  % (host_label(), table.layer, status.path,
                                     exc.filename or status.partial_path, os_error_text(exc)))
        raise
    finally:
        if in_fd is not None:
            os.close(in_fd)
    try:
        write_meta(status.meta_path, meta)
    except OSError as exc:
        raise EngramPackError("host %s: %s was published but its metadata %s could not be written: %s; the next "
                              "plan verifies the shard by sampled rows" % (host_label(), status.path, status.meta_path,
                                                                          os_error_text(exc)))


def _check_space(dest, status, margin_bytes):
    free = free_bytes(dest)
    need = status.bytes + margin_bytes
    have = free + status.reclaimable_bytes
    if have < need:
        deficit = need - have
        raise EngramPackError(
            "host %s: not enough space in %s for %s: needs %d bytes (%d + margin %d), has %d free + %d "
            "reclaimable; deficit %d bytes (%.3f GiB)"
            % (host_label(), dest, os.path.basename(status.path), need, status.bytes, margin_bytes,
               free, status.reclaimable_bytes, deficit, deficit / GIB))


def _stopped_message(exc, layer, path, partial_path, record):
    """What a stop signal left behind, checked on disk rather than assumed."""
    where = "before writing began"
    if record.get("total_bytes"):
        where = "at %.2f%% (%s of %s bytes)" % (record.get("percent", 0.0), "{:,}".format(record["done_bytes"]),
                                               "{:,}".format(record["total_bytes"]))
    left = ("its .partial %s is still there" % partial_path if os.path.exists(partial_path)
            else "no .partial is left")
    final = ("%s exists (published before the signal; complete by the rename protocol)" % path
             if os.path.exists(path) else "no final-named shard was written")
    return ("host %s: packing layer %d into %s was %s %s; %s and %s"
            % (host_label(), layer, path, exc, where, left, final))


def pack_layer(checkpoint, dest, layer, rank, tp_size, margin_bytes=0, check_mode=False,
               progress_path=None, chunk_bytes=DEFAULT_CHUNK_BYTES, chunk_rows=None, lock_timeout=0,
               sync_bytes=DEFAULT_SYNC_BYTES, max_mib_s=0, run_id=None):
    """Pack one layer's rows for ``rank`` of ``tp_size`` into ``dest`` unless already complete.

    Returns changed, path, bytes, rows, lo, hi, seconds, throughput_mib_s, state_before,
    max_mib_s and reclaimed_lock (the record a dead holder left in the lock file, described, or
    None). In check mode nothing is touched. ``max_mib_s`` caps the transfer rate (0: no cap).
    With ``progress_path`` the :class:`Progress` record is written from the first moment (pid,
    ``run_id``), updated while writing and closed with ``done`` or ``failed`` and the error.
    Raises EngramFormatError for malformed input and EngramPackError for destination problems
    (missing directory, lock held, not enough space, I/O errors, a stop signal).
    """
    progress = Progress(None if check_mode else progress_path, run_id=run_id, layer=layer, rank=rank,
                        tp_size=tp_size, max_mib_s=max_mib_s, message="reading the checkpoint headers")
    progress.update()  # first: a follower knows the pid from here on
    try:
        return _pack_layer(checkpoint, dest, layer, rank, tp_size, margin_bytes, check_mode, chunk_bytes,
                           chunk_rows, lock_timeout, sync_bytes, max_mib_s, progress)
    except PackStopped as exc:
        record = progress.record
        message = _stopped_message(exc, layer, record.get("path") or os.path.join(dest, shard_name(layer, rank, tp_size)),
                                   record.get("partial_path") or os.path.join(dest, partial_name(layer, rank, tp_size)),
                                   record)
        progress.fail(message)
        raise EngramPackError(message)
    except EngramError as exc:
        progress.fail(str(exc))
        raise
    except BaseException as exc:
        progress.fail("host %s: packing layer %d stopped by an unexpected %s: %s"
                      % (host_label(), layer, type(exc).__name__, exc))
        raise


def _pack_layer(checkpoint, dest, layer, rank, tp_size, margin_bytes, check_mode, chunk_bytes, chunk_rows,
                lock_timeout, sync_bytes, max_mib_s, progress):
    check_dest(dest)
    check_pack_params(checkpoint, rank, tp_size, margin_bytes)
    check_max_mib_s(checkpoint, max_mib_s)
    if chunk_rows is None:
        if not is_int(chunk_bytes) or chunk_bytes < ROW_BYTES:
            raise EngramFormatError("%s: chunk_bytes must be an integer >= %d, got %r"
                                    % (checkpoint, ROW_BYTES, chunk_bytes))
        chunk_rows = chunk_bytes // ROW_BYTES
    elif not is_int(chunk_rows) or chunk_rows < 1:
        raise EngramFormatError("%s: chunk_rows must be an integer >= 1, got %r" % (checkpoint, chunk_rows))
    limit = RateLimit(max_mib_s)
    chunk_rows = limit.chunk_rows(chunk_rows)
    table = read_engram_tables(checkpoint, (layer,))[layer]
    table_rank_range(table, rank, tp_size)
    before = describe_shard(dest, layer, rank, tp_size, table.rows, table)
    result = {"changed": before.state != "complete" or before.note in REFRESH_NOTES, "path": before.path,
              "bytes": before.bytes,
              "rows": before.hi - before.lo, "lo": before.lo, "hi": before.hi, "seconds": 0.0,
              "throughput_mib_s": 0.0, "state_before": before.state, "max_mib_s": max_mib_s,
              "reclaimed_lock": None, "stale_reason": before.reason, "verified": before.note,
              "meta_path": before.meta_path, "metadata_written": False}
    if check_mode:
        return result
    progress.update(path=before.path, partial_path=before.partial_path, total_bytes=before.bytes)
    if before.state == "complete" and before.note not in REFRESH_NOTES:
        progress.update(state="done", done_bytes=before.bytes, percent=100.0, eta_s=0,
                        message="%s is already complete; nothing written" % before.path)
        return result
    progress.update(state="waiting_lock", message="taking the destination lock %s"
                    % os.path.join(dest, LOCK_NAME))
    owner = {"layer": layer, "rank": rank, "tp_size": tp_size, "progress_file": progress.path}
    with dest_lock(dest, lock_timeout, owner) as lock:
        if lock["reclaimed"]:
            result["reclaimed_lock"] = "a record left by a holder that died: %s" % describe_lock_holder(lock["reclaimed"])
        # Another run may have finished (or left a .partial) while we waited for the lock.
        status = describe_shard(dest, layer, rank, tp_size, table.rows, table)
        if status.state == "complete":
            message = "%s was completed by another run; nothing written" % status.path
            if status.note in REFRESH_NOTES:
                # An older packer's shard (verified by sampled rows), or one moved or touched since it was
                # packed (verified in full): record what it was verified against and its content now.
                try:
                    sha = (status.content or {}).get("sha256") or content_sha256(status.path)[0]
                    write_meta(status.meta_path, dict(shard_provenance(table, rank, tp_size),
                                                      content=content_record(status.path, sha)))
                except OSError as exc:
                    raise EngramPackError("host %s: cannot write the metadata %s of %s: %s"
                                          % (host_label(), status.meta_path, status.path, os_error_text(exc)))
                result["metadata_written"] = True
                message = "%s (%s) is complete; wrote its metadata %s" % (status.path, status.note, status.meta_path)
            result["changed"] = result["metadata_written"]
            progress.update(state="done", done_bytes=status.bytes, percent=100.0, eta_s=0, message=message)
            return result
        _check_space(dest, status, margin_bytes)
        meta = shard_provenance(table, rank, tp_size)
        progress.update(message="writing rows %d..%d into %s%s" % (
            status.lo, status.hi - 1, status.partial_path,
            " (capped at %s MiB/s)" % max_mib_s if max_mib_s else ""))
        started = _clock()
        _write_shard(table, status, meta, min(chunk_rows, status.hi - status.lo), sync_bytes, progress, limit)
        result["metadata_written"] = True
        seconds = _clock() - started
    result["seconds"] = round(seconds, 3)
    result["throughput_mib_s"] = round(status.bytes / MIB / seconds, 1) if seconds > 0 else 0.0
    progress.update(state="done", done_bytes=status.bytes, percent=100.0, eta_s=0,
                    message="wrote %s (%s bytes) in %.1f s, %.1f MiB/s" % (
                        status.path, "{:,}".format(status.bytes), seconds, result["throughput_mib_s"]))
    return result
