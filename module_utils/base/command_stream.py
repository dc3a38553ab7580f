# -*- coding: utf-8 -*-
"""An external command's stdout and stderr read as they arrive, under a deadline (standard library only).

``AnsibleModule.run_command`` returns a command's whole output at once, and its cost grows faster than
the output (a container that has served for days prints hundreds of MB through ``docker logs``).  A
reader that needs only part of an output opens it with :func:`open_stream`, reads chunks as they come
and closes the stream when it has what it needs: the command is then killed (its whole process group),
so nothing is left running and nothing more is read.

:func:`open_stream` is looked up on this module at call time (``command_stream.open_stream(...)``), so
the unit tests' module harness answers streamed commands with the same fake as ``run_command``.
"""
from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import select
import signal
import subprocess
import time

__metaclass__ = type

READ_SIZE = 1 << 20           # bytes asked for in one read
DRAIN_LIMIT = 8 << 20         # bytes one drain() may take before it hands over what it has
ERROR_TAIL = 2000             # bytes of stderr kept for an error message


class StreamTimeout(Exception):
    """The command did not finish, or stopped printing, before the deadline."""


class CommandStream(object):
    """A running command whose two output streams are read in chunks.

    ``read()`` waits (until the deadline) for at least one stream to have data and returns every chunk
    then available as ``[(0 | 1, bytes), ...]`` (0 stdout, 1 stderr; ``b""`` once a stream ends);
    ``drain()`` then takes, without waiting, whatever else the pipes hold, so the caller knows every
    byte written before the last one it read is in hand.  ``close()`` kills the command if it still
    runs and returns its exit status (None when it was killed by the close).
    """

    def __init__(self, args, timeout):
        self.args = list(args)
        self.deadline = time.monotonic() + timeout if timeout else None
        self.timeout = timeout
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, close_fds=True, start_new_session=True)
        self.fds = {self.proc.stdout.fileno(): 0, self.proc.stderr.fileno(): 1}
        for fd in self.fds:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self.open = set(self.fds)
        self.err_tail = b""
        self.killed = False

    @property
    def finished(self):
        return not self.open

    def _take(self, fd):
        """One non-blocking read: bytes, b"" at the end of the stream, None when nothing is there now."""
        try:
            data = os.read(fd, READ_SIZE)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return None
            raise
        if not data:
            self.open.discard(fd)
        elif self.fds[fd] == 1:
            self.err_tail = (self.err_tail + data)[-ERROR_TAIL:]
        return data

    def read(self):
        out = []
        while self.open and not out:
            wait = None
            if self.deadline is not None:
                wait = self.deadline - time.monotonic()
                if wait <= 0:
                    raise StreamTimeout("%s: no end within %d s" % (self.args[0], self.timeout))
            try:
                ready, _, _ = select.select(sorted(self.open), [], [], wait)
            except InterruptedError:
                continue
            for fd in ready:
                data = self._take(fd)
                if data is not None:
                    out.append((self.fds[fd], data))
        return out

    def drain(self):
        """Everything the pipes hold now, read until one full pass finds them all empty (or
        DRAIN_LIMIT bytes were taken: the second value is then False)."""
        out, size = [], 0
        while self.open:
            got = False
            for fd in sorted(self.open):
                while fd in self.open:
                    data = self._take(fd)
                    if data is None:
                        break
                    got = True
                    out.append((self.fds[fd], data))
                    size += len(data)
                    if size >= DRAIN_LIMIT:
                        return out, False
            if not got:
                break
        return out, True

    def close(self):
        """Kill the command (its process group) if it still runs; its exit status, None if killed."""
        if self.proc.poll() is None and self.open:
            self.killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return None if self.killed else rc

    def error_text(self):
        return self.err_tail.decode("utf-8", "replace").strip()[-500:]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_stream(args, timeout):
    """A :class:`CommandStream` of ``args`` (OSError when the executable cannot be run)."""
    return CommandStream(args, timeout)


class WholeOutput(object):
    """The :class:`CommandStream` interface over an output already complete, ``(rc, stdout, stderr)``:
    for a caller that can only run a command elsewhere and get its whole output back (a test host);
    nothing is bounded then.  rc 124 or 137 (coreutils ``timeout``) reads as the deadline passed."""

    def __init__(self, args, rc, out, err):
        self.args = list(args)
        self.rc = rc
        self.err = _bytes(err)
        self.pending = [(0, _bytes(out)), (1, self.err), (0, b""), (1, b"")]

    @property
    def finished(self):
        return not self.pending

    def read(self):
        if self.rc in (124, 137):
            raise StreamTimeout("%s: no end within the deadline" % self.args[0])
        out, self.pending = self.pending, []
        return out

    def drain(self):
        return [], True

    def close(self):
        return self.rc

    def error_text(self):
        return self.err.decode("utf-8", "replace").strip()[-500:]


def _bytes(text):
    if isinstance(text, bytes):
        return text
    return (text or "").encode("utf-8", "surrogateescape")


def opener_over(run_command):
    """An ``open_stream`` that runs each command through ``run_command(args) -> (rc, out, err)`` and
    hands its whole output over as :class:`WholeOutput` (rc None: the executable does not exist)."""
    def open_over(args, timeout):
        rc, out, err = run_command(list(args))
        if rc is None:
            raise OSError(errno.ENOENT, "no such executable: %s" % args[0])
        return WholeOutput(args, rc, out, err)
    return open_over
