# -*- coding: utf-8 -*-
"""Campaigns: several experiment definitions in one maintenance window, with the fewest boots.

A campaign file (``campaigns/<name>.yml``) names the definitions it runs, in order::

    name: d_then_e                  # the file's name
    description: ...
    stages: [stage_d_wo_a, stage_e_prefetch]
    baseline_drift: {tolerance_pct: 0}   # optional: how far the end baseline may move before comparisons fail

Run one by one, every stage boots for its own baseline and for its own restore. A campaign takes one snapshot,
boots and measures the baseline once at the start, then every arm of every stage in order, then the baseline
again at the end (A-B-A), then restores the snapshot: ``sum(arms) + 3`` boots instead of ``sum(arms + 2)``.
The second baseline shows whether the fleet drifted during the window (thermal state, background load),
which a single baseline cannot: when it moved beyond the noise of the two (the separation rule every verdict
uses: the ranges of the repetitions do not overlap) by more than ``tolerance_pct``, every comparison of the
campaign fails and says so.

The campaign runs as one experiment: :func:`merge` builds the definition the experiment role runs (the
baseline of every stage measured together, then every stage's arms, each with its own evidence, checks,
benchmark, acceptance and preconditions). Each stage is then judged from the shared conditions with its own
definition, exactly as its own run would be. What cannot be shared is refused before anything changes:
stages whose baselines set one switch differently, whose baseline benchmarks differ in anything but their
workloads and concurrencies, or whose arms share a name.
"""
import copy

from ansible.module_utils.base.data_schema import yaml_load_strict

END = "baseline_end"
KEYS = ("name", "description", "stages", "baseline_drift")
SHARED_BENCH = ("repetitions", "warmups", "max_tokens", "sampling", "labels")


class CampaignError(ValueError):
    """A campaign that cannot run; the message names the file and what is wrong."""


def load_text(text, source, stem=None):
    """The campaign file's data, validated: {name, description, stages, baseline_drift: {tolerance_pct}}."""
    doc = yaml_load_strict(text, source, CampaignError, "campaign")
    if not isinstance(doc, dict):
        raise CampaignError("%s: a campaign is a mapping, got %s" % (source, type(doc).__name__))
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise CampaignError("%s: %s: unknown key (known: %s)" % (source, unknown[0], ", ".join(KEYS)))
    for key in ("name", "description", "stages"):
        if key not in doc:
            raise CampaignError("%s: %s: required" % (source, key))
    if not isinstance(doc["name"], str) or (stem is not None and doc["name"] != stem):
        raise CampaignError("%s: name: %r must be the file's name (%r)" % (source, doc["name"], stem))
    stages = doc["stages"]
    if not isinstance(stages, list) or len(stages) < 2 or not all(isinstance(s, str) and s for s in stages):
        raise CampaignError("%s: stages: a list of at least two definition names, got %r" % (source, stages))
    if len(set(stages)) != len(stages):
        raise CampaignError("%s: stages: %s is named twice" % (source, [s for s in stages if stages.count(s) > 1][0]))
    drift = doc.get("baseline_drift") or {}
    if not isinstance(drift, dict) or set(drift) - {"tolerance_pct"}:
        raise CampaignError("%s: baseline_drift: only tolerance_pct is known, got %r" % (source, drift))
    tol = drift.get("tolerance_pct", 0)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 100:
        raise CampaignError("%s: baseline_drift.tolerance_pct: a percentage from 0 to 100, got %r" % (source, tol))
    return {"name": doc["name"], "description": str(doc["description"]).strip(), "stages": list(stages),
            "baseline_drift": {"tolerance_pct": float(tol)}}


def _merge_checks(lists):
    out, seen = [], set()
    for checks in lists:
        for check in checks:
            key = repr(sorted(check.items())) if isinstance(check, dict) else repr(check)
            if key not in seen:
                seen.add(key)
                out.append(check)
    return out


def _merge_lines(lists):
    out, seen = [], set()
    for lines in lists:
        for line in lines:
            key = line.get("id") or repr(sorted(line.items()))
            if key not in seen:
                seen.add(key)
                out.append(line)
    return out


def merge(campaign, defs, source="campaign"):
    """The one definition the experiment role runs for ``campaign`` (``defs``: the stages' normalised
    definitions, in order). Raises CampaignError naming the stages and the key that cannot be shared."""
    settings, bench = {}, None
    names = {}
    for defn in defs:
        for key, value in defn["baseline"]["settings"].items():
            if key in settings and settings[key][1] != value:
                raise CampaignError("%s: the baselines of %s and %s set %s differently (%r, %r): they cannot share "
                                    "one baseline; run them one by one" % (source, settings[key][0], defn["name"], key,
                                                                           settings[key][1], value))
            settings[key] = (defn["name"], value)
        b = defn["baseline"]["benchmark"]
        if bench is None:
            bench = dict(copy.deepcopy(b), workloads=list(b["workloads"]), concurrency=list(b["concurrency"]))
            first = defn["name"]
        else:
            for key in SHARED_BENCH:
                if b.get(key) != bench.get(key):
                    raise CampaignError("%s: the baseline benchmarks of %s and %s differ in %s (%r, %r): one baseline "
                                        "cannot stand for both; run them one by one" % (source, first, defn["name"], key,
                                                                                       bench.get(key), b.get(key)))
            bench["workloads"] += [w for w in b["workloads"] if w not in bench["workloads"]]
            bench["concurrency"] = sorted(set(bench["concurrency"]) | set(b["concurrency"]))
        for arm in defn["arms"]:
            if arm["name"] in names or arm["name"] in ("baseline", END):
                raise CampaignError("%s: arm %s of %s: the name is taken (%s): arms of one campaign need names of "
                                    "their own" % (source, arm["name"], defn["name"], names.get(arm["name"], "reserved")))
            names[arm["name"]] = defn["name"]
    merged = copy.deepcopy(defs[0])
    merged.update({
        "name": campaign["name"], "stage": "campaign", "description": campaign["description"],
        "applicable_if": {"engine_features": sorted(set(f for d in defs for f in d["applicable_if"]["engine_features"]))},
        "requires": {},
        # each arm keeps its own stage's exposed-time check (stage E's must fall; stage D has none)
        "arms": [dict(copy.deepcopy(arm), profile_exposed=copy.deepcopy((d.get("profile") or {}).get("exposed")))
                 for d in defs for arm in d["arms"]],
        "campaign": {"name": campaign["name"], "baseline_drift": dict(campaign["baseline_drift"]),
                     "stages": [{"name": d["name"], "stage": d["stage"], "arms": [a["name"] for a in d["arms"]],
                                 "definition": copy.deepcopy(d)} for d in defs]},
    })
    merged["baseline"] = {
        "settings": dict((k, v[1]) for k, v in settings.items()),
        "labels": dict(defs[0]["baseline"]["labels"]),
        "evidence": {"checks": _merge_checks(d["baseline"]["evidence"]["checks"] for d in defs),
                     "must": _merge_lines(d["baseline"]["evidence"]["must"] for d in defs),
                     "must_not": _merge_lines(d["baseline"]["evidence"]["must_not"] for d in defs)},
        "correctness": _merge_checks(d["baseline"]["correctness"] for d in defs),
        "benchmark": bench,
    }
    # a stage that profiles (stage E's exposed time) profiles the campaign's conditions; others ignore it
    merged["profile"] = next((copy.deepcopy(d["profile"]) for d in defs if (d.get("profile") or {}).get("exposed")),
                             merged.get("profile"))
    merged["memory"]["floor_gib"] = max(d["memory"]["floor_gib"] for d in defs)
    merged["report"]["telemetry"] = any(d["report"].get("telemetry") for d in defs)
    return merged


def boots(defs):
    """{"one_by_one": every stage's baseline, arms and restore; "campaign": one baseline, every arm, the end
    baseline and one restore; "saved"}."""
    one = sum(len(d["arms"]) + 2 for d in defs)
    camp = sum(len(d["arms"]) for d in defs) + 3
    return {"one_by_one": one, "campaign": camp, "saved": one - camp}


def plan_lines(campaign, defs):
    b = boots(defs)
    lines = ["campaign %s: %s" % (campaign["name"], campaign["description"]),
             "stages, in order: %s; one snapshot, the baseline at the start and again at the end (A-B-A), one restore"
             % ", ".join(d["name"] for d in defs),
             "boots: %d for the campaign against %d for the stages one by one (%d saved)" % (
                 b["campaign"], b["one_by_one"], b["saved"]),
             "baseline drift: the end baseline may not move beyond the noise of the two%s, else every comparison fails"
             % (" by more than %g%%" % campaign["baseline_drift"]["tolerance_pct"]
                if campaign["baseline_drift"]["tolerance_pct"] else "")]
    return lines


def stage_conditions(merged, stage_name, conditions, arm_checks):
    """(conditions, arm_checks) of one stage: the shared baseline and the stage's own arms."""
    stage = next(s for s in merged["campaign"]["stages"] if s["name"] == stage_name)
    keep = ["baseline"] + stage["arms"]
    return (dict((k, v) for k, v in (conditions or {}).items() if k in keep),
            dict((k, v) for k, v in (arm_checks or {}).items() if k in keep))


def baseline_drift(conditions, metric="aggregate_tok_s", tolerance_pct=0.0):
    """The A-B-A check: {"moved": bool, "rows": [{workload, concurrency, start, end, gain_pct, outcome, moved}],
    "note": why not judged or None}. Moved: separated (ranges apart) and by more than ``tolerance_pct``."""
    from ansible.module_utils.experiment import stats as st
    start = (conditions.get("baseline") or {}).get("results") or []
    end = (conditions.get(END) or {}).get("results") or []
    if not start or not end:
        return {"moved": None, "rows": [], "note": "the %s baseline was not measured" % ("start" if not start else "end")}
    try:
        rows = st.compare_conditions(start, end, metric)
    except st.StatsError as exc:
        return {"moved": None, "rows": [], "note": str(exc)}
    out = []
    for r in rows:
        moved = r["outcome"] != "no_difference" and abs(100.0 * r["gain"]) > tolerance_pct
        out.append({"workload": r["workload"], "concurrency": r["concurrency"], "start": r["baseline"]["median"],
                    "end": r["arm"]["median"], "gain_pct": round(100.0 * r["gain"], 2), "outcome": r["outcome"],
                    "moved": moved})
    return {"moved": any(r["moved"] for r in out), "rows": out, "note": None}


def drift_reason(drift):
    """The reason every comparison of a campaign whose baseline moved fails with (None when it did not)."""
    if not drift or not drift.get("moved"):
        return None
    moved = ["%s C%d %+.1f%%" % (r["workload"], r["concurrency"], r["gain_pct"]) for r in drift["rows"] if r["moved"]]
    return ("campaign: the baseline moved beyond its noise between the start and the end of the window (%s): "
            "no comparison against it holds" % ", ".join(moved))


def drift_table(drift, metric="aggregate_tok_s"):
    if not drift or not drift.get("rows"):
        return ["", "## Baseline at the start and at the end (A-B-A)", "",
                "Not judged: %s." % ((drift or {}).get("note") or "no baseline measured")]
    out = ["", "## Baseline at the start and at the end (A-B-A), %s median" % metric, "",
           "| workload | C | start | end | change | moved |", "|---|---|---|---|---|---|"]
    for r in drift["rows"]:
        out.append("| %s | C%d | %.1f | %.1f | %+.1f%% | %s |" % (r["workload"], r["concurrency"], r["start"], r["end"],
                                                                 r["gain_pct"], "yes" if r["moved"] else "no"))
    out.append("")
    out.append("The baseline %s." % ("moved: every comparison of the campaign fails" if drift["moved"] else
                                     "held: the comparisons stand"))
    return out
