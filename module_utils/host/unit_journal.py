# -*- coding: utf-8 -*-
"""The journal of this boot as ``journalctl -b 0 -o json`` gives it, and a systemd unit's runs in it
(standard library only).

Entries are ordered by ``__MONOTONIC_TIMESTAMP`` (then the cursor's sequence number) and only those
of the running system manager count (``__MONOTONIC_TIMESTAMP`` >= systemd's
``UserspaceTimestampMonotonic``). A unit's run is read from systemd's job lines (``UNIT=<unit>``,
``JOB_TYPE=start``, ``JOB_RESULT=done|failed``, ``INVOCATION_ID``; ``EXIT_STATUS`` on "Main process
exited") and the unit's own output (``_SYSTEMD_UNIT=<unit>``, ``_SYSTEMD_INVOCATION_ID``).
"""
from __future__ import absolute_import, division, print_function

import datetime
import re

from ansible.module_utils.base.json_lines import NOT_JSON, json_lines
from ansible.module_utils.host.nvidia_smi import parse_clocks_set, says_no_permission

__metaclass__ = type


# Only these fields are asked of journalctl (the cursor and both timestamps always come along).
OUTPUT_FIELDS = ("MESSAGE", "UNIT", "JOB_TYPE", "JOB_RESULT", "INVOCATION_ID", "_SYSTEMD_INVOCATION_ID",
                 "_SYSTEMD_UNIT", "SYSLOG_IDENTIFIER", "EXIT_CODE", "EXIT_STATUS", "_PID", "UNIT_RESULT")


class JournalError(ValueError):
    """Text that is not ``journalctl -o json`` output."""


def journal_args(matches, grep=None):
    """``journalctl`` arguments: this boot, JSON, only the fields we read, OR-ed ``matches``."""
    args = ["journalctl", "-b", "0", "-o", "json", "--no-pager", "--output-fields=" + ",".join(OUTPUT_FIELDS)]
    if grep:
        args += ["-g", grep]
    for i, match in enumerate(matches):
        if i:
            args.append("+")
        args.append(match)
    return args


def unit_matches(units):
    """Journal matches for everything systemd and the unit itself write about each unit."""
    out = []
    for unit in units:
        out += ["_SYSTEMD_UNIT=%s" % unit, "UNIT=%s" % unit]
    return out


def parse_journal_json(text, source="journalctl"):
    """``journalctl -o json`` text -> list of entry dicts (one JSON object a line).

    A line that is not JSON is an error naming the source and line number, except a half-written
    last line (a journal read while it grows), which is dropped.
    """
    entries = []
    last = len((text or "").splitlines())
    for n, line, value in json_lines(text):
        if value is NOT_JSON:
            if n == last:
                break
            raise JournalError("%s: line %d is not journal JSON: %r" % (source, n, line[:120]))
        if not isinstance(value, dict):
            raise JournalError("%s: line %d is not a journal entry: %r" % (source, n, line[:120]))
        entries.append(value)
    return entries


def as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def entry_message(entry):
    msg = entry.get("MESSAGE")
    if isinstance(msg, list):          # journalctl gives non-UTF-8 messages as byte arrays
        try:
            msg = bytes(msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            msg = ""
    return msg if isinstance(msg, str) else ""


def _seq(entry):
    m = re.search(r";i=([0-9a-f]+);", entry.get("__CURSOR") or "")
    return int(m.group(1), 16) if m else 0


def order_key(entry):
    return (as_int(entry.get("__MONOTONIC_TIMESTAMP")) or 0, _seq(entry))


def this_manager(entries, manager_start_us):
    """Entries written since the running systemd started, in journal order (a deduplicated set:
    an entry two queries both returned counts once)."""
    seen, out = set(), []
    for e in entries:
        key = e.get("__CURSOR") or id(e)
        if key in seen:
            continue
        seen.add(key)
        mono = as_int(e.get("__MONOTONIC_TIMESTAMP"))
        if manager_start_us is not None and mono is not None and mono < manager_start_us:
            continue
        out.append(e)
    return sorted(out, key=order_key)


def when(entry):
    """The entry's wall-clock time, ``2026-11-30 14:24:59 UTC`` (None when unknown)."""
    us = as_int(entry.get("__REALTIME_TIMESTAMP")) if entry else None
    if us is None:
        return None
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=us)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _from_pid1(entry):
    return str(entry.get("_PID")) == "1" or entry.get("SYSLOG_IDENTIFIER") == "systemd"


def unit_runs(entries, unit):
    """Each start of ``unit`` in ``entries`` (ordered) -> list of runs, oldest first::

        {invocation, result: done|failed|...|None (no job result in the journal), exit_status,
         output: [lines the unit printed], systemd: [systemd's lines], set: {min, max, gpu} or None,
         set_entry, start_entry, end_entry, permission_denied}

    Output lines are tied to a run by invocation id when both carry one, else to the run that
    is open (started, not finished) when they were written.
    """
    runs, by_inv, current = [], {}, None

    def new_run(inv, entry):
        run = {"invocation": inv, "result": None, "exit_status": None, "output": [], "systemd": [],
               "set": None, "set_entry": None, "start_entry": entry, "end_entry": None,
               "permission_denied": False}
        runs.append(run)
        if inv:
            by_inv[inv] = run
        return run

    for e in entries:
        msg = entry_message(e)
        if _from_pid1(e) and e.get("UNIT") == unit:
            inv = e.get("INVOCATION_ID")
            job, result = e.get("JOB_TYPE"), e.get("JOB_RESULT")
            if job == "start" and not result:
                current = new_run(inv, e)
                continue
            run = by_inv.get(inv) if inv else current
            if job == "start" and result:
                if run is None:
                    run = new_run(inv, e)
                run["result"] = result
                run["end_entry"] = e
                run["systemd"].append(msg)
                if run is current:
                    current = None
                continue
            if run is not None and e.get("EXIT_STATUS") is not None:
                run["exit_status"] = as_int(e.get("EXIT_STATUS"))
            if run is not None and job is None:
                run["systemd"].append(msg)
            continue
        if e.get("_SYSTEMD_UNIT") == unit and not _from_pid1(e):
            inv = e.get("_SYSTEMD_INVOCATION_ID")
            run = by_inv.get(inv) if inv else None
            if run is None:
                run = current if current is not None else new_run(inv, e)
            run["output"].append(msg)
            if says_no_permission(msg):
                run["permission_denied"] = True
            clocks = parse_clocks_set(msg)
            if clocks:
                run["set"] = clocks
                run["set_entry"] = e
    return runs


def run_failure(run, unit):
    """One sentence naming the failed run: when, exit status, what nvidia-smi printed."""
    entry = run["end_entry"] or run["start_entry"]
    status = " with exit status %s" % run["exit_status"] if run["exit_status"] is not None else ""
    printed = " ".join(line.strip() for line in run["output"] if line.strip()) or "(no output in the journal)"
    return "%s run at %s failed%s: %s" % (unit, when(entry), status, printed)
