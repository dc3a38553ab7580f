# -*- coding: utf-8 -*-
"""Command output with one JSON object a line (``docker ... --format '{{json .}}'``, ``journalctl -o json``)
(standard library only)."""
from __future__ import absolute_import, division, print_function

import json

__metaclass__ = type


NOT_JSON = object()   # what a line that does not parse stands for


def json_lines(text):
    """``(line number, line, value)`` for every non-blank line; ``value`` is :data:`NOT_JSON` when the
    line does not parse (each caller decides what a bad line means)."""
    out = []
    for n, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError:
            value = NOT_JSON
        out.append((n, line, value))
    return out
