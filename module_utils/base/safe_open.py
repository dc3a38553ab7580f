# -*- coding: utf-8 -*-
"""Opening files at names someone else could have replaced (standard library only).

A symlink, a FIFO or a device planted at a name the project reads or writes would make it read another
file, write through the link or block forever. Every such open goes through :data:`OPEN_SAFE`: no symlink
followed, no blocking open, not inherited by a child; :func:`open_read` also accepts only a regular file.
"""
from __future__ import absolute_import, division, print_function

import errno
import os
import stat

__metaclass__ = type

OPEN_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_read(path):
    """Read-only descriptor of a regular file at ``path``: never follows a symlink, never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | OPEN_SAFE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd
