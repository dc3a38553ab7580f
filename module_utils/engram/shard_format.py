# -*- coding: utf-8 -*-
"""The packed per-rank Engram shard file: names, row ranges, header and staleness (standard library only).

``engram-l{L}-r{r}of{tp}.bin`` holds a 4096-byte header (six little-endian u64: magic
``0x31344E4531565344``, layer, lo, hi, N, 264; zero padding) and then rows ``lo..hi-1``, each 256
weight bytes followed by the row's 8 scale bytes. Rank r of tp owns rows ``N*r//tp`` up to
``N*(r+1)//tp`` (exclusive).
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
from collections import namedtuple

from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.safe_open import open_read


ENGRAM_LAYERS = (1, 14)
WEIGHT_BYTES = 256
SCALE_BYTES = 8
ROW_BYTES = WEIGHT_BYTES + SCALE_BYTES  # 264
HEADER_BYTES = 4096


# The SPEC's magic value. Its little-endian bytes spell b"DSV1EN41" (the SPEC's prose says
# "DSV41EN1"); the number is what is written and compared, so the number is kept.
MAGIC = 0x31344E4531565344


# Beside each shard: the checkpoint identity it was packed from (see shard_provenance).
META_SUFFIX = ".meta.json"
GIB = 2 ** 30
MIB = 2 ** 20
_SHARD_HEADER = struct.Struct("<6Q")
ShardStatus = namedtuple(
    "ShardStatus", "state reason path partial_path lo hi bytes reclaimable_bytes note meta_path content",
    defaults=(None, None, None))

ShardStatus.__doc__ = """What is on disk for one packed shard. ``state`` is complete, missing,
partial or stale; ``reason`` explains stale; ``reclaimable_bytes`` is the allocated size of the
files a pack would replace (a left-over .partial and/or a stale final file). ``note`` says how a
complete shard was trusted (``verified by sampled rows, no metadata`` for a shard packed before
metadata existed); ``content`` is what the full-content check found (see
shard_provenance.content_verdict), None when it did not run."""


class EngramError(Exception):
    """Base class of every error this module raises on purpose."""


class EngramFormatError(EngramError):
    """A checkpoint, index or shard is malformed; the message names the file and the value."""


class EngramPackError(EngramError):
    """An operation on the destination failed (missing directory, lock held, no space, I/O);
    the message names the host, the path and the cause."""




def os_error_text(exc):
    """errno name and text, e.g. ENOSPC (No space left on device)."""
    name = errno.errorcode.get(exc.errno, "errno %s" % exc.errno)
    return "%s (%s)" % (name, exc.strerror or exc)


def shard_name(layer, rank, tp_size):
    return "engram-l%d-r%dof%d.bin" % (layer, rank, tp_size)


def partial_name(layer, rank, tp_size):
    return "engram-l%d-r%dof%d.partial" % (layer, rank, tp_size)


def meta_name(layer, rank, tp_size):
    return shard_name(layer, rank, tp_size) + META_SUFFIX


def shard_bytes(lo, hi):
    """Exact size of a packed shard holding rows [lo, hi)."""
    return HEADER_BYTES + (hi - lo) * ROW_BYTES


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_rank(rank, tp_size):
    """Raise ValueError unless 0 <= rank < tp_size and tp_size >= 1."""
    if not is_int(tp_size) or tp_size < 1:
        raise ValueError("tp_size must be an integer >= 1, got %r" % (tp_size,))
    if not is_int(rank) or not 0 <= rank < tp_size:
        raise ValueError("rank %r is outside 0..%d for tp_size %d" % (rank, tp_size - 1, tp_size))


def rank_row_range(n_rows, rank, tp_size):
    """Rows [lo, hi) of an N-row table owned by ``rank`` of ``tp_size``: [N*r//tp, N*(r+1)//tp)."""
    check_rank(rank, tp_size)
    if not is_int(n_rows) or n_rows < tp_size:
        raise ValueError("table has %r rows, fewer than tp_size %d: every rank needs at least one row"
                         % (n_rows, tp_size))
    return n_rows * rank // tp_size, n_rows * (rank + 1) // tp_size


def encode_shard_header(layer, lo, hi, n_rows):
    """The 4096-byte header of a packed shard holding rows [lo, hi) of an N-row layer."""
    fields = _SHARD_HEADER.pack(MAGIC, layer, lo, hi, n_rows, ROW_BYTES)
    return fields + bytes(HEADER_BYTES - len(fields))


def file_kind(st):
    mode = st.st_mode
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def lstat_or_none(path):
    """``os.lstat(path)`` (never following a symlink), None if nothing is there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EngramPackError("host %s: cannot inspect %s: %s" % (host_label(), path, os_error_text(exc)))


def check_regular(path, what):
    """Refuse (EngramPackError naming host and path) anything but a regular file or nothing at ``path``.

    A symlink, directory or FIFO at a name the packer writes, replaces or reads would make it write
    through the link, fail half-way or block forever; none of them is ever the packer's own."""
    st = lstat_or_none(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = file_kind(st)
        if kind == "symlink":
            with contextlib.suppress(OSError):
                kind = "symlink to %s" % os.readlink(path)
        raise EngramPackError("host %s: %s %s is a %s, not a regular file; refusing to read, replace or remove "
                              "it (nothing was written). Move it out of the way and rerun"
                              % (host_label(), what, path, kind))
    return st


def shard_stale_reason(path, layer, lo, hi, n_rows):
    """Why the existing final shard at ``path`` is unusable for rows [lo, hi), or None if valid."""
    try:
        fd = open_read(path)
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, HEADER_BYTES, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        return "cannot be read: %s" % os_error_text(exc)
    if len(head) < HEADER_BYTES:
        return "has no header: file is %d bytes, shorter than the %d-byte header" % (size, HEADER_BYTES)
    got = _SHARD_HEADER.unpack_from(head)
    want = (MAGIC, layer, lo, hi, n_rows, ROW_BYTES)
    labels = ("magic", "layer", "lo", "hi", "total rows N", "row bytes")
    for label, have, expected in zip(labels, got, want):
        if have != expected:
            if label == "magic":
                return "bad magic 0x%016X, expected 0x%016X" % (have, expected)
            return "header %s is %d, expected %d" % (label, have, expected)
    if head.count(0, _SHARD_HEADER.size) != HEADER_BYTES - _SHARD_HEADER.size:
        return "header padding after byte %d is not zero" % _SHARD_HEADER.size
    expected_size = shard_bytes(lo, hi)
    if size < expected_size:
        return "is truncated: %d bytes, expected %d" % (size, expected_size)
    if size > expected_size:
        return "has %d trailing bytes: %d bytes, expected %d" % (size - expected_size, size, expected_size)
    return None


def allocated_bytes(path):
    """Space freed by deleting/truncating ``path``: allocated blocks, never more than its size
    (a sparse file frees only what it occupies)."""
    st = lstat_or_none(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        return 0
    return min(st.st_size, st.st_blocks * 512)


def write_all(fd, view):
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
