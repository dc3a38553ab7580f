# -*- coding: utf-8 -*-
"""Whose records are whose on the control node: one directory per fleet.

Everything a fleet's runs write on the control node goes under ``records/<fleet>/``, ``<fleet>`` being the
inventory's ``dsv41_fleet_name`` (``inventory/lab``: ``lab``; ``inventory/production``: ``production``)::

    records/<fleet>/experiments/<run>/         experiment runs (roles/experiment): run.json, snapshots, record
    records/<fleet>/runs/<UTC time>-<stage>/   stage run records (roles/run_record)
    records/<fleet>/bench/                     raw benchmark output (roles/benchmark)
    records/<fleet>/boot-logs/                 each rank's latest boot log (roles/engine)
    records/<fleet>/adopt/<head>-<UTC time>/   adoption proposals (playbooks/adopt.yml)
    records/<fleet>/adapters-manifest.yml      the proposed adapter manifest lines (playbooks/adapters_manifest.yml)
    records/<fleet>/drift/<UTC time>/          drift check history (bin/fleet-drift)
    records/<fleet>/metrics/                   the drift metrics file, unless --metrics-dir says elsewhere

So the fleet name is a path component: :func:`fleet_name_problem` is the one rule (the preflight's inventory
validation and bin/fleet-drift apply it), and a name can never leave ``records/`` or land on a directory of the
layout every fleet shared before (:data:`LEGACY_NAMES`). Records written in that shared layout are moved into
their fleet's directory by ``bin/records-migrate`` (:func:`migration_plan`, :func:`migrate`): by the fleet name
each record carries, never deleting anything, and refusing the whole move on any conflict.

Controller-side only (the preflight's filters, bin/fleet-drift, bin/records-migrate); PyYAML, which Ansible
itself needs on the control node, is imported only to read an inventory's group_vars.
"""
from __future__ import absolute_import, division, print_function

import errno
import json
import os
import re

from ansible.module_utils.experiment import runs

__metaclass__ = type

EXPERIMENTS = "experiments"
RUNS = "runs"
BENCH = "bench"
BOOT_LOGS = "boot-logs"
ADOPT = "adopt"
DRIFT = "drift"
METRICS = "metrics"
ADAPTERS_MANIFEST = "adapters-manifest.yml"

# The layout every fleet shared before (records/experiments/, records/<UTC time>-<stage>/, records/bench/, ...):
# a fleet may not be named like one of its directories, so an old record is never read as a fleet's.
LEGACY_NAMES = ("experiments", "bench", "boot-logs", "adapters-manifest", "drift", "metrics")
LEGACY_ADOPT_PREFIX = "adopt-"
# A stage run record's directory, <UTC time>-<stage> (roles/run_record): (time, stage)
STAGE_RUN = re.compile(r"^(\d{8}T\d{6}Z)-(.+)$")

FLEET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
FLEET_NAME_RULE = ("a fleet name: lowercase letters, digits, '-' and '_', starting with a letter or a digit, "
                   "at most 63 characters (it names the fleet's directory under records/)")
RANK_GROUP = "dsv41_ranks"


class FleetRecordsError(Exception):
    """A fleet name or an inventory that cannot key records; the message names the file and the value."""


def fleet_name_problem(value):
    """None when ``value`` can name a fleet's records directory, else why not (the value quoted)."""
    if not isinstance(value, str) or not FLEET_NAME.match(value):
        return "dsv41_fleet_name=%r is not %s" % (value, FLEET_NAME_RULE)
    if value in LEGACY_NAMES or value.startswith(LEGACY_ADOPT_PREFIX):
        return ("dsv41_fleet_name=%r is taken: records/%s belongs to the layout every fleet shared before "
                "(reserved: %s, adopt-*)" % (value, value, ", ".join(LEGACY_NAMES)))
    return None


def fleet_dir(records, fleet):
    """``<records>/<fleet>``; FleetRecordsError when ``fleet`` is not a valid fleet name."""
    problem = fleet_name_problem(fleet)
    if problem:
        raise FleetRecordsError(problem)
    return os.path.join(records, fleet)


# --------------------------------------------------------------------------- the fleet name of an inventory

def _vars_files(group_vars, group):
    """The group_vars files Ansible reads for ``group``, in its order (a later file wins): ``<group>``,
    ``<group>.yml``/``.yaml``/``.json``, or every such file under the directory ``<group>/``, sorted, depth first;
    hidden files and backups skipped."""
    found = []
    for ext in ("", ".yml", ".yaml", ".json"):
        path = os.path.join(group_vars, group + ext)
        if os.path.isdir(path):
            for top, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(top, f) for f in sorted(files)
                          if not f.startswith(".") and not f.endswith("~")
                          and os.path.splitext(f)[1] in ("", ".yml", ".yaml", ".json")]
        elif os.path.isfile(path):
            found.append(path)
    return found


def _load_vars(path):
    """A group_vars file's mapping; None for a vault-encrypted file (no fleet name is kept in a secret). Tags
    such as ``!vault`` or ``!unsafe`` are read as nothing: only a plain value can name a fleet."""
    import yaml

    class Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetRecordsError("%s: cannot read: %s" % (path, exc))
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        return None
    try:
        data = yaml.load(text, Loader=Loader)  # nosec B506: a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise FleetRecordsError("%s: not YAML: %s" % (path, " ".join(str(exc).split())))
    return data if isinstance(data, dict) else None


def inventory_fleet_name(inventory):
    """``dsv41_fleet_name`` as the inventory ``inventory`` (a directory, or a file whose directory holds its
    group_vars) declares it in ``group_vars/all`` or ``group_vars/dsv41_ranks`` (a later file wins, as in
    Ansible), validated. Read from the files, without Ansible: a host or child group that overrides it is caught
    by the playbook's own check. FleetRecordsError naming the inventory (or the file) otherwise."""
    path = os.path.abspath(str(inventory))
    base = path if os.path.isdir(path) else os.path.dirname(path)
    value, where = None, None
    for group in ("all", RANK_GROUP):
        for name in _vars_files(os.path.join(base, "group_vars"), group):
            data = _load_vars(name)
            if data is not None and "dsv41_fleet_name" in data:
                value, where = data["dsv41_fleet_name"], name
    if where is None:
        raise FleetRecordsError("%s: dsv41_fleet_name is not set in group_vars/all or group_vars/%s; every fleet "
                                "inventory names itself (its records go to records/<dsv41_fleet_name>/)"
                                % (path, RANK_GROUP))
    problem = fleet_name_problem(value)
    if problem:
        raise FleetRecordsError("%s: %s" % (where, problem))
    return value


# --------------------------------------------------------------------------- records of the shared layout

def _json(path):
    """The JSON object at ``path``; None when absent, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _experiment_fleet(run_dir):
    """(fleet, why not) of an experiment run directory: the fleet its run.json recorded (read as every reader of
    run.json does, experiment_runs.read_json)."""
    try:
        run = runs.read_json(os.path.join(run_dir, runs.RUN_FILE))
    except runs.RunError:
        return None, "its run.json cannot be read"
    if run is None:
        return None, "it records no fleet (no run.json)"
    if not run.get("fleet"):
        return None, "its run.json records no fleet"
    return run["fleet"], None


def _stage_run_fleet(run_dir):
    """(fleet, why not) of a stage run record: the fleet every nodes/<host>.json names."""
    try:
        names = sorted(os.listdir(os.path.join(run_dir, "nodes")))
    except OSError:
        return None, "it has no nodes/ directory"
    fleets = set()
    for name in names:
        node = _json(os.path.join(run_dir, "nodes", name)) if name.endswith(".json") else None
        if node is not None and node.get("fleet"):
            fleets.add(node["fleet"])
    if len(fleets) > 1:
        return None, "its nodes name several fleets (%s)" % ", ".join(sorted(map(str, fleets)))
    if not fleets:
        return None, "its nodes record no fleet"
    return fleets.pop(), None


def _children(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def migration_plan(records, fleet=None):
    """What ``bin/records-migrate`` does with ``records`` (the repository's records/): (moves, left, conflicts).

    moves: [(source, destination, why this fleet)] for every record of the shared layout whose fleet is known:
    the fleet its experiment run (run.json) or stage run record (nodes/*.json) recorded, the name of its file
    (adapters-manifest/<fleet>.yml, metrics/dsv41_drift_<fleet>.prom) or of its drift history (drift/<fleet>/, kept
    by inventory directory name, which is the fleet's name in this repository); records that name no fleet (boot
    logs, raw benchmark output, adoption proposals, runs recorded without one) only with ``fleet``.
    left: [(source, why)] of what stays where it is. conflicts: [(source, destination)] already taken."""
    records = os.path.abspath(records)
    moves, left = [], []

    def place(source, owner, why_not, kind, name, how):
        if owner is None:
            if fleet is None:
                left.append((source, "%s; give its fleet with --fleet NAME" % why_not))
                return
            owner, how = fleet, "%s: --fleet %s" % (why_not, fleet)
        problem = fleet_name_problem(owner)
        if problem:
            left.append((source, problem))
            return
        moves.append((source, os.path.join(records, owner, *([kind, name] if name else [kind])), how))

    for name in _children(records):
        path = os.path.join(records, name)
        if os.path.islink(path):
            left.append((path, "a symlink: records are never moved through one"))
        elif name == "experiments" and os.path.isdir(path):
            for run in _children(path):
                source = os.path.join(path, run)
                if os.path.isdir(source) and not os.path.islink(source):
                    owner, why = _experiment_fleet(source)
                    place(source, owner, why, EXPERIMENTS, run, "run.json names fleet %s" % owner)
        elif STAGE_RUN.match(name) and os.path.isdir(path):
            owner, why = _stage_run_fleet(path)
            place(path, owner, why, RUNS, name, "nodes/*.json name fleet %s" % owner)
        elif name.startswith(LEGACY_ADOPT_PREFIX) and os.path.isdir(path):
            place(path, None, "an adoption proposal records no fleet", ADOPT, name[len(LEGACY_ADOPT_PREFIX):], "")
        elif name in ("bench", "boot-logs") and os.path.isdir(path):
            for item in _children(path):
                place(os.path.join(path, item), None, "%s/ records no fleet" % name,
                      BENCH if name == "bench" else BOOT_LOGS, item, "")
        elif name == "adapters-manifest" and os.path.isdir(path):
            for item in _children(path):
                if item.endswith(".yml"):
                    place(os.path.join(path, item), item[:-len(".yml")], None, ADAPTERS_MANIFEST, None,
                          "the file is named for fleet %s" % item[:-len(".yml")])
                else:
                    left.append((os.path.join(path, item), "not a proposal of the shared layout (<fleet>.yml)"))
        elif name == "drift" and os.path.isdir(path):
            for owner in _children(path):
                for run in _children(os.path.join(path, owner)):
                    place(os.path.join(path, owner, run), owner, None, DRIFT, run,
                          "kept under drift/%s/ (the inventory directory's name)" % owner)
        elif name == "metrics" and os.path.isdir(path):
            for item in _children(path):
                if item.startswith("dsv41_drift_") and item.endswith(".prom"):
                    owner = item[len("dsv41_drift_"):-len(".prom")]
                    place(os.path.join(path, item), owner, None, METRICS, item, "the file is named for fleet %s" % owner)
                else:
                    left.append((os.path.join(path, item), "not a drift metrics file of the shared layout"))
        elif fleet_name_problem(name) is None and os.path.isdir(path):
            continue  # a fleet's own directory
        else:
            left.append((path, "not a record of the shared layout"))
    taken, conflicts = set(), []
    for source, dest, _how in moves:
        if os.path.lexists(dest) or dest in taken:
            conflicts.append((source, dest))
        taken.add(dest)
    return moves, left, conflicts


def migrate(moves, conflicts):
    """Move every record of the plan (a rename each, so nothing is copied and nothing deleted); refuses to move
    anything while the plan has a conflict. Returns the moves done; FleetRecordsError naming the first failure
    (the moves before it are done and stay done)."""
    if conflicts:
        raise FleetRecordsError("nothing moved: %d destination(s) already taken (first: %s)"
                                % (len(conflicts), conflicts[0][1]))
    done = []
    for source, dest, _how in moves:
        parent = os.path.dirname(dest)
        try:
            os.makedirs(parent, 0o750)
        except OSError as exc:
            if exc.errno != errno.EEXIST or not os.path.isdir(parent):
                raise FleetRecordsError("%s: cannot create: %s (moved so far: %d)" % (parent, exc, len(done)))
        if os.path.lexists(dest):  # taken since the plan was made
            raise FleetRecordsError("%s: already exists, %s not moved (moved so far: %d)" % (dest, source, len(done)))
        try:
            os.rename(source, dest)
        except OSError as exc:
            raise FleetRecordsError("%s -> %s: %s (moved so far: %d)" % (source, dest, exc, len(done)))
        done.append((source, dest))
    return done
