# -*- coding: utf-8 -*-
"""History of the drift check across runs: since when each finding persists, what is new, what was
resolved, whether the set of findings changed (the notifier's trigger), and retention.

Runs on the control node (``bin/fleet-drift``). Each fleet keeps its own history under ``<records>/<fleet>/drift/``
(``<fleet>``: the inventory's ``dsv41_fleet_name``, the key of every record the fleet's runs write, see
``fleet_records``), so a lab run can never stand for a production one. A run is a directory
``<root>/<UTC time>[-n]/`` created exclusively, holding the marker :data:`MARKER` this tool wrote and
``drift.json``; the previous run is the newest other such directory with a readable ``drift.json``.
Nothing is ever followed through a symlink, and retention removes only directories holding the marker.
"""
from __future__ import absolute_import, division, print_function

import errno
import json
import os
import re
import shutil
import stat

from ansible.module_utils.base import probe_read
from ansible.module_utils.fleet import records as fleet_records

RUN_NAME = re.compile(r"^\d{8}T\d{6}(\.\d+)?Z(-\d+)?$")
MARKER = ".dsv41-drift-run"     # written into each run directory by new_run_dir: what retention may remove


class HistoryError(Exception):
    """The records directory cannot hold the drift history safely (a symlink, a file in the way)."""


def fleet_key(inventories):
    """The fleet whose history this is: the ``dsv41_fleet_name`` the first inventory declares
    (``fleet_records.inventory_fleet_name``), the same key the playbooks file the fleet's records under. Later
    inventories only add to it (connection settings), so they do not change whose history it is. HistoryError
    naming the inventory when it declares no valid name."""
    for inv in inventories or ():
        try:
            return fleet_records.inventory_fleet_name(inv)
        except fleet_records.FleetRecordsError as exc:
            raise HistoryError(str(exc))
    raise HistoryError("no inventory to read the fleet's name from")


# Exit codes from the best to the worst: no drift, drift, a host unreachable or a probe failed, could not run
# (a check that did not run at all says the least about its fleet).
EXIT_SEVERITY = (0, 2, 3, 1)


def worst_exit(codes):
    """The worst of several fleet-drift exit codes (EXIT_SEVERITY); an unknown code counts as "could not run"."""
    worst = 0
    for code in codes:
        code = code if code in EXIT_SEVERITY else 1
        if EXIT_SEVERITY.index(code) > EXIT_SEVERITY.index(worst):
            worst = code
    return worst


def fleet_inventories(directory):
    """[(fleet name, inventory directory)] of every fleet inventory under ``directory`` (``inventory/``): each
    subdirectory holding a ``hosts.yml`` (``common/``, the layer every fleet shares, holds none), sorted by
    directory; an inventory that names no valid fleet, or two that name the same one (they would share its
    records), are refused."""
    found, keys = [], {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path) and os.path.isfile(os.path.join(path, "hosts.yml")):
            key = fleet_key([path])
            if key in keys:
                raise HistoryError("%s and %s both name the fleet %r: they would share its records and drift history"
                                   % (keys[key], path, key))
            keys[key] = path
            found.append((key, path))
    if not found:
        raise HistoryError("no fleet inventory (a directory holding hosts.yml) under %s" % directory)
    return found


def _real_dir(path, what):
    """Create ``path`` if missing; refuse a symlink or anything but a directory there."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise HistoryError("%s %s: %s" % (what, path, exc.strerror))
        os.mkdir(path, 0o750)
        return
    if stat.S_ISLNK(st.st_mode):
        raise HistoryError("%s %s is a symlink (to %s): the drift history is never kept through one; make it a "
                           "directory" % (what, path, os.readlink(path)))
    if not stat.S_ISDIR(st.st_mode):
        raise HistoryError("%s %s is not a directory; move it away" % (what, path))


def history_root(records, fleet):
    """``<records>/<fleet>/drift``, each level a real directory (created when missing); HistoryError for a fleet
    name that is not one path component (``fleet_records.fleet_name_problem``)."""
    try:
        fleet_dir = fleet_records.fleet_dir(records, fleet)
    except fleet_records.FleetRecordsError as exc:
        raise HistoryError(str(exc))
    if not os.path.isdir(records):
        os.makedirs(records, 0o750)
    _real_dir(fleet_dir, "the records directory of fleet %s" % fleet)
    root = os.path.join(fleet_dir, fleet_records.DRIFT)
    _real_dir(root, "the drift history of fleet %s" % fleet)
    return root


def new_run_dir(root, name):
    """Create the run directory ``<root>/<name>`` exclusively (``-2``, ``-3``... when that second is taken) with
    the marker inside; returns its path."""
    for n in range(1, 1000):
        path = os.path.join(root, name if n == 1 else "%s-%d" % (name, n))
        try:
            os.mkdir(path, 0o750)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                continue
            raise
        fd = os.open(os.path.join(path, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o640)
        os.close(fd)
        return path
    raise HistoryError("%s: a thousand runs named %s already" % (root, name))


def _ours(path):
    """A real directory (not a symlink) holding this tool's marker as a regular file."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(os.lstat(os.path.join(path, MARKER)).st_mode)
    except OSError:
        return False


def key(f):
    """Identity of a finding across runs: host, area and item (a changed value stays the same finding)."""
    return "%s|%s|%s" % (f["host"], f["area"], f["item"])


def run_dirs(root):
    """Run directories under ``root``, oldest first (names are UTC times, so they sort in time order)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return [os.path.join(root, n) for n in sorted(names, key=_order) if RUN_NAME.match(n) and _ours(os.path.join(root, n))]


def _order(name):
    """Time order of run names: the UTC time, then the -n of a second run in the same second."""
    base, _, n = name.partition("-")
    return base, int(n) if n.isdigit() else 1


def load_report(run_dir):
    try:    # no symlink followed, no FIFO waited on, at most 64 MiB (probe_read)
        raw = probe_read.read_bytes(os.path.join(run_dir, "drift.json"), 64 << 20)
        return None if raw is None else json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        return None


def previous_report(root, current_dir):
    """The newest earlier run's report, or None (first run, or none readable)."""
    current = os.path.abspath(current_dir)
    for d in reversed(run_dirs(root)):
        if os.path.abspath(d) == current or _order(os.path.basename(d)) > _order(os.path.basename(current)):
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


def shards_verified(previous, snapshots):
    """{host: {shard path: identity}} of the shards whose whole content equals the hash recorded when they
    were packed, as of this run: what the next run passes back (fleet_snapshot ``shards_verified``) so a
    shard is read in full once per change, not on every scheduled run. ``snapshots``: {host: snapshot} of
    the hosts this run checked; an unchecked host keeps the previous run's entries."""
    before = (previous or {}).get("shards_verified")
    before = dict((h, v) for h, v in before.items() if isinstance(v, dict)) if isinstance(before, dict) else {}
    out = dict((h, dict(v)) for h, v in before.items() if h not in snapshots)
    for host, snap in snapshots.items():
        mine = {}
        for s in ((snap or {}).get("shards") or {}).get("shards") or []:
            content = s.get("content") if isinstance(s, dict) else None
            if s.get("state") != "complete" or not isinstance(content, dict) or not content.get("recorded"):
                continue
            if content.get("hashed") and content.get("sha256") != content["recorded"]:
                continue
            if not content.get("hashed"):
                # not read this run: trusted only because the previous run verified this exact identity
                if before.get(host, {}).get(s.get("path")) != content.get("identity"):
                    continue
            mine[s["path"]] = content["identity"]
        out[host] = mine
    return out


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
    """Remove the oldest run directories so that ``keep`` remain (the current one always stays); only
    directories this tool created (:data:`MARKER`) are counted or removed. Returns the removed paths."""
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
    """``nodes/<host>.json`` of the newest stage run record under ``records_root`` (a fleet's
    ``records/<fleet>/runs``: directories ``<UTC time>-<stage>``), with its ``stage`` added; None when there is
    none."""
    try:
        names = sorted(os.listdir(records_root), reverse=True)
    except OSError:
        return None
    for name in names:
        m = fleet_records.STAGE_RUN.match(name)
        path = os.path.join(records_root, name, "nodes", "%s.json" % host)
        if not m or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):   # a hand-edited or foreign file: an older record may still be whole
            continue
        record["stage"] = "%s %s" % (m.group(2), m.group(1))
        return record
    return None
