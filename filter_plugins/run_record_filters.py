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


def dsv41_docker_env(items):
    """``docker inspect``'s Config.Env (``["NAME=value", ...]``) as a dict; a bare ``NAME`` maps to ''.
    Only the first ``=`` separates: a value may hold more (module_utils/launch_truth.env_dict)."""
    return _launch_truth().env_dict(items)


class FilterModule:
    """Run record filters."""

    def filters(self):
        return {"dsv41_docker_env": dsv41_docker_env}
