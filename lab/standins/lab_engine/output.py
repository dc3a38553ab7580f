"""The engine's two output streams: logging records, print() lines, tqdm bars and fatal lines, each written
whole, in the order written (the scheduler's records, which carry the rank, are the run's: run.Run.log)."""
from __future__ import annotations

import fcntl
import os
import stat
import sys
import termios
import threading
import time

from .constants import GIB


class Output:
    """Writes whole lines to fd 1 (print) or fd 2 (logging, tqdm, fatal) in one write() each.

    Switching streams waits until the pipe written before is drained (FIONREAD == 0), so a reader that
    timestamps what it reads (the docker stand-in) sees the lines in the order they were written."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: the SIGTERM handler may interrupt a write
        self.last = None

    @staticmethod
    def _same_file(a: int, b: int) -> bool:
        try:
            sa, sb = os.fstat(a), os.fstat(b)
        except OSError:
            return True
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)

    def _drain(self, fd: int, other: int) -> None:
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode) or self._same_file(fd, other):
                return
        except OSError:
            return
        buf = bytearray(4)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, buf, True)
            except OSError:
                return
            if int.from_bytes(buf, sys.byteorder) == 0:
                return
            time.sleep(0.001)

    def emit(self, fd: int, text: str) -> None:
        data = text.encode("utf-8", "replace")
        with self.lock:
            if self.last is not None and self.last != fd:
                self._drain(self.last, fd)
            view = memoryview(data)
            while view:
                try:
                    n = os.write(fd, view)
                except InterruptedError:
                    continue
                except OSError:
                    return
                view = view[n:]
            self.last = fd


OUT = Output()


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def log_main(msg: str) -> None:
    """A logging record of the main process (before the scheduler starts): stderr, ``[ts] `` prefix."""
    OUT.emit(2, f"[{stamp()}] {msg}\n")


def say(msg: str) -> None:
    """print(msg, flush=True): stdout, no prefix."""
    OUT.emit(1, msg + "\n")


def raw_err(text: str) -> None:
    """Unprefixed stderr output (tqdm, C++ errors); no newline is added."""
    OUT.emit(2, text)


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"
