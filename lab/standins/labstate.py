"""State files of the lab stand-ins (docker, nvidia-smi): one way to lock, read and replace them.

A stand-in keeps its state as JSON files in one directory, changed only under an exclusive flock on
``<dir>/.lock`` and replaced atomically (write a temporary file, fsync, rename), so a reader never sees
half a file and two commands never interleave their changes. Lab only; the product never imports it.
"""
import contextlib
import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = ".lock"


@contextlib.contextmanager
def locked(directory):
    """Hold the directory's exclusive lock for the block. Raises PermissionError when the caller may
    not open the lock file (the stand-in turns that into its own tool's message)."""
    with open(Path(directory) / LOCK_NAME, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_json(path, default):
    """The JSON in ``path``, or ``default`` when there is no such file (a broken file raises ValueError)."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def write_json(path, data, mode=0o644):
    """Replace ``path`` with ``data`` atomically (call it under :func:`locked`)."""
    path = Path(path)
    tmp = path.parent / (".%s.%d.tmp" % (path.name, os.getpid()))
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.chmod(tmp, mode)
    except PermissionError:       # a file made by another user in a group-writable directory
        pass
    os.replace(tmp, path)
