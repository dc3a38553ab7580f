# -*- coding: utf-8 -*-
"""The host's files, read under a root that tests can move (standard library only; the host's name in
messages is module_utils/base/host_label.py).

``FS_ROOT`` is ``/`` on a host; unit tests point it at a fake tree so /proc and /etc are theirs.
"""
from __future__ import absolute_import, division, print_function

import os

__metaclass__ = type


FS_ROOT = "/"                 # tests point this at a fake tree


def host_path(path):
    """``path`` under :data:`FS_ROOT`."""
    if FS_ROOT in ("", "/"):
        return path
    return os.path.join(FS_ROOT, path.lstrip("/"))


def read_text(path):
    """File text, or None when it is missing or unreadable (including EOPNOTSUPP on PSI files)."""
    try:
        with open(host_path(path), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None
