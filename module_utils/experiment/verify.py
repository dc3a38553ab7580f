# -*- coding: utf-8 -*-
"""Does speculative verification commit what the target model would? Two checks (standard library only).

One subject: judging the tokens a speculative engine commits against the target alone, which is what the report
asks of the sampler switches and the confidence cap ("confirm that acceptance uses the actual proposal
distribution"; "mixed greedy/sampled batches, capped blocks, and rank agreement are required checks").

``proposal_distribution``: speculative sampling commits tokens distributed exactly as the target's own sampling
distribution only when its acceptance test and its residual use the distribution the draft actually proposed
from (with draft temperature: the tempered one). So the engine is asked for its logprobs (OpenAI chat API,
``logprobs: true, top_logprobs: N``), and each committed token is placed in the target's distribution at its
position by a randomised probability integral transform: the reported top tokens, sorted by probability, under
the request's own top-k and top-p, renormalised over what was reported, the unreported rest one "other" bucket;
the token's bucket gives ``u = F(before it) + V * p(token)`` with ``V`` uniform from a seeded generator (the
same answer gives the same values). Whatever the target distribution, ``u`` is uniform on [0, 1) and the values
of successive positions are independent when the committed tokens follow it; pooled over every position and
prompt of a workload, Pearson's chi-square over ``bins`` equal bins tests that, and an arm fails where p <
``alpha``. A token outside the request's top-k / top-p set can never be sampled: it fails the check on its own.

What the engine reports: SGLang returns the log-probabilities after the request's temperature, before top-k
and top-p (``SGLANG_RETURN_ORIGINAL_LOGPROB`` unset; ``logprobs: original`` says it is set, and the check then
applies the temperature itself: exact while the kept set lies inside the reported tokens, the usual case with
``top_k`` up to ``top_logprobs``).

``capped_block``: under the confidence cap, dead verify rows (routed to the anchor's experts, never verified)
must never be committed. What shows it: greedy answers under the cap equal the uncapped baseline's prompt by
prompt (a dead row committed is a token the target did not choose), and the mean committed tokens per step
(rank 0's ``Decode batch`` ``accept len``, the same greedy prompts at C1) never above the baseline's: the cap
can only remove acceptances, never add any.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import math
import random

from ansible.module_utils.engine_log import decode_steps
from ansible.module_utils.experiment.quality import greedy_match_failures
from ansible.module_utils.bench.sampling import chi2_sf

__metaclass__ = type

DEFAULT_ALPHA = 0.001
DEFAULT_BINS = 10
DEFAULT_TOP_LOGPROBS = 20          # the OpenAI API's largest top_logprobs
MIN_POSITIONS = 500                # fewer sampled positions in a workload: too few to judge, said so
LOGPROB_MODES = ("tempered", "original")
# Slack on the top-p cut: the engine sums probabilities in its own precision, so the cut is made only once the
# reported mass passes top-p by this much; a token on the boundary of the nucleus is kept rather than reported
# as impossible.
TOP_P_SLACK = 1e-4
OUTSIDE_EXAMPLES = 3


class VerifyCheckError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# proposal_distribution: one position
# ---------------------------------------------------------------------------------------------

def kept_distribution(top, temperature, top_p=None, top_k=None, logprobs="tempered"):
    """(buckets, other): the request's sampling distribution as the reported top tokens show it.

    ``top``: [(token, logprob), ...] as reported at one position (any order). ``buckets``: [(token, p)] in
    descending probability, the tokens top-k and top-p keep; ``other``: the probability of every token not
    reported (0 when the kept set lies inside the reported tokens). Probabilities sum to 1.
    The order follows the engine's sampler: temperature, then top-k, then top-p on the renormalised rest."""
    if logprobs not in LOGPROB_MODES:
        raise VerifyCheckError("logprobs must be one of %s, got %r" % (", ".join(LOGPROB_MODES), logprobs))
    items = []
    for token, lp in top:
        if lp is None or (isinstance(lp, float) and math.isnan(lp)):
            continue
        items.append((token, float(lp)))
    items.sort(key=lambda kv: -kv[1])
    if not items:
        return [], 1.0
    if logprobs == "original":
        # untempered figures: apply the request's temperature to what was reported, and give the unreported rest
        # one token's tempered weight (an upper bound of the tail; exact when top-k cuts inside the report)
        t = float(temperature) if temperature else 1.0
        probs = [math.exp(lp / t) for _, lp in items]
        rest = max(0.0, 1.0 - sum(math.exp(lp) for _, lp in items))
        rest = rest ** (1.0 / t) if rest > 0 else 0.0
    else:
        probs = [math.exp(lp) for _, lp in items]
        rest = max(0.0, 1.0 - sum(probs))
    tokens = [tok for tok, _ in items]
    k = int(top_k) if top_k not in (None, 0, -1) else None
    if k is not None and k <= len(tokens):
        tokens, probs, rest = tokens[:k], probs[:k], 0.0
    total = sum(probs) + rest
    probs = [p / total for p in probs]
    rest = rest / total
    if top_p is not None and float(top_p) < 1.0:
        cum = 0.0
        for i, p in enumerate(probs):
            cum += p
            if cum >= float(top_p) + TOP_P_SLACK:
                tokens, probs, rest = tokens[:i + 1], probs[:i + 1], 0.0
                break
        else:
            # the nucleus reaches past the reported tokens: the rest it takes is what top-p still needs
            rest = min(rest, max(0.0, float(top_p) - cum))
        total = sum(probs) + rest
        probs = [p / total for p in probs]
        rest = rest / total
    return list(zip(tokens, probs)), rest


def pit_value(buckets, other, token, v, reported=()):
    """The randomised PIT value of ``token`` (``v`` uniform in [0, 1)), or None when the token is outside the
    kept set: a reported token top-k or top-p cut (``reported``: the position's reported tokens), or an
    unreported one where nothing unreported is kept."""
    before = 0.0
    for tok, p in buckets:
        if tok == token:
            return min(before + v * p, 1.0 - 1e-12)
        before += p
    if token in reported or other <= 0.0:
        return None
    return min(before + v * other, 1.0 - 1e-12)


def _top_pairs(entry):
    out = []
    for alt in entry.get("top_logprobs") or []:
        if isinstance(alt, dict) and "token" in alt:
            out.append((alt["token"], alt.get("logprob")))
    return out


def request_pits(content, sampling, key, logprobs="tempered"):
    """(values, outside) of one answer's ``logprobs.content`` (a list of {token, logprob, top_logprobs}).
    ``sampling``: the request's temperature, top_p, top_k; ``key``: what seeds the randomisation (the same
    answer, the same values). ``outside``: [(position, token, logprob)] of tokens outside the kept set."""
    rng = random.Random(int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], 16))
    values, outside = [], []
    for pos, entry in enumerate(content or []):
        if not isinstance(entry, dict):
            continue
        top = _top_pairs(entry)
        token = entry.get("token")
        buckets, other = kept_distribution(top, sampling.get("temperature"), sampling.get("top_p"),
                                           sampling.get("top_k"), logprobs)
        v = rng.random()
        u = pit_value(buckets, other, token, v, set(t for t, _ in top)) if buckets else None
        if u is None:
            outside.append([pos, token, entry.get("logprob")])
        else:
            values.append(round(u, 6))
    return values, outside


def condition_pits(requests, settings, logprobs="tempered"):
    """What a condition's sampled requests say about the proposal, for the record and the check:
    {"requests", "without_logprobs", "positions", "pit" (values), "outside" (count), "outside_examples"}.
    Requests are the decode_bench request records (``logprobs``: the answer's ``logprobs.content``, None when
    the engine sent none); a repeated (prompt, answer) counts once (a fixed seed samples alike)."""
    sampling = {"temperature": settings.get("temperature"), "top_p": settings.get("top_p"),
                "top_k": settings.get("top_k")}
    seen = set()
    out = {"requests": 0, "without_logprobs": 0, "positions": 0, "pit": [], "outside": 0, "outside_examples": []}
    for r in requests:
        if r.get("greedy") is not False:
            continue
        out["requests"] += 1
        content = r.get("logprobs")
        if not content:
            out["without_logprobs"] += 1
            continue
        ident = (r.get("prompt_id"), r.get("text"))
        if ident in seen:
            continue
        seen.add(ident)
        digest = hashlib.sha256((r.get("text") or "").encode("utf-8")).hexdigest()[:16]
        values, outside = request_pits(content, sampling, "%s|%s|%s" % (settings.get("seed"), r.get("prompt_id"),
                                                                         digest), logprobs)
        out["pit"].extend(values)
        out["positions"] += len(values) + len(outside)
        out["outside"] += len(outside)
        for pos, token, lp in outside[:OUTSIDE_EXAMPLES - len(out["outside_examples"])]:
            out["outside_examples"].append({"prompt": r.get("prompt_id"), "position": pos, "token": token,
                                            "logprob": lp})
    return out


# ---------------------------------------------------------------------------------------------
# proposal_distribution: the check
# ---------------------------------------------------------------------------------------------

def uniformity(values, bins=DEFAULT_BINS):
    """Pearson's chi-square of ``values`` (in [0, 1)) against the uniform distribution over ``bins`` equal
    bins: {"positions", "bins" (counts), "expected", "chi2", "df", "p"}."""
    bins = int(bins)
    if bins < 2:
        raise VerifyCheckError("bins must be at least 2, got %r" % bins)
    counts = [0] * bins
    for u in values:
        counts[min(bins - 1, max(0, int(float(u) * bins)))] += 1
    n = len(values)
    expected = n / float(bins) if n else 0.0
    chi2 = sum((c - expected) ** 2 / expected for c in counts) if n else 0.0
    return {"positions": n, "bins": counts, "expected": round(expected, 2), "chi2": round(chi2, 3),
            "df": bins - 1, "p": chi2_sf(chi2, bins - 1) if n else 1.0}


def _pooled(results):
    """{workload: pooled condition_pits} of the decode_bench results carrying ``proposal_pit``."""
    out = {}
    for r in results or []:
        pit = r.get("proposal_pit")
        if pit is None:
            continue
        slot = out.setdefault(r.get("workload"), {"requests": 0, "without_logprobs": 0, "positions": 0, "pit": [],
                                                  "outside": 0, "outside_examples": [], "top_logprobs": None})
        for k in ("requests", "without_logprobs", "positions", "outside"):
            slot[k] += int(pit.get(k) or 0)
        slot["pit"].extend(pit.get("pit") or [])
        slot["outside_examples"].extend(pit.get("outside_examples") or [])
        slot["top_logprobs"] = (r.get("settings") or {}).get("top_logprobs") or slot["top_logprobs"]
    return out


def proposal_failures(results, alpha=DEFAULT_ALPHA, bins=DEFAULT_BINS, min_positions=MIN_POSITIONS):
    """(failures, figures) of the proposal-distribution check over a condition's logprob probe results.
    ``figures``: {workload: uniformity(...) + requests and outside counts} for the record."""
    failures, figures = [], {}
    pooled = _pooled(results)
    if not pooled:
        return ["proposal_distribution: no sampled request asked for logprobs, so the proposal was not tested"], figures
    for workload in sorted(pooled, key=str):
        slot = pooled[workload]
        asked = "logprobs: true, top_logprobs: %s" % (slot["top_logprobs"] or "?")
        if slot["requests"] == 0:
            failures.append("proposal_distribution: %s: no sampled request was answered" % workload)
            continue
        if slot["without_logprobs"] == slot["requests"]:
            failures.append("proposal_distribution: %s: the engine returned no logprobs for any of %d sampled "
                            "request(s) (asked %s); the proposal cannot be tested"
                            % (workload, slot["requests"], asked))
            continue
        if slot["without_logprobs"]:
            failures.append("proposal_distribution: %s: %d of %d sampled request(s) came back without logprobs "
                            "(asked %s)" % (workload, slot["without_logprobs"], slot["requests"], asked))
        if slot["outside"]:
            ex = slot["outside_examples"][0] if slot["outside_examples"] else {}
            failures.append("proposal_distribution: %s: %d committed token(s) outside the request's top-k/top-p set "
                            "as the target reported it (first: prompt %s position %s token %r logprob %s)"
                            % (workload, slot["outside"], ex.get("prompt"), ex.get("position"), ex.get("token"),
                               ex.get("logprob")))
        fig = uniformity(slot["pit"], bins)
        fig.update(requests=slot["requests"], outside=slot["outside"])
        figures[workload] = fig
        if fig["positions"] < min_positions:
            failures.append("proposal_distribution: %s: too few sampled positions to judge (%d; at least %d: ask "
                            "for longer answers or more prompts)" % (workload, fig["positions"], min_positions))
            continue
        if fig["p"] < alpha:
            failures.append("proposal_distribution: %s: committed tokens do not follow the target's reported "
                            "distribution (acceptance is not using the proposal it drew from): randomised PIT over "
                            "%d positions in %d bins %s (expected %.1f each), chi-square %.1f on %d df, p=%.2g < %g"
                            % (workload, fig["positions"], len(fig["bins"]), fig["bins"], fig["expected"],
                               fig["chi2"], fig["df"], fig["p"], alpha))
    return failures, figures


# ---------------------------------------------------------------------------------------------
# capped_block
# ---------------------------------------------------------------------------------------------

def probe_steps(text, results):
    """{workload: {"lines", "mean_accept_len", "missing"}} from rank 0's latest boot ``text``: the ``Decode
    batch`` lines with one running request logged while each greedy probe result ran (its ``window``)."""
    out = {}
    for r in results or []:
        w = r.get("window")
        if not w:
            out[r.get("workload")] = {"lines": 0, "mean_accept_len": None, "missing": "the probe has no window"}
            continue
        recs = decode_steps.decode_batch_lines(text or "", running=1, window=(w["start"], w["end"]))
        vals = [x["accept_len"] for x in recs if x["accept_len"] is not None]
        out[r.get("workload")] = {
            "lines": len(recs), "mean_accept_len": round(sum(vals) / len(vals), 4) if vals else None,
            "missing": None if vals else ("no Decode batch line with #running-req: 1 in the probe's window"
                                          if not recs else "no Decode batch line carries accept len (an older build)")}
    return out


def capped_failures(probe, baseline_probe):
    """Failures of the capped-block check: ``probe`` and ``baseline_probe`` are {"results" (the greedy probe's
    decode_bench results), "steps" (probe_steps)} of the arm and of the uncapped baseline in the same run.
    ``baseline_probe`` None: the baseline itself is judged (only that the probe ran)."""
    if not probe or not probe.get("results"):
        return ["capped_block: no greedy probe was answered under this condition"]
    if baseline_probe is None:
        return []
    if not baseline_probe.get("results"):
        return ["capped_block: the baseline answered no greedy probe to compare with"]
    out = [f.replace("greedy_matches_baseline:", "capped_block:", 1).replace(
        "where the baseline answered", "under the cap where the uncapped baseline answered", 1)
        for f in greedy_match_failures(probe["results"], baseline_probe["results"])]
    arm_steps, base_steps = probe.get("steps") or {}, baseline_probe.get("steps") or {}
    for workload in sorted(set(arm_steps) | set(base_steps), key=str):
        a, b = arm_steps.get(workload) or {}, base_steps.get(workload) or {}
        if a.get("mean_accept_len") is None or b.get("mean_accept_len") is None:
            out.append("capped_block: %s: committed tokens per step not measured (cap: %s; baseline: %s)"
                       % (workload, a.get("missing") or "no figure", b.get("missing") or "no figure"))
        elif a["mean_accept_len"] > b["mean_accept_len"]:
            out.append("capped_block: %s: %.3f committed tokens per step under the cap, above the uncapped "
                       "baseline's %.3f on the same greedy prompts (%d and %d Decode batch lines): the cap can only "
                       "remove acceptances, so dead verify rows were committed"
                       % (workload, a["mean_accept_len"], b["mean_accept_len"], a["lines"], b["lines"]))
    return out
