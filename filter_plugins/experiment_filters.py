"""Filters of the experiment role: judging an arm on the control node.

Thin wrappers over ``module_utils/experiment/checks.py``, ``condition.py`` and ``snapshot.py`` (unit-tested
there), so the role's tasks hold no Jinja programs: each verdict is one filter call.
"""
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.engine_log import decode_steps, engram_cache, memory_ledger  # noqa: E402
from ansible.module_utils.experiment import condition as experiment_condition  # noqa: E402
from ansible.module_utils.experiment import campaign, graded_tasks, checks as experiment_checks, estimate, evidence as experiment_evidence, nodes, quality, snapshot  # noqa: E402
from ansible.module_utils.host import nvidia_smi  # noqa: E402


def dsv41_stage_b_estimate(hosts, record_root=None, window_minutes=0, fleet=None):
    """Stage B's expected duration on this fleet (module_utils/experiment/estimate.py): the image rebuild and
    four boots, the boot and apply figures from this fleet's experiment records under ``record_root`` (runs
    whose snapshot holds exactly ``hosts`` and that recorded no other fleet name than ``fleet``) when there are
    any. Returns {estimate, lines, refusal} (refusal: None, or the window_minutes refusal naming what fits)."""
    est = estimate.stage_b_estimate(estimate.fleet_figures(record_root, list(hosts), fleet))
    return {"estimate": est, "lines": estimate.stage_lines("stage_b_autotune", est),
            "refusal": estimate.stage_window_refusal("stage_b_autotune", est, window_minutes,
                                                      estimate.STAGE_B_ADVICE)}


def dsv41_campaign_drift(conditions, definition):
    """A campaign's A-B-A check (module_utils/experiment/campaign.py): the baseline at the start against the
    baseline at the end, by the separation rule and the campaign's tolerance."""
    camp = (definition or {}).get("campaign") or {}
    metric = (((definition or {}).get("arms") or [{}])[0].get("acceptance") or {}).get("metric", "aggregate_tok_s")
    return campaign.baseline_drift(conditions or {}, metric, (camp.get("baseline_drift") or {}).get("tolerance_pct", 0))


def dsv41_campaign_stage(definition, stage, conditions, arm_checks):
    """[conditions, arm_checks] of one stage of a campaign: the shared baseline and the stage's own arms."""
    return list(campaign.stage_conditions(definition, stage, conditions, arm_checks))


def dsv41_experiment_node_facts(running, images, memory, logs, ranks):
    """{host: what the rank ran and its memory} of one condition (module_utils/experiment/nodes.py): container
    variables (secrets masked), image id, engine/FlashInfer versions, kernel, graph shapes, MemAvailable and
    pressure stalls before the restart, after the captures and after the measurement."""
    return nodes.node_facts(running or {}, images or {}, memory or {}, logs or {}, ranks or {})


def dsv41_experiment_probe_plan(base, workloads, settings):
    """An untimed condition's requests: every workload at every concurrency 1..slots (every graph shape
    warmed; module_utils/experiment/checks.py)."""
    return experiment_checks.probe_plan(base or {}, workloads or [], settings or {})


def dsv41_graded_prompts(kinds=None):
    """The graded code, JSON and math task set (decode_bench's prompt file format), the tasks of ``kinds``
    (module_utils/experiment/graded_tasks.py)."""
    return graded_tasks.prompts(kinds or None)


def dsv41_needle_prompts(tokens=None):
    """The long-context needle prompt set (decode_bench's prompt file format) for the given sizes in tokens
    (default 30,000 and 100,000): module_utils/experiment/quality.py."""
    return quality.needle_prompts(tokens or quality.DEFAULT_NEEDLE_TOKENS)


def dsv41_experiment_cache_state(logs, ranks):
    """{host: [{layer, cold_hit_pct, warm_hit_pct, ...}]}: the Engram row cache at the first and the last
    periodic Engram line of every rank's latest boot (module_utils/engine_log/engram_cache.py)."""
    return engram_cache.fleet_cache_state(logs or {}, ranks or {})


def dsv41_experiment_wo_a_modes(logs, ranks):
    """{host: {rank, armed, mode (bridge/kernel/None), drop, draft_kept}}: how wo_a_w8 ran on each rank's latest
    boot, from the adapter's own lines (module_utils/experiment/evidence.py)."""
    return experiment_evidence.wo_a_modes(logs or {}, ranks or {})


def dsv41_driver_versions(outputs):
    """{host: nvidia-smi --query-gpu=driver_version output} -> {host: "580.95.05" or None} (one parser:
    module_utils/host/nvidia_smi.py)."""
    return dict((host, nvidia_smi.parse_driver_version(text)) for host, text in (outputs or {}).items())


def dsv41_experiment_evidence(evidence, logs, ranks, profiles=None):
    """Failure messages of an arm's named checks and its must / must-not lines on every rank (empty = pass)."""
    return experiment_condition.evidence_failures(evidence, logs, ranks, profiles)


def dsv41_experiment_same_lines(logs, ranks, definition):
    """{id: {host: [lines]}}: what every ``same_as_baseline`` line of the definition (shared and each arm's)
    matches in each rank's latest boot, recorded for every condition so each arm is compared with the baseline
    of the same run (module_utils/experiment/checks.py: same_lines)."""
    return experiment_condition.same_lines(logs, ranks, definition)


def dsv41_experiment_same_failures(evidence, lines, conditions, ranks):
    """Failure messages of the ranks whose ``same_as_baseline`` lines differ from the baseline's of this run."""
    return experiment_condition.same_failures(evidence, lines, conditions, ranks)


def dsv41_memory_cost_failures(ledger, conditions, headroom_gib, name="the arm"):
    """With memory.cost_within_headroom: the ranks where the arm costs more memory than its stated headroom
    against the baseline of this run (module_utils/engine_log/memory_ledger.py: cost_failures)."""
    return experiment_condition.memory_cost_failures(ledger, conditions, headroom_gib, name)


def dsv41_experiment_preconditions(requires, facts):
    """Failure messages of what an arm requires against what the fleet shows (empty = may run)."""
    return experiment_checks.preconditions(requires or {}, facts or {})


def dsv41_experiment_pin_images(definition, pins):
    """{"definition": the definition with each image_pin arm set to its pinned IMAGE, "problems": [...]}."""
    resolved, problems = experiment_checks.pin_images(definition or {}, pins or {})
    return {"definition": resolved, "problems": problems}


def dsv41_experiment_image_facts(presence, checks):
    """{ref: {"present": {host: bool}, "problems", "checks", "image_id"}} of the pinned images."""
    return experiment_checks.image_facts(presence or {}, checks or [])


def dsv41_experiment_pinned_image_failures(image_ids, ref, images):
    """Evidence failures: ranks whose engine does not run the pinned image (empty when nothing is pinned)."""
    return experiment_checks.pinned_image_failures(image_ids or {}, ref or "", images or {})


def dsv41_experiment_correctness(checks, results, run_logs=None, conditions=None, condition=None, mixed=None,
                                 probes=None):
    """Failure messages of the named correctness checks (empty = correct). ``conditions`` (the run's so far)
    and ``condition`` (the name judged) give the checks that compare with the baseline its figures;
    ``mixed``: this condition's mixed greedy/sampled results; ``probes``: its logprob probe (``proposal``) and
    greedy probe under the cap (``capped``)."""
    return experiment_condition.correctness(checks, results, run_logs, conditions, condition, mixed, probes)


def dsv41_experiment_proposal(results, bins=None):
    """{workload: PIT uniformity figures} of a condition's logprob probe (module_utils/experiment/verify.py), for the
    record; {} when no probe was sent."""
    return experiment_condition.proposal(results, bins)


def dsv41_experiment_capped_probe(results, logs, ranks):
    """{"results", "steps"} of a condition's greedy probe for the capped-block check: the probe's decode_bench
    results and, per workload, rank 0's mean committed tokens per step while it ran ({} without rank 0's log)."""
    return experiment_condition.capped_probe(results, logs, ranks)


def dsv41_experiment_distribution(results, conditions, condition, bins=None):
    """{workload: chi-square figures} of a sampled condition against the run's baseline (the record's
    table); {} for the baseline itself or when nothing was sampled."""
    return experiment_condition.distribution(results, conditions, condition, bins)


# The value a switch is evaluated at when it is unset and an arm needs it forwarded: its off value.
# the per-layer budgets' off value is zero for both layers (a bare "0" is not LAYER:GiB pairs)
_PROBE_VALUES = {"DSV41_DRAFT_TAU": "1", "DSV41_CACHE_LAYER_GIB": "1:0,14:0"}


def dsv41_forward_probe(settings, definition):
    """``settings`` plus, for every switch an arm (or the definition) requires forwarded that the baseline
    leaves unset, that switch at its off value ("0"; "1" for the draft temperature). Only the forward
    check evaluates these settings: nothing is written with them."""
    out = dict(settings or {})
    definition = definition or {}
    base = dict(out, **(((definition.get("baseline") or {}).get("settings")) or {}))
    wanted = list((definition.get("requires") or {}).get("switches_forwarded") or [])
    for arm in definition.get("arms") or []:
        wanted += (arm.get("requires") or {}).get("switches_forwarded") or []
    for name in wanted:
        if base.get(name) is None:
            out[name] = _PROBE_VALUES.get(name, "0")
    return out


def dsv41_experiment_boot_facts(logs, ranks):
    """What the preconditions read from every rank's latest boot: memory left after capture per host and
    rank 0's folded-sampling decision (module_utils/experiment/evidence.py: boot_memory_facts)."""
    return experiment_evidence.boot_memory_facts(logs or {}, ranks or {})


def dsv41_experiment_fatal_lines(tails, ranks):
    """Fatal lines of each rank's latest boot, "host rank r: line" (why a condition did not come up)."""
    return experiment_checks.fatal_lines(tails or {}, ranks or {})


def dsv41_snapshot_compare(before, after):
    """{"equal": bool, "differences": {host: [item: a -> b]}} of two fleet snapshots."""
    return snapshot.compare(before or {}, after or {})


def dsv41_experiment_needs_profile(evidence):
    """True when an arm's evidence reads the profile trace (``when: profile``)."""
    return experiment_checks.needs_profile(evidence)


def dsv41_experiment_exposed_failures(exposed, arm_us, conditions, ranks):
    """Ranks whose exposed time (profile traces) did not fall below the baseline's, when the definition asks.
    ``conditions`` is the run's conditions so far (the baseline's ``exposed_us`` is read from it)."""
    return experiment_condition.exposed_failures(exposed, arm_us, conditions, ranks)


def dsv41_experiment_exposed_by_host(profiles):
    """{host: exposed us or None} from {host: engine_profile_trace result, or {} where not profiled}.
    (Jinja's ``map(attribute=..., default=none)`` has no default at all, so the None is made here.)"""
    return experiment_condition.exposed_by_host(profiles)


def dsv41_experiment_phase_seconds(clock):
    """Seconds of each phase of a condition (apply, boot, benchmark, evidence, total) from its clock marks."""
    return experiment_checks.phase_seconds(clock or {})


def dsv41_experiment_workload_steps(logs, ranks, results, concurrency=1):
    """Per workload: committed tokens per step, step time and their quotient from rank 0's lines logged
    while that workload ran at ``concurrency`` (module_utils/engine_log/decode_steps.py: workload_steps)."""
    return decode_steps.workload_steps(logs or {}, ranks or {}, results or [], concurrency)


def dsv41_experiment_round_metrics(results, logs, ranks):
    """A condition's decode_bench results with committed tokens per step, step time and their quotient per
    measured round from rank 0's step lines (module_utils/engine_log/decode_steps.py: with_round_metrics), so a definition
    can judge by them."""
    return decode_steps.with_round_metrics(results or [], logs or {}, ranks or {})


def dsv41_experiment_decode_steps(logs, ranks, benchmarked=()):
    """Committed tokens per step and step time of a condition, from rank 0's Decode batch lines: at C1, C2, C4
    and at every concurrency the condition's benchmark ran (``benchmarked``; more slots adds C8)."""
    return experiment_condition.benchmark_steps(logs, ranks, benchmarked)


def dsv41_memory_ledger(logs, ranks, meminfo_before=None, meminfo_after=None):
    """{host: ledger} of a condition: rank_ledger of each rank's latest boot (module_utils/engine_log/memory_ledger.py)
    with the host's MemAvailable (GiB) read before the restart and after the boot (/proc/meminfo texts)."""
    return experiment_condition.ledger(logs, ranks, meminfo_before, meminfo_after)


def dsv41_memory_floor_failures(ledger, floor_gib):
    """Failure messages of the ranks that keep less than floor_gib for serving (empty = pass)."""
    return memory_ledger.floor_failures(ledger or {}, floor_gib)


def dsv41_by_host(hostvars, hosts, path, default=None):
    """{host: value at the dotted ``path`` of each host's variables} in the order of ``hosts`` (``default`` where
    a step is missing): module_utils/experiment/condition.py's by_host."""
    return experiment_condition.by_host(hostvars, hosts, path, default)


def dsv41_experiment_condition_record(condition, **inputs):
    """{"condition", "arm_checks"}: a measured condition's entry of experiment_conditions and of
    experiment_arm_checks, from its named inputs (module_utils/experiment/condition.py: condition_record)."""
    return experiment_condition.condition_record(condition, **inputs)


class FilterModule:
    """Experiment filters."""

    def filters(self):
        return {
            "dsv41_experiment_evidence": dsv41_experiment_evidence,
            "dsv41_campaign_drift": dsv41_campaign_drift,
            "dsv41_stage_b_estimate": dsv41_stage_b_estimate,
            "dsv41_campaign_stage": dsv41_campaign_stage,
            "dsv41_experiment_preconditions": dsv41_experiment_preconditions,
            "dsv41_experiment_same_lines": dsv41_experiment_same_lines,
            "dsv41_experiment_same_failures": dsv41_experiment_same_failures,
            "dsv41_memory_cost_failures": dsv41_memory_cost_failures,
            "dsv41_experiment_pin_images": dsv41_experiment_pin_images,
            "dsv41_experiment_image_facts": dsv41_experiment_image_facts,
            "dsv41_experiment_pinned_image_failures": dsv41_experiment_pinned_image_failures,
            "dsv41_experiment_correctness": dsv41_experiment_correctness,
            "dsv41_experiment_proposal": dsv41_experiment_proposal,
            "dsv41_experiment_capped_probe": dsv41_experiment_capped_probe,
            "dsv41_experiment_fatal_lines": dsv41_experiment_fatal_lines,
            "dsv41_snapshot_compare": dsv41_snapshot_compare,
            "dsv41_experiment_needs_profile": dsv41_experiment_needs_profile,
            "dsv41_experiment_exposed_failures": dsv41_experiment_exposed_failures,
            "dsv41_experiment_exposed_by_host": dsv41_experiment_exposed_by_host,
            "dsv41_experiment_distribution": dsv41_experiment_distribution,
            "dsv41_experiment_boot_facts": dsv41_experiment_boot_facts,
            "dsv41_forward_probe": dsv41_forward_probe,
            "dsv41_experiment_phase_seconds": dsv41_experiment_phase_seconds,
            "dsv41_experiment_decode_steps": dsv41_experiment_decode_steps,
            "dsv41_experiment_workload_steps": dsv41_experiment_workload_steps,
            "dsv41_memory_ledger": dsv41_memory_ledger,
            "dsv41_memory_floor_failures": dsv41_memory_floor_failures,
            "dsv41_driver_versions": dsv41_driver_versions, "dsv41_experiment_wo_a_modes": dsv41_experiment_wo_a_modes,
            "dsv41_experiment_cache_state": dsv41_experiment_cache_state,
            "dsv41_needle_prompts": dsv41_needle_prompts,
            "dsv41_graded_prompts": dsv41_graded_prompts,
            "dsv41_experiment_round_metrics": dsv41_experiment_round_metrics,
            "dsv41_experiment_probe_plan": dsv41_experiment_probe_plan,
            "dsv41_experiment_node_facts": dsv41_experiment_node_facts,
            "dsv41_by_host": dsv41_by_host,
            "dsv41_experiment_condition_record": dsv41_experiment_condition_record,
        }
