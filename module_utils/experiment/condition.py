# -*- coding: utf-8 -*-
"""One measured condition of an experiment (the baseline or an arm): its entry of the run's conditions and
of its arm checks (standard library only).

One subject: what the experiment role keeps of a condition once its ranks have booted, been measured and
logged. The per-host readings come in as {host: value} (what each rank registered: ``by_host`` reads them
out of the play's hostvars); the figures and verdicts come from ``checks``, ``evidence``, ``verify``,
``nodes`` and the engine_log and bench parsers. Comparisons with the baseline read the baseline of the same
run from ``conditions`` (the run's conditions so far).
"""
from __future__ import absolute_import, division, print_function

from collections.abc import Mapping

from ansible.module_utils.bench import sampling
from ansible.module_utils.engine_log import decode_steps, engram_cache, memory_ledger
from ansible.module_utils.experiment import checks, evidence as experiment_evidence, nodes, verify
from ansible.module_utils.host import meminfo

__metaclass__ = type

# the conditions that are the fleet as it runs: recorded, never judged against themselves
BASELINES = ("baseline", "baseline_end")


def by_host(hostvars, hosts, path, default=None):
    """{host: value at ``path``} of each host's variables, in the order of ``hosts``. ``path`` is dotted
    (``_experiment_boot.content``); where a step is missing or is not a mapping, ``default`` stands in and
    the remaining steps read on from it, as Jinja's ``map(attribute=path, default=default)`` does."""
    parts = [p for p in str(path).split(".") if p]
    out = {}
    for host in hosts or []:
        item = hostvars[host]
        for part in parts:
            item = item[part] if isinstance(item, Mapping) and part in item else default
        out[host] = item
    return out


def evidence_failures(evidence, logs, ranks, profiles=None):
    """Failure messages of an arm's named checks and its must / must-not lines on every rank (empty = pass)."""
    return (experiment_evidence.named_failures((evidence or {}).get("checks") or [], logs or {}, ranks or {})
            + checks.evidence_failures(evidence, logs or {}, ranks or {}, profiles))


def same_lines(logs, ranks, definition):
    """{id: {host: [lines]}}: what every ``same_as_baseline`` line of the definition (shared and each arm's)
    matches in each rank's latest boot, recorded for every condition so each arm is compared with the baseline
    of the same run (checks.same_lines)."""
    specs, seen = [], set()
    for arm in (definition or {}).get("arms") or []:
        for spec in ((arm.get("evidence") or {}).get("same_as_baseline") or []):
            if spec["id"] not in seen:
                seen.add(spec["id"])
                specs.append(spec)
    return checks.same_lines(specs, logs or {}, ranks or {})


def same_failures(evidence, lines, conditions, ranks):
    """Failure messages of the ranks whose ``same_as_baseline`` lines differ from the baseline's of this run."""
    specs = (evidence or {}).get("same_as_baseline") or []
    if not specs:
        return []
    base = ((conditions or {}).get("baseline") or {}).get("same_lines")
    return checks.same_as_baseline_failures(specs, lines or {}, base if base is not None else {}, ranks or {})


def memory_cost_failures(ledger, conditions, headroom_gib, name="the arm"):
    """With memory.cost_within_headroom: the ranks where the arm costs more memory than its stated headroom
    against the baseline of this run (memory_ledger.cost_failures)."""
    base = ((conditions or {}).get("baseline") or {}).get("memory")
    if not headroom_gib:
        return []
    if not base:
        return ["memory: the baseline's ledger was not recorded; %s's cost against its stated headroom %.2f GiB "
                "cannot be shown" % (name, float(headroom_gib))]
    return memory_ledger.cost_failures(ledger or {}, base, float(headroom_gib), name, "the baseline")


def correctness(checks_, results, run_logs=None, conditions=None, condition=None, mixed=None, probes=None):
    """Failure messages of the named correctness checks (empty = correct). ``conditions`` (the run's so far)
    and ``condition`` (the name judged) give the checks that compare with the baseline its figures;
    ``mixed``: this condition's mixed greedy/sampled results; ``probes``: its logprob probe (``proposal``) and
    greedy probe under the cap (``capped``)."""
    baseline = None
    if condition not in (None, "baseline"):
        baseline = (conditions or {}).get("baseline") or {}
    return checks.correctness_failures(checks_ or [], results or [], run_logs, baseline, mixed or [], probes or {})


def proposal(results, bins=None):
    """{workload: PIT uniformity figures} of a condition's logprob probe (verify.py), for the record; {} when no
    probe was sent."""
    if not results:
        return {}
    return verify.proposal_failures(results, bins=bins or verify.DEFAULT_BINS)[1]


def capped_probe(results, logs, ranks):
    """{"results", "steps"} of a condition's greedy probe for the capped-block check: the probe's decode_bench
    results and, per workload, rank 0's mean committed tokens per step while it ran ({} without rank 0's log)."""
    if not results:
        return {}
    heads = [h for h, r in (ranks or {}).items() if int(r) == 0 and h in (logs or {})]
    steps = verify.probe_steps(logs[heads[0]], results) if heads else {}
    return {"results": results, "steps": steps}


def distribution(results, conditions, condition, bins=None):
    """{workload: chi-square figures} of a sampled condition against the run's baseline (the record's
    table); {} for the baseline itself or when nothing was sampled."""
    base = ((conditions or {}).get("baseline") or {}).get("results")
    if condition == "baseline" or not base:
        return {}
    return sampling.distribution_failures(results or [], base, bins=bins or sampling.DEFAULT_BINS)[1]


def exposed_failures(exposed, arm_us, conditions, ranks):
    """Ranks whose exposed time (profile traces) did not fall below the baseline's, when the definition asks.
    ``conditions`` is the run's conditions so far (the baseline's ``exposed_us`` is read from it)."""
    baseline_us = ((conditions or {}).get("baseline") or {}).get("exposed_us")
    return checks.exposed_failures(exposed, arm_us, baseline_us, ranks or {})


def exposed_by_host(profiles):
    """{host: exposed us or None} from {host: engine_profile_trace result, or {} where not profiled}."""
    return dict((host, (result or {}).get("exposed_us")) for host, result in (profiles or {}).items())


def benchmark_steps(logs, ranks, benchmarked=()):
    """Committed tokens per step and step time of a condition, from rank 0's Decode batch lines: at C1, C2, C4
    and at every concurrency the condition's benchmark ran (``benchmarked``; more slots adds C8)."""
    return decode_steps.condition_steps(logs or {}, ranks or {},
                                        sorted({1, 2, 4} | set(int(c) for c in benchmarked or ())))


def ledger(logs, ranks, meminfo_before=None, meminfo_after=None):
    """{host: ledger} of a condition: rank_ledger of each rank's latest boot (memory_ledger.fleet_ledger) with the
    host's MemAvailable (GiB) read before the restart and after the boot (/proc/meminfo texts)."""
    out = memory_ledger.fleet_ledger(logs or {}, ranks or {})
    for host, led in out.items():
        led["mem_available_before_gib"] = meminfo.field_gib((meminfo_before or {}).get(host))
        led["mem_available_after_gib"] = meminfo.field_gib((meminfo_after or {}).get(host))
    return out


def _results(registered):
    """A registered result's ``results`` ([] when it has none: skipped, or reset to {})."""
    return (registered or {}).get("results", [])


def _field(by_host_values, key, default):
    """{host: value[key]} of {host: registered result} (``default`` where a host has none)."""
    return dict((host, value.get(key, default) if isinstance(value, Mapping) else default)
                for host, value in (by_host_values or {}).items())


def condition_record(condition, definition, conditions, ranks, facts, clock, logs, image_ids, readings,
                     telemetry, profiles, bench=None, short=None, needles=None, graded_probe=None, graded=None,
                     mixed=None, proposal_probe=None, capped=None, sent=None, running=None, images=None):
    """{"condition": its entry of the run's conditions, "arm_checks": its entry of the arm checks}.

    ``condition``: the condition as the role runs it (name, settings, labels, hook, timed, benchmark, requires,
    evidence, correctness, profile_exposed); ``definition``: the experiment definition; ``conditions``: the
    run's conditions so far; ``ranks``: {host: rank}; ``facts``: experiment_facts (its pinned ``images``);
    ``clock``: the condition's time marks, ``judged`` included; per host: ``logs`` (latest boot text),
    ``image_ids`` (image each engine runs), ``readings`` ({"before_restart", "after_capture",
    "after_measurement"}: {host: host_memory result}), ``telemetry`` (GPU summary), ``profiles`` (profile
    trace result, {} where not profiled); the condition's registered results: ``bench``, ``short``,
    ``needles``, ``graded_probe``, ``graded`` (its ``failures``), ``mixed``, ``proposal_probe``, ``capped``;
    ``sent``: what an untimed condition sent; ``running``/``images``: the engine's container and image
    facts."""
    name = condition["name"]
    timed = condition["timed"]
    requires = condition.get("requires") or {}
    conditions = conditions or {}
    logs = logs or {}
    bench_results = _results(bench) if timed else []
    exposed = exposed_by_host(profiles)
    kernels = _field(profiles, "kernels", [])
    lines = same_lines(logs, ranks, definition)
    led = ledger(logs, ranks, _field(readings.get("before_restart"), "meminfo_text", ""),
                 _field(readings.get("after_capture"), "meminfo_text", ""))
    capped_results = capped_probe(_results(capped), logs, ranks)
    entry = {
        "settings": condition["settings"], "labels": condition["labels"], "hook": condition.get("hook"),
        "image_ids": image_ids,
        "results": decode_steps.with_round_metrics(bench_results or [], logs, ranks or {}) if timed else [],
        "decode_steps": benchmark_steps(logs, ranks, condition["benchmark"]["concurrency"] if timed else []),
        "engram_cache": engram_cache.fleet_cache_state(logs, ranks or {}),
        "telemetry": telemetry,
        "workload_steps": decode_steps.workload_steps(logs, ranks or {}, bench_results or [],
                                                      (definition.get("ranking") or {}).get("concurrency", 1)),
        "timing": checks.phase_seconds(clock or {}),
        "memory": led, "exposed_us": exposed,
        "mixed_results": _results(mixed),
        "proposal": proposal(_results(proposal_probe)),
        "capped_probe": capped_results,
        "folded_sampling": experiment_evidence.boot_memory_facts(logs, ranks or {})["folded_sampling"],
        "wo_a_modes": experiment_evidence.wo_a_modes(logs, ranks or {}),
        "same_lines": lines,
        "probe": None if timed else {"workloads": sent["workloads"], "concurrency": sent["concurrency"]},
        "nodes": nodes.node_facts(running or {}, images or {}, readings, logs, ranks or {}),
        "distribution": distribution(bench_results, conditions, name) if timed else {},
    }
    judged = name not in BASELINES
    failures = (evidence_failures(condition["evidence"], logs, ranks, kernels)
                + memory_ledger.floor_failures(led, definition["memory"]["floor_gib"] if judged else 0)
                + checks.pinned_image_failures(image_ids or {}, requires.get("pinned_image", "") or "",
                                               (facts or {}).get("images", {}) or {}))
    if judged and timed:
        spec = condition["profile_exposed"] if "profile_exposed" in condition else definition["profile"]["exposed"]
        failures += exposed_failures(spec, exposed, conditions, ranks)
    if judged:
        failures += same_failures(condition["evidence"], lines, conditions, ranks)
    if definition["memory"]["cost_within_headroom"] and judged:
        failures += memory_cost_failures(led, conditions, requires.get("memory_headroom_gib_per_rank", 0), name)
    results = _results(bench) + _results(short) + _results(needles) + _results(graded_probe)
    correct = (correctness(condition["correctness"], results, logs, conditions, name, _results(mixed),
                           {"proposal": _results(proposal_probe), "capped": capped_results})
               + (graded or {}).get("failures", []))
    return {"condition": entry, "arm_checks": {"evidence_failures": failures, "correctness_failures": correct}}
