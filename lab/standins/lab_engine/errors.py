"""The boot errors the engine dies of."""
from __future__ import annotations


class Fatal(Exception):
    """A boot error the real engine dies of with a Python traceback (RuntimeError, exit 1)."""
    kind = "RuntimeError"


class OutOfMemory(Fatal):
    """torch's out-of-memory error during a graph capture (the lab's oom_at_boot fault)."""
    kind = "torch.OutOfMemoryError"


class EngramFatal(Exception):
    """A packed shard the engine's C++ reader rejects: one unprefixed stderr line, then abort (exit 134)."""

    def __init__(self, detail: str, errno: int = 0):
        super().__init__(detail)
        self.detail = detail
        self.errno = errno
