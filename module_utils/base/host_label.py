# -*- coding: utf-8 -*-
"""The name a module's messages give the host it runs on (standard library only).

One helper for every module: the inventory name when the play passes it (``host_label``, the name the
operator reads in the play), else the node's own name without its domain (``spark1.lab.example`` ->
``spark1``, as the inventory names hosts), else ``this host``.
"""
from __future__ import absolute_import, division, print_function

import os

__metaclass__ = type


def host_label(name=None):
    """``name`` when given, else the node's short name, else ``this host``."""
    if name:
        return str(name)
    try:
        node = os.uname().nodename
    except AttributeError:  # pragma: no cover - non-POSIX
        node = ""
    return node.split(".")[0] or "this host"
