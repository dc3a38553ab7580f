# -*- coding: utf-8 -*-
"""Experiment definitions (``experiments/<stage>.yml``): the schema and its validator.

One subject: what a stage definition may say, and refusing anything else before a host is touched.
A definition is data (SPEC section 4: branch from a known-good baseline, change one thing, restart,
prove it on every rank, check correctness, time it beside the baseline, record, roll back); the
``experiment`` role carries it out. Every unknown key and every unknown check name is refused with
the file and the dotted key path (``experiments/stage_c_fence.yml: arms[0].evidence.must[1].rnks:
unknown key (allowed: ...)``), so a typo can never silently drop a check.

The caller parses the YAML (the module uses PyYAML, which ships with ansible-core) and hands the
mapping to :func:`validate`; this file needs only the standard library.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.base.data_schema import (
    Context, _bool, _int_at_least, _list_of, _name, _number, _one_of, _regex, _str, _walk, yaml_load_strict)
from ansible.module_utils.experiment.arms import normalise

__metaclass__ = type

SCHEMA_VERSION = 1
STAGES = tuple("ABCDEFGHI")
MIN_REPETITIONS = 5
SWITCH_RE = re.compile(r"^(?:DSV41|SGLANG|DSPARK)_[A-Z0-9_]+$")

def _int_between(low, high):
    def check(where, value, ctx):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            ctx.fail(where, "must be an integer %d..%d, got %r" % (low, high, value))
    return check


# Checks made on the answers the engine gives (the role runs them; the names are the interface).
CORRECTNESS_CHECKS = {
    "greedy_repeat_identical": "the same greedy request sent `repeats` times gives one output per prompt",
    "greedy_concurrent_identical": "greedy outputs at `concurrency` streams equal the single-stream ones",
    "finite_outputs": "every answer completes (stop/length), no error event, no non-finite logits in any log",
    "short_prefill": "prompts of a few tokens complete (the short-prefill path)",
    "no_abort": "no repetition ended in an error event or finish_reason abort",
    "sampled_distribution": "the arm's sampled answers follow the baseline's word distribution (chi-square test of "
                            "homogeneity per workload, p >= `alpha`, default 0.001; module_utils/bench/sampling.py)",
    "mixed_batch_greedy": "greedy requests in batches mixed with sampled ones (`greedy_streams` of `concurrency`) give "
                          "the baseline's greedy answers",
    "proposal_distribution": "sampled requests ask for the target's logprobs (`top_logprobs`, default 20); every "
                             "committed token's randomised probability integral transform in the reported "
                             "distribution (the request's temperature, top-p and top-k; the unreported rest one bucket) "
                             "is uniform, pooled per workload over at least `min_positions` (500) positions: "
                             "chi-square over `bins` (10), p >= `alpha` (0.001). It holds only if speculative "
                             "acceptance uses the distribution the draft proposed from; no logprobs fails "
                             "(module_utils/experiment/verify.py)",
    "capped_block": "dead verify rows under the confidence cap are never committed: a greedy probe (every workload, "
                    "C1, one round) answers as the uncapped baseline's prompt by prompt, and rank 0's mean committed "
                    "tokens per step on it is never above the baseline's (module_utils/experiment/verify.py)",
    "greedy_matches_baseline": "the arm's greedy answers equal the baseline's prompt by prompt on every prompt set both "
                               "measured; a failure names the prompt and shows both answers (module_utils/experiment/quality.py)",
    "graded_tasks": "every answer to the graded task set is right: code that runs and passes its asserts (run only "
                    "inside bubblewrap on the head), JSON with the asked keys, types and values, math with the "
                    "checked final answer; `kinds` chooses code, json, math (default all; module_utils/experiment/graded_tasks.py)",
    "long_context_needles": "a pass code hidden half-way into about `tokens` tokens of filler (default 30,000 and "
                            "100,000) comes back in the greedy answer (long-context retrieval)",
}
CHECK_PARAMS = {
    "greedy_repeat_identical": {"repeats": int},
    "greedy_concurrent_identical": {"concurrency": int},
    "finite_outputs": {},
    "short_prefill": {"max_prompt_tokens": int},
    "no_abort": {},
    "sampled_distribution": {"alpha": float, "bins": int},
    "mixed_batch_greedy": {"concurrency": int, "greedy_streams": int},
    # concurrency: streams of the logprob probe; max_tokens: its answer length (default the plan's); logprobs:
    # what the engine reports (tempered: SGLang's default; original: SGLANG_RETURN_ORIGINAL_LOGPROB set)
    "proposal_distribution": {"alpha": float, "bins": _int_between(2, 100), "top_logprobs": _int_between(1, 20),
                              "min_positions": int, "concurrency": int, "max_tokens": int,
                              "logprobs": _one_of(("tempered", "original"))},
    "capped_block": {"max_tokens": int},
    "greedy_matches_baseline": {},
    "long_context_needles": {"tokens": list},
    "graded_tasks": {"kinds": ("code", "json", "math")},    # a tuple: a list of these
}
# Evidence read by the existing modules on every rank's latest boot (named, not regexes).
EVIDENCE_CHECKS = {
    "boot_healthy": "engine_boot_log: every rank booted, no fatal line; the head printed Ready",
    "graph_capture_clean": "target and draft verify CUDA graphs captured (begin and end) on every rank",
    "packed_all": "engram_packed: packed=True for layers 1 and 14 on every rank",
    "kv_pool": "kv_pool: the pool each rank allocated, rounding told apart from a clamp",
    "autotune_agreement": "every rank did the same with its autotune cache (all reused or all tuned; no partial hit)",
    "rank_consistency": "every rank booted with the same block size, slots, chunk and context length",
    "folded_decision": "rank 0 logged its folded-sampling decision (folded, greedy only, eager, or AUTO short of memory)",
    "wo_a_mode": "wo_a_w8 judged in the mode it logged on every rank (einsum bridge on today's image, kernel "
                 "replacement on the canary): every rank in the same mode; with DROP in bridge mode the draft's "
                 "wo_a kept on bf16 and said so",
}
# Figures an acceptance rule may compare, and which direction is better.
METRICS = {
    "aggregate_tok_s": "higher",
    "per_stream_tok_s": "higher",
    "ttft_ms": "lower",
    "step_ms": "lower",
    "committed_per_step": "higher",
    "committed_per_s": "higher",     # committed tokens per step / step time, per round (decode_steps.round_metrics)
}
WIN_RULES = ("separation",)
HOOKS = ("clock_state",)
SAMPLING_MODES = ("greedy", "sampled")
RANK_SETS = ("all", "head", "workers")
WHEN = ("boot", "run", "profile")


class DefinitionError(ValueError):
    """A definition that cannot be run; the message names the file and the key."""


# ---------------------------------------------------------------------------------------------
# A small declarative schema: {"type": ..., "keys": {...}, "required": (...), "items": spec}
# ---------------------------------------------------------------------------------------------


def _settings(where, value, ctx):
    """Launcher settings of an arm: NAME -> scalar string/number, or null (remove the key)."""
    if not isinstance(value, dict):
        ctx.fail(where, "must be a mapping of launcher setting -> value")
    for key, val in value.items():
        if not isinstance(key, str) or not re.match(r"^[A-Z_][A-Z0-9_]*$", key):
            ctx.fail("%s.%s" % (where, key), "is not a launcher setting name (upper case)")
        if key == "API_KEY":
            ctx.fail("%s.%s" % (where, key), "secrets never appear in a definition")
        if val is not None and (isinstance(val, (bool, dict, list))):
            ctx.fail("%s.%s" % (where, key), "must be a string or a number (quoted \"1\" for switches), got %r"
                     % (val,))


def _switch_list(where, value, ctx):
    if not isinstance(value, list):
        ctx.fail(where, "must be a list of switch names")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not SWITCH_RE.match(item):
            ctx.fail("%s[%d]" % (where, i), "is not an engine switch name (DSV41_/SGLANG_/DSPARK_), got %r" % (item,))


def _named_checks(registry, params):
    """A list whose items are a check name or {name: {param: value}}; unknown names refused."""
    def check(where, value, ctx):
        if not isinstance(value, list):
            ctx.fail(where, "must be a list of check names")
        for i, item in enumerate(value):
            at = "%s[%d]" % (where, i)
            if isinstance(item, dict) and len(item) == 1:
                name, args = list(item.items())[0]
            else:
                name, args = item, {}
            if not isinstance(name, str) or name not in registry:
                ctx.fail(at, "unknown check %r (known: %s)" % (name, ", ".join(sorted(registry))))
            if args is None:
                args = {}
            if not isinstance(args, dict):
                ctx.fail("%s.%s" % (at, name), "parameters must be a mapping")
            allowed = (params or {}).get(name, {})
            for key, val in args.items():
                if key not in allowed:
                    ctx.fail("%s.%s.%s" % (at, name, key), "unknown parameter (allowed: %s)"
                             % (", ".join(sorted(allowed)) or "none"))
                if allowed[key] is int:
                    _int_at_least(1)("%s.%s.%s" % (at, name, key), val, ctx)
                elif allowed[key] is list:      # a list of token counts (long_context_needles.tokens)
                    if not isinstance(val, list) or not val:
                        ctx.fail("%s.%s.%s" % (at, name, key), "must be a non-empty list of token counts")
                    for j, n in enumerate(val):
                        if isinstance(n, bool) or not isinstance(n, int) or not 1000 <= n <= 1000000:
                            ctx.fail("%s.%s.%s[%d]" % (at, name, key, j), "%r is not a token count 1,000..1,000,000" % (n,))
                elif allowed[key] is float:
                    _probability("%s.%s.%s" % (at, name, key), val, ctx)
                elif callable(allowed[key]):            # its own validator (a bounded count, one of a few words)
                    allowed[key]("%s.%s.%s" % (at, name, key), val, ctx)
                elif isinstance(allowed[key], tuple):   # a non-empty list of these names (graded_tasks.kinds)
                    if not isinstance(val, list) or not val:
                        ctx.fail("%s.%s.%s" % (at, name, key), "must be a non-empty list of %s" % ", ".join(allowed[key]))
                    for j, n in enumerate(val):
                        if n not in allowed[key]:
                            ctx.fail("%s.%s.%s[%d]" % (at, name, key, j), "%r is not one of %s" % (n, ", ".join(allowed[key])))
    return check


def _probability(where, value, ctx):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        ctx.fail(where, "must be a number between 0 and 1 (exclusive), got %r" % (value,))


def _stage_list(where, value, ctx):
    _list_of(_one_of(STAGES))(where, value, ctx)


def _ranks(where, value, ctx):
    if isinstance(value, list):
        _list_of(_int_at_least(0))(where, value, ctx)
    else:
        _one_of(RANK_SETS)(where, value, ctx)


EVIDENCE_LINE = {
    "type": dict, "required": ("id",),
    "keys": {
        "id": _name,
        "text": _str,            # a literal substring
        "pattern": _regex,       # or a regular expression (Python re, searched per line)
        "ranks": _ranks,         # all | head | workers | [0, 2]
        # boot: the latest boot; run: lines logged while the arm was measured; profile: kernel names of
        # the engine's /start_profile../stop_profile trace of one measured request per shape
        "when": _one_of(WHEN),
        "min_count": _int_at_least(1),
        "why": _str,
    },
}
# A line the condition must print on every rank in scope exactly as the baseline of the same run printed it on
# that rank (the latest boot's matching lines, in order): what must stay as it is while something else changes
# (EP1 keeps TP3's attention, vocab and draft padding).
SAME_LINE = {
    "type": dict, "required": ("id",),
    "keys": {"id": _name, "text": _str, "pattern": _regex, "ranks": _ranks, "why": _str},
}
EVIDENCE = {
    "type": dict,
    "keys": {
        "checks": _named_checks(EVIDENCE_CHECKS, None),
        "must": {"type": list, "items": EVIDENCE_LINE},
        "must_not": {"type": list, "items": EVIDENCE_LINE},
        "same_as_baseline": {"type": list, "items": SAME_LINE},
    },
}
REQUIRES = {
    "type": dict,
    "keys": {
        "stages_passed": _stage_list,                 # validations ledger entries "stage_<x>" for this image
        "validations": _list_of(_name),               # ledger entries keyed by image digest
        "engine_features": _list_of(_name),           # adapters in the image and registered in the hook
        "memory_headroom_gib_per_rank": _number,      # MemAvailable every rank keeps after the arm's boot
        "switches_forwarded": _switch_list,           # on both launch paths (head and worker)
        "packed": _bool,                              # six packed=True before anything is changed
        "arms_passed": _list_of(_name),               # earlier arms of this definition (same run)
        # GPU memory every rank's latest boot left after its graph captures (the memory ledger of the fleet
        # as it runs, read before anything changes); when it holds, the arm's boot is allowed the guardrail
        # validation `grants` (e.g. folded_sampling_budget: forced folded sampling's static buffers fit)
        "capture_headroom": {"type": dict, "required": ("gib",), "keys": {"gib": _number, "grants": _name}},
        "folded_sampling": _bool,                     # rank 0's latest boot folded the sampled proposal
        # every rank's GPU driver is one of these (nvidia-smi --query-gpu=driver_version), e.g. the DRM
        # cache's qualified 580.173.02
        "driver_version": _list_of(_str),
        # every rank's clock-lock verdict (the journal of this boot) before anything changes: the clocks A/B
        # measures unlocked against a locked baseline
        "clocks": _one_of(("locked",)),
        # the isolated driver compatibility probe of the DRM cache, on every rank before anything changes
        # (library/drm_probe.py): the arm's DSV41_ENGRAM_DRM_NODE a character device on the host and among the
        # running serving container's devices, nvidia_drm's modeset parameter `modeset` (default Y)
        "drm_probe": {"type": dict, "keys": {"modeset": _str}},
    },
}
SAMPLING = {
    "type": dict, "required": ("mode",),
    "keys": {
        "mode": _one_of(SAMPLING_MODES),
        "temperature": _number, "top_p": _number, "top_k": _int_at_least(1), "seed": _int_at_least(0),
    },
}
BENCHMARK = {
    "type": dict, "required": ("workloads", "concurrency", "repetitions"),
    "keys": {
        "workloads": _list_of(_name),
        "concurrency": _list_of(_int_at_least(1)),
        "repetitions": _int_at_least(MIN_REPETITIONS),
        "warmups": _int_at_least(1),
        "max_tokens": _int_at_least(1),
        "sampling": SAMPLING,
        "labels": {"type": dict, "free": True},      # e.g. block_size: 3 (printed beside every figure)
    },
}
ACCEPTANCE = {
    "type": dict, "required": ("metric",),
    "keys": {
        "metric": _one_of(tuple(sorted(METRICS))),
        "rule": _one_of(WIN_RULES),
        "wins_required": _one_of(("none", "any", "all")),   # none: a correctness arm; it must only not lose
        "regression_allowed": _bool,
        "on_pass_validation": _name,                        # proposed ledger entry, keyed by image digest
        "promote": _bool,                                   # propose the arm's settings as the new baseline
    },
}
ARM = {
    "type": dict, "required": ("name",),
    "keys": {
        "name": _name,
        "description": _str,
        "settings": _settings,
        # work that is not a launcher setting, run by the experiment role; clock_state: the clock-lock role's
        # unlocked state for this arm, the snapshot's state restored after (an image pin or a driver probe is
        # not a hook the role runs: refused here rather than run an arm that changes nothing)
        "hook": _one_of(HOOKS),
        # another engine image, named by a pin the inventory holds (experiment_image_pins: name -> an immutable
        # reference); the arm sets IMAGE to it and may run only once the image checks pass on the head
        "image_pin": _name,
        "requires": REQUIRES,
        "evidence": EVIDENCE,
        "correctness": _named_checks(CORRECTNESS_CHECKS, CHECK_PARAMS),
        "timed": _bool,                                     # false: a validation phase, never timed
        "benchmark": BENCHMARK,                             # overrides the definition's plan
        "labels": {"type": dict, "free": True},
        "acceptance": dict(ACCEPTANCE, required=()),        # key by key over the shared rule
    },
}
MEMORY_REFERENCE = {
    "type": dict, "required": ("arm", "vs", "mib"),
    "keys": {
        "arm": _name,          # the condition measured
        "vs": _name,           # against this condition (baseline or an arm)
        "mib": lambda where, value, ctx: None if isinstance(value, (int, float)) and not isinstance(value, bool)
        else ctx.fail(where, "must be a number of MiB (negative = saved), got %r" % (value,)),
        "what": _str,          # which figure: weights (default)
        "why": _str,           # where the reference comes from (the report)
    },
}
MEMORY = {
    "type": dict,
    "keys": {
        "floor_gib": _number,                    # every rank keeps at least this for serving, or the arm fails
        "compare_with": _list_of(_name),         # conditions each arm's ledger is differenced against
        "reference": {"type": list, "items": MEMORY_REFERENCE},   # figures printed beside the measured ones
        # each arm's memory cost against the baseline of the same run, on every rank (extra weights plus what it
        # leaves less for serving, and the drop of MemAvailable after the boot), within the arm's stated
        # requires.memory_headroom_gib_per_rank, or the arm fails naming the rank and the figures
        "cost_within_headroom": _bool,
    },
}
PROFILE = {
    "type": dict,
    "keys": {
        # time on the compute stream of the kernels the pattern names, read from every rank's profile trace
        # of the baseline and of each timed arm (module_utils/engine_log/profile_trace.py: exposed_us)
        "exposed": {"type": dict, "required": ("name", "pattern"),
                    "keys": {"name": _name, "pattern": _regex, "must_fall": _bool}},
    },
}
DEFINITION = {
    "type": dict, "required": ("schema_version", "name", "stage", "description", "arms", "benchmark",
                               "acceptance"),
    "keys": {
        "schema_version": _one_of((SCHEMA_VERSION,)),
        "name": _name,
        "stage": _one_of(STAGES),
        "description": _str,
        "applicable_if": {"type": dict, "keys": {"engine_features": _list_of(_name)}},
        "requires": REQUIRES,
        "baseline": {"type": dict, "keys": {"settings": _settings, "labels": {"type": dict, "free": True}}},
        "evidence": EVIDENCE,
        "correctness": _named_checks(CORRECTNESS_CHECKS, CHECK_PARAMS),
        "benchmark": BENCHMARK,
        "acceptance": ACCEPTANCE,
        "memory": MEMORY,                                # the memory ledger's floor, comparisons, references
        "profile": PROFILE,                              # figures read from the profile traces (exposed time)
        # the report's block-size rank: committed tokens per speculative step / step time, per workload, from
        # rank 0's Decode batch lines logged while that workload ran at `concurrency` (default 1)
        "ranking": {"type": dict, "keys": {"concurrency": _int_at_least(1)}},
        # figures tabled beside the acceptance metric (per-stream and aggregate rates for more slots): the
        # rates decode_bench keeps per repetition
        "report": {"type": dict, "keys": {"metrics": _list_of(_one_of(("aggregate_tok_s", "per_stream_tok_s"))),
                                          # sample every rank's GPU (clock, power, heat) over each measured window
                                          "telemetry": _bool,
                                          # rank 0's accept length per concurrency, each arm beside the baseline
                                          "accept_length": _bool}},
        "arms": {"type": list, "items": ARM, "min_items": 1},
    },
}


def _cross_checks(doc, ctx, stem):
    """Rules across keys (one change per arm, names unique, evidence lines well formed)."""
    if stem and doc["name"] != stem:
        ctx.fail("name", "%r must equal the file name %r (the record and the playbook are named after it)"
                 % (doc["name"], stem))
    names = [arm["name"] for arm in doc["arms"]]
    for i, arm in enumerate(doc["arms"]):
        at = "arms[%d]" % i
        if arm["name"] == "baseline" or names.count(arm["name"]) > 1:
            ctx.fail(at + ".name", "%r is reserved or used twice" % arm["name"])
        if sum(key in arm for key in ("settings", "hook", "image_pin")) != 1:
            ctx.fail(at, "an arm has exactly one of settings, hook or image_pin (one change per arm)")
        if "settings" in arm and not arm["settings"]:
            ctx.fail(at + ".settings", "is empty: an arm changes one thing")
        for dep in arm.get("requires", {}).get("arms_passed", []):
            if dep not in names[:i]:
                ctx.fail(at + ".requires.arms_passed", "%r is not an earlier arm of this definition" % dep)
        if arm.get("timed", True) is False and "benchmark" in arm:
            ctx.fail(at + ".benchmark", "an untimed arm (timed: false) has no benchmark plan")
    _cache_ways_rule(doc, ctx)
    _drm_budget_rule(doc, ctx)
    known = ["baseline"] + names
    for i, name in enumerate(doc.get("memory", {}).get("compare_with", [])):
        if name not in known:
            ctx.fail("memory.compare_with[%d]" % i, "%r is not the baseline or an arm of this definition" % name)
    for i, ref in enumerate(doc.get("memory", {}).get("reference", [])):
        for key in ("arm", "vs"):
            if ref[key] not in known:
                ctx.fail("memory.reference[%d].%s" % (i, key), "%r is not the baseline or an arm of this definition"
                         % ref[key])
    if doc.get("memory", {}).get("cost_within_headroom"):
        for i, arm in enumerate(doc["arms"]):
            need = dict(doc.get("requires") or {}, **(arm.get("requires") or {})).get("memory_headroom_gib_per_rank")
            if not need:
                ctx.fail("arms[%d].requires" % i, "memory.cost_within_headroom judges each arm against its stated "
                         "memory_headroom_gib_per_rank, which %s does not give" % arm["name"])
    for where, evidence in _evidence_blocks(doc):
        for kind in ("must", "must_not", "same_as_baseline"):
            for j, line in enumerate(evidence.get(kind, [])):
                at = "%s.%s[%d]" % (where, kind, j)
                if ("text" in line) == ("pattern" in line):
                    ctx.fail(at, "give exactly one of text (literal) or pattern (regex)")


def _gib(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _cache_ways_rule(doc, ctx):
    """Engram row-cache ways matter only with a non-zero cache (SPEC section 3): an arm that changes
    DSV41_CACHE_WAYS where its cache (its own DSV41_CACHE_GIB, else the baseline's) is zero measures nothing."""
    base = doc.get("baseline", {}).get("settings", {})
    for i, arm in enumerate(doc["arms"]):
        own = arm.get("settings") or {}
        if "DSV41_CACHE_WAYS" not in own or own["DSV41_CACHE_WAYS"] == base.get("DSV41_CACHE_WAYS"):
            continue
        cache = _gib(own.get("DSV41_CACHE_GIB", base.get("DSV41_CACHE_GIB")))
        if not cache:
            ctx.fail("arms[%d].settings.DSV41_CACHE_WAYS" % i,
                     "ways matter only with a non-zero DSV41_CACHE_GIB (the arm's cache is %s)"
                     % own.get("DSV41_CACHE_GIB", base.get("DSV41_CACHE_GIB", "unset")))


# The per-layer budget switch of the ported adapter (engine feature engram_layer_budget): "L:GiB" pairs.
LAYER_BUDGET_KEY = "DSV41_CACHE_LAYER_GIB"


def _drm_budget_rule(doc, ctx):
    """The report: raising the global Engram budget (DSV41_CACHE_GIB) also gives the non-DRM layer an ordinary
    cache. An arm with a DRM node must give per-layer budgets (DSV41_CACHE_LAYER_GIB) and keep the global one 0;
    a DRM probe needs the arm's DRM node to probe."""
    base = doc.get("baseline", {}).get("settings", {})
    for i, arm in enumerate(doc["arms"]):
        own = arm.get("settings") or {}
        merged = dict(base, **own)
        if merged.get("DSV41_ENGRAM_DRM_NODE") not in (None, ""):
            cache = _gib(merged.get("DSV41_CACHE_GIB"))
            if cache and merged.get(LAYER_BUDGET_KEY) in (None, ""):
                ctx.fail("arms[%d].settings.DSV41_CACHE_GIB" % i,
                         "%s raises the global Engram budget with a DRM node: that also allocates an ordinary-RAM "
                         "cache for the other layer; give per-layer budgets in %s (e.g. \"1:0,14:0.25\") and keep "
                         "DSV41_CACHE_GIB 0" % (merged.get("DSV41_CACHE_GIB"), LAYER_BUDGET_KEY))
        if "drm_probe" in dict(doc.get("requires") or {}, **(arm.get("requires") or {})) and \
                merged.get("DSV41_ENGRAM_DRM_NODE") in (None, ""):
            ctx.fail("arms[%d].requires.drm_probe" % i, "the DRM probe needs the arm's DSV41_ENGRAM_DRM_NODE (the node "
                     "to probe), which %s does not set" % arm["name"])


def _evidence_blocks(doc):
    if "evidence" in doc:
        yield "evidence", doc["evidence"]
    for i, arm in enumerate(doc["arms"]):
        if "evidence" in arm:
            yield "arms[%d].evidence" % i, arm["evidence"]


def validate(doc, source="definition", stem=None):
    """Validate a parsed definition; returns it completed with defaults (see :func:`normalise`).

    ``source`` names the file in every message; ``stem`` (the file name without ``.yml``), when
    given, must equal ``name``. Raises :class:`DefinitionError`.
    """
    ctx = Context(source, DefinitionError)
    if not isinstance(doc, dict):
        ctx.fail("", "a definition is a mapping, got %s" % type(doc).__name__)
    _walk("", doc, DEFINITION, ctx)
    _cross_checks(doc, ctx, stem)
    return normalise(doc)


def load_text(text, source="definition", stem=None, known_workloads=None):
    """Parse and validate a definition's YAML text; returns the normalised definition."""
    defn = validate(yaml_load_strict(text, source, DefinitionError, "definition"), source=source, stem=stem)
    if known_workloads is not None:
        for where, bench in [("benchmark", defn["baseline"]["benchmark"])] + [
                ("arms[%d].benchmark" % i, a["benchmark"]) for i, a in enumerate(defn["arms"]) if a["benchmark"]]:
            for j, name in enumerate(bench["workloads"]):
                if name not in known_workloads:
                    raise DefinitionError("%s: %s.workloads[%d]: unknown workload %r (known: %s)"
                                          % (source, where, j, name, ", ".join(sorted(known_workloads))))
    return defn
