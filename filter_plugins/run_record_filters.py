"""Filters of the run_record role. Unit-tested in tests/unit/filters/test_run_record_filters.py."""
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.experiment import record as experiment_record  # noqa: E402
from ansible.module_utils.fleet import stage_ledger  # noqa: E402
from ansible.module_utils.launcher import truth as launch_truth  # noqa: E402


def dsv41_baseline_diff(text, changes, declared=None):
    """The unified diff that declares ``changes`` in the launcher baseline file's settings block (the one
    writer, module_utils/experiment/record.baseline_diff), or '' when ``declared`` (the settings as the
    inventory declares them now) already holds every value."""
    todo = dict((k, v) for k, v in (changes or {}).items()
                if str((declared or {}).get(k, "\0unset")) != str(v))
    return experiment_record.baseline_diff(text, todo) if todo else ""


def dsv41_docker_env(items):
    """``docker inspect``'s Config.Env (``["NAME=value", ...]``) as a dict; a bare ``NAME`` maps to ''.
    Only the first ``=`` separates: a value may hold more (module_utils/launcher/truth.env_dict)."""
    return launch_truth.env_dict(items)


def dsv41_stage_ledger_proposal(ledger, stage, digest, record, carry=(), start_digest=None):
    """The stage ledger entries a passing stage proposes (module_utils/fleet/stage_ledger.py): entries, new,
    carried."""
    return stage_ledger.proposal(ledger or [], stage, digest, record, carry or (), start_digest)


class FilterModule:
    """Run record filters."""

    def filters(self):
        return {"dsv41_docker_env": dsv41_docker_env, "dsv41_stage_ledger_proposal": dsv41_stage_ledger_proposal,
                "dsv41_baseline_diff": dsv41_baseline_diff}
