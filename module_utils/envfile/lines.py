# -*- coding: utf-8 -*-
"""The launcher ``.env`` as groups of whole lines, each with what bash assigns in it.

The in-place converge (``envfile_merge.py``) keeps every group it does not need to change byte for
byte, and adoption (``envfile_adopt.py``) finds the trailing notes; both read the file through the
one parser (``envfile_parse.py``).
"""
from __future__ import absolute_import, division, print_function

import bisect

from ansible.module_utils.envfile.parse import parse_text

__metaclass__ = type


def parse_statements(text, base=None, source=".env"):
    """``(env, groups)``: what bash assigns (as :func:`parse_env`) and the file cut into line groups.

    Each group is ``{"first": n, "last": m, "text": str, "assigns": [(NAME, value), ...]}`` (1-based
    line numbers; ``text`` holds the lines verbatim, line ends included; ``assigns`` lists each
    assignment the group makes with the value the name holds right after it, empty for comment
    and blank lines). A command that spans lines (quotes, continuations), or several commands
    sharing a line, form one group; joining every group's text gives the file back exactly.
    """
    env, text, commands = parse_text(text, base, source)
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and i + 1 < len(text)] if text else []
    ends = starts[1:] + [len(text)]
    spans = []                          # [first, last, assigns] of command lines, 0-based, merged
    for start, end, assigns in commands:
        first = bisect.bisect_right(starts, start) - 1
        last = bisect.bisect_right(starts, min(end, len(text)) - 1) - 1
        if spans and first <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], last)
            spans[-1][2].extend(assigns)
        else:
            spans.append([first, max(first, last), list(assigns)])
    groups = []
    line = 0
    for first, last, assigns in spans + [[len(starts), len(starts), []]]:
        while line < first:             # comment and blank lines: one group each
            groups.append({"first": line + 1, "last": line + 1, "text": text[starts[line]:ends[line]],
                           "assigns": []})
            line += 1
        if first < len(starts):
            groups.append({"first": first + 1, "last": last + 1, "text": text[starts[first]:ends[last]],
                           "assigns": assigns})
            line = last + 1
    return env, groups
