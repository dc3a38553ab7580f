# -*- coding: utf-8 -*-
"""Experiment runs on the control node: which are finished, which are not, and the way back from each.

A run directory ``<record root>/<run id>/`` (``roles/experiment``) holds, in the order a run writes them:
``run.json`` (what ran, for which fleet, the exact rollback command, where the run is: condition and step,
and what each condition measured so far), ``snapshot-before.json`` (the fleet before the first change),
``snapshot-after.json`` (after the restore), ``finished.json`` and the record (``record.json``/``.md``).

**Finished** means the fleet was proven equal to the run's snapshot after the run: ``finished.json``, written
when the restore's comparison found no difference (by the run itself, or by ``playbooks/rollback.yml``
finishing it). Records written before that marker existed count as finished by the same proof: their
``snapshot-after.json`` equals ``snapshot-before.json``, or their ``record.json`` says the restore was equal.
**Unfinished**: the snapshot exists (the run was about to change the fleet, or did) without that proof; the
fleet may be in an arm's state, and the next run's snapshot would record that state as its "before". A
directory without a snapshot changed nothing (the run stopped before its first change) and is neither.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import time

from ansible.module_utils.experiment.snapshot import compare

__metaclass__ = type

RUN_FILE = "run.json"
FINISHED_FILE = "finished.json"
BEFORE_FILE = "snapshot-before.json"
AFTER_FILE = "snapshot-after.json"
RECORD_FILE = "record.json"
ROLLBACK_PLAYBOOK = "playbooks/rollback.yml"


class RunError(Exception):
    """A run file that cannot be read or written; the message names the file."""


def read_json(path):
    """The JSON object at ``path``; None when the file is absent. Raises RunError when it is unreadable."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            return None
        raise RunError("%s: cannot read: %s" % (path, exc))
    except ValueError as exc:
        raise RunError("%s: not JSON: %s" % (path, exc))
    if not isinstance(data, dict):
        raise RunError("%s: not a JSON object" % path)
    return data


def write_json(path, data):
    """Atomic write (beside the target, then renamed): a reader finds the old file or the new one."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True, default=str)
            handle.write("\n")
        os.replace(tmp, path)
    except (IOError, OSError) as exc:
        raise RunError("%s: cannot write: %s" % (path, exc))


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _display(path, base):
    """``path`` relative to ``base`` when inside it (the command is typed from the repository root)."""
    path = os.path.normpath(path)
    if base:
        rel = os.path.relpath(path, os.path.normpath(base))
        if not rel.startswith(".."):
            return rel
    return path


def playbook_command(playbook, inventories=(), extra_vars=(), repo_root=None):
    """``ansible-playbook <playbook> -i <inventory>... -e k=v...``, typed from the repository root ``repo_root``
    (inventories inside it are given relative to it)."""
    parts = ["ansible-playbook", playbook]
    for inv in inventories or ():
        parts += ["-i", _display(inv, repo_root)]
    for pair in extra_vars or ():
        parts += ["-e", pair]
    return " ".join(parts)


def rollback_command(run_id, inventories=(), record_root=None, repo_root=None, fleet=None):
    """The exact command that finishes run ``run_id`` of fleet ``fleet``, typed from the repository root
    ``repo_root``: the same inventories, and the record root when it is not that fleet's own
    ``records/<fleet>/experiments`` in the repository (the one rollback.yml reads by default; always named when
    the fleet is not known)."""
    extra = ["experiment_rollback_run=%s" % run_id, "maintenance_window=true"]
    if record_root and repo_root and (not fleet or os.path.normpath(record_root) != os.path.normpath(
            os.path.join(repo_root, "records", fleet, "experiments"))):
        extra.append("experiment_record_root=%s" % os.path.normpath(record_root))
    return playbook_command(ROLLBACK_PLAYBOOK, inventories, extra, repo_root)


# The way back of a playbook run that is not an experiment (preflight_way_back): the rollback.yml options
# that undo what it changes, and what they undo.
WAY_BACK = {
    "launcher_env": (["rollback_launcher_env=true", "container_env_rollback_run={run}"],
                     "restores the head's launcher .env exactly as it was before this run, and any container the "
                     "contention role paused or stopped; a stage playbook's restart then applies it"),
    "contention": ([], "restores every container the contention role paused or stopped"),
    "pack": (["rollback_engram_relocation=true"],
             "moves the Engram files this stage relocated to make room (if any) back where they came from, and "
             "restores every container the contention role paused or stopped; packed shards are complete files "
             "and stay (the engine opens them only at a restart)"),
}


def way_back(kind, run_id, inventories=(), repo_root=None):
    """(command, what it undoes) for a run of ``kind`` (WAY_BACK); ValueError for an unknown kind."""
    if kind not in WAY_BACK:
        raise ValueError("unknown way back %r (one of %s)" % (kind, ", ".join(sorted(WAY_BACK))))
    extra, what = WAY_BACK[kind]
    return playbook_command(ROLLBACK_PLAYBOOK, inventories, [e.format(run=run_id) for e in extra], repo_root), what


def _hosts(before):
    return sorted((before or {}).get("snapshot") or {})


def _restored_equal(run_dir, before):
    """The pre-marker proof: the restore's snapshot (or the record's comparison) equal to the snapshot."""
    after = read_json(os.path.join(run_dir, AFTER_FILE))
    if after is not None and before is not None and compare(before.get("snapshot") or {},
                                                            after.get("snapshot") or {})["equal"]:
        return "its snapshot after the restore equals its snapshot before"
    record = read_json(os.path.join(run_dir, RECORD_FILE))
    if record is not None and (record.get("restore") or {}).get("equal") is True:
        return "its record says the restore was equal"
    return None


def run_status(run_dir, record_root=None, inventories=(), repo_root=None):
    """What a run directory says: ``run``, ``changed`` (its snapshot exists), ``finished``, ``how`` (the proof),
    ``state`` and ``at`` (where it was: condition and step), ``fleet``, ``hosts``, ``rollback_command``.
    Raises RunError naming a file that cannot be read."""
    name = os.path.basename(os.path.normpath(run_dir))
    run = read_json(os.path.join(run_dir, RUN_FILE)) or {}
    before = read_json(os.path.join(run_dir, BEFORE_FILE))
    marker = read_json(os.path.join(run_dir, FINISHED_FILE))
    how = None
    if marker is not None:
        how = "finished %s by %s" % (marker.get("finished", "?"), marker.get("by", "?"))
    elif before is not None:
        how = _restored_equal(run_dir, before)
    command = run.get("rollback_command") or rollback_command(name, inventories, record_root or os.path.dirname(
        os.path.normpath(run_dir)), repo_root, run.get("fleet"))
    return {"run": name, "path": run_dir, "changed": before is not None, "finished": how is not None, "how": how,
            "has_record": os.path.exists(os.path.join(run_dir, RECORD_FILE)),
            "state": run.get("state") or ("finished" if how else "unknown"), "at": run.get("at") or {},
            "fleet": run.get("fleet"), "hosts": run.get("hosts") or _hosts(before),
            "definition": (run.get("definition") or {}).get("name"), "rollback_command": command}


def belongs(status, fleet=None, hosts=()):
    """Whether a run is this fleet's: its recorded fleet name, or (a record without one) a host in common;
    a run whose hosts are unknown counts."""
    if fleet and status.get("fleet"):
        return status["fleet"] == fleet
    if status.get("hosts") is None:   # unknown (its files unreadable): it may be this fleet's
        return True
    return not hosts or bool(set(hosts) & set(status["hosts"]))


def fleet_runs(record_root, fleet=None, hosts=(), inventories=(), repo_root=None):
    """The status of every run of this fleet under ``record_root`` (:func:`belongs`), oldest first (run ids start
    with their UTC time). A missing root has none. A run file that cannot be read leaves the run not known to be
    finished nor whose it is: it is counted for every fleet, with the reason in ``problem``."""
    try:
        names = sorted(os.listdir(record_root))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(record_root, name)
        if not os.path.isdir(path):
            continue
        try:
            status = run_status(path, record_root, inventories, repo_root)
        except RunError as exc:
            status = {"run": name, "path": path, "changed": True, "finished": False, "how": None, "has_record": False,
                      "state": "unreadable", "at": {}, "fleet": None, "hosts": None, "definition": None,
                      "problem": str(exc),
                      "rollback_command": rollback_command(name, inventories, record_root, repo_root, fleet)}
        if belongs(status, fleet, hosts):
            out.append(status)
    return out


def unfinished_runs(record_root, fleet=None, hosts=(), inventories=(), repo_root=None):
    """Every unfinished run of this fleet under ``record_root`` (:func:`fleet_runs`), oldest first: its snapshot
    exists without the proof that the fleet was restored to it."""
    return [s for s in fleet_runs(record_root, fleet, hosts, inventories, repo_root)
            if s["changed"] and not s["finished"]]


def where(status):
    """'interrupted in arm w8 at step restart' from a status's ``at``."""
    at = status.get("at") or {}
    if not at.get("step"):
        return "stopped at an unknown point (no run state recorded)"
    cond = at.get("condition")
    return "stopped %sat step %s" % ("in condition %s " % cond if cond else "", at["step"])


def refusal(runs, fleet=None, refused=True):
    """The message refusing a run while ``runs`` (``unfinished_runs``) are unfinished, as lines; with
    ``refused`` false the same report for a playbook that goes on (read-only, or the rollback finishing one)."""
    head = "Refused before touching any host: " if refused else ""
    lines = ["%s%d experiment run(s) on the %s fleet never ended with the fleet proven equal to their snapshot, "
             "so the fleet may still be in an arm's state (a new run's snapshot would record that state as its "
             "\"before\"). Finish each %s:" % (head, len(runs), fleet or "this", "first" if refused else "with")]
    for status in runs:
        lines.append("run %s (%s, %s%s): %s" % (status["run"], status.get("definition") or "experiment",
                                                 where(status), "; " + status["problem"] if status.get("problem")
                                                 else "", status["rollback_command"]))
    return lines


def update_run(run_dir, **fields):
    """Merge ``fields`` into the run's ``run.json`` (created with the directory); returns the new state."""
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.isdir(run_dir):
        try:
            os.makedirs(run_dir)
        except OSError as exc:
            raise RunError("%s: cannot create: %s" % (run_dir, exc))
    state = read_json(path) or {"run": os.path.basename(os.path.normpath(run_dir))}
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(state.get(key), dict) and key in ("conditions", "arm_checks"):
            merged = dict(state[key])
            merged.update(value)
            state[key] = merged
        else:
            state[key] = value
    state["updated"] = utc_now()
    write_json(path, state)
    return state


def finish_run(run_dir, restore, by):
    """After a restore's comparison: ``finished.json`` when the fleet equals the snapshot (the run is then
    finished), else the run stays unfinished with the differences in its state. Returns whether finished."""
    equal = bool((restore or {}).get("equal"))
    if equal:
        write_json(os.path.join(run_dir, FINISHED_FILE),
                   {"run": os.path.basename(os.path.normpath(run_dir)), "finished": utc_now(), "by": by,
                    "restore": restore})
    if os.path.exists(os.path.join(run_dir, RUN_FILE)) or not equal:
        update_run(run_dir, state="finished" if equal else "restore_failed", restore=restore,
                   **({} if equal else {"at": {"condition": None, "step": "restore (fleet not equal)"}}))
    return equal


def interrupted_inputs(state):
    """What an interrupted run's record is written from (``run.json``): the conditions measured before it
    stopped, kept as measured, and every condition it did not finish marked as not run, naming where it
    stopped. Returns (conditions, arm_checks, interrupted)."""
    at = dict(state.get("at") or {})
    conditions = dict(state.get("conditions") or {})
    checks = dict(state.get("arm_checks") or {})
    note = "not run: the run was interrupted (%s)" % where({"at": at})
    for arm in ((state.get("definition") or {}).get("arms") or []):
        if arm.get("name") not in checks:
            checks[arm["name"]] = {"refused": note}
    return conditions, checks, {"condition": at.get("condition"), "step": at.get("step"),
                                "measured": sorted(conditions)}
