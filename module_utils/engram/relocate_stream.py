# -*- coding: utf-8 -*-
"""The streaming half of the program engram_relocate runs on the hosts (standard library only).

:data:`AGENT_STREAM` is Python source text, joined into :data:`engram_relocate_agent.AGENT` after its
common part (whose helpers it uses: ``walk``, ``lstat``, ``report``, ``Fail``, ...). Its operations:
``send`` (optionally paced to a rate in bytes/s), ``receive``, ``commit`` and ``discard``; see
:mod:`engram_relocate_agent` for the protocol.
"""
from __future__ import annotations

AGENT_STREAM = r'''
def op_send(args):
    path, size, mtime, chunk = args[0], int(args[1]), int(args[2]), int(args[3])
    rate = int(args[4]) if len(args) > 4 else 0
    if rate > 0:
        # Frames of at most a quarter second at the cap, so the pace is even rather than bursty.
        chunk = max(4096, min(chunk, rate // 4))
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
        started = time.monotonic()

        def data(off, buf):
            h.update(buf)
            out.write(FRAME.pack(b"D", off, len(buf)))
            out.write(buf)
            sent[0] += len(buf)
            if rate > 0:
                # Only data crosses the network (holes are not sent): the cap paces the data frames.
                out.flush()
                ahead = sent[0] / float(rate) - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
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
'''
