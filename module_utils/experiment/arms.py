# -*- coding: utf-8 -*-
"""Experiment arms as the ``experiment`` role runs them: a validated definition with every default
filled in (so the role never guesses), and the plan as text (what ``--check`` prints first).

Input is a definition that ``module_utils/experiment/schema.py`` has already validated.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _evidence_defaults(ev):
    out = {"checks": [], "must": [], "must_not": [], "same_as_baseline": []}
    out.update(ev or {})
    for kind in ("must", "must_not"):
        out[kind] = [dict({"ranks": "all", "when": "boot", "min_count": 1}, **line) for line in out[kind]]
    out["same_as_baseline"] = [dict({"ranks": "all"}, **line) for line in out["same_as_baseline"]]
    out["checks"] = [_check_name(c) for c in out["checks"]]
    return out


def _check_name(item):
    if isinstance(item, dict):
        name, args = list(item.items())[0]
        return {"name": name, "args": args or {}}
    return {"name": item, "args": {}}


def normalise(doc):
    """The definition with every default filled in, so the role never guesses.

    Each arm gets the definition-wide evidence, correctness, benchmark and acceptance merged under its
    own (an arm's ``evidence.must`` adds to the shared lines; its ``benchmark``/``acceptance`` keys
    replace the shared ones key by key), and ``requires`` is the union of both levels.
    """
    base_bench = dict({"warmups": 1, "max_tokens": 256, "sampling": {"mode": "greedy"}, "labels": {}},
                      **doc["benchmark"])
    base_acc = dict({"rule": "separation", "wins_required": "any", "regression_allowed": False,
                     "promote": False}, **doc["acceptance"])
    shared_ev = _evidence_defaults(doc.get("evidence"))
    shared_req = doc.get("requires", {})
    shared_corr = [_check_name(c) for c in doc.get("correctness", [])]
    arms = []
    for arm in doc["arms"]:
        own_ev = _evidence_defaults(arm.get("evidence"))
        req = dict(shared_req)
        for key, val in arm.get("requires", {}).items():
            req[key] = (sorted(set(req.get(key, [])) | set(val)) if isinstance(val, list)
                        else max(val, req.get(key, val)) if isinstance(val, (int, float)) and not isinstance(val, bool)
                        else val)
        timed = arm.get("timed", True)
        arms.append({
            "name": arm["name"], "description": arm.get("description", ""),
            "settings": dict(arm.get("settings", {})), "hook": arm.get("hook"), "image_pin": arm.get("image_pin"),
            "requires": req, "timed": timed,
            "evidence": {"checks": _merge_checks(shared_ev["checks"], own_ev["checks"]),
                         "must": shared_ev["must"] + own_ev["must"],
                         "must_not": shared_ev["must_not"] + own_ev["must_not"],
                         "same_as_baseline": shared_ev["same_as_baseline"] + own_ev["same_as_baseline"]},
            "correctness": _merge_checks(shared_corr, [_check_name(c) for c in arm.get("correctness", [])]),
            "benchmark": dict(base_bench, **arm.get("benchmark", {})) if timed else None,
            "labels": dict(base_bench["labels"], **arm.get("labels", {})),
            "acceptance": dict(base_acc, **arm.get("acceptance", {})),
        })
    baseline = doc.get("baseline", {})
    return {
        "schema_version": doc["schema_version"], "name": doc["name"], "stage": doc["stage"],
        "description": doc["description"],
        "applicable_if": {"engine_features": list(doc.get("applicable_if", {}).get("engine_features", []))},
        "requires": shared_req,
        "baseline": {"settings": dict(baseline.get("settings", {})),
                     "labels": dict(base_bench["labels"], **baseline.get("labels", {})),
                     "evidence": shared_ev, "correctness": shared_corr, "benchmark": base_bench},
        "memory": {"floor_gib": doc.get("memory", {}).get("floor_gib", 0),
                   "compare_with": list(doc.get("memory", {}).get("compare_with", ["baseline"])),
                   "reference": [dict(r) for r in doc.get("memory", {}).get("reference", [])],
                   "cost_within_headroom": bool(doc.get("memory", {}).get("cost_within_headroom", False))},
        "profile": {"exposed": dict({"must_fall": False}, **doc["profile"]["exposed"])
                    if "exposed" in doc.get("profile", {}) else None},
        # rank the conditions per workload by committed tokens per step / step time at this concurrency
        "ranking": dict({"concurrency": 1}, **doc["ranking"]) if "ranking" in doc else None,
        # figures tabled beside the acceptance metric, which always comes first
        "report": {"metrics": [base_acc["metric"]] + [m for m in doc.get("report", {}).get("metrics", [])
                                                      if m != base_acc["metric"]],
                   # sample every rank's GPU over each measured window (roles/experiment/tasks/bench.yml)
                   "telemetry": bool(doc.get("report", {}).get("telemetry", False)),
                   # rank 0's accept length per concurrency, each arm beside the baseline (the record)
                   "accept_length": bool(doc.get("report", {}).get("accept_length", False))},
        "arms": arms,
    }


def _merge_checks(shared, own):
    out = dict((c["name"], c) for c in shared)
    for c in own:
        out[c["name"]] = c
    return [out[k] for k in sorted(out)]


def plan_lines(defn):
    """Human-readable plan of a normalised definition (what --check prints before the verdicts)."""
    lines = ["%s (stage %s): %s" % (defn["name"], defn["stage"], defn["description"].strip())]
    if defn["applicable_if"]["engine_features"]:
        lines.append("applies only where the engine has: %s" % ", ".join(defn["applicable_if"]["engine_features"]))
    lines.append("baseline: the inventory's launcher settings%s" % (
        " with %s" % _fmt(defn["baseline"]["settings"]) if defn["baseline"]["settings"] else ""))
    mem = defn.get("memory") or {}
    if mem.get("floor_gib") or mem.get("reference") or mem.get("cost_within_headroom"):
        lines.append("memory ledger on every rank%s; differences against %s%s" % (
            ", floor %.2f GiB for serving" % mem["floor_gib"] if mem.get("floor_gib") else "",
            ", ".join(mem.get("compare_with") or ["baseline"]),
            "; each arm's cost against the baseline within its stated headroom" if mem.get("cost_within_headroom")
            else ""))
    exposed = (defn.get("profile") or {}).get("exposed")
    if exposed:
        lines.append("profile of the baseline and every timed arm: %s time on the compute stream (kernels matching "
                     "%r)%s" % (exposed["name"], exposed["pattern"], ", must fall on every rank" if exposed["must_fall"] else ""))
    for arm in defn["arms"]:
        change = (_fmt(arm["settings"]) if arm["settings"] else "hook %s" % arm["hook"] if arm["hook"]
                  else "the image pinned as %s (experiment_image_pins)" % arm["image_pin"])
        bench = arm["benchmark"]
        timing = ("untimed validation phase" if bench is None else
                  "%s x C%s, %d reps after %d warm-up(s), %s" % (
                      "/".join(bench["workloads"]), "/C".join(str(c) for c in bench["concurrency"]),
                      bench["repetitions"], bench["warmups"], bench["sampling"]["mode"]))
        lines.append("arm %s: %s; %s; evidence %d must / %d must-not line(s); checks %s; win on %s (%s)" % (
            arm["name"], change, timing, len(arm["evidence"]["must"]), len(arm["evidence"]["must_not"]),
            ", ".join(c["name"] for c in arm["correctness"]) or "none", arm["acceptance"]["metric"],
            arm["acceptance"]["wins_required"]))
    return lines


def _fmt(settings):
    return ", ".join("%s=%s" % (k, "(removed)" if v is None else v) for k, v in sorted(settings.items()))

