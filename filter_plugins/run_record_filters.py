"""Filters of the run_record role. Unit-tested in tests/unit/test_run_record_filters.py."""


def dsv41_docker_env(items):
    """``docker inspect``'s Config.Env (``["NAME=value", ...]``) as a dict; a bare ``NAME`` maps to ''.
    Only the first ``=`` separates: a value may hold more."""
    out = {}
    for item in items or []:
        name, _, value = str(item).partition("=")
        out[name] = value
    return out


class FilterModule:
    """Run record filters."""

    def filters(self):
        return {"dsv41_docker_env": dsv41_docker_env}
