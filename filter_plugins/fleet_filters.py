"""Filters for the TP fleet: inventory validation and small formatting helpers.

The inventory is validated on the control node before any task reaches a host, so every rule lives
here as plain Python (unit-tested in tests/unit/filters/test_fleet_filters.py) and the preflight role fails
in one task with every problem listed.
"""
import base64
import posixpath
import re
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.base import secrets  # noqa: E402
from ansible.module_utils.fleet import records  # noqa: E402
from ansible.module_utils.host.meminfo import field_gib, parse_meminfo  # noqa: E402
from ansible.module_utils.envfile import parse, render, shell  # noqa: E402

# Per-host variables every rank host must define, with the check each value must pass.
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _abs_path(value):
    return isinstance(value, str) and value.startswith("/") and posixpath.normpath(value) == value.rstrip("/") \
        and ".." not in value.split("/")


REQUIRED_HOST_VARS = {
    "dsv41_rank": ("a non-negative integer", lambda v: _is_int(v) and v >= 0),
    "dsv41_login_user": ("a login name like 'mia'", lambda v: isinstance(v, str) and bool(USER_RE.match(v))),
    "dsv41_launcher_dir": ("an absolute path", _abs_path),
    "dsv41_engram_dir": ("an absolute path", _abs_path),
    "dsv41_checkpoint_dir": ("an absolute path", _abs_path),
    "dsv41_tp_size": ("a positive integer", lambda v: _is_int(v) and v >= 1),
    "dsv41_head_container": ("a container name", lambda v: isinstance(v, str) and bool(NAME_RE.match(v))),
    "dsv41_worker_container": ("a container name", lambda v: isinstance(v, str) and bool(NAME_RE.match(v))),
}
# Fleet-wide variables every rank host must agree on. dsv41_fleet_name names the fleet's records directory
# (records/<dsv41_fleet_name>/), so it is one safe path component (module_utils/fleet/records.py holds the rule,
# which bin/fleet-drift applies too); dsv41_fleet_is_lab (optional, false when absent) marks every figure the
# fleet's runs record as lab output.
FLEET_VARS = ("dsv41_fleet_name", "dsv41_fleet_is_lab")


def _fleet_var_errors(hostvars, hosts):
    errors = []
    for host in hosts:
        hv = hostvars.get(host, {})
        if "dsv41_fleet_name" not in hv:
            errors.append(f"{host}: dsv41_fleet_name is not set (want {records.FLEET_NAME_RULE})")
        else:
            problem = records.fleet_name_problem(hv["dsv41_fleet_name"])
            if problem:
                errors.append(f"{host}: {problem}")
        if "dsv41_fleet_is_lab" in hv and not isinstance(hv["dsv41_fleet_is_lab"], bool):
            errors.append(f"{host}: dsv41_fleet_is_lab={hv['dsv41_fleet_is_lab']!r} is not a boolean (true for a lab "
                          "fleet, whose figures are lab output; false or unset otherwise)")
    for var in FLEET_VARS:
        values = {repr(hostvars.get(h, {}).get(var, False if var == "dsv41_fleet_is_lab" else None)) for h in hosts}
        if len(values) > 1:
            errors.append(f"hosts disagree on {var}: {', '.join(sorted(values))} (one fleet, one value)")
    return errors


def dsv41_inventory_errors(hostvars, groups, rank_group="dsv41_ranks", head_group="head", worker_group="workers"):
    """Return a list of messages, one per inventory problem; empty when the fleet is consistent.

    Rules: exactly one head and it has rank 0; every rank host is in the head or worker group;
    ranks 0..tp-1 each exactly once; the declared TP size equals the number of rank hosts; every
    required per-host variable present and well-typed; one fleet name, a safe path component (it keys
    the fleet's records), and dsv41_fleet_is_lab a boolean, the same on every rank host.
    """
    errors = []
    ranks_hosts = list(groups.get(rank_group, []))
    heads = list(groups.get(head_group, []))
    workers = list(groups.get(worker_group, []))
    if not ranks_hosts:
        return [f"group '{rank_group}' has no hosts"]
    errors += _fleet_var_errors(hostvars, ranks_hosts)

    for host in ranks_hosts:
        hv = hostvars.get(host, {})
        for var, (want, ok) in REQUIRED_HOST_VARS.items():
            if var not in hv:
                errors.append(f"{host}: {var} is not set (want {want})")
            elif not ok(hv[var]):
                errors.append(f"{host}: {var}={hv[var]!r} is not {want}")

    for host in ranks_hosts:
        hv = hostvars.get(host, {})
        if "ansible_user" in hv and "dsv41_login_user" in hv and hv["ansible_user"] != hv["dsv41_login_user"]:
            errors.append(f"{host}: ansible_user={hv['ansible_user']!r} differs from dsv41_login_user={hv['dsv41_login_user']!r}")

    if len(heads) != 1:
        errors.append(f"group '{head_group}' must hold exactly one host, has {len(heads)}: {', '.join(heads) or 'none'}")
    for host in heads:
        rank = hostvars.get(host, {}).get("dsv41_rank")
        if _is_int(rank) and rank != 0:
            errors.append(f"{host}: is the head but dsv41_rank={rank} (the head is rank 0)")
    for host in set(heads) & set(workers):
        errors.append(f"{host}: is in both '{head_group}' and '{worker_group}'")
    for host in ranks_hosts:
        if host not in heads and host not in workers:
            errors.append(f"{host}: is in '{rank_group}' but in neither '{head_group}' nor '{worker_group}'")

    tp_values = {hostvars.get(h, {}).get("dsv41_tp_size") for h in ranks_hosts}
    tp_values = {v for v in tp_values if _is_int(v)}
    if len(tp_values) > 1:
        errors.append(f"hosts disagree on dsv41_tp_size: {sorted(tp_values)}")
    for tp in tp_values:
        if tp != len(ranks_hosts):
            errors.append(f"dsv41_tp_size={tp} but '{rank_group}' has {len(ranks_hosts)} hosts "
                          f"({', '.join(ranks_hosts)})")

    by_rank = {}
    for host in ranks_hosts:
        rank = hostvars.get(host, {}).get("dsv41_rank")
        if _is_int(rank):
            by_rank.setdefault(rank, []).append(host)
    for rank, hosts in sorted(by_rank.items()):
        if len(hosts) > 1:
            errors.append(f"rank {rank} is held by more than one host: {', '.join(sorted(hosts))}")
        if rank >= len(ranks_hosts):
            errors.append(f"{', '.join(hosts)}: dsv41_rank={rank} is outside 0..{len(ranks_hosts) - 1}")
    missing = [r for r in range(len(ranks_hosts)) if r not in by_rank]
    if missing:
        errors.append(f"no host holds rank {', '.join(str(r) for r in missing)}")
    return errors


def dsv41_bytes_gib(value, digits=3):
    """Bytes to GiB (2**30) rounded, the unit the report uses (62.944 GiB)."""
    return round(int(value) / (1 << 30), digits)


def dsv41_meminfo(text):
    """Parse /proc/meminfo text into {key: bytes} (the one parser, module_utils/host/meminfo.parse_meminfo)."""
    return parse_meminfo(str(text))


def dsv41_meminfo_gib(contents, field="MemAvailable"):
    """{host: GiB of ``field``} from {host: /proc/meminfo as ansible.builtin.slurp returns it (base64)}; None for a
    host whose reading is missing or has no such line."""
    return {host: field_gib(base64.b64decode(content).decode("utf-8", "replace") if content else "", field, 3)
            for host, content in (contents or {}).items()}


def dsv41_table(rows, columns):
    """Render a list of dicts as a fixed-width text table (one string per line) for play output."""
    header = [title for _, title in columns]
    body = [[str(row.get(key, "")) for key, _ in columns] for row in rows]
    widths = [max(len(cell) for cell in col) for col in zip(header, *body)]

    def fmt(cells):
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in body]


def _fail(exc):
    from ansible.errors import AnsibleFilterError
    return AnsibleFilterError(str(exc))


def dsv41_env_parse(text, base=None):
    """What ``set -a; source .env`` assigns, read with bash's rules (module_utils/envfile/parse.py's parse_env).

    Fails naming the line for anything that is not data (command substitution, a command word, ...).
    """
    try:
        return parse.parse_env(str(text), base)
    except shell.EnvError as exc:
        raise _fail(exc)


def dsv41_env_render(settings, api_key=None, notes=None):
    """The launcher .env text for ``settings`` (the one writer, module_utils/envfile/render.py's render_env).

    Fails naming every key or value that cannot be written as data.
    """
    try:
        return render.render_env(settings or {}, api_key, notes or ())
    except shell.EnvError as exc:
        raise _fail(exc)


def dsv41_is_secret(name):
    """The one secret rule (module_utils/base/secrets.is_secret_name): KEY/TOKEN/SECRET/PASSWORD/PASSWD/
    CREDENTIAL/PAT-style names, case-insensitive."""
    return secrets.is_secret_name(name)


def dsv41_redact(data, secret_values=None):
    """``data`` with values of secret names shown as ``***`` and every secret value (those, plus
    ``secret_values`` such as the API key) replaced wherever it appears (module_utils/base/secrets.redact).
    Apply before to_json/to_nice_json so a secret holding quotes or backslashes is still matched."""
    values = [v for v in (secret_values or []) if v]
    return secrets.redact(data, values)


def dsv41_secret_values(data, secret_values=None):
    """Every secret value in ``data`` (values of secret names, ``NAME=value`` items included) plus
    ``secret_values``: what must be hidden in other documents too (module_utils/base/secrets.secret_values)."""
    return secrets.secret_values(data, [v for v in (secret_values or []) if v])


class FilterModule:
    """Fleet filters."""

    def filters(self):
        return {
            "dsv41_inventory_errors": dsv41_inventory_errors,
            "dsv41_bytes_gib": dsv41_bytes_gib,
            "dsv41_meminfo": dsv41_meminfo,
            "dsv41_meminfo_gib": dsv41_meminfo_gib,
            "dsv41_table": dsv41_table,
            "dsv41_env_parse": dsv41_env_parse,
            "dsv41_env_render": dsv41_env_render,
            "dsv41_is_secret": dsv41_is_secret,
            "dsv41_redact": dsv41_redact,
            "dsv41_secret_values": dsv41_secret_values,
        }
