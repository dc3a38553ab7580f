# -*- coding: utf-8 -*-
"""Engram tables in a safetensors checkpoint and the packed per-rank shard files.

Shared by the ``engram_plan`` and ``engram_pack`` modules and by ``engram_follow`` (which reads the
packer's progress record and lock). Standard library only: Ansible ships this file to the target
host next to the module.

Checkpoint side: ``model.safetensors.index.json`` maps ``layers.{L}.engram.embed.weight``
(``F8_E4M3``, ``[N, 256]``) and ``layers.{L}.engram.embed.scale`` (``F8_E8M0``, ``[N, 8]``) to one
safetensors file. Only the index and the safetensors headers are read to plan; table bytes are
read only by :func:`pack_layer`.

Packed side: ``engram-l{L}-r{r}of{tp}.bin`` holds a 4096-byte header (six little-endian u64:
magic ``0x31344E4531565344``, layer, lo, hi, N, 264; zero padding) and then rows ``lo..hi-1``, each 256
weight bytes followed by the row's 8 scale bytes. It is published by writing ``.partial``,
fsyncing, renaming and fsyncing the directory, so a final-named file is always complete.

While packing, :func:`pack_layer` keeps a :class:`Progress` record (pid, state, bytes, rate, its
last message or error) that a follower reads, can be capped in rate (:class:`RateLimit`), holds a
kernel flock on the destination (:func:`dest_lock`) and, inside :func:`stop_signals_unwind`, turns
SIGTERM/SIGINT into a clean stop that removes its ``.partial``.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import signal
import stat
import struct
import time
from collections import namedtuple

ENGRAM_LAYERS = (1, 14)
WEIGHT_BYTES = 256
SCALE_BYTES = 8
ROW_BYTES = WEIGHT_BYTES + SCALE_BYTES  # 264
HEADER_BYTES = 4096
# The SPEC's magic value. Its little-endian bytes spell b"DSV1EN41" (the SPEC's prose says
# "DSV41EN1"); the number is what is written and compared, so the number is kept.
MAGIC = 0x31344E4531565344
INDEX_NAME = "model.safetensors.index.json"
# Beside each shard: the checkpoint identity it was packed from (see shard_provenance).
META_SUFFIX = ".meta.json"
META_VERSION = 1
# Written into every shard's metadata; raise it when the packed bytes of a row change meaning.
PACKER_VERSION = 2
# Rows hashed to tie a shard to the checkpoint's table bytes: spread over [lo, hi), first and last
# included; 64 rows cost 128 small reads whatever the table size.
SAMPLE_ROWS = 64
LOCK_NAME = ".engram-pack.lock"
WEIGHT_DTYPE = "F8_E4M3"
SCALE_DTYPE = "F8_E8M0"
GIB = 2 ** 30
MIB = 2 ** 20

DEFAULT_CHUNK_BYTES = 8 * MIB
# Dirty pages are forced out and dropped from the page cache at least this often: host RAM is
# GPU memory on a DGX Spark, so a multi-GiB pack must not sit in the cache.
DEFAULT_SYNC_BYTES = 128 * MIB
PROGRESS_INTERVAL_S = 0.5
PROGRESS_VERSION = 1
# starting/waiting_lock/packing while the packer runs; done or failed are its last word.
RUNNING_STATES = ("starting", "waiting_lock", "packing")
PROGRESS_STATES = RUNNING_STATES + ("done", "failed")
# A capped pack moves this many seconds' worth of rows per chunk, so its pace and progress are smooth.
THROTTLE_SLICE_S = 0.1
# Clock and sleep of the packer's timing and rate cap (replaced by a fake clock in tests).
_clock = time.monotonic
_sleep = time.sleep

# The safetensors reference reader refuses headers above 100 MB; so do we, before allocating.
MAX_SAFETENSORS_HEADER = 100 * 1000 * 1000
_SHARD_HEADER = struct.Struct("<6Q")
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 0
_IOV_MAX = _IOV_MAX if _IOV_MAX > 0 else 1024  # buffers per preadv call (1024 on Linux)

EngramTable = namedtuple("EngramTable", "layer rows shard_path weight_offset scale_offset source",
                         defaults=(None,))
EngramTable.__doc__ = """One layer's Engram table: row count and absolute byte offsets of the
weight and scale data inside ``shard_path``. ``source`` is the checkpoint identity the table was
read under (index digest, shard file name, size and mtime_ns, both tensors' dtype, shape and
data_offsets), or None when built by hand."""

ShardStatus = namedtuple(
    "ShardStatus", "state reason path partial_path lo hi bytes reclaimable_bytes note meta_path",
    defaults=(None, None))
ShardStatus.__doc__ = """What is on disk for one packed shard. ``state`` is complete, missing,
partial or stale; ``reason`` explains stale; ``reclaimable_bytes`` is the allocated size of the
files a pack would replace (a left-over .partial and/or a stale final file). ``note`` says how a
complete shard was trusted (``verified by sampled rows, no metadata`` for a shard packed before
metadata existed)."""


class EngramError(Exception):
    """Base class of every error this module raises on purpose."""


class EngramFormatError(EngramError):
    """A checkpoint, index or shard is malformed; the message names the file and the value."""


class EngramPackError(EngramError):
    """An operation on the destination failed (missing directory, lock held, no space, I/O);
    the message names the host, the path and the cause."""


def hostname():
    """Node name used in messages: a module cannot know its inventory name."""
    return os.uname().nodename


def _os_error_text(exc):
    """errno name and text, e.g. ENOSPC (No space left on device)."""
    name = errno.errorcode.get(exc.errno, "errno %s" % exc.errno)
    return "%s (%s)" % (name, exc.strerror or exc)


def weight_tensor_name(layer):
    return "layers.%d.engram.embed.weight" % layer


def scale_tensor_name(layer):
    return "layers.%d.engram.embed.scale" % layer


def shard_name(layer, rank, tp_size):
    return "engram-l%d-r%dof%d.bin" % (layer, rank, tp_size)


def partial_name(layer, rank, tp_size):
    return "engram-l%d-r%dof%d.partial" % (layer, rank, tp_size)


def meta_name(layer, rank, tp_size):
    return shard_name(layer, rank, tp_size) + META_SUFFIX


def shard_bytes(lo, hi):
    """Exact size of a packed shard holding rows [lo, hi)."""
    return HEADER_BYTES + (hi - lo) * ROW_BYTES


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_rank(rank, tp_size):
    """Raise ValueError unless 0 <= rank < tp_size and tp_size >= 1."""
    if not _is_int(tp_size) or tp_size < 1:
        raise ValueError("tp_size must be an integer >= 1, got %r" % (tp_size,))
    if not _is_int(rank) or not 0 <= rank < tp_size:
        raise ValueError("rank %r is outside 0..%d for tp_size %d" % (rank, tp_size - 1, tp_size))


def rank_row_range(n_rows, rank, tp_size):
    """Rows [lo, hi) of an N-row table owned by ``rank`` of ``tp_size``: [N*r//tp, N*(r+1)//tp)."""
    check_rank(rank, tp_size)
    if not _is_int(n_rows) or n_rows < tp_size:
        raise ValueError("table has %r rows, fewer than tp_size %d: every rank needs at least one row"
                         % (n_rows, tp_size))
    return n_rows * rank // tp_size, n_rows * (rank + 1) // tp_size


# --------------------------------------------------------------------------- checkpoint side

def _pread_exact(fd, length, offset, path):
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise EngramFormatError("%s: is truncated: wanted %d bytes at offset %d, got %d"
                                % (path, length, offset, len(data)))
    return data


def read_safetensors_header(path):
    """Return ``(header_dict, data_start)`` of a safetensors file, validated against its size.

    Checks the 8-byte length prefix, that the JSON header fits in the file and parses to an
    object, and that every tensor's ``data_offsets`` lie inside the file (by ``os.stat`` size:
    files may be sparse). Never reads tensor data.
    """
    try:
        # O_NONBLOCK: a FIFO at the name must not block the reader (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise EngramFormatError("%s: cannot open safetensors file: %s" % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EngramFormatError("%s: safetensors file is a %s, not a regular file" % (path, _kind(st)))
        size = st.st_size
        if size < 8:
            raise EngramFormatError("%s: truncated safetensors header: file is %d bytes, shorter than "
                                    "the 8-byte header length" % (path, size))
        (length,) = struct.unpack("<Q", _pread_exact(fd, 8, 0, path))
        if length > size - 8:
            raise EngramFormatError("%s: safetensors header length %d runs past the end of the file "
                                    "(%d bytes)" % (path, length, size))
        if length > MAX_SAFETENSORS_HEADER:
            raise EngramFormatError("%s: safetensors header length %d exceeds the %d-byte limit"
                                    % (path, length, MAX_SAFETENSORS_HEADER))
        raw = _pread_exact(fd, length, 8, path)
    finally:
        os.close(fd)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
        raise EngramFormatError("%s: safetensors header is not valid JSON: %s" % (path, exc))
    if not isinstance(header, dict):
        raise EngramFormatError("%s: safetensors header is a JSON %s, not an object"
                                % (path, type(header).__name__))
    data_start = 8 + length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise EngramFormatError("%s: tensor %s has invalid data_offsets %r"
                                    % (path, name, offsets))
        if data_start + offsets[1] > size:
            raise EngramFormatError("%s: tensor %s data_offsets %r end at byte %d, past the end of "
                                    "the file (%d bytes)" % (path, name, offsets,
                                                            data_start + offsets[1], size))
    return header, data_start


def _table_rows(path, header, name, dtype, width):
    """Validate one Engram tensor entry and return its row count."""
    info = header.get(name)
    if not isinstance(info, dict):
        raise EngramFormatError("%s: tensor %s is missing from the safetensors header" % (path, name))
    if info.get("dtype") != dtype:
        raise EngramFormatError("%s: tensor %s has dtype %r, expected %s"
                                % (path, name, info.get("dtype"), dtype))
    shape = info.get("shape")
    if (not isinstance(shape, list) or len(shape) != 2 or not all(_is_int(d) for d in shape)
            or shape[0] < 1 or shape[1] != width):
        raise EngramFormatError("%s: tensor %s has shape %r, expected [N, %d] with N >= 1"
                                % (path, name, shape, width))
    begin, end = info["data_offsets"]
    if end - begin != shape[0] * width:
        raise EngramFormatError("%s: tensor %s holds %d data bytes but shape %r needs %d"
                                % (path, name, end - begin, shape, shape[0] * width))
    return shape[0]


def _load_index(checkpoint_dir):
    index_path = os.path.join(checkpoint_dir, INDEX_NAME)
    try:
        fd = os.open(index_path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EngramFormatError("%s: checkpoint index is a %s, not a regular file"
                                        % (index_path, _kind(st)))
            with os.fdopen(os.dup(fd), "rb") as handle:
                raw = handle.read()
        finally:
            os.close(fd)
        index = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise EngramFormatError("%s: checkpoint index not found" % index_path)
    except OSError as exc:
        raise EngramFormatError("%s: cannot read checkpoint index: %s" % (index_path, exc.strerror))
    except ValueError as exc:
        raise EngramFormatError("%s: checkpoint index is not valid JSON: %s" % (index_path, exc))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise EngramFormatError("%s: checkpoint index has no weight_map object" % index_path)
    return index_path, weight_map, hashlib.sha256(raw).hexdigest()


def _confined_file(checkpoint_dir, index_path, tensor, value):
    """Path of the checkpoint file ``value`` the index names for ``tensor``, refused unless it stays
    inside the checkpoint directory (no absolute path, no "..", no symlink resolving outside)."""
    parts = value.replace("\\", "/").split("/")
    if os.path.isabs(value) or ".." in parts or "\0" in value:
        raise EngramFormatError("%s: weight_map entry for %s is %r, which names a file outside the checkpoint "
                                "directory %s (absolute path or '..'); refusing to read it"
                                % (index_path, tensor, value, checkpoint_dir))
    path = os.path.join(checkpoint_dir, value)
    root, real = os.path.realpath(checkpoint_dir), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise EngramFormatError("%s: weight_map entry for %s is %r, which resolves to %s, outside the checkpoint "
                                "directory %s (a symlink leading out); refusing to read it"
                                % (index_path, tensor, value, real, root))
    return path


def read_engram_tables(checkpoint_dir, layers=ENGRAM_LAYERS):
    """Return ``{layer: EngramTable}`` read from the index and the safetensors headers only."""
    index_path, weight_map, index_sha256 = _load_index(checkpoint_dir)
    headers = {}  # one header read per shard file, however many layers live in it
    tables = {}
    for layer in layers:
        if not _is_int(layer):
            raise EngramFormatError("%s: Engram layer %r is not an integer" % (index_path, layer))
        wname, sname = weight_tensor_name(layer), scale_tensor_name(layer)
        for name in (wname, sname):
            if not isinstance(weight_map.get(name), str) or not weight_map[name]:
                raise EngramFormatError("%s: tensor %s is missing from weight_map" % (index_path, name))
        if weight_map[wname] != weight_map[sname]:
            raise EngramFormatError("%s: %s is in %s but %s is in %s; both must be in the same file"
                                    % (index_path, wname, weight_map[wname], sname, weight_map[sname]))
        shard_path = _confined_file(checkpoint_dir, index_path, wname, weight_map[wname])
        if shard_path not in headers:
            header = read_safetensors_header(shard_path)
            try:
                st = os.stat(shard_path)
            except OSError as exc:
                raise EngramFormatError("%s: cannot stat safetensors file: %s" % (shard_path, exc.strerror))
            headers[shard_path] = header + ((st.st_size, st.st_mtime_ns),)
        header, data_start, (size, mtime_ns) = headers[shard_path]
        rows = _table_rows(shard_path, header, wname, WEIGHT_DTYPE, WEIGHT_BYTES)
        scale_rows = _table_rows(shard_path, header, sname, SCALE_DTYPE, SCALE_BYTES)
        if scale_rows != rows:
            raise EngramFormatError("%s: %s has %d rows but %s has %d"
                                    % (shard_path, sname, scale_rows, wname, rows))
        source = {"index_sha256": index_sha256, "file": weight_map[wname], "size": size, "mtime_ns": mtime_ns,
                  "tensors": {name: {key: header[name][key] for key in ("dtype", "shape", "data_offsets")}
                              for name in (wname, sname)}}
        tables[layer] = EngramTable(layer, rows, shard_path,
                                    data_start + header[wname]["data_offsets"][0],
                                    data_start + header[sname]["data_offsets"][0], source)
    return tables


def table_rank_range(table, rank, tp_size):
    """rank_row_range for a table, with errors naming the checkpoint file."""
    try:
        return rank_row_range(table.rows, rank, tp_size)
    except ValueError as exc:
        raise EngramFormatError("%s: layer %d: %s" % (table.shard_path, table.layer, exc))


# --------------------------------------------------------------------------- packed side

def encode_shard_header(layer, lo, hi, n_rows):
    """The 4096-byte header of a packed shard holding rows [lo, hi) of an N-row layer."""
    fields = _SHARD_HEADER.pack(MAGIC, layer, lo, hi, n_rows, ROW_BYTES)
    return fields + bytes(HEADER_BYTES - len(fields))


_OPEN_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _kind(st):
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
        raise EngramPackError("host %s: cannot inspect %s: %s" % (hostname(), path, _os_error_text(exc)))


def check_regular(path, what):
    """Refuse (EngramPackError naming host and path) anything but a regular file or nothing at ``path``.

    A symlink, directory or FIFO at a name the packer writes, replaces or reads would make it write
    through the link, fail half-way or block forever; none of them is ever the packer's own."""
    st = lstat_or_none(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = _kind(st)
        if kind == "symlink":
            with contextlib.suppress(OSError):
                kind = "symlink to %s" % os.readlink(path)
        raise EngramPackError("host %s: %s %s is a %s, not a regular file; refusing to read, replace or remove "
                              "it (nothing was written). Move it out of the way and rerun"
                              % (hostname(), what, path, kind))
    return st


def _open_read(path):
    """Read-only descriptor of a regular file at ``path``: never follows a symlink, never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | _OPEN_SAFE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def shard_stale_reason(path, layer, lo, hi, n_rows):
    """Why the existing final shard at ``path`` is unusable for rows [lo, hi), or None if valid."""
    try:
        fd = _open_read(path)
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, HEADER_BYTES, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        return "cannot be read: %s" % _os_error_text(exc)
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


def _allocated_bytes(path):
    """Space freed by deleting/truncating ``path``: allocated blocks, never more than its size
    (a sparse file frees only what it occupies)."""
    st = lstat_or_none(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        return 0
    return min(st.st_size, st.st_blocks * 512)


# --------------------------------------------------------------------------- provenance

def sample_rows(lo, hi, count=SAMPLE_ROWS):
    """Up to ``count`` rows spread evenly over [lo, hi), the first and the last included."""
    n = hi - lo
    if n <= count:
        return list(range(lo, hi))
    return sorted(set(lo + i * (n - 1) // (count - 1) for i in range(count)))


def checkpoint_sample_sha256(table, lo, hi):
    """sha256 of the sampled rows as they would be packed (256 weight + 8 scale bytes each), read
    from the checkpoint."""
    digest = hashlib.sha256()
    fd = os.open(table.shard_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        for row in sample_rows(lo, hi):
            digest.update(_pread_exact(fd, WEIGHT_BYTES, table.weight_offset + row * WEIGHT_BYTES, table.shard_path))
            digest.update(_pread_exact(fd, SCALE_BYTES, table.scale_offset + row * SCALE_BYTES, table.shard_path))
    finally:
        os.close(fd)
    return digest.hexdigest()


def _shard_sample_sha256_fd(fd, lo, hi, path):
    digest = hashlib.sha256()
    for row in sample_rows(lo, hi):
        digest.update(_pread_exact(fd, ROW_BYTES, HEADER_BYTES + (row - lo) * ROW_BYTES, path))
    return digest.hexdigest()


def shard_sample_sha256(path, lo, hi):
    """sha256 of the same sampled rows read from a packed shard."""
    fd = _open_read(path)
    try:
        return _shard_sample_sha256_fd(fd, lo, hi, path)
    finally:
        os.close(fd)


def shard_provenance(table, rank, tp_size, sample_sha256=None):
    """The metadata written beside a shard: which checkpoint bytes it was packed from."""
    lo, hi = rank_row_range(table.rows, rank, tp_size)
    source = table.source or {}
    return {
        "version": META_VERSION, "packer_version": PACKER_VERSION,
        "layer": table.layer, "rank": rank, "tp_size": tp_size, "lo": lo, "hi": hi, "rows": table.rows,
        "shard_bytes": shard_bytes(lo, hi),
        "index_sha256": source.get("index_sha256"),
        "source": {"file": source.get("file"), "size": source.get("size"), "mtime_ns": source.get("mtime_ns")},
        "tensors": source.get("tensors"),
        "sampled_rows": {"count": len(sample_rows(lo, hi)),
                         "sha256": sample_sha256 or checkpoint_sample_sha256(table, lo, hi)},
    }


def _short(digest):
    return (digest or "none")[:12]


def provenance_stale_reasons(meta, table, rank, tp_size, shard_path):
    """Why a shard whose metadata is ``meta`` no longer matches the checkpoint (empty list: it does)."""
    lo, hi = rank_row_range(table.rows, rank, tp_size)
    want = shard_provenance(table, rank, tp_size)
    reasons = []
    for key in ("layer", "rank", "tp_size", "lo", "hi", "rows", "shard_bytes"):
        if meta.get(key) != want[key]:
            reasons.append("metadata %s is %r, the shard needs %r" % (key, meta.get(key), want[key]))
    if meta.get("index_sha256") != want["index_sha256"]:
        reasons.append("index digest changed: %s sha256 %s..., was %s... when packed"
                       % (INDEX_NAME, _short(want["index_sha256"]), _short(meta.get("index_sha256"))))
    was, now = meta.get("source") if isinstance(meta.get("source"), dict) else {}, want["source"]
    if was.get("file") != now["file"]:
        reasons.append("source file changed: the index names %s, was %s" % (now["file"], was.get("file")))
    elif (was.get("size"), was.get("mtime_ns")) != (now["size"], now["mtime_ns"]):
        reasons.append("source size or mtime changed: %s is %s bytes, mtime_ns %s; was %s bytes, mtime_ns %s"
                       % (now["file"], now["size"], now["mtime_ns"], was.get("size"), was.get("mtime_ns")))
    tensors = meta.get("tensors") if isinstance(meta.get("tensors"), dict) else {}
    for name, info in sorted((want["tensors"] or {}).items()):
        old = tensors.get(name) if isinstance(tensors.get(name), dict) else {}
        for key in ("data_offsets", "dtype", "shape"):
            if old.get(key) != info[key]:
                reasons.append("%s changed: %s %s is %r, was %r" % (
                    "offsets" if key == "data_offsets" else key, name, key, info[key], old.get(key)))
    sampled = meta.get("sampled_rows") if isinstance(meta.get("sampled_rows"), dict) else {}
    if sampled.get("sha256") != want["sampled_rows"]["sha256"]:
        reasons.append("sampled rows differ: %d rows of the checkpoint hash to %s..., the shard was packed from %s..."
                       % (want["sampled_rows"]["count"], _short(want["sampled_rows"]["sha256"]),
                          _short(sampled.get("sha256"))))
    elif shard_sample_sha256(shard_path, lo, hi) != sampled.get("sha256"):
        reasons.append("sampled rows differ: the shard's own rows no longer match its metadata")
    return reasons


def read_meta(meta_path):
    """(metadata dict or None, problem text or None) of the file beside a shard."""
    if check_regular(meta_path, "shard metadata") is None:
        return None, None
    try:
        fd = _open_read(meta_path)
        try:
            raw = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
        meta = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        return None, "metadata %s is unreadable: %s" % (meta_path, exc)
    if not isinstance(meta, dict) or meta.get("version") != META_VERSION:
        return None, "metadata %s has an unknown format" % meta_path
    return meta, None


def write_meta(meta_path, meta):
    """Publish the metadata like a shard: exclusive temp file, fsync, rename, directory fsync."""
    tmp = meta_path + ".partial"
    dest = os.path.dirname(meta_path)
    remove_own_file(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_SAFE, 0o644)
    try:
        _write_all(fd, memoryview(json.dumps(meta, sort_keys=True, indent=1).encode() + b"\n"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, meta_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(dest)


def remove_own_file(path, what="left-over .partial"):
    """Remove a left-over temp file only if it is a regular file owned by this process's uid (lstat:
    a symlink is never followed); refuse anything else. Returns whether a file was removed."""
    st = check_regular(path, what)
    if st is None:
        return False
    if st.st_uid != os.geteuid():
        raise EngramPackError("host %s: %s %s belongs to uid %d, not the packer's uid %d; "
                              "refusing to remove it (nothing was written). Remove it as its owner and rerun"
                              % (hostname(), what, path, st.st_uid, os.geteuid()))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


def describe_shard(dest, layer, rank, tp_size, n_rows, table=None):
    """ShardStatus of ``engram-l{L}-r{r}of{tp}`` in directory ``dest``.

    complete: the final file is valid for this rank's range; missing: nothing there;
    partial: only a .partial exists (a killed run); stale: the final file exists but is wrong.
    With ``table`` (from :func:`read_engram_tables`) a structurally valid shard is also checked
    against the checkpoint: through its metadata (index digest, source size and mtime, offsets,
    sampled rows), or, when it has none (packed by an older version), by sampled rows alone.
    Raises EngramPackError when a name the packer uses holds a symlink, directory or FIFO.
    """
    lo, hi = rank_row_range(n_rows, rank, tp_size)
    path = os.path.join(dest, shard_name(layer, rank, tp_size))
    partial_path = os.path.join(dest, partial_name(layer, rank, tp_size))
    meta_path = os.path.join(dest, meta_name(layer, rank, tp_size))
    partial_exists = check_regular(partial_path, "shard .partial") is not None
    check_regular(meta_path, "shard metadata")
    note = None
    if check_regular(path, "packed shard") is not None:
        reason = shard_stale_reason(path, layer, lo, hi, n_rows)
        if reason is None and table is not None:
            reason, note = _provenance_verdict(table, rank, tp_size, path, meta_path, lo, hi)
        state = "complete" if reason is None else "stale"
    else:
        reason = None
        state = "partial" if partial_exists else "missing"
    reclaimable = 0
    if state != "complete":
        reclaimable = _allocated_bytes(partial_path) + (_allocated_bytes(path) if state == "stale" else 0)
    return ShardStatus(state, reason, path, partial_path, lo, hi, shard_bytes(lo, hi), reclaimable, note, meta_path)


NOTE_NO_METADATA = "verified by sampled rows, no metadata"


def _provenance_verdict(table, rank, tp_size, path, meta_path, lo, hi):
    """(stale reason or None, note) of a structurally valid shard against the checkpoint."""
    meta, problem = read_meta(meta_path)
    try:
        if meta is None and problem is None:
            # Packed before metadata existed: trusted only if its sampled rows equal the checkpoint's.
            if shard_sample_sha256(path, lo, hi) == checkpoint_sample_sha256(table, lo, hi):
                return None, NOTE_NO_METADATA
            return ("sampled rows differ: the shard has no metadata and %d sampled rows differ from the checkpoint"
                    % len(sample_rows(lo, hi))), None
        if problem is not None:
            return problem, None
        reasons = provenance_stale_reasons(meta, table, rank, tp_size, path)
    except OSError as exc:
        return "cannot be verified: %s" % _os_error_text(exc), None
    return ("; ".join(reasons) or None), None


def inspect_shard(path, layer, rank, tp_size, n_rows):
    """State of one packed shard: "complete", "missing", "partial" or "stale".

    ``path`` is the destination directory, or the shard's final path inside it.
    """
    if os.path.basename(path) == shard_name(layer, rank, tp_size):
        path = os.path.dirname(path)
    return describe_shard(path, layer, rank, tp_size, n_rows).state


# --------------------------------------------------------------------------- planning

def _gib(value):
    return round(value / GIB, 3)


def check_dest(dest):
    if not os.path.isdir(dest):
        what = "is not a directory" if os.path.exists(dest) else "does not exist"
        raise EngramPackError("host %s: Engram destination %s %s" % (hostname(), dest, what))


def free_bytes(dest):
    st = os.statvfs(dest)
    return st.f_bavail * st.f_frsize


def _check_params(checkpoint, rank, tp_size, margin_bytes):
    try:
        check_rank(rank, tp_size)
    except ValueError as exc:
        raise EngramFormatError("%s: %s" % (checkpoint, exc))
    if not _is_int(margin_bytes) or margin_bytes < 0:
        raise EngramFormatError("%s: margin_bytes must be an integer >= 0, got %r" % (checkpoint, margin_bytes))


def plan(checkpoint, dest, rank, tp_size, layers=ENGRAM_LAYERS, margin_bytes=0):
    """Read-only space verdict for packing ``layers`` for one rank into ``dest``.

    A shortfall is a verdict (``fits: False``), not an error; malformed input raises
    EngramFormatError and a missing ``dest`` raises EngramPackError.
    """
    check_dest(dest)
    _check_params(checkpoint, rank, tp_size, margin_bytes)
    layers = list(layers)
    if not layers or len(set(layers)) != len(layers):
        raise EngramFormatError("%s: layers must be a non-empty list without duplicates, got %r"
                                % (checkpoint, layers))
    tables = read_engram_tables(checkpoint, layers)
    shards = []
    required = to_write = reclaimable = 0
    for layer in layers:
        table = tables[layer]
        table_rank_range(table, rank, tp_size)
        status = describe_shard(dest, layer, rank, tp_size, table.rows, table)
        entry = {"layer": layer, "path": status.path, "lo": status.lo, "hi": status.hi,
                 "rows": status.hi - status.lo, "bytes": status.bytes, "state": status.state,
                 "meta_path": status.meta_path}
        if status.state == "stale":
            entry["stale_reason"] = status.reason
        if status.note:
            entry["verified"] = status.note
        shards.append(entry)
        required += status.bytes
        if status.state != "complete":
            to_write += status.bytes
            reclaimable += status.reclaimable_bytes
    free = free_bytes(dest)
    deficit = max(0, to_write + margin_bytes - free - reclaimable)
    return {
        "required_bytes": required,
        "shards": shards,
        "to_write_bytes": to_write,
        "reclaimable_bytes": reclaimable,
        "free_bytes": free,
        "margin_bytes": margin_bytes,
        "fits": deficit == 0,
        "deficit_bytes": deficit,
        "required_gib": _gib(required),
        "to_write_gib": _gib(to_write),
        "free_gib": _gib(free),
        "deficit_gib": _gib(deficit),
        "reclaimable_gib": _gib(reclaimable),
    }


# --------------------------------------------------------------------------- processes

def _proc_stat(pid):
    """(state letter, start time in clock ticks since boot) from /proc/PID/stat, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # Field 2 (the command) is parenthesised and may itself contain spaces or ")": split after the last ")".
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def process_start_ticks(pid):
    """Start time of ``pid`` (clock ticks since boot), or None where /proc cannot tell.

    Recorded next to a pid so that a later reader can tell the process from a newer one that
    reused its number."""
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def pid_alive(pid, start_ticks=None):
    """Whether ``pid`` still runs, and (when ``start_ticks`` is known) is the same process.

    A zombie (exited, not yet reaped by its parent) counts as gone: it holds no files or locks.
    """
    if not _is_int(pid) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists but belongs to another user
    stat = _proc_stat(pid)
    if stat is None:
        # No /proc entry although the signal test passed: it exited in between, or there is no
        # procfs at all (then the signal test is all there is).
        return not os.path.isdir("/proc/self")
    state, started = stat
    if state == "Z":
        return False
    return start_ticks is None or started == start_ticks


def _read_json(path):
    """A JSON object from ``path``; None if the file is missing, empty or not a JSON object."""
    try:
        fd = _open_read(path)  # a FIFO or symlink planted at the name is not read (nor waited on)
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


# --------------------------------------------------------------------------- packing

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
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_SAFE, 0o644)
    except OSError as exc:
        raise EngramPackError("host %s: cannot open lock file %s: %s" % (hostname(), path, _os_error_text(exc)))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        kind = _kind(os.fstat(fd))
        os.close(fd)
        raise EngramPackError("host %s: lock file %s is a %s, not a regular file; refusing to use it (nothing was "
                              "written). Move it out of the way and rerun" % (hostname(), path, kind))
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
                        % (hostname(), path, describe_lock_holder(_read_json(path)), timeout, dest))
                time.sleep(min(0.1, remaining))
        reclaimed = _read_json(path)
        pid = os.getpid()
        record = dict(owner or {}, pid=pid, pid_start=process_start_ticks(pid), host=hostname(), since=time.time())
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record, sort_keys=True).encode(), 0)
        yield {"path": path, "reclaimed": reclaimed}
    finally:
        if held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # a clean release leaves no holder record behind
        os.close(fd)  # closing the descriptor releases the flock


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
        self.record = {"version": PROGRESS_VERSION, "run_id": None, "host": hostname(), "pid": pid,
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
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_SAFE, 0o644)
            created = True
            try:
                _write_all(fd, memoryview(json.dumps(self.record, sort_keys=True).encode()))
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            if created:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise EngramPackError("host %s: cannot write the progress file %s: %s"
                                  % (hostname(), self.path, _os_error_text(exc)))

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
    record = _read_json(path)
    if record is None or not _is_int(record.get("pid")) or record.get("state") not in PROGRESS_STATES:
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


def _write_all(fd, view):
    while view:
        view = view[os.write(fd, view):]


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


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_rows(table, status, out_fd, in_fd, chunk_rows, sync_bytes, progress, limit):
    """Write header and rows lo..hi-1 into ``out_fd``; return bytes written.

    Per chunk: the weights are scattered by the kernel straight into their 256-byte slots of the
    row buffer (preadv), the scales are read in one piece and dropped into the 8-byte slot at the
    end of each row with a single strided 8-byte-word copy (264 = 33 words), then the whole chunk
    is written at once. No per-row Python work.
    """
    lo, hi, total = status.lo, status.hi, status.bytes
    _write_all(out_fd, memoryview(encode_shard_header(table.layer, lo, hi, table.rows)))
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
        _write_all(out_fd, buf[:n * ROW_BYTES])
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
    the metadata ``meta`` beside it the same way.

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
        out_fd = os.open(status.partial_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_SAFE, 0o644)
        created = True
        in_fd = os.open(table.shard_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        written = _copy_rows(table, status, out_fd, in_fd, chunk_rows, sync_bytes, progress, limit)
        if written != status.bytes or os.fstat(out_fd).st_size != status.bytes:
            raise EngramPackError("host %s: %s: wrote %d bytes, expected %d"
                                  % (hostname(), status.partial_path, written, status.bytes))
        # The metadata's sample was read before the copy: equal rows in what was written mean the
        # checkpoint did not change under the pack (at least where it is sampled).
        if _shard_sample_sha256_fd(out_fd, status.lo, status.hi, status.partial_path) != meta["sampled_rows"]["sha256"]:
            raise EngramPackError("host %s: %s changed while layer %d was being packed (sampled rows differ from "
                                  "those read before writing); nothing was published, rerun the pack"
                                  % (hostname(), table.shard_path, table.layer))
        os.fsync(out_fd)
        os.close(out_fd)
        out_fd = None
        os.replace(status.partial_path, status.path)
        created = False
        fsync_dir(dest)
    except BaseException as exc:
        if out_fd is not None:
            os.close(out_fd)
        if created:
            with contextlib.suppress(OSError):
                os.unlink(status.partial_path)
        if isinstance(exc, OSError):
            raise EngramPackError("host %s: packing layer %d into %s failed at %s: %s; nothing was published"
                                  % (hostname(), table.layer, status.path,
                                     exc.filename or status.partial_path, _os_error_text(exc)))
        raise
    finally:
        if in_fd is not None:
            os.close(in_fd)
    try:
        write_meta(status.meta_path, meta)
    except OSError as exc:
        raise EngramPackError("host %s: %s was published but its metadata %s could not be written: %s; the next "
                              "plan verifies the shard by sampled rows" % (hostname(), status.path, status.meta_path,
                                                                          _os_error_text(exc)))


def _check_space(dest, status, margin_bytes):
    free = free_bytes(dest)
    need = status.bytes + margin_bytes
    have = free + status.reclaimable_bytes
    if have < need:
        deficit = need - have
        raise EngramPackError(
            "host %s: not enough space in %s for %s: needs %d bytes (%d + margin %d), has %d free + %d "
            "reclaimable; deficit %d bytes (%.3f GiB)"
            % (hostname(), dest, os.path.basename(status.path), need, status.bytes, margin_bytes,
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
            % (hostname(), layer, path, exc, where, left, final))


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
                      % (hostname(), layer, type(exc).__name__, exc))
        raise


def _pack_layer(checkpoint, dest, layer, rank, tp_size, margin_bytes, check_mode, chunk_bytes, chunk_rows,
                lock_timeout, sync_bytes, max_mib_s, progress):
    check_dest(dest)
    _check_params(checkpoint, rank, tp_size, margin_bytes)
    check_max_mib_s(checkpoint, max_mib_s)
    if chunk_rows is None:
        if not _is_int(chunk_bytes) or chunk_bytes < ROW_BYTES:
            raise EngramFormatError("%s: chunk_bytes must be an integer >= %d, got %r"
                                    % (checkpoint, ROW_BYTES, chunk_bytes))
        chunk_rows = chunk_bytes // ROW_BYTES
    elif not _is_int(chunk_rows) or chunk_rows < 1:
        raise EngramFormatError("%s: chunk_rows must be an integer >= 1, got %r" % (checkpoint, chunk_rows))
    limit = RateLimit(max_mib_s)
    chunk_rows = limit.chunk_rows(chunk_rows)
    table = read_engram_tables(checkpoint, (layer,))[layer]
    table_rank_range(table, rank, tp_size)
    before = describe_shard(dest, layer, rank, tp_size, table.rows, table)
    result = {"changed": before.state != "complete", "path": before.path, "bytes": before.bytes,
              "rows": before.hi - before.lo, "lo": before.lo, "hi": before.hi, "seconds": 0.0,
              "throughput_mib_s": 0.0, "state_before": before.state, "max_mib_s": max_mib_s,
              "reclaimed_lock": None, "stale_reason": before.reason, "verified": before.note,
              "meta_path": before.meta_path, "metadata_written": False}
    if check_mode:
        return result
    progress.update(path=before.path, partial_path=before.partial_path, total_bytes=before.bytes)
    if before.state == "complete" and before.note != NOTE_NO_METADATA:
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
            if status.note == NOTE_NO_METADATA:
                # An older packer's shard, verified by sampled rows: record what it was verified against.
                try:
                    write_meta(status.meta_path, shard_provenance(table, rank, tp_size))
                except OSError as exc:
                    raise EngramPackError("host %s: cannot write the metadata %s of %s: %s"
                                          % (hostname(), status.meta_path, status.path, _os_error_text(exc)))
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
