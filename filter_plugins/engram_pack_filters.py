"""Filters of the engram_pack role: the fleet's space table, its notes and refusals, the ways out for a
rank that is short (relocate or delete foreign shards: module_utils/engram/options.py, pack_choice.py), the
time limit.

Unit-tested in tests/unit/filters/test_engram_pack_filters.py.
"""
import math
import os
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.engram import choice as pack_choice, options as pack_options  # noqa: E402
from ansible.module_utils.experiment import estimate as experiment_estimate  # noqa: E402

# The directory made for relocated shards in each of dsv41_spare_volumes ([/data/zurih] -> /data/zurih/dsv41-engram-archive).
SPARE_SUBDIR = "dsv41-engram-archive"


def _n(value):
    """Bytes with thousands separators, as the report prints them (67,586,019,080)."""
    return "{:,}".format(value)


def _who(host, hostvars):
    return "%s (rank %s)" % (host, hostvars[host]["dsv41_rank"])


def _outlook(host, hostvars):
    """This host's verdict with the operator's chosen room making counted (plan.yml sets it), or None."""
    view = hostvars[host]["engram_pack_outlook"] if "engram_pack_outlook" in hostvars[host] else None
    return (view or {}).get(host)


def dsv41_pack_plan_rows(hosts, hostvars):
    """One row per host of the play from its ``engram_pack_plan`` (engram_plan) result; the verdict counts the
    chosen relocation or deletion when there is one."""
    rows = []
    for host in hosts:
        p, view = hostvars[host]["engram_pack_plan"], _outlook(host, hostvars)
        rows.append({
            "host": host, "rank": hostvars[host]["dsv41_rank"], "dest": hostvars[host]["engram_pack_destination"],
            "required": "%s (%s GiB)" % (_n(p["required_bytes"]), p["required_gib"]),
            "to_write": _n(p["to_write_bytes"]),
            "free": "%s (%s GiB)" % (_n(p["free_bytes"]), p["free_gib"]),
            "reclaimable": _n(p["reclaimable_bytes"]), "margin": _n(p["margin_bytes"]),
            "verdict": view["verdict"] if view else
            "fits" if p["fits"] else "SHORT by %s (%s GiB)" % (_n(p["deficit_bytes"]), p["deficit_gib"]),
        })
    return rows


def dsv41_pack_plan_notes(hosts, hostvars):
    """Why each stale shard is repacked, and which complete shards were trusted on what evidence."""
    out = []
    for host in hosts:
        for s in hostvars[host]["engram_pack_plan"]["shards"]:
            if s["state"] == "stale":
                out.append("%s %s: stale: %s" % (_who(host, hostvars), s["path"], s["stale_reason"]))
            elif s.get("verified"):
                out.append("%s %s: complete (%s)" % (_who(host, hostvars), s["path"], s["verified"]))
    return out


def dsv41_pack_plan_short(hosts, hostvars):
    """One message per rank whose destination cannot hold its shards (empty: every rank fits)."""
    out = []
    for host in hosts:
        p, view = hostvars[host]["engram_pack_plan"], _outlook(host, hostvars)
        if (view["fits_after"] if view else p["fits"]):
            continue
        reclaimable = " + %s reclaimable" % _n(p["reclaimable_bytes"]) if p["reclaimable_bytes"] else ""
        deficit = view["deficit_after_bytes"] if view else p["deficit_bytes"]
        changed = view and (view["freed_bytes"] or view["taken_bytes"])
        out.append("%s needs %s bytes (%s GiB) plus a %s-byte margin in %s and has %s free%s%s: deficit %s bytes (%s GiB)"
                   % (_who(host, hostvars), _n(p["to_write_bytes"]), p["to_write_gib"], _n(p["margin_bytes"]),
                      hostvars[host]["engram_pack_destination"], _n(p["free_bytes"]), reclaimable,
                      " (%s after the chosen room making)" % _n(view["free_after_bytes"]) if changed else "",
                      _n(deficit), round(deficit / pack_options.GIB, 3)))
    return out


def dsv41_pack_time_limit(plan, layer, layer_timeout, max_mib_s=0):
    """Seconds the pack of ``layer`` may take: ``layer_timeout``, or, when a rate cap slows the pack
    down on purpose, at least twice what the cap allows for the shard plus 600 s."""
    layer = int(layer)
    shard = next((s for s in plan["shards"] if s["layer"] == layer), None)
    if shard is None:
        from ansible.errors import AnsibleFilterError
        raise AnsibleFilterError("layer %s is not in the pack plan (layers %s)"
                                 % (layer, ", ".join(str(s["layer"]) for s in plan["shards"]) or "none"))
    rate = float(max_mib_s or 0)
    capped = int(math.ceil(2 * shard["bytes"] / (rate * 1048576) + 600)) if rate > 0 else 0
    return max(int(layer_timeout), capped)


def dsv41_pack_rooms(archive_dir, spare_volumes, engram_relocate, host):
    """The directories whose free space this host's plan measures: its archive directory, an archive directory
    on each spare volume, and any ``dest_dir`` the operator chose for relocations to this host."""
    volumes = spare_volumes or []
    bad = [v for v in volumes if not isinstance(v, str) or not os.path.isabs(v)] if isinstance(volumes, list) else [volumes]
    if bad:
        from ansible.errors import AnsibleFilterError
        raise AnsibleFilterError("%s: dsv41_spare_volumes must be a list of absolute paths; %r is not" % (host, bad[0]))
    rooms = [archive_dir] + [os.path.join(v, SPARE_SUBDIR) for v in volumes]
    choice = engram_relocate if isinstance(engram_relocate, dict) else {}
    chosen = choice.get("dest_dir")
    if choice.get("to") == host and isinstance(chosen, str) and os.path.isabs(chosen) and chosen not in rooms:
        rooms.append(chosen)
    return rooms


def _fleet(hosts, hostvars):
    """The fleet as pack_options and pack_choice read it, from each host's plan and engram_pack_host fact."""
    fleet = []
    for host in hosts:
        hv = hostvars[host]
        me, plan = hv["engram_pack_host"], hv["engram_pack_plan"]
        rooms = plan.get("rooms") or []
        fleet.append({"host": host, "rank": hv["dsv41_rank"], "target": me["target"] or None, "dest": me["dest"],
                      "plan": plan, "archive": rooms[0] if rooms else {"path": me["archive_dir"], "problem": "not measured"},
                      "spare": rooms[1:1 + int(me["spare_count"])]})
    return fleet


def dsv41_pack_choice(hosts, hostvars, engram_relocate=None, engram_delete=None):
    """The operator's chosen relocation and deletion, checked against the fleet (pack_choice.parse_choice)."""
    return pack_choice.parse_choice(engram_relocate, engram_delete, _fleet(hosts, hostvars))


def _checks(results):
    """{source host: plan} of the registered engram_relocate check-mode loop (items are the choice's moves)."""
    return {r["item"]["src_host"]: r.get("plan") or {} for r in (results or {}).get("results", [])
            if isinstance(r.get("item"), dict) and not r.get("skipped")}


def dsv41_pack_refusals(*checks):
    """engram_relocate's messages from registered check-mode loops run with ``failed_when: false`` (which clears
    ``failed``): every result whose plan is not ok, or that has no plan (an error before planning)."""
    out = []
    for registered in checks:
        for r in (registered or {}).get("results", []):
            if not r.get("skipped") and not (r.get("plan") or {}).get("ok"):
                out.append(r.get("msg") or "engram_relocate gave no verdict for %s" % (r.get("item"),))
    return out


def dsv41_pack_outlook(hosts, hostvars, choice, checks=None):
    """{host: verdict with the choice counted} (pack_choice.outlook)."""
    return pack_choice.outlook(_fleet(hosts, hostvars), choice, _checks(checks))


def dsv41_pack_command(inventory_sources, root):
    """How the printed commands start: the playbook from the repository root, with this run's inventories."""
    inventories = []
    for source in inventory_sources or []:
        rel = os.path.relpath(source, root)
        inventories.append(source if rel.startswith("..") else rel)
    return " ".join(["ansible-playbook stage_a_pack.yml"] + ["-i %s" % i for i in inventories])


def _short_after(hosts, hostvars):
    return [h for h in hosts if not (_outlook(h, hostvars) or {"fits_after": hostvars[h]["engram_pack_plan"]["fits"]})[
        "fits_after"]]


def dsv41_pack_options(hosts, hostvars, prefix):
    """The ways out (pack_options.options) for each rank still short once the chosen room making is counted."""
    return pack_options.options(_fleet(hosts, hostvars), prefix, _short_after(hosts, hostvars))


def dsv41_pack_option_lines(options, advice=()):
    return pack_options.option_lines(options, advice)


def dsv41_pack_foreign_lines(hosts, hostvars):
    """One line per foreign Engram file the plans found beside a destination, identified or why not."""
    out = []
    for host in hosts:
        for f in hostvars[host]["engram_pack_plan"].get("foreign") or []:
            what = ("TP%s rank %s layer %s shard, may be relocated" % (f["tp_size"], f["rank"], f["layer"])
                    if f["identified"] else "not identified (%s): never offered for moving" % f["reason"])
            out.append("%s: %s, %s bytes (%s allocated): %s" % (_who(host, hostvars), f["path"], _n(f["size"] or 0),
                                                                _n(f["allocated_bytes"] or 0), what))
    return out


def dsv41_pack_choice_lines(choice, checks=None, delete_checks=None, check_mode=True):
    """What the chosen relocation and deletion do (pack_choice.choice_lines); ``checks``/``delete_checks``: the
    registered engram_relocate check-mode loops."""
    deletes = {r["item"]["host"]: r.get("plan") or {} for r in (delete_checks or {}).get("results", [])
               if isinstance(r.get("item"), dict) and not r.get("skipped")}
    return pack_choice.choice_lines(choice, _checks(checks), deletes, check_mode)


def dsv41_pack_restore_groups(manifest, hosts, hostvars):
    """The rollback's restore runs from the head's manifest, one per source host (pack_choice.restore_groups)."""
    fleet = [{"host": h, "target": hostvars[h]["engram_pack_host"]["target"] or None,
              "dest": hostvars[h]["engram_pack_host"]["dest"]} for h in hosts]
    return pack_choice.restore_groups(manifest, fleet)


def dsv41_pack_summary(hosts, hostvars, choice, options, prefix, check_mode):
    """One line: where stage A stops and the next command, or that every rank fits (make demo prints it)."""
    fleet = _fleet(hosts, hostvars)
    view = {f["host"]: _outlook(f["host"], hostvars) or pack_options.after(f["plan"]) for f in fleet}
    return pack_choice.summary(fleet, view, options, prefix, check_mode, bool(choice["moves"] or choice["deletes"]))


def dsv41_stage_a_estimate(hosts, hostvars, bench, prompt_dir=None, max_mib_s=0, window_minutes=0, record_root=None,
                           fleet=None):
    """Stage A's expected duration on this fleet (module_utils/experiment/estimate.py): every rank's bytes to
    write (its plan) packed one rank at a time, one restart, the C1/C4 benchmark twice (``bench``: workloads
    {name: file}, concurrency, repetitions, warmups, max_tokens), the contention step. The restart and the
    benchmark rounds from this fleet's experiment records under ``record_root`` when there are any. Returns
    {estimate, lines, refusal} (refusal: None, or the window_minutes refusal naming what fits)."""
    to_write = dict((h, ((hostvars[h].get("engram_pack_plan") or {}).get("to_write_bytes") or 0)) for h in hosts)
    workloads = bench.get("workloads") or {}
    prompts = experiment_estimate.prompt_counts(prompt_dir, workloads if isinstance(workloads, dict) else {})
    plan = {"workloads": sorted(workloads), "concurrency": list(bench.get("concurrency") or [1]),
            "repetitions": int(bench.get("repetitions") or 0), "warmups": int(bench.get("warmups") or 0),
            "max_tokens": int(bench.get("max_tokens") or 256)}
    figures = experiment_estimate.fleet_figures(record_root, list(hosts), fleet)
    est = experiment_estimate.stage_a_estimate(to_write, plan, prompts, figures, max_mib_s)
    return {"estimate": est, "lines": experiment_estimate.stage_lines("stage_a_pack", est),
            "refusal": experiment_estimate.stage_window_refusal("stage_a_pack", est, window_minutes)}


def dsv41_stage_a_expected_vs_actual(estimate, hosts, hostvars, check_mode=False):
    """Stage A's expected seconds per step (``estimate``: dsv41_stage_a_estimate's ``estimate``) beside what this
    run measured: each host's ``run_record_step_seconds`` ({step name: seconds}, set around each step by
    roles/run_record's step_start / step_end), merged over ``hosts`` (a step every rank timed, such as the
    restart, counts its longest)."""
    actual = {}
    for host in hosts:
        for step, seconds in ((hostvars[host].get("run_record_step_seconds") or {}).items()):
            try:
                actual[step] = max(actual.get(step, 0.0), float(seconds))
            except (TypeError, ValueError):
                continue
    return experiment_estimate.stage_expected_vs_actual(estimate or {}, actual, check_mode)


class FilterModule:
    """Engram pack filters."""

    def filters(self):
        return {
            "dsv41_pack_plan_rows": dsv41_pack_plan_rows,
            "dsv41_pack_plan_notes": dsv41_pack_plan_notes,
            "dsv41_pack_plan_short": dsv41_pack_plan_short,
            "dsv41_pack_time_limit": dsv41_pack_time_limit,
            "dsv41_pack_rooms": dsv41_pack_rooms,
            "dsv41_pack_choice": dsv41_pack_choice,
            "dsv41_pack_outlook": dsv41_pack_outlook,
            "dsv41_pack_refusals": dsv41_pack_refusals,
            "dsv41_pack_command": dsv41_pack_command,
            "dsv41_pack_options": dsv41_pack_options,
            "dsv41_pack_option_lines": dsv41_pack_option_lines,
            "dsv41_pack_foreign_lines": dsv41_pack_foreign_lines,
            "dsv41_pack_summary": dsv41_pack_summary,
            "dsv41_pack_choice_lines": dsv41_pack_choice_lines,
            "dsv41_pack_restore_groups": dsv41_pack_restore_groups,
            "dsv41_stage_a_estimate": dsv41_stage_a_estimate,
            "dsv41_stage_a_expected_vs_actual": dsv41_stage_a_expected_vs_actual,
        }
