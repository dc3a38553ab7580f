# -*- coding: utf-8 -*-
"""The program engram_relocate runs on the hosts it moves files between (standard library only).

:data:`AGENT` is Python source text, run as ``python3 -c AGENT OP ARGS...`` (through ssh on a worker, as
it is on the head), so a worker needs nothing installed. Its operations:

- ``inspect JSON``: read-only facts (lstat, shard header, data extents, free space, the active Engram
  directory resolved on that host, /etc/machine-id; for a destination or ``rooms`` directory that does
  not exist yet, its nearest existing ancestor); the head decides from them. ``engram_plan`` runs it
  on the host itself (no ssh) to identify foreign shards exactly as a relocation will.
- ``mkdir DIR``: creates DIR and its missing parents (0755), fsyncing each parent.
- ``send PATH SIZE MTIME_NS CHUNK [RATE]``: streams PATH on stdout as frames, hole-aware (SEEK_DATA/SEEK_HOLE),
  ``S`` (size, mtime_ns), ``D`` (offset, length) + bytes, ``E`` (size, data bytes) + the 32-byte sha256
  of the logical content (holes hash as zeros); refuses a file whose size or mtime is not the one
  inspected, or that changes while it is read. With RATE (bytes/s, 0 none) the data frames are paced to
  it, so a copy does not saturate the head's network while the fleet serves. Its report goes to stderr
  (stdout is the stream).
- ``receive DIR NAME SIZE NEED``: refuses unless DIR is a real directory (not a symlink) with NEED
  bytes free; writes ``.NAME.dsv41-relocate.partial`` (O_EXCL, O_NOFOLLOW, 0600, flock held while
  writing) with pwrite so holes stay holes, truncates to SIZE, fsyncs, re-reads it and checks its
  sha256 against the sender's. Never writes NAME. On any error or SIGTERM/SIGINT/SIGHUP, or a stream
  that ends early, it removes its temporary file; a SIGKILL can leave only the temporary name.
- ``commit DIR NAME SHA SIZE INO MTIME_NS MODE SRC_MTIME_NS``: publishes the verified temporary file
  (same inode, size and mtime as received) under NAME without ever replacing a file (link + unlink,
  rename where links are unsupported), with the source's mode and mtime, and fsyncs DIR. A final
  name already holding the same content is kept and the temporary file dropped; different content
  is refused.
- ``discard DIR NAME``: removes a temporary file no live receiver holds (flock).
- ``hash PATH``: sha256 of the logical content, with the stat it was taken under.
- ``remove PATH SIZE MTIME_NS INO DEV``: unlinks PATH only if it is still that very file, unchanged;
  fsyncs its directory.

Every operation except ``send`` prints one ``DSV41-RELOCATE {json}`` line on stdout (``ok`` true, or
false with ``error``) and exits 0 only on success. Pages read or written are dropped from the page
cache as it goes (host RAM is GPU memory on a DGX Spark).
"""
from __future__ import annotations

from ansible.module_utils.engram.relocate_stream import AGENT_STREAM

MARK = "DSV41-RELOCATE "
TEMP_SUFFIX = ".dsv41-relocate.partial"


def temp_name(name):
    """The receiver's temporary name for final name ``name`` (hidden, in the same directory)."""
    return "." + name + TEMP_SUFFIX


# The common part: imports, helpers, file facts, inspect; then the streaming part; then the rest and main.
_AGENT_BASE = r'''
import errno, fcntl, hashlib, json, os, signal, stat, struct, sys, time

MARK = "DSV41-RELOCATE "
FRAME = struct.Struct("<cQQ")
ZERO = memoryview(bytes(1 << 20))
SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
DROP_EVERY = 64 << 20
HEADER = struct.Struct("<6Q")
TEMP_SUFFIX = ".dsv41-relocate.partial"

class Fail(Exception):
    pass

def on_signal(signum, frame):
    for other in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(other, signal.SIG_IGN)
    raise Fail("stopped by signal %d" % signum)

def err_text(exc):
    if isinstance(exc, OSError) and exc.errno:
        text = "%s (%s)" % (errno.errorcode.get(exc.errno, "errno %d" % exc.errno), exc.strerror)
        return text + (" at %s" % exc.filename if exc.filename else "")
    return str(exc) or type(exc).__name__

def report(stream, **fields):
    stream.write(MARK + json.dumps(fields, sort_keys=True) + "\n")
    stream.flush()

def kind(st):
    for test, name in ((stat.S_ISREG, "regular"), (stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(st.st_mode):
            return name
    return "special file"

def lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None

def drop(fd, offset=0, length=0):
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)

def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_frsize

def open_regular(path, flags=os.O_RDONLY):
    fd = os.open(path, flags | SAFE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Fail("%s is not a regular file" % path)
    return fd

def data_ranges(fd, size):
    """(start, end) of each data extent; the whole file where the filesystem cannot tell."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return
            if pos == 0 and exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                yield 0, size
                return
            raise
        if start >= size:
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end
        pos = end

def walk(fd, size, chunk, on_data, on_hole):
    """Read the data extents in chunks, calling on_data(offset, bytes) and on_hole(length) in order."""
    pos = dropped = 0
    for start, end in data_ranges(fd, size):
        if start > pos:
            on_hole(start - pos)
        off = start
        while off < end:
            data = os.pread(fd, min(chunk, end - off), off)
            if not data:
                raise Fail("file shrank while being read (at offset %d)" % off)
            on_data(off, data)
            off += len(data)
            if off - dropped >= DROP_EVERY:
                drop(fd, dropped, off - dropped)
                dropped = off
        pos = end
    if size > pos:
        on_hole(size - pos)
    drop(fd)

def hash_zeros(h, n):
    while n > 0:
        k = min(n, len(ZERO))
        h.update(ZERO[:k])
        n -= k

def logical_sha(fd, size, chunk=1 << 20):
    h = hashlib.sha256()
    walk(fd, size, chunk, lambda off, data: h.update(data), lambda n: hash_zeros(h, n))
    return h.hexdigest()

def under(path, top):
    top = top.rstrip("/") or "/"
    return path == top or path.startswith(top + "/") or top == "/"

def file_facts(path, active):
    st = lstat(path)
    facts = {"path": path, "kind": None if st is None else kind(st)}
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    facts.update(realpath=real, in_active=bool(active) and under(real, active))
    if st is None:
        return facts
    facts.update(size=st.st_size, mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev, mode=st.st_mode & 0o7777,
                 allocated=min(st.st_size, st.st_blocks * 512), uid=st.st_uid)
    if facts["kind"] == "symlink":
        facts["target"] = os.readlink(path)
    if facts["kind"] != "regular":
        return facts
    fd = open_regular(path)
    try:
        head = os.pread(fd, 4096, 0)
        if len(head) >= HEADER.size:
            facts["header"] = list(HEADER.unpack_from(head))
            facts["padding_zero"] = len(head) == 4096 and head.count(0, HEADER.size) == 4096 - HEADER.size
        ranges = list(data_ranges(fd, st.st_size))
        facts.update(extents=len(ranges), data_bytes=sum(e - s for s, e in ranges))
        facts["free"], facts["block"] = free_bytes(os.path.dirname(path) or ".")
        drop(fd, 0, 4096)
    finally:
        os.close(fd)
    return facts

def nearest_dir(d):
    """The nearest existing ancestor of a missing directory: where creating it takes room and rights."""
    up = os.path.dirname(d)
    while lstat(up) is None:
        up = os.path.dirname(up)
    out = {"path": up, "is_dir": os.path.isdir(up)}
    if out["is_dir"]:
        out.update(dev=os.stat(up).st_dev, writable=os.access(up, os.W_OK | os.X_OK))
        out["free"], out["block"] = free_bytes(up)
    return out

def dest_facts(d, active, names):
    st = lstat(d)
    dest = {"path": d, "kind": None if st is None else kind(st), "realpath": os.path.realpath(d)}
    dest["in_active"] = bool(active) and under(dest["realpath"], active)
    if st is None:
        dest["ancestor"] = nearest_dir(d)
    if dest["kind"] == "directory":
        dest.update(dev=st.st_dev, writable=os.access(d, os.W_OK | os.X_OK))
        dest["free"], dest["block"] = free_bytes(d)
        dest["names"] = {}
        for name in names:
            final, temp = lstat(os.path.join(d, name)), lstat(os.path.join(d, "." + name + TEMP_SUFFIX))
            dest["names"][name] = {"final": None if final is None else kind(final),
                                   "final_size": None if final is None else final.st_size,
                                   "temp": None if temp is None else kind(temp)}
    return dest

def op_inspect(args):
    spec = json.loads(args[0])
    active = os.path.realpath(spec["active_dir"]) if spec.get("active_dir") else None
    out = {"files": [file_facts(p, active) for p in spec.get("files", [])], "node": os.uname().nodename,
           "uid": os.geteuid(), "active_real": active, "active_exists": bool(active) and os.path.isdir(active)}
    try:
        with open("/etc/machine-id") as handle:
            out["machine_id"] = handle.read().strip()
    except OSError:
        out["machine_id"] = None
    if spec.get("dest_dir"):
        out["dest"] = dest_facts(spec["dest_dir"], active, spec.get("names", []))
    out["rooms"] = [dest_facts(d, active, []) for d in spec.get("rooms", [])]
    report(sys.stdout, ok=True, **out)
'''

_AGENT_REST = r'''

def op_hash(args):
    fd = open_regular(args[0])
    try:
        st = os.fstat(fd)
        sha = logical_sha(fd, st.st_size)
        now = os.fstat(fd)
    finally:
        os.close(fd)
    if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        raise Fail("%s changed while it was being hashed" % args[0])
    report(sys.stdout, ok=True, sha256=sha, size=st.st_size, mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev,
           allocated=min(st.st_size, st.st_blocks * 512))

def op_remove(args):
    path = args[0]
    size, mtime, ino, dev = (int(x) for x in args[1:5])
    st = lstat(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        raise Fail("%s is %s; not removed" % (path, "gone" if st is None else "a " + kind(st)))
    have = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    if have != (size, mtime, ino, dev):
        raise Fail("%s changed since it was checked (size, mtime_ns, inode, device %r, expected %r); left in place"
                   % (path, have, (size, mtime, ino, dev)))
    os.unlink(path)
    fsync_dir(os.path.dirname(path) or ".")
    report(sys.stdout, ok=True, path=path, freed=min(st.st_size, st.st_blocks * 512))

def op_mkdir(args):
    d, made, missing = args[0], [], []
    up = d
    while lstat(up) is None:
        missing.append(up)
        up = os.path.dirname(up)
    for path in reversed(missing):
        os.mkdir(path, 0o755)
        fsync_dir(os.path.dirname(path))
        made.append(path)
    st = lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise Fail("%s is a %s, not a directory" % (d, kind(st)))
    report(sys.stdout, ok=True, path=d, created=made)

OPS = {"inspect": op_inspect, "send": op_send, "receive": op_receive, "commit": op_commit,
       "discard": op_discard, "hash": op_hash, "remove": op_remove, "mkdir": op_mkdir}

def main():
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    op = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        OPS[op](sys.argv[2:])
    except BaseException as exc:
        if isinstance(exc, KeyError) and op not in OPS:
            exc = Fail("unknown operation %r" % op)
        try:
            report(sys.stderr if op == "send" else sys.stdout, ok=False, error=err_text(exc))
        except Exception:
            pass
        sys.exit(1)

main()
'''

AGENT = _AGENT_BASE + AGENT_STREAM + _AGENT_REST
