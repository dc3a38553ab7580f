# -*- coding: utf-8 -*-
"""History of the drift check across runs: since when each finding persists, what is new, what was
resolved, whether the set of findings changed (the notifier's trigger), and retention.

Runs on the control node (``bin/fleet-drift``). A run is a directory ``<root>/<UTC time>/`` holding
``drift.json``; the previous run is the newest other directory with a readable ``drift.json``.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import re
import shutil

RUN_NAME = re.compile(r"^\d{8}T\d{6}(\.\d+)?Z$")


def key(f):
    """Identity of a finding across runs: host, area and item (a changed value stays the same finding)."""
    return "%s|%s|%s" % (f["host"], f["area"], f["item"])


def run_dirs(root):
    """Run directories under ``root``, oldest first (names are UTC times, so they sort in time order)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return [os.path.join(root, n) for n in sorted(names) if RUN_NAME.match(n) and os.path.isdir(os.path.join(root, n))]


def load_report(run_dir):
    try:
        with open(os.path.join(run_dir, "drift.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def previous_report(root, current_dir):
    """The newest earlier run's report, or None (first run, or none readable)."""
    current = os.path.abspath(current_dir)
    for d in reversed(run_dirs(root)):
        if os.path.abspath(d) == current or os.path.basename(d) > os.path.basename(current):
            continue
        report = load_report(d)
        if report is not None:
            return report
    return None


def apply_history(findings, previous, now, checked_hosts):
    """Add ``since`` and ``new`` to every finding; return (findings, resolved).

    ``since`` is carried over from the previous run for a finding it also had (same key), else
    ``now``. ``resolved`` lists the previous run's findings that are gone, but only on hosts this run
    checked (an unreachable host's earlier findings are neither resolved nor repeated).
    """
    before = {}
    for f in (previous or {}).get("findings", []) + (previous or {}).get("accepted", []):
        before[key(f)] = f
    out = []
    seen = set()
    for f in findings:
        k = key(f)
        seen.add(k)
        old = before.get(k)
        out.append(dict(f, since=(old or {}).get("since") or now, new=old is None))
    resolved = [dict(f, resolved_at=now) for k, f in before.items()
                if k not in seen and f["host"] in checked_hosts and f.get("class") != "probe"]
    return out, resolved


def signature(open_findings):
    """What the notifier watches: the set of open findings (key and class), order-free."""
    return sorted("%s|%s" % (key(f), f["class"]) for f in open_findings)


def notify_needed(open_findings, previous):
    """True when the set of open findings differs from the one last notified (or, before any
    notification, from nothing: a first run with findings notifies, a clean first run does not)."""
    last = (previous or {}).get("notified_signature") or []
    return signature(open_findings) != last


def carried_signature(open_findings, previous, sent_ok):
    """The signature the next run compares with: this run's when the notifier succeeded (or nothing
    had to be sent), else the previous one, so a failed notification is retried on the next run."""
    if sent_ok:
        return signature(open_findings)
    return (previous or {}).get("notified_signature") or []


def prune(root, keep, current_dir):
    """Remove the oldest run directories so that ``keep`` remain (the current one always stays);
    returns the removed paths."""
    keep = max(1, int(keep))
    dirs = run_dirs(root)
    current = os.path.abspath(current_dir)
    removed = []
    excess = len(dirs) - keep
    for d in dirs:
        if excess <= 0:
            break
        if os.path.abspath(d) == current:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
        excess -= 1
    return removed


def latest_stage_record(records_root, host):
    """``nodes/<host>.json`` of the newest stage run record under ``records_root`` (directories
    ``<UTC time>-<stage>``), with its ``stage`` added; None when there is none."""
    try:
        names = sorted(os.listdir(records_root), reverse=True)
    except OSError:
        return None
    for name in names:
        m = re.match(r"^(\d{8}T\d{6}Z)-(.+)$", name)
        path = os.path.join(records_root, name, "nodes", "%s.json" % host)
        if not m or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        record["stage"] = "%s %s" % (m.group(2), m.group(1))
        return record
    return None
