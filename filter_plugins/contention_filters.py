"""Filters of the contention role: the opt-in actions, their record, the rollback and the tables.

The role's decisions (which actions to refuse, what to record, which docker verbs return a container
to its recorded state) live here as plain Python, unit-tested in tests/unit/filters/test_contention_filters.py.
"""

ACTIONS = ("pause", "stop")

# State now -> state recorded before the first change -> docker verbs that get from one to the other.
RESTORE_VERBS = {
    "running": {"paused": ["unpause"], "exited": ["start"], "created": ["start"]},
    "paused": {"running": ["pause"], "exited": ["start", "pause"], "created": ["start", "pause"]},
    "exited": {"running": ["stop"], "paused": ["stop"]},
    "created": {"running": ["stop"], "paused": ["stop"]},
}


def dsv41_contention_refusals(actions, inventory_containers, report_containers, serving_prefix):
    """One message per requested action the role must refuse (empty: every action may run).

    An action is refused unless it is ``pause`` or ``stop``, the container does not serve the model
    (``serving_prefix``), the inventory lists it as dispensable with an owner, and it exists on the node.
    """
    listed = {c["name"]: c for c in inventory_containers or [] if c.get("dispensable")}
    present = {c["name"] for c in report_containers or []}
    out = []
    for action in actions or []:
        name = action["name"]
        entry = listed.get(name)
        if action.get("action", "none") not in ACTIONS:
            out.append("%s: action must be pause or stop, got %s" % (name, action.get("action", "none")))
        elif name.startswith(serving_prefix):
            out.append("%s serves the model" % name)
        elif entry is None:
            out.append("%s is not listed as dispensable in contention_containers" % name)
        elif not entry.get("owner"):
            out.append("%s has no owner in contention_containers" % name)
        elif name not in present:
            out.append("%s does not exist on this node" % name)
    return out


def dsv41_contention_changes(results, report_containers):
    """The actions a looped ``docker pause|stop`` task changed: [{name, action, before}] (state before)."""
    state = {c["name"]: c["state"] for c in report_containers or []}
    return [{"name": r["item"]["name"], "action": r["item"]["action"], "before": state[r["item"]["name"]]}
            for r in results or [] if r.get("changed", False)]


def dsv41_contention_record(earlier, now):
    """The record after this run: one entry per container, in first-seen order.

    ``before`` is the state before the FIRST change since the last rollback (an earlier entry wins,
    and a record written in the older one-entry-per-action form counts its first entry); ``actions``
    lists every action since, in order.
    """
    entries = list(earlier or []) + list(now or [])
    out = {}
    for e in entries:
        merged = out.setdefault(e["name"], {"name": e["name"], "before": e["before"], "actions": []})
        merged["actions"].extend(e["actions"] if "actions" in e else [e["action"]])
    return list(out.values())


def dsv41_contention_restore_steps(results):
    """The docker verbs returning each container read by a looped ``docker inspect`` to its state
    before the first change: [{name, verb, now, before}], in order. Containers docker no longer
    knows (rc != 0) and containers already in their state give no step, so a second rollback does
    nothing."""
    out = []
    for r in results or []:
        if r.get("rc") != 0:
            continue
        now, before = r["stdout"].strip(), r["item"]["before"]
        for verb in RESTORE_VERBS.get(before, {}).get(now, []):
            out.append({"name": r["item"]["name"], "verb": verb, "now": now, "before": before})
    return out


def dsv41_contention_not_restored(results):
    """One message per container a looped ``docker inspect`` reads in another state than recorded."""
    return ["%s is %s, was %s" % (r["item"]["name"], r.get("stdout", "").strip(), r["item"]["before"])
            for r in results or [] if r.get("stdout", "").strip() != r["item"]["before"]]


def dsv41_contention_container_rows(containers):
    """contention_report containers with the printable owner, cpu % and memory columns added."""
    rows = []
    for c in containers or []:
        row = dict(c)
        row["owner"] = c.get("owner") or "unknown"
        row["cpu_percent"] = c["cpu_percent"] if c.get("cpu_percent") is not None else "-"
        mem = c.get("mem_bytes")
        row["mem_human"] = "%d MiB" % int(round(mem / 1048576, 0)) if mem is not None else "-"
        rows.append(row)
    return rows


def dsv41_contention_summary_rows(hosts, hostvars):
    """One row per host of the play from its ``contention_report`` (the summary table)."""
    rows = []
    for host in hosts:
        r = hostvars[host]["contention_report"]
        dm = r["display_manager"]
        rows.append({
            "host": host, "serving": ",".join(r["serving"]), "others": r["non_serving_count"],
            "others_running": r["non_serving_running_count"],
            "others_mem": "%s GiB" % round(int(r["non_serving_mem_bytes"]) / (1 << 30), 2),
            "dm": (dm.get("unit") or "-") + (" active" if dm.get("active") else " inactive"),
            "target": r["default_target"], "avail": "%s GiB" % r["memory"]["mem_available_gib"],
            "psi": "%s%%" % r["psi"]["some"]["avg60"] if r.get("psi") else "n/a",
            "load": r["load"]["load1"] if r.get("load") else "-",
            "pollers": ",".join(str(p["interval_s"]) for p in r["gpu_pollers"]) or "-",
            "nv_err": r["nv_err_events"]["count"],
        })
    return rows


class FilterModule:
    """Contention filters."""

    def filters(self):
        return {
            "dsv41_contention_refusals": dsv41_contention_refusals,
            "dsv41_contention_changes": dsv41_contention_changes,
            "dsv41_contention_record": dsv41_contention_record,
            "dsv41_contention_restore_steps": dsv41_contention_restore_steps,
            "dsv41_contention_not_restored": dsv41_contention_not_restored,
            "dsv41_contention_container_rows": dsv41_contention_container_rows,
            "dsv41_contention_summary_rows": dsv41_contention_summary_rows,
        }
