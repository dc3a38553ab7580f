# -*- coding: utf-8 -*-
"""How long an experiment run takes on the fleet, step by step, before it starts (issue: maintenance windows).

A run restarts the whole fleet once per condition (the baseline, then each arm) and once more to restore its
snapshot, and a boot is the longest step there is: Ready about 767 s after start on the fleet
(``Engine startup timings (s): ... scheduler_e2e=761.30``). Every condition then runs its benchmark and its
evidence and quality checks. The estimate of each step comes from the best figure available:

- **recorded**: the median of what this fleet's earlier runs measured (``records/<fleet>/experiments/*/record.json``,
  each condition's ``timing``: apply, boot, benchmark, evidence), when there is one;
- **fleet**: otherwise the real figure the engine is known to print (the boot), or, for the steps the report
  gives no figure for, a stated assumption (apply 60 s, evidence and quality checks 5 minutes).

A benchmark is estimated from its definition: each workload at each concurrency runs warm-ups + repetitions
rounds, and a round sends every prompt of the workload's set, ``concurrency`` at a time, each answering
``max_tokens`` tokens. A round's time is the one recorded for the same workload and concurrency (scaled by
the answer length), else ``ceil(prompts / concurrency) x max_tokens / rate``, where the rate per request is
the one recorded, else 38 tok/s (the report's live median generation throughput: an observation, not a
controlled baseline, which is why a recorded figure replaces it as soon as there is one).

The caller reads the records (:func:`read_records`, on the control node); everything else is pure.
"""
import json
import math
import os
import statistics

from ansible.module_utils.experiment import runs

FLEET_BOOT_S = 767.0
FLEET_APPLY_S = 60.0
FLEET_EVIDENCE_S = 300.0
FLEET_DECODE_TOK_S = 38.0
DEFAULT_PROMPTS = 8
DEFAULT_SLOTS = 4

FLEET_SOURCES = {
    "boot_s": "a fleet boot: Ready about 767 s after start (scheduler_e2e=761.30)",
    "apply_s": "assumed 60 s: settings written and validated, the launch predicted",
    "evidence_s": "assumed 5 min: every rank's log read, the quality checks asked (long-context needles included)",
    "decode_tok_s": "38 tok/s per request: the report's live median generation throughput",
}
STEPS = ("apply_s", "boot_s", "benchmark_s", "evidence_s")


def _run_fleet(run_dir):
    """The fleet name a run recorded when it started (its ``run.json``), or None (none recorded, or unreadable)."""
    try:
        run = runs.read_json(os.path.join(run_dir, runs.RUN_FILE)) or {}
    except runs.RunError:
        return None
    return run.get("fleet") if isinstance(run.get("fleet"), str) else None


def read_records(root, hosts=None, limit=20, fleet=None):
    """The record.json of the newest ``limit`` finished runs under ``root`` (a run directory each), oldest first.

    Only this fleet's runs: with ``fleet``, a run that recorded another fleet's name is passed over (the lab's
    hosts may carry the fleet's host names: a lab boot of seconds is no fleet figure); with ``hosts``, only runs
    whose snapshot holds exactly those hosts. A record that cannot be read is passed over: an estimate never
    fails on an old record."""
    out = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    wanted = sorted(hosts) if hosts else None
    for name in reversed(names):
        path = os.path.join(root, name, "record.json")
        try:
            with open(path) as handle:
                rec = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("conditions"), dict):
            continue
        if wanted is not None and sorted((rec.get("snapshot") or {}).keys()) != wanted:
            continue
        if fleet and _run_fleet(os.path.join(root, name)) not in (None, fleet):
            continue
        out.append(rec)
        if len(out) >= limit:
            break
    return list(reversed(out))


def prompt_counts(prompt_dir, files):
    """{workload: number of prompts in its set} (``files``: {workload: file name under ``prompt_dir``}); a set
    that cannot be read is left to the default count."""
    out = {}
    for name, file_name in (files or {}).items():
        try:
            with open(os.path.join(prompt_dir or ".", file_name)) as handle:
                prompts = json.load(handle)
        except (IOError, OSError, ValueError, TypeError):
            continue
        if isinstance(prompts, list) and prompts:
            out[name] = len(prompts)
    return out


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def recorded_figures(records):
    """{step: (median seconds, n)} over every condition of ``records``, and
    {"rounds": {(workload, concurrency): (seconds per round per answer token, n)}, "rates": {...: tok/s}}."""
    steps = {step: [] for step in STEPS}
    per_token, rates = {}, {}
    for rec in records:
        for cond in (rec.get("conditions") or {}).values():
            if not isinstance(cond, dict):
                continue
            timing = cond.get("timing") or {}
            for step in STEPS:
                value = _number(timing.get(step))
                if value is not None and value > 0:
                    steps[step].append(value)
            for res in cond.get("results") or []:
                if not isinstance(res, dict):
                    continue
                key = (res.get("workload"), res.get("concurrency"))
                tokens = _number((res.get("settings") or {}).get("max_tokens"))
                walls = [w for w in (res.get("round_wall_s") or []) if _number(w)]
                if tokens and walls:
                    per_token.setdefault(key, []).append(statistics.median(walls) / tokens)
                rate = _number((res.get("per_stream_tok_s") or {}).get("median"))
                if rate:
                    rates.setdefault(key, []).append(rate)
    out = {step: (statistics.median(v), len(v)) for step, v in steps.items() if v}
    out["rounds"] = {k: (statistics.median(v), len(v)) for k, v in per_token.items()}
    out["rates"] = {k: (statistics.median(v), len(v)) for k, v in rates.items()}
    return out


def fleet_figures(record_root, hosts=None, fleet=None):
    """:func:`recorded_figures` of this fleet's runs under ``record_root`` (:func:`read_records`); {} without a
    root, so every estimate falls back to the fleet's figures the same way."""
    return recorded_figures(read_records(record_root, hosts, fleet=fleet or None)) if record_root else {}


def _step(figures, step, fleet):
    if step in figures:
        value, n = figures[step]
        return value, "recorded on this fleet (median of %d)" % n
    return fleet, FLEET_SOURCES[step]


def benchmark_seconds(bench, figures, prompts=None):
    """(seconds, source) of one condition's benchmark (``bench``: the normalised definition's benchmark)."""
    if not bench:
        return 0.0, "none"
    prompts = prompts or {}
    total, sources = 0.0, set()
    rounds = bench.get("warmups", 0) + bench.get("repetitions", 0)
    max_tokens = bench.get("max_tokens", 256)
    for workload in bench.get("workloads") or []:
        for conc in bench.get("concurrency") or [1]:
            key = (workload, conc)
            if key in figures.get("rounds", {}):
                per_round = figures["rounds"][key][0] * max_tokens
                sources.add("recorded")
            else:
                rate = figures.get("rates", {}).get(key, (FLEET_DECODE_TOK_S, 0))[0]
                sources.add("recorded" if key in figures.get("rates", {}) else "fleet")
                per_round = math.ceil(prompts.get(workload, DEFAULT_PROMPTS) / float(conc)) * max_tokens / rate
            total += rounds * per_round
    return total, "+".join(sorted(sources)) or "none"


def probe_seconds(defn, figures, prompts=None, slots=DEFAULT_SLOTS):
    """An untimed condition's probe: one round of every workload at every concurrency 1..slots."""
    base = defn["baseline"]["benchmark"] or {}
    probe = {"workloads": base.get("workloads") or [], "concurrency": list(range(1, max(1, slots) + 1)),
             "repetitions": 1, "warmups": 0, "max_tokens": base.get("max_tokens", 256)}
    return benchmark_seconds(probe, figures, prompts)


def _slots(settings, default):
    try:
        return int(str((settings or {}).get("MAX_RUNNING_REQUESTS") or default).strip())
    except ValueError:
        return default


def estimate(defn, figures=None, prompts=None, slots=DEFAULT_SLOTS):
    """The run's expected steps on this fleet: {"conditions": [{name, apply_s, boot_s, benchmark_s, evidence_s,
    total_s, sources}], "boots": n, "total_s": s, "figures": {step: source}}; the restore is the last condition
    (its settings written back and one boot, then the snapshot compared)."""
    figures = figures or {}
    apply_s, apply_src = _step(figures, "apply_s", FLEET_APPLY_S)
    boot_s, boot_src = _step(figures, "boot_s", FLEET_BOOT_S)
    evidence_s, evidence_src = _step(figures, "evidence_s", FLEET_EVIDENCE_S)
    conditions = []
    base = ("baseline", defn["baseline"]["benchmark"], defn["baseline"]["settings"])
    # a campaign measures the baseline again at the end (A-B-A: module_utils/experiment/campaign.py)
    end = [("baseline_end",) + base[1:]] if defn.get("campaign") else []
    for name, bench, settings in [base] + [(arm["name"], arm["benchmark"], arm["settings"])
                                           for arm in defn["arms"]] + end:
        if bench is None:       # an untimed arm warms every graph shape up to its request slots
            bench_s, bench_src = probe_seconds(defn, figures, prompts, _slots(settings, slots))
        else:
            bench_s, bench_src = benchmark_seconds(bench, figures, prompts)
        conditions.append({"name": name, "apply_s": apply_s, "boot_s": boot_s, "benchmark_s": bench_s,
                           "evidence_s": evidence_s, "sources": {"benchmark_s": bench_src}})
    conditions.append({"name": "restore", "apply_s": apply_s, "boot_s": boot_s, "benchmark_s": 0.0,
                       "evidence_s": 0.0, "sources": {"benchmark_s": "none"}})
    for cond in conditions:
        cond["total_s"] = round(sum(cond[s] for s in STEPS), 1)
        for s in STEPS:
            cond[s] = round(cond[s], 1)
    return {"conditions": conditions, "boots": len(conditions),
            "total_s": round(sum(c["total_s"] for c in conditions), 1),
            "figures": {"apply_s": apply_src, "boot_s": boot_src, "evidence_s": evidence_src,
                        "decode_tok_s": ("recorded on this fleet where a workload and concurrency were measured, "
                                         "else " + FLEET_SOURCES["decode_tok_s"])
                        if figures.get("rounds") or figures.get("rates") else FLEET_SOURCES["decode_tok_s"]}}


def duration(seconds):
    """'1 h 04 min', '12 min 47 s', '38 s'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return "%d h %02d min" % (seconds // 3600, (seconds % 3600 + 30) // 60)
    if seconds >= 60:
        return "%d min %02d s" % (seconds // 60, seconds % 60)
    return "%d s" % seconds


def _prefix_fitting(items, window_s, used=0.0):
    """(names, seconds) of the longest prefix of ``items`` ([(name, seconds)]) that fits ``window_s`` after
    ``used`` seconds already spoken for."""
    names = []
    for name, seconds in items:
        if used + seconds > window_s:
            break
        used += seconds
        names.append(name)
    return names, used


def fitting(est, window_s):
    """The conditions that fit ``window_s`` with the restore still inside it: the baseline and the longest
    prefix of the arms, in the definition's order ([] when not even the baseline and the restore fit)."""
    return _prefix_fitting([(c["name"], c["total_s"]) for c in est["conditions"][:-1]], window_s,
                           est["conditions"][-1]["total_s"])


def window_refusal(name, est, window_minutes):
    """None when the run fits ``window_minutes``, else the refusal naming what would fit."""
    if window_minutes is None:
        return None
    window_s = float(window_minutes) * 60.0
    if est["total_s"] <= window_s:
        return None
    names, used = fitting(est, window_s)
    if len(names) > 1:
        fits = ("the baseline and arm(s) %s with the restore (%s) would fit: run them alone with a cut-down "
                "definition, or ask for a longer window" % (", ".join(names[1:]), duration(used)))
    elif names:
        fits = ("only the baseline with the restore (%s) would fit, no arm: ask for a longer window"
                % duration(used))
    else:
        fits = "not even the baseline and the restore fit: ask for a longer window"
    return ("%s refused, nothing changed: it is expected to take %s on this fleet (%d boots), more than the "
            "%s-minute window (window_minutes=%s); %s" % (name, duration(est["total_s"]), est["boots"],
                                                          _fmt_minutes(window_minutes), _fmt_minutes(window_minutes),
                                                          fits))


def _fmt_minutes(value):
    value = float(value)
    return "%d" % value if value == int(value) else "%g" % value


def plan_lines(est):
    """The estimate as plan lines (what --check prints with the plan)."""
    f = est["figures"]
    lines = ["expected on this fleet: %s in all, %d boots (boot %s, %s)" % (
        duration(est["total_s"]), est["boots"], duration(est["conditions"][0]["boot_s"]), f["boot_s"])]
    for cond in est["conditions"]:
        lines.append("  %s: %s (apply %s, boot %s, benchmark %s [%s], evidence %s)" % (
            cond["name"], duration(cond["total_s"]), duration(cond["apply_s"]), duration(cond["boot_s"]),
            duration(cond["benchmark_s"]), cond["sources"]["benchmark_s"], duration(cond["evidence_s"])))
    lines.append("  figures: apply %s; evidence %s; decode rate %s" % (
        f["apply_s"], f["evidence_s"], f["decode_tok_s"]))
    return lines


def expected_vs_actual(est, conditions):
    """[{name, step, expected_s, actual_s}] for every condition measured (``conditions``: the record's
    {name: {timing: {...}}}); the restore's actual is not timed per step and is left out."""
    rows = []
    for cond in est.get("conditions") or []:
        timing = ((conditions or {}).get(cond["name"]) or {}).get("timing") or {}
        if not timing:
            continue
        for step in STEPS + ("total_s",):
            rows.append({"name": cond["name"], "step": step[:-2], "expected_s": cond.get(step),
                         "actual_s": _number(timing.get(step))})
    return rows


# --------------------------------------------------------------------------- stage A (packing), not an experiment

FLEET_PACK_MB_S = 100.0
FLEET_CONTENTION_S = 60.0
# The largest rank's bytes are filled in: a layer is about 33.8 GB a rank on TP3, 25.3 GB on TP4.
PACK_SOURCE = ("assumed 100 MB/s: each rank's shards (up to %s GB a rank on this fleet) read over the head's NFS "
               "export, minutes per layer (the same slow rate the pack's time limit is sized from)")


def stage_a_estimate(to_write, bench, prompts=None, figures=None, max_mib_s=0):
    """Stage A's expected steps: every rank's shards packed one rank at a time (``to_write``: {host: bytes}),
    one restart so every rank opens them, the C1/C4 benchmark after packing, the contention step, and the
    benchmark again. ``bench``: the benchmark role's plan (workloads, concurrency, repetitions, warmups,
    max_tokens). A rate cap (``max_mib_s``) sets the packing rate; else the assumed 100 MB/s."""
    figures = figures or {}
    if max_mib_s and float(max_mib_s) > 0:
        rate, rate_src = float(max_mib_s) * 1024 * 1024, "the cap, engram_pack_max_mib_s=%s MiB/s" % max_mib_s
    else:
        largest = max([int(v or 0) for v in (to_write or {}).values()] or [0])
        rate, rate_src = FLEET_PACK_MB_S * 1e6, PACK_SOURCE % ("%.1f" % (largest / 1e9))
    boot_s, boot_src = _step(figures, "boot_s", FLEET_BOOT_S)
    bench_s, bench_src = benchmark_seconds(bench, figures, prompts)
    total_bytes = sum(int(v or 0) for v in (to_write or {}).values())
    steps = [{"name": "pack %s" % host, "seconds": round(int(b or 0) / rate, 1)} for host, b in sorted((to_write or {}).items())]
    steps += [{"name": "restart", "seconds": round(boot_s, 1)},
              {"name": "benchmark after packing", "seconds": round(bench_s, 1)},
              {"name": "contention", "seconds": FLEET_CONTENTION_S},
              {"name": "benchmark after contention", "seconds": round(bench_s, 1)}]
    return {"steps": steps, "boots": 1, "bytes": total_bytes, "total_s": round(sum(s["seconds"] for s in steps), 1),
            "figures": {"pack_rate": rate_src, "boot_s": boot_src, "benchmark": bench_src,
                        "contention": "assumed 1 min: inventory-declared pauses and stops"}}


# --------------------------------------------------------------------------- stage B (autotune retention)

FLEET_IMAGE_BUILD_S = 300.0
IMAGE_BUILD_SOURCE = ("assumed 5 min: the retention adapter deployed and the image rebuilt on every rank by the "
                      "launcher (the report gives no build time)")
# stage_b_autotune.yml's four boots, in order, with what each must show on every rank
STAGE_B_BOOTS = (("boot1-first", "tunes and saves, or reuses a valid cache"),
                 ("boot2-repeat", "identical settings: reuses on every rank, cache files unchanged"),
                 ("boot3-changed", "a setting that alters the tuned shapes: every rank retunes"),
                 ("boot4-restored", "the retention baseline again: reuses the first cache"))


def stage_b_estimate(figures=None):
    """Stage B's expected steps: the adapter deployed and the image rebuilt, then four boots, each with its
    settings written and validated (apply) and the autotune outcome read on every rank (the boot's time; the
    tuning boots are not known to take longer). Boot and apply from this fleet's records when there are any
    (``figures``: :func:`recorded_figures`), else the fleet's figures."""
    figures = figures or {}
    boot_s, boot_src = _step(figures, "boot_s", FLEET_BOOT_S)
    apply_s, apply_src = _step(figures, "apply_s", FLEET_APPLY_S)
    steps = [{"name": "the retention adapter deployed and the image rebuilt", "seconds": FLEET_IMAGE_BUILD_S}]
    steps += [{"name": "%s (%s)" % (label, what), "seconds": round(apply_s + boot_s, 1)}
              for label, what in STAGE_B_BOOTS]
    return {"steps": steps, "boots": len(STAGE_B_BOOTS), "total_s": round(sum(s["seconds"] for s in steps), 1),
            "figures": {"image build": IMAGE_BUILD_SOURCE, "boot": boot_src, "apply": apply_src}}


def stage_lines(name, est):
    """A stage estimate (stage_a_estimate, stage_b_estimate) as plan lines."""
    lines = ["%s expected on this fleet: %s in all, %d boot(s)" % (name, duration(est["total_s"]), est["boots"])]
    lines += ["  %s: %s" % (s["name"], duration(s["seconds"])) for s in est["steps"]]
    figures = est["figures"]
    if "pack_rate" in figures:
        lines.append("  figures: packing %s; boot %s; benchmark rate %s" % (
            figures["pack_rate"], figures["boot_s"], figures["benchmark"]))
    else:
        lines.append("  figures: " + "; ".join("%s %s" % item for item in figures.items()))
    return lines


def stage_expected_vs_actual(est, actual, check_mode=False):
    """[{step, expected_s, actual_s}] for every step of a stage estimate (stage_a_estimate, stage_b_estimate),
    in the estimate's order, then its total. ``actual``: {step name: seconds this run measured}. A step the run
    did not take (left out by --tags, or the restart when nothing needed one) has actual None; the total's
    actual is the sum of the steps measured, None when none was. Check mode measures nothing (its steps
    change nothing and take no fleet time): every actual is None. No estimate (the plan left out by --tags):
    no rows."""
    if not est or not est.get("steps"):
        return []
    actual = {} if check_mode else dict(actual or {})
    rows, measured = [], []
    for step in est.get("steps") or []:
        seconds = _number(actual.get(step["name"]))
        if seconds is not None:
            measured.append(seconds)
            seconds = round(seconds, 1)
        rows.append({"step": step["name"], "expected_s": step["seconds"], "actual_s": seconds})
    rows.append({"step": "total", "expected_s": est.get("total_s"),
                 "actual_s": round(sum(measured), 1) if measured else None})
    return rows


STAGE_A_ADVICE = "pack one rank per window with --limit is refused (the restart needs every rank), so ask for a longer window"
STAGE_B_ADVICE = ("its four boots prove retention only together (a partial run proposes nothing for the ledger), "
                  "so ask for a longer window")


def stage_window_refusal(name, est, window_minutes, advice=STAGE_A_ADVICE):
    """None when the stage fits ``window_minutes`` (0 or None: no budget), else the refusal naming what fits:
    the steps from the start that fit, in order, and ``advice`` (why a part of the stage is no way out)."""
    if not window_minutes or float(window_minutes) <= 0:
        return None
    window_s = float(window_minutes) * 60.0
    if est["total_s"] <= window_s:
        return None
    names, used = _prefix_fitting([(step["name"], step["seconds"]) for step in est["steps"]], window_s)
    fits = ("the first step(s) would fit (%s, %s): %s" % (", ".join(names), duration(used), advice)
            if names else "not even the first step fits: ask for a longer window")
    return ("%s refused, nothing changed: it is expected to take %s on this fleet, more than the %s-minute window "
            "(window_minutes=%s); %s" % (name, duration(est["total_s"]), _fmt_minutes(window_minutes),
                                         _fmt_minutes(window_minutes), fits))
