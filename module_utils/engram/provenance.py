# -*- coding: utf-8 -*-
"""Where a packed shard came from: its metadata file and sampled-row digests (standard library only).

Each shard has ``<shard>.meta.json`` naming the checkpoint identity, the rank's rows, the SHA-256 of
sampled rows and the SHA-256 of the shard's whole content (hashed while it was written) with the file's
identity then (size, mtime, inode, device); a shard is complete only when that record (or, for a shard
packed before metadata existed, the sampled rows themselves) matches the checkpoint, and its content
matches the recorded hash: checked cheaply by identity (a write changes the mtime), and read in full when
the identity changed, or when the caller asks for the full check (stage A's verify tag, the drift
check, which skips a shard whose identity it already verified).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os

from ansible.module_utils.engram.safetensors_index import INDEX_NAME, pread_exact
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.safe_open import OPEN_SAFE, open_read
from ansible.module_utils.engram.shard_format import (
    EngramPackError, HEADER_BYTES, ROW_BYTES, SCALE_BYTES, ShardStatus, WEIGHT_BYTES,
    allocated_bytes, check_regular, fsync_dir, meta_name, os_error_text,
    partial_name, rank_row_range, shard_bytes, shard_name, shard_stale_reason, write_all,
)


META_VERSION = 1


# Written into every shard's metadata; raise it when the packed bytes of a row change meaning.
PACKER_VERSION = 2


# Rows hashed to tie a shard to the checkpoint's table bytes: spread over [lo, hi), first and last
# included; 64 rows cost 128 small reads whatever the table size.
SAMPLE_ROWS = 64


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
            digest.update(pread_exact(fd, WEIGHT_BYTES, table.weight_offset + row * WEIGHT_BYTES, table.shard_path))
            digest.update(pread_exact(fd, SCALE_BYTES, table.scale_offset + row * SCALE_BYTES, table.shard_path))
    finally:
        os.close(fd)
    return digest.hexdigest()


def _shard_sample_sha256_fd(fd, lo, hi, path):
    digest = hashlib.sha256()
    for row in sample_rows(lo, hi):
        digest.update(pread_exact(fd, ROW_BYTES, HEADER_BYTES + (row - lo) * ROW_BYTES, path))
    return digest.hexdigest()


def shard_sample_sha256(path, lo, hi):
    """sha256 of the same sampled rows read from a packed shard."""
    fd = open_read(path)
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


# How the content of a complete shard is checked against the hash recorded when it was packed:
# "identity": equal size, mtime, inode and device are trusted (a write changes the mtime), the whole file is
# read only when one of them changed; "full": the whole file is read, unless ``verified`` already holds this
# exact verification key for it. The recorded identity leaves ctime out (the pack's own chmod, or an
# operator's chown, changes it without touching a byte); the key a full check is remembered by has it, so
# bytes rewritten under a restored mtime (ctime cannot be set back) are read again.
CONTENT_CHECKS = ("identity", "full")
IDENTITY_FIELDS = ("size", "mtime_ns", "ino", "dev")
HASH_CHUNK = 8 * 2 ** 20

NOTE_NO_CONTENT_HASH = "no content hash recorded (packed by an older version): verified by sampled rows"
NOTE_IDENTITY_CHANGED = "content hash verified in full: the file's mtime or inode changed since it was packed"


def content_identity(st):
    """The cheap identity of a file's content: what a write, a copy or a replacement changes."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def verification_key(st):
    """size:mtime_ns:ctime_ns:inode:device of a stat result: what a full check is remembered by (the drift
    history); any write, even one that sets the mtime back, changes it."""
    return "%d:%d:%d:%d:%d" % (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def content_sha256(path, chunk=HASH_CHUNK):
    """(sha256 hex, verification key) of a regular file read whole; raises OSError when it changed while read."""
    fd = open_read(path)
    try:
        before = os.fstat(fd)
        digest, offset = hashlib.sha256(), 0
        while True:
            data = os.pread(fd, chunk, offset)
            if not data:
                break
            digest.update(data)
            offset += len(data)
            if hasattr(os, "posix_fadvise") and offset % (64 * chunk) == 0:
                os.posix_fadvise(fd, 0, offset, os.POSIX_FADV_DONTNEED)   # a 34 GB read leaves no page cache behind
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if offset != before.st_size or verification_key(after) != verification_key(before):
        raise OSError(errno.EAGAIN, "changed while its content was hashed (read %d of %d bytes)"
                      % (offset, before.st_size), path)
    return digest.hexdigest(), verification_key(before)


def content_record(path, sha256):
    """The ``content`` entry of a shard's metadata: its hash and the identity of the file it was taken from."""
    return dict(content_identity(os.lstat(path)), sha256=sha256)


def content_verdict(meta, path, check="identity", verified=None):
    """(stale reason or None, note or None, content facts) of a shard whose metadata is ``meta``.

    ``verified``: {shard path: verification_key} already hashed in full and found equal (the drift
    history); such a shard is not read again until its key changes. Content facts: ``recorded`` (the hash
    at pack time, or None), ``identity`` (its verification key now), ``hashed`` (whether the whole file was
    read here), ``sha256`` (what it read, when it did)."""
    if check not in CONTENT_CHECKS:
        raise ValueError("content check must be one of %s, got %r" % (", ".join(CONTENT_CHECKS), check))
    recorded = meta.get("content") if isinstance(meta.get("content"), dict) else {}
    st = os.lstat(path)
    now = content_identity(st)
    facts = {"recorded": recorded.get("sha256"), "identity": verification_key(st), "hashed": False, "sha256": None}
    if not recorded.get("sha256"):
        return None, NOTE_NO_CONTENT_HASH, facts
    same = all(recorded.get(k) == now[k] for k in IDENTITY_FIELDS)
    if same and (check == "identity" or (verified or {}).get(path) == facts["identity"]):
        return None, None, facts
    sha, seen = content_sha256(path)
    facts.update(hashed=True, sha256=sha, identity=seen)
    if sha != recorded["sha256"]:
        return ("content differs: the file hashes to sha256 %s..., %s... was recorded when it was packed (%s)"
                % (_short(sha), _short(recorded["sha256"]),
                   "same size, mtime and inode" if same else "size, mtime or inode changed since")), None, facts
    return None, (None if same else NOTE_IDENTITY_CHANGED), facts


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
        fd = open_read(meta_path)
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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_SAFE, 0o644)
    try:
        write_all(fd, memoryview(json.dumps(meta, sort_keys=True, indent=1).encode() + b"\n"))
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
                              % (host_label(), what, path, st.st_uid, os.geteuid()))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


def describe_shard(dest, layer, rank, tp_size, n_rows, table=None, content_check="identity", verified=None):
    """ShardStatus of ``engram-l{L}-r{r}of{tp}`` in directory ``dest``.

    complete: the final file is valid for this rank's range; missing: nothing there;
    partial: only a .partial exists (a killed run); stale: the final file exists but is wrong.
    With ``table`` (from :func:`read_engram_tables`) a structurally valid shard is also checked
    against the checkpoint: through its metadata (index digest, source size and mtime, offsets,
    sampled rows, then its content hash: :func:`content_verdict` with ``content_check`` and
    ``verified``), or, when it has none (packed by an older version), by sampled rows alone.
    Raises EngramPackError when a name the packer uses holds a symlink, directory or FIFO.
    """
    lo, hi = rank_row_range(n_rows, rank, tp_size)
    path = os.path.join(dest, shard_name(layer, rank, tp_size))
    partial_path = os.path.join(dest, partial_name(layer, rank, tp_size))
    meta_path = os.path.join(dest, meta_name(layer, rank, tp_size))
    partial_exists = check_regular(partial_path, "shard .partial") is not None
    check_regular(meta_path, "shard metadata")
    note = content = None
    if check_regular(path, "packed shard") is not None:
        reason = shard_stale_reason(path, layer, lo, hi, n_rows)
        if reason is None and table is not None:
            reason, note, content = _provenance_verdict(table, rank, tp_size, path, meta_path, lo, hi,
                                                        content_check, verified)
        state = "complete" if reason is None else "stale"
    else:
        reason = None
        state = "partial" if partial_exists else "missing"
    reclaimable = 0
    if state != "complete":
        reclaimable = allocated_bytes(partial_path) + (allocated_bytes(path) if state == "stale" else 0)
    return ShardStatus(state, reason, path, partial_path, lo, hi, shard_bytes(lo, hi), reclaimable, note, meta_path,
                       content)


NOTE_NO_METADATA = "verified by sampled rows, no metadata"


def _provenance_verdict(table, rank, tp_size, path, meta_path, lo, hi, content_check="identity", verified=None):
    """(stale reason or None, note, content facts or None) of a structurally valid shard against the
    checkpoint, then against the content hash recorded when it was packed."""
    meta, problem = read_meta(meta_path)
    try:
        if meta is None and problem is None:
            # Packed before metadata existed: trusted only if its sampled rows equal the checkpoint's.
            if shard_sample_sha256(path, lo, hi) == checkpoint_sample_sha256(table, lo, hi):
                return None, NOTE_NO_METADATA, None
            return ("sampled rows differ: the shard has no metadata and %d sampled rows differ from the checkpoint"
                    % len(sample_rows(lo, hi))), None, None
        if problem is not None:
            return problem, None, None
        reasons = provenance_stale_reasons(meta, table, rank, tp_size, path)
        if reasons:
            return "; ".join(reasons), None, None
        return content_verdict(meta, path, content_check, verified)
    except OSError as exc:
        return "cannot be verified: %s" % os_error_text(exc), None, None


def inspect_shard(path, layer, rank, tp_size, n_rows):
    """State of one packed shard: "complete", "missing", "partial" or "stale".

    ``path`` is the destination directory, or the shard's final path inside it.
    """
    if os.path.basename(path) == shard_name(layer, rank, tp_size):
        path = os.path.dirname(path)
    return describe_shard(path, layer, rank, tp_size, n_rows).state
