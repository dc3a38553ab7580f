"""Filters of the preflight role: the refusal of a run on part of the fleet, the guard against starting
while an experiment run is unfinished (module_utils/experiment/runs.py reads the record directory), and the
notice of this fleet's runs left in the records/experiments/ every fleet shared before.

Unit-tested in tests/unit/filters/test_preflight_filters.py and tests/unit/module_utils/experiment/test_experiment_runs.py.
"""
import os
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.experiment import runs as experiment_runs  # noqa: E402


def dsv41_partial_fleet_refusal(covered, left_out, hostvars, scope, head, limit="", whole_only_reason=""):
    """The message refusing a run that covers ``covered`` and leaves out ``left_out`` (rank hosts).

    ``scope`` ``whole_only``: the playbook never runs on a subset; otherwise the operator may opt in
    with allow_partial_fleet (and an engine restart, which goes through the launcher on ``head``, is
    then refused).
    """
    out = ", ".join("%s (rank %s)" % (h, hostvars[h]["dsv41_rank"]) for h in left_out)
    text = ("Refusing to run on part of the fleet; nothing was changed on any host. This run covers %s%s and "
            "leaves out %s. " % (", ".join(covered), " (--limit %s)" % limit if limit else "", out))
    if scope == "whole_only":
        return text + ("This playbook cannot run on a subset of the ranks, even with -e allow_partial_fleet=true: "
                       "%s. Run it without --limit." % (whole_only_reason or "every step reaches every rank"))
    return text + ("This playbook acts on the whole fleet: the engine restart goes through the launcher on %s and "
                   "restarts every rank, and a rank left out skips its own checks. Run it without --limit, or add "
                   "-e allow_partial_fleet=true to act on %s only (an engine restart is then refused: the launcher "
                   "cannot restart a subset of the ranks)." % (head, ", ".join(covered)))


def dsv41_unfinished_runs(record_root, fleet=None, hosts=(), inventories=(), repo_root=None):
    """This fleet's unfinished experiment runs under ``record_root`` (control node), oldest first: each with
    its run id, where it stopped and the exact command that finishes it."""
    return experiment_runs.unfinished_runs(record_root, fleet, list(hosts or ()), list(inventories or ()),
                                           repo_root)


def dsv41_unfinished_refusal(runs, fleet=None, refused=True):
    """The refusal naming every unfinished run and its rollback command (a list of lines); ``refused`` false:
    the same as a report, for a playbook that goes on."""
    return experiment_runs.refusal(runs, fleet, refused)


def dsv41_rollback_command(run_id, inventories=(), record_root=None, repo_root=None, fleet=None):
    """The exact command that finishes the experiment run ``run_id`` of fleet ``fleet`` (typed from the
    repository root)."""
    return experiment_runs.rollback_command(run_id, list(inventories or ()), record_root, repo_root, fleet or None)


def dsv41_legacy_runs(legacy_root, fleet=None, hosts=(), record_root=None):
    """This fleet's experiment runs still in ``legacy_root``, the records/experiments/ every fleet shared before
    records were kept per fleet (records/<fleet>/experiments/): neither the unfinished-run guard nor the
    estimates read them there. None when ``legacy_root`` is empty or is the record root in use."""
    if not legacy_root or (record_root and os.path.normpath(legacy_root) == os.path.normpath(record_root)):
        return []
    return experiment_runs.fleet_runs(legacy_root, fleet, list(hosts or ()))


def dsv41_legacy_runs_notice(runs, legacy_root, record_root, fleet=None):
    """The lines naming the old shared directory that still holds this fleet's runs and the command that moves
    them; an unfinished one among them is named first (the guard cannot see it there)."""
    unfinished = [r["run"] for r in runs if r.get("changed") and not r.get("finished")]
    lines = ["%s still holds %d experiment run(s) of the %s fleet from before records were kept per fleet; the "
             "unfinished-run guard and the estimates read only %s. Move them with bin/records-migrate --apply "
             "(each run into records/<its fleet>/, nothing deleted, nothing moved if a destination is taken)."
             % (os.path.normpath(legacy_root), len(runs), fleet or "this", os.path.normpath(record_root))]
    if unfinished:
        lines.append("Unfinished among them (finish each with its rollback command once moved): %s"
                     % ", ".join(unfinished))
    return lines


def dsv41_way_back(run_id, kind, inventories=(), repo_root=None):
    """'Run <id>. If it goes wrong: <command> (<what it undoes>).' for a playbook run that is not an experiment."""
    command, what = experiment_runs.way_back(kind, run_id, list(inventories or ()), repo_root)
    return "Run %s. The way back: %s (%s)." % (run_id, command, what)


class FilterModule:
    """Preflight filters."""

    def filters(self):
        return {"dsv41_partial_fleet_refusal": dsv41_partial_fleet_refusal,
                "dsv41_unfinished_runs": dsv41_unfinished_runs,
                "dsv41_unfinished_refusal": dsv41_unfinished_refusal,
                "dsv41_rollback_command": dsv41_rollback_command,
                "dsv41_legacy_runs": dsv41_legacy_runs,
                "dsv41_legacy_runs_notice": dsv41_legacy_runs_notice,
                "dsv41_way_back": dsv41_way_back}
