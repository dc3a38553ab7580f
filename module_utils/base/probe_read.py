# -*- coding: utf-8 -*-
"""Reading files a root probe does not own, safely (standard library only).

The drift probe runs as root and reads files in the login user's launcher checkout (adapters, the import
hook). Whoever can write there could put a FIFO (the read blocks forever), a symlink to ``/dev/zero`` (the
hash never ends) or to another user's file in their place. Every such read goes through here: opened
without following a symlink and without blocking, a regular file only, at most ``limit`` bytes. Anything
else is a :class:`ProbeReadError` naming the file and what it is, reported like any other finding.
"""
from __future__ import absolute_import, division, print_function

import errno
import hashlib
import os
import stat

from ansible.module_utils.base.safe_open import OPEN_SAFE

__metaclass__ = type

DEFAULT_LIMIT = 16 << 20     # an adapter or a hook is kilobytes; a unit file less


class ProbeReadError(OSError):
    """A file the probe refuses to read (not a regular file, a symlink, too large)."""


def _kind(mode):
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def _open(path):
    """An fd of ``path`` if it is a regular file (opened as :func:`safe_open.open_read` opens, and naming what
    else it found), else ProbeReadError; None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_SAFE)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise ProbeReadError(errno.ELOOP, "is a symlink; the probe does not follow it", path)
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ProbeReadError(errno.EINVAL, "is a %s, not a regular file; not read" % _kind(st.st_mode), path)
    return fd


def _chunks(fd, path, limit):
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return
        total += len(chunk)
        if limit is not None and total > limit:
            raise ProbeReadError(errno.EFBIG, "is larger than %d bytes; not read" % limit, path)
        yield chunk


def read_bytes(path, limit=DEFAULT_LIMIT):
    """The bytes of a regular file, or None when it does not exist."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        return b"".join(_chunks(fd, path, limit))
    finally:
        os.close(fd)


def read_text(path, limit=DEFAULT_LIMIT, errors="strict"):
    """:func:`read_bytes` decoded as UTF-8 (``errors`` as for ``bytes.decode``), or None."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", errors)


def sha256(path, limit=None):
    """The sha256 of a regular file, or None when it does not exist (``limit``: None for any size)."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        digest = hashlib.sha256()
        for chunk in _chunks(fd, path, limit):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)
