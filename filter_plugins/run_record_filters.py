"""Filters of the run_record role. Unit-tested in tests/unit/test_run_record_filters.py."""
from pathlib import Path


def _launch_truth():
    """module_utils/launch_truth.py, imported as Ansible ships module_utils (see filter_plugins/fleet.py)."""
    import ansible.module_utils as amu
    path = str(Path(__file__).resolve().parent.parent / "module_utils")
    if path not in amu.__path__:
        amu.__path__.append(path)
    from ansible.module_utils import launch_truth
    return launch_truth


def _stage_ledger():
    _launch_truth()   # puts the repository's module_utils on the package path
    from ansible.module_utils import stage_ledger
    return stage_ledger


def dsv41_baseline_diff(text, changes, declared=None):
    """The unified diff that declares ``changes`` in the launcher baseline file's settings block (the one
    writer, module_utils/experiment_record.baseline_diff), or '' when ``declared`` (the settings as the
    inventory declares them now) already holds every value."""
    _launch_truth()
    from ansible.module_utils import experiment_record
    todo = dict((k, v) for k, v in (changes or {}).items()
                if str((declared or {}).get(k, "\0unset")) != str(v))
    return experiment_record.baseline_diff(text, todo) if todo else ""


def dsv41_docker_env(items):
    """``docker inspect``'s Config.Env (``["NAME=value", ...]``) as a dict; a bare ``NAME`` maps to ''.
    Only the first ``=`` separates: a value may hold more (module_utils/launch_truth.env_dict)."""
    return _launch_truth().env_dict(items)


def dsv41_stage_ledger_proposal(ledger, stage, digest, record, carry=(), start_digest=None):
    """The stage ledger entries a passing stage proposes (module_utils/stage_ledger.py): entries, new,
    carried."""
    return _stage_ledger().proposal(ledger or [], stage, digest, record, carry or (), start_digest)


class FilterModule:
    """Run record filters."""

    def filters(self):
        return {"dsv41_docker_env": dsv41_docker_env, "dsv41_stage_ledger_proposal": dsv41_stage_ledger_proposal,
                "dsv41_baseline_diff": dsv41_baseline_diff}
