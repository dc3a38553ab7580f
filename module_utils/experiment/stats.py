# -*- coding: utf-8 -*-
"""Verdicts of an experiment from repeated measurements, never from one number (standard library only).

One subject: turning each condition's measured repetitions into a description (median, min, max,
quartiles, dispersion) and each arm into a verdict against the baseline measured in the same window.

The winning rule, ``separation``
--------------------------------
An arm wins a condition (one workload at one concurrency, prose and code apart) only when EVERY
measured repetition of the arm beats EVERY measured repetition of the baseline: for a figure where
higher is better, ``min(arm) > max(baseline)``; where lower is better, ``max(arm) < min(baseline)``.
It loses by the mirror rule, and anything in between is "no measurable difference".

Why this rule and not "gain > max(IQR_base, IQR_arm)":

* With the five to ten repetitions a maintenance window allows, quartiles are the 2nd and 4th of five
  values; an IQR from five points moves a lot from run to run, so a rule built on it would decide on
  noise in the noise estimate. Min and max use every repetition and cannot understate the spread.
* The gain must exceed the run-to-run spread of BOTH conditions at once: the gap between the two
  ranges is positive only when the arm's worst run is better than the baseline's best.
* It has an exact meaning without assuming any distribution: if the arm changed nothing, every
  ordering of the 2n repetitions is equally likely, and complete separation of 5 against 5 happens
  with probability 1 / C(10, 5) = 1/252 (0.4 %), the one-sided Mann-Whitney exact level. A reader
  can check it on the chart: the two clouds of points do not overlap.
* It is conservative: a small real gain over a noisy baseline is reported as no measurable
  difference. That is the intended failure mode: promote only what is measured, and repeat the
  stage (more repetitions, a quieter window) to resolve a small effect.

A failed evidence or correctness check makes the arm fail whatever its speed.
"""
from __future__ import absolute_import, division, print_function

import statistics

__metaclass__ = type

RULE = "separation"
DIRECTIONS = {"aggregate_tok_s": "higher", "per_stream_tok_s": "higher", "ttft_ms": "lower",
              "step_ms": "lower", "committed_per_step": "higher", "committed_per_s": "higher"}
MIN_REPETITIONS = 5


class StatsError(ValueError):
    """Measurements that cannot give a verdict (too few, not numbers, a missing condition)."""


def _quartiles(values):
    """Q1 and Q3 by the inclusive method (the median of each half, the median itself included for odd n)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def describe(values):
    """Median, min, max, quartiles, IQR, range and sample stdev of one condition's repetitions."""
    vals = [float(v) for v in values]
    if not vals:
        raise StatsError("no measured repetition")
    q1, q3 = _quartiles(sorted(vals))
    return {
        "n": len(vals), "median": statistics.median(vals), "min": min(vals), "max": max(vals),
        "q1": q1, "q3": q3, "iqr": q3 - q1, "range": max(vals) - min(vals),
        "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0, "values": vals,
    }


def compare(base_values, arm_values, metric="aggregate_tok_s", min_repetitions=MIN_REPETITIONS):
    """One condition: the arm against the baseline by the separation rule.

    Returns ``{"outcome": "win"|"loss"|"no_difference", "gain": median gain as a fraction of the
    baseline median (positive = better in the metric's direction), "margin": the gap between the two
    ranges in the metric's unit (positive only on a win or loss), "baseline"/"arm": descriptions}``.
    """
    direction = DIRECTIONS.get(metric)
    if direction is None:
        raise StatsError("unknown metric %r (known: %s)" % (metric, ", ".join(sorted(DIRECTIONS))))
    for label, vals in (("baseline", base_values), ("arm", arm_values)):
        if len(vals) < min_repetitions:
            raise StatsError("%s has %d measured repetition(s); a verdict needs at least %d"
                             % (label, len(vals), min_repetitions))
    base, arm = describe(base_values), describe(arm_values)
    sign = 1.0 if direction == "higher" else -1.0
    gain = (sign * (arm["median"] - base["median"]) / base["median"]) if base["median"] else 0.0
    if direction == "higher":
        win_gap, loss_gap = arm["min"] - base["max"], base["min"] - arm["max"]
    else:
        win_gap, loss_gap = base["min"] - arm["max"], arm["min"] - base["max"]
    if win_gap > 0:
        outcome, margin = "win", win_gap
    elif loss_gap > 0:
        outcome, margin = "loss", loss_gap
    else:
        outcome, margin = "no_difference", 0.0
    return {"metric": metric, "direction": direction, "rule": RULE, "outcome": outcome, "gain": gain,
            "margin": margin, "baseline": base, "arm": arm}


def metric_values(result, metric):
    """The per-repetition values of ``metric`` in one decode_bench result (a condition)."""
    fig = result.get(metric)
    if isinstance(fig, dict) and isinstance(fig.get("rounds"), list):
        return fig["rounds"]
    why = (result.get("unmeasured") or {}).get(metric)      # decode_steps.round_metrics says why a round had none
    raise StatsError("condition %s C%s has no per-repetition %s%s" % (result.get("workload"), result.get("concurrency"),
                                                                    metric, ": %s" % why if why else ""))


def _key(result):
    return (result["workload"], int(result["concurrency"]))


def compare_conditions(baseline_results, arm_results, metric="aggregate_tok_s"):
    """Every (workload, concurrency) of the arm against the same condition of the baseline."""
    base = dict((_key(r), r) for r in baseline_results)
    out = []
    for res in arm_results:
        key = _key(res)
        if key not in base:
            raise StatsError("the baseline has no %s C%d measured in this window" % key)
        row = compare(metric_values(base[key], metric), metric_values(res, metric), metric)
        row.update({"workload": key[0], "concurrency": key[1]})
        out.append(row)
    return sorted(out, key=lambda r: (r["workload"], r["concurrency"]))


def arm_verdict(name, acceptance, evidence_failures=(), correctness_failures=(), comparisons=None,
                timed=True, refused=None):
    """The arm's verdict and every reason for it (in that order: refusal, evidence, correctness, speed).

    ``acceptance``: ``wins_required`` (none/any/all), ``regression_allowed``. Evidence and correctness
    failures fail the arm whatever its speed; an untimed arm (a validation phase) passes on evidence and
    correctness alone.
    """
    reasons = []
    if refused:
        return {"arm": name, "verdict": "refused", "reasons": [refused], "wins": [], "losses": [],
                "checks_passed": False}
    reasons += ["evidence: %s" % f for f in evidence_failures]
    reasons += ["correctness: %s" % f for f in correctness_failures]
    comparisons = comparisons or []
    # The report's gates: an arm is validated when its evidence and quality checks pass (and, timed, when it was
    # measured); a speed win decides promotion, never permission to go on (W8 unlocks DROP, k=5 the cap).
    checks_passed = not reasons and (bool(comparisons) or not timed)
    wins = ["%s C%d %+.1f%%" % (c["workload"], c["concurrency"], 100 * c["gain"]) for c in comparisons
            if c["outcome"] == "win"]
    losses = ["%s C%d %+.1f%%" % (c["workload"], c["concurrency"], 100 * c["gain"]) for c in comparisons
              if c["outcome"] == "loss"]
    if timed:
        if not comparisons and not reasons:
            reasons.append("speed: no condition was measured")
        if losses and not acceptance.get("regression_allowed", False):
            reasons.append("speed: slower than the baseline beyond both spreads at %s" % ", ".join(losses))
        need = acceptance.get("wins_required", "any")
        if need == "any" and comparisons and not wins:
            reasons.append("speed: no condition where every repetition beats every baseline repetition")
        elif need == "all" and comparisons and len(wins) < len(comparisons):
            rest = ["%s C%d" % (c["workload"], c["concurrency"]) for c in comparisons if c["outcome"] != "win"]
            reasons.append("speed: a win is required everywhere; not at %s" % ", ".join(rest))
    return {"arm": name, "verdict": "fail" if reasons else "pass", "reasons": reasons, "wins": wins,
            "losses": losses, "checks_passed": checks_passed}
