"""Filters of the container_env role: the logic its tasks need, as plain Python with unit tests.

Unit tests: tests/unit/filters/test_container_env_filters.py.
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


def dsv41_forward_request(settings, unforwarded, forward_lists=None, unset_keys=None):
    """What ``launcher_forward`` must make reach every container: ``{KEY: declared value}``.

    ``unforwarded``: ``{"head": [...], "worker": [...]}`` (the ``launcher_settings`` result); a key missing
    on either path is requested once, with the value the inventory declares (the edit is verified by
    evaluating the launcher with that value). Names are checked to be shell identifiers, so nothing else
    reaches the script.

    ``unset_keys``: variables to forward although they are not declared (unset is not off for some, e.g.
    SGLANG_DSPARK_FOLDED_SAMPLING); each one a path's ``forward_lists`` lacks is requested with an empty
    value, and the managed forward (``${KEY+-e "KEY=$KEY"}``) passes nothing while it stays unset.
    """
    from ansible.errors import AnsibleFilterError
    wanted = []
    for path in ("head", "worker"):
        for name in _names((unforwarded or {}).get(path), "unforwarded." + path):
            if name not in wanted:
                wanted.append(name)
    settings = dict(settings or {})
    for name in _names(unset_keys, "unset_keys"):
        if name in settings and settings[name] is not None:
            continue                  # declared with a value: forwarded (or not) as declared
        if any(name not in ((forward_lists or {}).get(path) or []) for path in ("head", "worker")):
            if name not in wanted:
                wanted.append(name)
            settings[name] = None
    missing = [n for n in wanted if n not in settings]
    if missing:
        raise AnsibleFilterError("unforwarded names no declared setting: %s" % ", ".join(missing))
    return dict((n, "" if settings[n] is None else str(settings[n])) for n in wanted)


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
            "dsv41_forward_request": dsv41_forward_request,
            "dsv41_null_keys": dsv41_null_keys,
            "dsv41_env_report": dsv41_env_report,
        }
