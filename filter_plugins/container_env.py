"""Filters of the container_env role: the logic its tasks need, as plain Python with unit tests.

Unit tests: tests/unit/test_container_env_filters.py.
"""
import re

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _names(values, what):
    from ansible.errors import AnsibleFilterError
    names = list(values or [])
    bad = [n for n in names if not isinstance(n, str) or not _NAME_RE.match(n)]
    if bad:
        raise AnsibleFilterError("%s: %s is not a shell variable name" % (what, ", ".join(repr(b) for b in bad)))
    return names


def dsv41_forward_block(unforwarded):
    """The managed block added to start.sh for the variables a launch path does not forward.

    ``unforwarded``: ``{"head": [...], "worker": [...]}`` (the ``launcher_settings`` result). One
    ``HEAD_FORWARD+=(...)`` / ``WORKER_FORWARD+=(...)`` line per path that misses any; empty text
    when none does. Names are checked to be shell identifiers, so nothing else reaches the script.
    """
    lines = []
    for path, array in (("head", "HEAD_FORWARD"), ("worker", "WORKER_FORWARD")):
        names = _names((unforwarded or {}).get(path), "unforwarded." + path)
        if names:
            lines.append("%s+=(%s)" % (array, " ".join(names)))
    return "".join(line + "\n" for line in lines)


def dsv41_null_keys(mapping):
    """Keys of ``mapping`` whose value is null (an override that removes the key from the .env), in order."""
    return [key for key, value in (mapping or {}).items() if value is None]


def dsv41_env_report(result):
    """Lines reporting a launcher_env converge: the changes, then the undeclared keys kept and the ones removed."""
    result = result or {}
    lines = list(result.get("changes") or []) or ["no change: the fleet runs exactly the declared settings"]
    kept = result.get("kept_undeclared") or []
    if kept:
        lines.append("kept %d key(s) the inventory does not declare, as they are (list one in "
                     "container_env_remove_keys to remove it): %s" % (len(kept), ", ".join(kept)))
    stale = result.get("removed_stale") or []
    if stale:
        lines.append("removed, written by an earlier run and no longer declared: %s" % ", ".join(stale))
    removed = result.get("removed") or []
    if removed:
        lines.append("removed as listed in container_env_remove_keys: %s" % ", ".join(removed))
    return lines


class FilterModule(object):
    def filters(self):
        return {
            "dsv41_forward_block": dsv41_forward_block,
            "dsv41_null_keys": dsv41_null_keys,
            "dsv41_env_report": dsv41_env_report,
        }
