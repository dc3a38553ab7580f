# -*- coding: utf-8 -*-
"""The program engram_relocate runs on the hosts it moves files between (standard library only).

:data:`AGENT` is Python source text, run as ``python3 -c AGENT OP ARGS...`` (through ssh on a worker, as
it is on the head), so a worker needs nothing installed. Its operations:

- ``inspect JSON``: read-only facts (lstat, shard header, data extents, free space, the active Engram
  directory resolved on that host, /etc/machine-id); the head decides from them.
- ``send PATH SIZE MTIME_NS CHUNK``: streams PATH on stdout as frames, hole-aware (SEEK_DATA/SEEK_HOLE),
  ``S`` (size, mtime_ns), ``D`` (offset, length) + bytes, ``E`` (size, data bytes) + the 32-byte sha256
  of the logical content (holes hash as zeros); refuses a file whose size or mtime is not the one
  inspected, or that changes while it is read. Its report goes to stderr (stdout is the stream).
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

MARK = "DSV41-RELOCATE "
TEMP_SUFFIX = ".dsv41-relocate.partial"


def temp_name(name):
    """The receiver's temporary name for final name ``name`` (hidden, in the same directory)."""
    return "." + name + TEMP_SUFFIX


AGENT = r'''
import errno, fcntl, hashlib, json, os, signal, stat, struct, sys

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
    d = spec.get("dest_dir")
    if d:
        st = lstat(d)
        dest = {"path": d, "kind": None if st is None else kind(st), "realpath": os.path.realpath(d)}
        dest["in_active"] = bool(active) and under(dest["realpath"], active)
        if dest["kind"] == "directory":
            dest.update(dev=st.st_dev, writable=os.access(d, os.W_OK | os.X_OK))
            dest["free"], dest["block"] = free_bytes(d)
            dest["names"] = {}
            for name in spec.get("names", []):
                final, temp = lstat(os.path.join(d, name)), lstat(os.path.join(d, "." + name + TEMP_SUFFIX))
                dest["names"][name] = {"final": None if final is None else kind(final),
                                       "final_size": None if final is None else final.st_size,
                                       "temp": None if temp is None else kind(temp)}
        out["dest"] = dest
    report(sys.stdout, ok=True, **out)

def op_send(args):
    path, size, mtime, chunk = args[0], int(args[1]), int(args[2]), int(args[3])
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            raise Fail("%s changed since it was inspected: size %d mtime_ns %d, expected size %d mtime_ns %d"
                       % (path, st.st_size, st.st_mtime_ns, size, mtime))
        out = sys.stdout.buffer
        out.write(FRAME.pack(b"S", size, mtime))
        h = hashlib.sha256()
        sent = [0]

        def data(off, buf):
            h.update(buf)
            out.write(FRAME.pack(b"D", off, len(buf)))
            out.write(buf)
            sent[0] += len(buf)
        walk(fd, size, chunk, data, lambda n: hash_zeros(h, n))
        now, again = os.fstat(fd), lstat(path)
        if (now.st_size, now.st_mtime_ns) != (size, mtime) or again is None or again.st_ino != st.st_ino:
            raise Fail("%s changed while it was being sent; nothing was kept" % path)
        out.write(FRAME.pack(b"E", size, sent[0]))
        out.write(h.digest())
        out.flush()
    finally:
        os.close(fd)
    report(sys.stderr, ok=True, sha256=h.hexdigest(), size=size, data_bytes=sent[0], mtime_ns=mtime)

def read_exact(inp, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = inp.readinto(view[got:])
        if not k:
            raise Fail("the stream ended early: the sender stopped before the end")
        got += k
    return buf

def take_stale_temp(temp):
    """Remove a temporary file a dead receiver left (a live one holds its flock)."""
    st = lstat(temp)
    if st is None:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        raise Fail("%s is a %s owned by uid %d, not a temporary file of ours; move it away" % (
            temp, kind(st), st.st_uid))
    fd = os.open(temp, os.O_RDONLY | SAFE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Fail("%s is being written by another relocation still running" % temp)
        if os.fstat(fd).st_ino == st.st_ino:
            os.unlink(temp)
    finally:
        os.close(fd)
    return True

def op_receive(args):
    d, name, size, need = args[0], args[1], int(args[2]), int(args[3])
    st = lstat(d)
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise Fail("destination %s %s" % (d, "does not exist" if st is None else "is a %s, not a directory"
                                          % kind(st)))
    free = free_bytes(d)[0]
    if free < need:
        raise Fail("no room in %s: %d bytes free, needs %d" % (d, free, need))
    temp = os.path.join(d, "." + name + TEMP_SUFFIX)
    take_stale_temp(temp)
    # A stop signal waits while the file is created and its inode noted, so the cleanup below always knows it.
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | SAFE, 0o600)
    ino = os.fstat(fd).st_ino
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        inp = sys.stdin.buffer
        typ, a, b = FRAME.unpack(read_exact(inp, FRAME.size))
        if typ != b"S" or a != size:
            raise Fail("the stream does not start with this file (frame %r, size %d, expected %d)" % (typ, a, size))
        pos = dirty = 0
        while True:
            typ, a, b = FRAME.unpack(read_exact(inp, FRAME.size))
            if typ == b"E":
                if a != size:
                    raise Fail("the stream ends at size %d, expected %d" % (a, size))
                digest = bytes(read_exact(inp, 32)).hex()
                break
            if typ != b"D" or a < pos or a + b > size:
                raise Fail("malformed frame %r offset %d length %d (size %d)" % (typ, a, b, size))
            view = memoryview(read_exact(inp, b))
            off = a
            while view:
                n = os.pwrite(fd, view, off)
                view, off = view[n:], off + n
            pos, dirty = off, dirty + b
            if dirty >= DROP_EVERY:
                os.fdatasync(fd)
                drop(fd)
                dirty = 0
        if inp.read(1):
            raise Fail("data after the end of the stream")
        os.ftruncate(fd, size)
        os.fsync(fd)
        drop(fd)
        mine = logical_sha(fd, size)
        if mine != digest:
            raise Fail("the copy reads back as sha256 %s, the sender read %s" % (mine, digest))
        st = os.fstat(fd)
        report(sys.stdout, ok=True, temp=temp, sha256=mine, sender_sha256=digest, size=st.st_size, ino=st.st_ino,
               dev=st.st_dev, mtime_ns=st.st_mtime_ns, blocks=st.st_blocks)
    except BaseException:
        gone = lstat(temp)
        if gone is not None and gone.st_ino == ino:
            os.unlink(temp)
        raise
    finally:
        os.close(fd)

def op_commit(args):
    d, name, sha = args[0], args[1], args[2]
    size, ino, mtime, mode, src_mtime = (int(x) for x in args[3:8])
    temp, final = os.path.join(d, "." + name + TEMP_SUFFIX), os.path.join(d, name)
    st = lstat(temp)
    if st is None or not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_size, st.st_mtime_ns) != (ino, size, mtime):
        raise Fail("the verified temporary copy %s is gone or changed; nothing published" % temp)
    fd = open_regular(temp)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Fail("%s is held by another process; nothing published" % temp)
        fst = lstat(final)
        if fst is not None:
            if not stat.S_ISREG(fst.st_mode):
                raise Fail("%s exists and is a %s; nothing published" % (final, kind(fst)))
            ffd = open_regular(final)
            try:
                have = logical_sha(ffd, os.fstat(ffd).st_size)
            finally:
                os.close(ffd)
            if have != sha:
                raise Fail("%s already exists with different content (sha256 %s, size %d); nothing published"
                           % (final, have, fst.st_size))
            os.unlink(temp)
            fsync_dir(d)
            report(sys.stdout, ok=True, path=final, state="already_present")
            return
        os.fchmod(fd, mode)
        os.utime(fd, ns=(src_mtime, src_mtime))
        os.fsync(fd)
        # Publishing is not cut short by a stop signal: the temporary name is never left beside the final one.
        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
        try:
            os.link(temp, final)
            os.unlink(temp)
        except FileExistsError:
            raise Fail("%s appeared while publishing; nothing published" % final)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
            if lstat(final) is not None:
                raise Fail("%s appeared while publishing; nothing published" % final)
            os.rename(temp, final)
        fsync_dir(d)
    finally:
        os.close(fd)
    report(sys.stdout, ok=True, path=final, state="committed")

def op_discard(args):
    temp = os.path.join(args[0], "." + args[1] + TEMP_SUFFIX)
    removed = take_stale_temp(temp)
    if removed:
        fsync_dir(args[0])
    report(sys.stdout, ok=True, temp=temp, removed=removed)

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

OPS = {"inspect": op_inspect, "send": op_send, "receive": op_receive, "commit": op_commit,
       "discard": op_discard, "hash": op_hash, "remove": op_remove}

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
