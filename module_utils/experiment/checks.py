# -*- coding: utf-8 -*-
"""Judging one arm on the control node: preconditions, evidence lines, correctness (standard library only).

One subject: turning what the roles gathered on every rank (latest-boot texts, the launcher's forward
lists, the image's adapters, packed state, memory, the validation ledger, the benchmark's results)
into failure messages that name the host, the rank and the missing thing. An empty list is a pass.
The filters in ``filter_plugins/experiment_filters.py`` call these; the unit tests call them directly.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.host import drm_probe
from ansible.module_utils.experiment import graded_tasks
from ansible.module_utils.experiment import quality
from ansible.module_utils.experiment import verify
from ansible.module_utils.bench.sampling import (DEFAULT_ALPHA, DEFAULT_BINS, distribution_failures,
                                                  mixed_greedy_failures)

__metaclass__ = type

_DOCKER_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) ")
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+(?: EP\d+)?)?\] ")
_GLUED = re.compile(r"(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+(?: EP\d+)?)?\] )")
_CURSOR = re.compile(r"\r|\x1b\[A")
READY_MARKS = ("Uvicorn running on",)


def messages(text):
    """Log messages of a boot text: docker timestamps, logging prefixes, tqdm redraws and glued
    records taken apart, so a pattern sees what the engine or adapter printed."""
    out = []
    for line in (text or "").replace("\r\n", "\n").split("\n"):
        line = _DOCKER_TS.sub("", line, count=1)
        for seg in _CURSOR.split(line):
            for part in _GLUED.split(seg):
                part = _PREFIX.sub("", part, count=1).rstrip()
                if part.strip():
                    out.append(part)
    return out


def split_boot(text):
    """(boot messages, run messages): the run starts after the rank's ``Uvicorn running on`` line."""
    msgs = messages(text)
    for i, m in enumerate(msgs):
        if any(mark in m for mark in READY_MARKS):
            return msgs[:i + 1], msgs[i + 1:]
    return msgs, []


def _matches(line_spec, msg):
    if "text" in line_spec:
        return line_spec["text"] in msg
    return re.search(line_spec["pattern"], msg) is not None


def _in_scope(spec_ranks, rank, head_rank=0):
    if spec_ranks == "all":
        return True
    if spec_ranks == "head":
        return rank == head_rank
    if spec_ranks == "workers":
        return rank != head_rank
    return rank in spec_ranks


def evidence_failures(evidence, logs, ranks, profiles=None):
    """Must / must-not lines of an arm's evidence on every rank in scope.

    ``logs``: host -> latest-boot text read after the measured window; ``ranks``: host -> rank;
    ``profiles``: host -> kernel names of the profile trace (``when: profile``; a host without one
    fails a must line that asks for it).
    """
    out = []
    for host in sorted(ranks, key=lambda h: ranks[h]):
        rank = ranks[host]
        boot, run = split_boot(logs.get(host, ""))
        where = {"boot": boot, "run": run, "profile": list((profiles or {}).get(host) or [])}
        for kind in ("must", "must_not"):
            for spec in evidence.get(kind, []):
                if not _in_scope(spec.get("ranks", "all"), rank):
                    continue
                when = spec.get("when", "boot")
                if host not in logs and when != "profile":
                    out.append("%s rank %d: no log read; %s cannot be shown" % (host, rank, spec["id"]))
                    continue
                hits = [m for m in where[when] if _matches(spec, m)]
                what = spec.get("text") or spec.get("pattern")
                label = {"boot": "the latest boot", "run": "the measured window", "profile": "the profile trace"}[when]
                if kind == "must" and len(hits) < spec.get("min_count", 1):
                    out.append("%s rank %d: %s missing from %s (%d of %d line(s) matching %r)"
                               % (host, rank, spec["id"], label, len(hits), spec.get("min_count", 1), what))
                elif kind == "must_not" and hits:
                    out.append("%s rank %d: %s present in %s: %r" % (host, rank, spec["id"], label, hits[0][:200]))
    return out


def same_lines(specs, logs, ranks):
    """What each ``same_as_baseline`` spec matches in every in-scope rank's latest boot: {id: {host: [messages]}}
    (None for a host whose log was not read). Recorded for every condition, so each arm is compared with the
    baseline of the same run."""
    out = {}
    for spec in specs or []:
        per = out.setdefault(spec["id"], {})
        for host in sorted(ranks, key=lambda h: ranks[h]):
            if not _in_scope(spec.get("ranks", "all"), ranks[host]):
                continue
            if host not in (logs or {}):
                per[host] = None
                continue
            per[host] = [m for m in split_boot(logs[host])[0] if _matches(spec, m)]
    return out


def same_as_baseline_failures(specs, lines, baseline_lines, ranks):
    """Ranks whose lines of a ``same_as_baseline`` spec differ from the baseline's on that rank, or where either
    side printed none or was not read (nothing then shows it unchanged). Empty = pass."""
    out = []
    for spec in specs or []:
        what = spec.get("text") or spec.get("pattern")
        mine = (lines or {}).get(spec["id"]) or {}
        base = (baseline_lines or {}).get(spec["id"])
        if base is None:
            out.append("%s: the baseline's lines matching %r were not recorded; nothing to compare with"
                       % (spec["id"], what))
            continue
        for host in sorted(ranks, key=lambda h: ranks[h]):
            if not _in_scope(spec.get("ranks", "all"), ranks[host]):
                continue
            who = "%s rank %d" % (host, ranks[host])
            a, b = mine.get(host), base.get(host)
            if a is None or b is None:
                out.append("%s: %s cannot be compared with the baseline (%s log not read)"
                           % (who, spec["id"], "the arm's" if a is None else "the baseline's"))
            elif not b:
                out.append("%s: %s: the baseline printed no line matching %r, so nothing shows it unchanged"
                           % (who, spec["id"], what))
            elif a != b:
                pairs = [(x, y) for x, y in zip(a, b) if x != y]
                x, y = pairs[0] if pairs else ((a[len(b)] if len(a) > len(b) else "no line"),
                                               (b[len(a)] if len(b) > len(a) else "no line"))
                out.append("%s: %s differs from the baseline: %r (baseline %r)" % (who, spec["id"], x[:300], y[:300]))
    return out


# Switches that cannot be declared "off" to get their forward, with why; their forward is asked for by name
# (container_env_forward_keys) and passes nothing while they stay unset:
# - unset is not off (SPEC section 3): declaring them off would change the fleet's behaviour;
# - off is unset (a device path): a declared empty value passes nothing, so the launcher finds no forward
#   missing.
FORWARD_BY_NAME = {"SGLANG_DSPARK_FOLDED_SAMPLING": "unset is AUTO (the engine decides from the free memory), not off",
                   "DSV41_ENGRAM_DRM_NODE": "a DRM device path; unset is off",
                   "DSV41_CACHE_LAYER_GIB": "per-layer Engram budgets; unset leaves the global DSV41_CACHE_GIB"}

# The stages that write the stage ledger (dsv41_stages_passed) when they pass, for the refusal to name.
STAGE_PLAYBOOKS = {"A": "playbooks/stage_a_pack.yml", "B": "playbooks/stage_b_autotune.yml"}


def preconditions(requires, facts):
    """What an arm (or the definition) requires, against what the fleet shows. Returns failure messages.

    ``facts``: ``features`` (adapters in the image and registered), ``forwarded`` ({"head": [...],
    "worker": [...]}), ``packed`` (host -> bool), ``mem_available_gib`` (host -> float),
    ``ledger`` (list of {name, image_digest, record}), ``image_digest``, ``arms_passed`` (names),
    ``driver_version`` (host -> nvidia-smi's driver version, None where it did not answer), ``clocks`` (host ->
    the clock-lock verdict: locked, unlocked, drift or unknown), ``drm_probe`` (host -> the drm_probe module's
    result for the arm's DRM node).
    """
    out = []
    ledger = [v for v in facts.get("ledger") or [] if v.get("image_digest") == facts.get("image_digest")]
    have = set(v.get("name") for v in ledger)
    for stage in requires.get("stages_passed", []):
        if "stage_%s" % stage.lower() not in have:
            out.append("stage %s has not passed on image %s (no stage_%s entry in the stage ledger, "
                       "dsv41_stages_passed: run %s and commit the entry it proposes)"
                       % (stage, facts.get("image_digest") or "(unknown)", stage.lower(),
                          STAGE_PLAYBOOKS.get(stage.upper(), "stage %s" % stage)))
    for name in requires.get("validations", []):
        if name not in have:
            out.append("validation %s is not in the ledger for image %s" % (name, facts.get("image_digest") or "(unknown)"))
    for feature in requires.get("engine_features", []):
        if feature not in (facts.get("features") or []):
            out.append("engine feature %s: adapter not in the image or not registered in its import hook" % feature)
    fwd = facts.get("forwarded") or {}
    for switch in requires.get("switches_forwarded", []):
        missing = [path for path in ("head", "worker") if switch not in (fwd.get(path) or [])]
        if missing and switch in FORWARD_BY_NAME:
            out.append("%s is not forwarded on the %s launch path (%s: leave it undeclared and add a forward that "
                       "passes nothing while it stays unset: `ansible-playbook site.yml --tags container_env -e "
                       "container_env_add_forwards=true -e '{\"container_env_forward_keys\": [\"%s\"]}'`)"
                       % (switch, " and ".join(missing), FORWARD_BY_NAME[switch], switch))
        elif missing:
            out.append("%s is not forwarded on the %s launch path (declare it in the inventory, off, and add the "
                       "forward: `ansible-playbook site.yml --tags container_env -e container_env_add_forwards=true`)"
                       % (switch, " and ".join(missing)))
    if requires.get("packed"):
        unpacked = sorted(h for h, p in (facts.get("packed") or {}).items() if not p)
        if unpacked or not facts.get("packed"):
            out.append("packed shards required: packed=True missing on %s" % (", ".join(unpacked) or "every rank"))
    need = requires.get("memory_headroom_gib_per_rank")
    if need:
        mem = facts.get("mem_available_gib") or {}
        short = ["%s %s" % (h, "no figure" if v is None else "%.2f GiB" % v) for h, v in sorted(mem.items())
                 if v is None or v < need]
        if short or not mem:
            out.append("memory headroom %.2f GiB per rank required; short: %s" % (need, ", ".join(short) or "no figure"))
    headroom = requires.get("capture_headroom")
    if headroom:
        free = facts.get("serving_free_gib") or {}
        short = ["%s %s" % (h, "no figure" if v is None else "%.2f GiB" % v) for h, v in sorted(free.items())
                 if v is None or v < headroom["gib"]]
        if short or not free:
            out.append("capture headroom %.2f GiB per rank required%s; the latest boot left after its graph captures: "
                       "%s" % (headroom["gib"], " (for %s)" % headroom["grants"] if headroom.get("grants") else "",
                               ", ".join(short) or "no rank's boot was read"))
    if requires.get("folded_sampling"):
        decision = facts.get("folded_sampling") or {}
        if decision.get("folded") is not True:
            out.append("folded sampling is not active on the running fleet (rank 0: %s%s): draft temperature does "
                       "nothing while the proposal is not folded; read the decision first (unset is AUTO, not off)"
                       % (decision.get("decision") or "not logged",
                          ": %r" % decision["line"] if decision.get("line") else ""))
    drivers = requires.get("driver_version")
    if drivers:
        seen = facts.get("driver_version") or {}
        off = ["%s %s" % (h, v or "unknown") for h, v in sorted(seen.items()) if v not in drivers]
        if off or not seen:
            out.append("GPU driver %s required on every rank; found: %s" % (
                " or ".join(drivers), ", ".join(off) or "no rank answered nvidia-smi"))
    want = requires.get("clocks")
    if want:
        seen = facts.get("clocks") or {}
        off = ["%s %s" % (h, v or "unknown") for h, v in sorted(seen.items()) if v != want]
        if off or not seen:
            out.append("clocks %s required on every rank (from the journal of this boot); found: %s" % (
                want, ", ".join(off) or "no rank's clock state was read"))
    probe = requires.get("drm_probe")
    if probe is not None:
        seen = facts.get("drm_probe") or {}
        if not seen:
            out.append("DRM driver compatibility probe required before the arm; no rank was probed")
        for host, result in sorted(seen.items()):
            out.extend("DRM probe on %s: %s" % (host, p)
                       for p in drm_probe.problems(result, (probe or {}).get("modeset", drm_probe.MODESET_ON)))
    for arm in requires.get("arms_passed", []):
        if arm not in (facts.get("arms_passed") or []):
            out.append("arm %s must pass first in this run" % arm)
    ref = requires.get("pinned_image")
    if ref:
        seen = (facts.get("images") or {}).get(ref)
        if not seen:
            out.append("image %s was not judged (no image check ran)" % ref)
        else:
            missing = sorted(h for h, there in (seen.get("present") or {}).items() if not there)
            if missing or not seen.get("present"):
                out.append("image %s is not on %s (pull it by digest on every rank first)"
                           % (ref, ", ".join(missing) or "any rank"))
            out.extend("image %s %s" % (ref, p) for p in seen.get("problems") or [])
    return out


# An immutable image reference: repo[:tag]@sha256:<digest> (a registry digest) or sha256:<image id>.
PINNED_IMAGE_RE = re.compile(r"^(?:[a-z0-9][a-z0-9._:/-]*@)?sha256:[0-9a-f]{64}$")


def pin_images(definition, pins):
    """The definition with each ``image_pin`` arm resolved against ``pins`` (name -> reference): the arm sets
    ``IMAGE`` to the pinned reference and requires that image judged. Returns (definition, problems): a
    pin missing or not immutable (a tag moves; a comparison against it means nothing) is a problem."""
    pins = pins or {}
    problems, arms = [], []
    for arm in definition.get("arms", []):
        name = arm.get("image_pin")
        if name is None:
            arms.append(arm)
            continue
        ref = pins.get(name)
        if not ref:
            problems.append("arm %s: no image pinned as %s (set experiment_image_pins.%s to repo@sha256:<digest> in "
                            "the inventory)" % (arm["name"], name, name))
        elif not PINNED_IMAGE_RE.match(str(ref)):
            problems.append("arm %s: experiment_image_pins.%s is %s, not pinned by digest (repo@sha256:<64 hex> or "
                            "an image id sha256:<64 hex>; a tag can move under the comparison)" % (arm["name"], name, ref))
        ref = str(ref or "")
        arms.append(dict(arm, settings={"IMAGE": ref}, requires=dict(arm.get("requires") or {}, pinned_image=ref),
                         labels=dict(arm.get("labels") or {}, image=ref)))
    return dict(definition, arms=arms), problems


# The prompt set the short_prefill check sends (roles/benchmark/files/prompts/short.json: a few tokens each).
SHORT_WORKLOAD = "short"


def correctness_failures(checks, results, run_logs=None, baseline=None, mixed=None, probes=None):
    """Named correctness checks against the arm's decode_bench results and its rank-0 run log.
    ``baseline`` ({"results", "mixed_results", "capped_probe"} of the baseline measured in this run; None while
    the baseline itself is judged) and ``mixed`` (this condition's mixed greedy/sampled batches) serve the
    checks that compare two conditions (stage H). ``probes``: this condition's own probes, kept apart from its
    measured results: ``proposal`` (the logprob probe's decode_bench results) and ``capped`` ({"results",
    "steps"} of the greedy probe under the cap)."""
    out = []
    probes = probes or {}
    results = results or []
    for check in checks:
        name, args = check["name"], check.get("args") or {}
        if name == "greedy_repeat_identical":
            for r in results:
                if r.get("distinct_outputs", 1) > 1:
                    out.append("greedy_repeat_identical: %s C%d gave %d distinct outputs for one prompt"
                               % (r["workload"], r["concurrency"], r["distinct_outputs"]))
        elif name == "greedy_concurrent_identical":
            want = args.get("concurrency", 2)
            by_prompt = {}
            for r in results:
                for pid, digests in (r.get("output_digests") or {}).items():
                    by_prompt.setdefault((r["workload"], pid), set()).update(digests)
            if not any(int(r["concurrency"]) >= want for r in results):
                out.append("greedy_concurrent_identical: nothing measured at C%d" % want)
            for (workload, pid), digests in sorted(by_prompt.items()):
                if len(digests) > 1:
                    out.append("greedy_concurrent_identical: %s prompt %s answered %d ways across concurrency"
                               % (workload, pid, len(digests)))
        elif name == "finite_outputs":
            for host, text in sorted((run_logs or {}).items()):
                bad = [m for m in split_boot(text)[1] if "NaN in the logits" in m]
                if bad:
                    out.append("finite_outputs: %s logged %d non-finite sampling error(s): %r" % (host, len(bad), bad[0]))
            for r in results:
                if r.get("degenerate_outputs"):
                    out.append("finite_outputs: %s C%d %d answer(s) made of one repeated token"
                               % (r["workload"], r["concurrency"], r["degenerate_outputs"]))
        elif name == "short_prefill":
            short = [r for r in results if r.get("workload") == SHORT_WORKLOAD]
            if not short:
                out.append("short_prefill: no prompt of the %r set was answered" % SHORT_WORKLOAD)
            for r in short:
                if r.get("failed_requests") or not r.get("complete", True):
                    out.append("short_prefill: %s C%d %d of the short prompts failed (%s)" % (
                        r["workload"], r["concurrency"], r.get("failed_requests") or 0,
                        ", ".join("%s x%d" % kv for kv in sorted((r.get("error_codes") or {}).items())) or "incomplete"))
                odd = dict((k, v) for k, v in (r.get("finish_reasons") or {}).items() if k not in ("stop", "length"))
                if odd:
                    out.append("short_prefill: %s C%d finished %s" % (r["workload"], r["concurrency"], odd))
        elif name == "no_abort":
            for r in results:
                n = (r.get("finish_reasons") or {}).get("abort", 0)
                if n:
                    out.append("no_abort: %s C%d %d repetition(s) ended in abort" % (r["workload"], r["concurrency"], n))
        elif name == "sampled_distribution":
            if baseline is not None:
                out += distribution_failures(results, baseline.get("results"), args.get("alpha", DEFAULT_ALPHA),
                                             args.get("bins", DEFAULT_BINS))[0]
        elif name == "proposal_distribution":
            out += verify.proposal_failures(probes.get("proposal"), args.get("alpha", verify.DEFAULT_ALPHA),
                                                   args.get("bins", verify.DEFAULT_BINS),
                                                   args.get("min_positions", verify.MIN_POSITIONS))[0]
        elif name == "capped_block":
            out += verify.capped_failures(probes.get("capped"),
                                                 None if baseline is None else baseline.get("capped_probe") or {})
        elif name == "greedy_matches_baseline":
            if baseline is not None:
                out += quality.greedy_match_failures(results, baseline.get("results"))
        elif name == "graded_tasks":
            # graded on the head by the graded_answers module (an answer's code runs only inside bubblewrap); its
            # failures join these. Here: that there were answers to grade at all.
            if not [r for r in results if r.get("workload") == graded_tasks.WORKLOAD]:
                out.append("graded_tasks: no graded task was answered")
        elif name == "long_context_needles":
            out += quality.needle_failures(results, args.get("tokens") or quality.DEFAULT_NEEDLE_TOKENS)
        elif name == "mixed_batch_greedy":
            if not mixed:
                out.append("mixed_batch_greedy: no mixed greedy/sampled batch was sent")
            elif baseline is not None:
                out += mixed_greedy_failures(mixed, baseline.get("mixed_results"))
        else:
            out.append("%s: not evaluated by this version of the experiment role" % name)
    if not results:
        out.append("correctness: no answer was collected")
    return out


FATAL_RE = re.compile(r"(Error|Exception|retrieval failed|engine drifted|Not enough memory)")


def fatal_lines(tails, ranks):
    """Each rank's own fatal lines (a traceback's last line, an Engram abort, a drifted symbol), named by
    host and rank, from the end of its latest boot: why a condition did not come up."""
    out = []
    for host in sorted(tails, key=lambda h: ranks.get(h, 0)):
        for msg in messages(tails[host]):
            line = "%s rank %s: %s" % (host, ranks.get(host, "?"), msg.strip()[:300])
            if FATAL_RE.search(msg) and line not in out and not msg.lstrip().startswith(("File ", "^")):
                out.append(line)
    return out


def needs_profile(evidence):
    """True when an arm's evidence reads the profile trace (an item with ``when: profile``)."""
    return any(spec.get("when") == "profile" for kind in ("must", "must_not") for spec in (evidence or {}).get(kind, []))


PHASES = (("apply_s", "start", "applied"), ("boot_s", "applied", "booted"), ("benchmark_s", "booted", "measured"),
          ("evidence_s", "measured", "judged"), ("total_s", "start", "judged"))


def phase_seconds(clock):
    """Seconds of each phase of one condition from its clock marks (epoch seconds): apply the settings,
    boot, benchmark, evidence and checks (profile and log reads included), total. A phase whose marks
    are missing (the condition stopped before it) is None."""
    def mark(name):
        try:
            return float(clock[name])
        except (KeyError, TypeError, ValueError):
            return None
    out = {}
    for name, a, b in PHASES:
        ta, tb = mark(a), mark(b)
        out[name] = round(tb - ta, 1) if ta is not None and tb is not None else None
    return out


def exposed_failures(exposed, arm_us, baseline_us, ranks):
    """With ``exposed.must_fall``: ranks whose exposed time (us per profiled step) did not fall below the
    baseline's, or that have no figure on either side. Empty = pass (or nothing asked)."""
    if not exposed or not exposed.get("must_fall"):
        return []
    out = []
    for host in sorted(ranks, key=lambda h: ranks[h]):
        a, b = (arm_us or {}).get(host), (baseline_us or {}).get(host)
        who = "%s rank %s" % (host, ranks[host])
        if a is None or b is None:
            out.append("profile: %s has no exposed %s time (baseline %s, arm %s us)" % (who, exposed["name"], b, a))
        elif not a < b:
            out.append("profile: exposed %s time did not fall on %s: %.1f -> %.1f us per profiled step"
                       % (exposed["name"], who, b, a))
    return out


def image_facts(presence, checks):
    """{ref: {"present": {host: bool}, "problems": [...], "checks": {...}, "image_id"}} from the registered
    loops: ``presence`` {host: [{"item": ref, "rc": int}, ...]} (docker image inspect on every rank) and
    ``checks`` [{"item": ref, "failed", "msg", "problems", "checks", "image_id"}] (engine_image_check on the
    head; a failed run's message is its one problem)."""
    out = {}

    def entry(ref):
        return out.setdefault(ref, {"present": {}, "problems": [], "checks": {}, "image_id": ""})
    for host, results in sorted((presence or {}).items()):
        for r in results or []:
            entry(r["item"])["present"][host] = r.get("rc") == 0
    for r in checks or []:
        entry(r["item"]).update(checks=r.get("checks") or {}, image_id=r.get("image_id") or "",
                                problems=list(r.get("problems") or []) or (
                                    [r.get("msg") or "the image check failed"] if r.get("failed") else []))
    return out


def pinned_image_failures(image_ids, ref, images):
    """Evidence failures of a condition that pins ``ref``: every rank whose engine runs another image id than
    the one the pin resolved to on the head (``images[ref]["image_id"]``). [] when nothing is pinned."""
    if not ref:
        return []
    want = ((images or {}).get(ref) or {}).get("image_id") or ""
    return ["pinned image: %s runs %s, not %s (%s)" % (h, got or "no readable container", want or "(unresolved)", ref)
            for h, got in sorted((image_ids or {}).items()) if not want or got != want]


DEFAULT_SLOTS = 4


def probe_plan(base, workloads, settings):
    """What an untimed condition (a validation phase, stage E's CHECK) sends: ``base`` (the role's probe plan)
    over every workload of the definition at every concurrency from 1 to the condition's request slots
    (``MAX_RUNNING_REQUESTS``), so every CUDA graph shape the engine captured is warmed before the timed
    comparison (the report: warm all graph shapes before comparing synchronous and prefetched rows)."""
    plan = dict(base or {})
    if workloads:
        plan["workloads"] = list(workloads)
    try:
        slots = int(str((settings or {}).get("MAX_RUNNING_REQUESTS") or DEFAULT_SLOTS).strip())
    except ValueError:
        slots = DEFAULT_SLOTS
    plan["concurrency"] = list(range(1, max(1, min(slots, 64)) + 1))
    return plan
