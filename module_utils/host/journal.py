# -*- coding: utf-8 -*-
"""Searching the journal for a pattern (standard library only).

``journalctl --no-pager -o short-iso -g PATTERN [--since S]``; when this journalctl has no pattern
matching, the whole journal (``--since`` still applied) is filtered here with the same smart-case
rule as ``-g``.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.base.probe import tail_text

__metaclass__ = type
MAX_EVENT_LINES = 50          # journal lines returned (the count covers all of them)
_GREP_UNSUPPORTED = ("pattern matching not supported", "compiled without pattern matching",
                     "unrecognized option", "invalid option", "unknown option")

PERMISSION_DENIED_TEXTS = ("insufficient permissions", "permission denied", "access denied")
_NO_JOURNAL = ("no journal files were found",)


def journal_args(pattern, since=None, grep=True):
    args = ["journalctl", "--no-pager", "-o", "short-iso"]
    if since:
        args += ["--since", since]
    if grep:
        args += ["-g", pattern]
    return args


def grep_unsupported(rc, out, err):
    if rc in (0, None):
        return False
    text = ((err or "") + "\n" + (out or "")).lower()
    return any(s in text for s in _GREP_UNSUPPORTED)


# Ansible logs every module invocation (with its arguments) to the journal as ``ansible-<module>[pid]``;
# those lines carry the search pattern itself and are not events.
_ANSIBLE_INVOCATION = re.compile(r"\sansible-[\w.]+\[\d+\]:\s")


def journal_lines(text):
    """Entries of journalctl output; ``-- No entries --``, ``-- Boot ... --`` markers and Ansible's own
    module-invocation lines dropped."""
    return [line for line in (text or "").splitlines()
            if line.strip() and not line.startswith("-- ") and not _ANSIBLE_INVOCATION.search(line)]


def pattern_matcher(pattern):
    """A predicate like ``journalctl -g``: regex, case-insensitive when the pattern is all lowercase."""
    flags = 0 if any(c.isupper() for c in pattern) else re.IGNORECASE
    try:
        rx = re.compile(pattern, flags)
    except re.error:
        rx = re.compile(re.escape(pattern), flags)
    return rx.search


def gather_journal(run, pattern, since=None, max_lines=MAX_EVENT_LINES):
    """-> {readable, method, count, lines (last ``max_lines``), truncated, note, pattern, since}."""
    res = {"readable": False, "method": "grep", "count": 0, "lines": [], "truncated": False,
           "note": None, "pattern": pattern, "since": since}
    rc, out, err = run(journal_args(pattern, since, grep=True))
    if rc is None:
        res["note"] = "journalctl: not found"
        return res
    if grep_unsupported(rc, out, err):
        res["method"] = "python"
        rc, out, err = run(journal_args(pattern, since, grep=False))
        match = pattern_matcher(pattern)
        lines = [line for line in journal_lines(out) if match(line)]
    else:
        lines = journal_lines(out)
    low = (err or "").lower()
    if any(s in low for s in PERMISSION_DENIED_TEXTS + _NO_JOURNAL) and not lines:
        res["note"] = tail_text(err)
        return res
    if rc not in (0, 1) or (rc == 1 and tail_text(err)):
        # rc 1 with nothing on stderr is "no match" for journalctl -g
        res["note"] = "journalctl exited %s: %s" % (rc, tail_text(err or out))
        if not lines:
            return res
    if "not seeing messages from other users" in low:
        res["note"] = "partial journal: " + tail_text(err, 200)
    res["readable"] = True
    res["count"] = len(lines)
    res["truncated"] = len(lines) > max_lines
    res["lines"] = lines[-max_lines:] if max_lines else lines
    return res
