# -*- coding: utf-8 -*-
"""Statistics of one decode benchmark condition (workload x concurrency) from its rounds.

One subject: turning the request records of ``decode_bench_client`` and the rounds of
``decode_bench`` into the figures SPEC section 3 ("Measuring") asks for. Only rounds in which every
request succeeded are measurements; a round with a request that ended in an error event or an abort
is a failed repetition: counted, its errors' own codes reported, never part of a rate.

Figures, over the measured (successful) rounds:

* aggregate and per-stream tok/s (median, min, max, sample stdev, per round);
* TTFT: first generated text, first reasoning text, first answer text (ms, median/min/max);
* inter-token latency: the gaps between text-bearing stream messages pooled over every measured
  request (ms, median/p90/min/max). The engine sends one message per speculative step, so the median
  gap is the step time seen by a client, and ``tokens_per_message`` (usage tokens / text-bearing
  messages, median over requests) the committed tokens per step seen by a client;
* reasoning and answer tokens apart (when the server reports ``reasoning_tokens``);
* determinism: distinct (reasoning, answer) pairs per prompt (``distinct_outputs``, as before), and
  distinct answers apart from distinct reasoning (a sampled run may reason differently and still
  answer the same);
* the servers' speculative counts (``completion_tokens_details``), summed, with the accept rate
  when accepted and rejected counts are both there.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import statistics

from ansible.module_utils.bench.sampling import answer_words
from ansible.module_utils.experiment.verify import condition_pits

__metaclass__ = type

WORD_COUNTS_KEPT = 200      # answer words kept per condition (the rest pooled; the test uses the top 24)
SETTING_KEYS = ("model", "max_tokens", "temperature", "top_p", "top_k", "seed", "thinking", "stream",
                "repetitions", "warmups", "failed_repetition_retries", "concurrency", "timeout",
                "prompts_per_stream", "greedy_streams", "purpose", "top_logprobs", "logprobs_mode")


def public_settings(settings):
    return dict((k, settings.get(k)) for k in SETTING_KEYS)


def spread(values):
    if not values:
        return {"median": None, "min": None, "max": None, "stdev": None, "rounds": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "rounds": list(values),
    }


def count(items):
    out = {}
    for item in items:
        key = str(item)
        out[key] = out.get(key, 0) + 1
    return out


def degenerate(text):
    """An answer of several tokens that are all the same one (what non-finite logits decode to)."""
    words = (text or "").split()
    return len(words) >= 4 and len(set(words)) == 1


def _ms(values):
    vals = [v * 1000.0 for v in values if v is not None]
    return (statistics.median(vals), min(vals), max(vals)) if vals else (None, None, None)


def _p90(values):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))] if s else None


def round_failures(rd, kind, number):
    """The failed requests of one round: where, the error's own code and its message."""
    out = []
    for st in rd["streams"]:
        for r in st["requests"]:
            if r.get("failed"):
                err = r.get("error") or {}
                out.append({"kind": kind, "round": number, "stream": st["stream"], "prompt_id": r.get("prompt_id"),
                            "code": err.get("code"), "message": err.get("message"),
                            "finish_reason": r.get("finish_reason")})
    return out


def word_counts(requests, keep=WORD_COUNTS_KEPT):
    """Answer word counts of sampled requests over their distinct (prompt, answer) pairs (the stage H
    distribution check, module_utils/bench/sampling.py): the ``keep`` most frequent words, the rest
    summed under ``(other)`` so the total stays right. A list of ``[word, count]`` pairs, never a mapping:
    the result is redacted as data, and a word such as ``key`` or ``token`` would be taken for a secret's name."""
    counts = answer_words({"prompt": r.get("prompt_id"), "text": r.get("text")} for r in requests)
    top = sorted(counts, key=lambda w: (-counts[w], w))[:keep]
    out = [[w, counts[w]] for w in top]
    rest = sum(counts.values()) - sum(n for _, n in out)
    if rest:
        out.append(["(other)", rest])
    return out


EXCERPT_CHARS = 240


def excerpt(text, limit=EXCERPT_CHARS):
    """The start of an answer as a record keeps it: one line (newlines shown as \\n), at most ``limit``
    characters, cut with an ellipsis; control characters other than newlines dropped (an answer echoed
    into a record must not carry terminal escapes)."""
    flat = "".join(ch for ch in (text or "").replace("\r", "").replace("\n", "\\n")
                   if ch >= " " or ch == "\t")
    return flat if len(flat) <= limit else flat[:limit - 1] + "\u2026"


ANSWER_KEPT_CHARS = 16000


def kept_answer(text, limit=ANSWER_KEPT_CHARS):
    """A quality probe's answer as its record keeps it: whole up to ``limit`` characters (then cut with an
    ellipsis), newlines and tabs kept, every other control character dropped (no terminal escapes in a record)."""
    kept = "".join(ch for ch in (text or "").replace("\r", "") if ch >= " " or ch in "\n\t")
    return kept if len(kept) <= limit else kept[:limit - 1] + "\u2026"


def round_failed(rd):
    return any(r.get("failed") for st in rd["streams"] for r in st["requests"])


def _distinct(requests, prompts, key):
    seen = dict((p["id"], set()) for p in prompts)
    for r in requests:
        seen[r["prompt_id"]].add(key(r))
    per_prompt = dict((pid, len(v)) for pid, v in seen.items() if v)
    return seen, per_prompt, (max(per_prompt.values()) if per_prompt else 0)


def _speculative(requests):
    totals = {}
    for r in requests:
        for k, v in (r.get("speculative") or {}).items():
            totals[k] = totals.get(k, 0) + v
    if not totals:
        return None
    acc, rej = totals.get("accepted_prediction_tokens"), totals.get("rejected_prediction_tokens")
    out = {"totals": totals, "accept_rate": None}
    if acc is not None and rej is not None and acc + rej > 0:
        out["accept_rate"] = acc / float(acc + rej)
    return out


def summarize(rounds, prompts, warmup_rounds=(), workload=None, settings=None, failures=(), failed_rounds=0,
              failed_warmups=0):
    """Statistics of one condition from its measured rounds (every one of them without a failure).

    ``failures``: :func:`round_failures` of every failed round (warm-ups included), ``failed_rounds``:
    measured rounds that failed (replaced or not), ``failed_warmups``: warm-up rounds that failed.
    """
    requests = [r for rd in rounds for st in rd["streams"] for r in st["requests"]]
    ttft = _ms([r.get("ttft_s") for r in requests])
    ttft_r = _ms([r.get("ttft_reasoning_s") for r in requests])
    ttft_a = _ms([r.get("ttft_answer_s") for r in requests])
    gaps = [g * 1000.0 for r in requests for g in (r.get("gaps_s") or [])]
    per_msg = [r["completion_tokens"] / float(r["messages"]) for r in requests
               if r.get("messages") and r.get("completion_tokens") is not None]
    outputs, per_prompt, distinct = _distinct(requests, prompts, lambda r: (r.get("reasoning") or "", r["text"]))
    _, answers_pp, answers = _distinct(requests, prompts, lambda r: r["text"])
    _, reasoning_pp, reasoning = _distinct(requests, prompts, lambda r: r.get("reasoning") or "")
    # sha256 of each distinct (reasoning, answer) per prompt: greedy answers can be compared across
    # concurrency levels and arms without carrying the texts
    digests = dict((pid, sorted(hashlib.sha256(json.dumps(list(t)).encode("utf-8")).hexdigest()[:16] for t in texts))
                   for pid, texts in outputs.items() if texts)
    # the start of each distinct answer, by its digest: a quality failure names the prompt and shows both answers
    excerpts = dict((pid, dict((hashlib.sha256(json.dumps(list(t)).encode("utf-8")).hexdigest()[:16],
                                excerpt(t[1])) for t in texts))
                    for pid, texts in outputs.items() if texts)
    known_reasoning = [r for r in requests if r.get("reasoning_tokens") is not None]
    reasoning_total = sum(r["reasoning_tokens"] for r in known_reasoning) if known_reasoning else None
    if known_reasoning and len(known_reasoning) == len(requests):
        answer_total = sum(r["completion_tokens"] - r["reasoning_tokens"] for r in requests)
    elif not known_reasoning and not any(r.get("reasoning") for r in requests):
        answer_total = sum(r["completion_tokens"] for r in requests)   # no reasoning at all: every token answers
    else:
        answer_total = None                                            # reasoning text without its count
    failures = list(failures)
    out = {
        "workload": workload,
        "concurrency": rounds[0]["concurrency"] if rounds else None,
        "aggregate_tok_s": spread([rd["aggregate_tok_s"] for rd in rounds]),
        "per_stream_tok_s": spread([rd["per_stream_tok_s"] for rd in rounds]),
        "ttft_ms_median": ttft[0], "ttft_ms_min": ttft[1], "ttft_ms_max": ttft[2],
        "ttft_reasoning_ms_median": ttft_r[0], "ttft_reasoning_ms_min": ttft_r[1], "ttft_reasoning_ms_max": ttft_r[2],
        "ttft_answer_ms_median": ttft_a[0], "ttft_answer_ms_min": ttft_a[1], "ttft_answer_ms_max": ttft_a[2],
        "itl_ms_median": statistics.median(gaps) if gaps else None, "itl_ms_p90": _p90(gaps),
        "itl_ms_min": min(gaps) if gaps else None, "itl_ms_max": max(gaps) if gaps else None,
        "tokens_per_message_median": statistics.median(per_msg) if per_msg else None,
        "completion_tokens_total": sum(r["completion_tokens"] for r in requests),
        "reasoning_tokens_total": reasoning_total,
        "answer_tokens_total": answer_total,
        "requests": len(requests),
        "rounds": len(rounds),
        "warmup_rounds": len(warmup_rounds),
        "warmup_requests": sum(len(st["requests"]) for rd in warmup_rounds for st in rd["streams"]),
        # the warm-up rounds' own rates, in the order they ran (never judged): the first round after a boot
        # is the cold-cache figure of a condition that fills a cache as it serves (stage I's row cache)
        "warmup_per_stream_tok_s": [rd["per_stream_tok_s"] for rd in warmup_rounds],
        "warmup_aggregate_tok_s": [rd["aggregate_tok_s"] for rd in warmup_rounds],
        "round_wall_s": [rd["wall_s"] for rd in rounds],
        # when the measured rounds ran (epoch seconds, the load generator's clock): which engine log lines
        # belong to this workload and concurrency (module_utils/engine_log/decode_steps.py: workload_steps)
        "window": ({"start": min(rd["started_at"] for rd in rounds), "end": max(rd["ended_at"] for rd in rounds)}
                   if rounds and all("started_at" in rd for rd in rounds) else None),
        # each measured round's own window, in order: the engine's step lines of one round (decode_steps.py
        # round_metrics: committed tokens per step over step time, per repetition, a judged metric)
        "round_windows": ([[rd["started_at"], rd["ended_at"]] for rd in rounds]
                          if rounds and all("started_at" in rd for rd in rounds) else None),
        "distinct_outputs": distinct,
        "distinct_outputs_per_prompt": per_prompt,
        "deterministic": distinct == 1,
        "distinct_answers": answers,
        "distinct_answers_per_prompt": answers_pp,
        "distinct_reasoning": reasoning,
        "distinct_reasoning_per_prompt": reasoning_pp,
        "output_digests": digests,
        "answer_excerpts": excerpts,
        "degenerate_outputs": sum(1 for r in requests if degenerate(r["text"])),
        "finish_reasons": count(r.get("finish_reason") for r in requests),
        "speculative": _speculative(requests),
        "failed_repetitions": failed_rounds,
        "failed_warmups": failed_warmups,
        "failed_requests": len(failures),
        "error_codes": count(f["code"] for f in failures),
        "failures": failures,
    }
    greedy = [r for r in requests if r.get("greedy")]
    sampled = [r for r in requests if r.get("greedy") is False]
    if greedy and sampled:
        # a mixed batch: the greedy requests' answers, to compare with the baseline's (stage H)
        out["greedy_output_digests"] = dict(
            (pid, sorted(hashlib.sha256(json.dumps(list(t)).encode("utf-8")).hexdigest()[:16] for t in texts))
            for pid, texts in _distinct(greedy, prompts, lambda r: (r.get("reasoning") or "", r["text"]))[0].items()
            if texts)
    if sampled:
        out["answer_word_counts"] = word_counts(sampled)
    if sampled and (settings or {}).get("top_logprobs"):
        # where each committed token falls in the target's reported distribution (the proposal test); the
        # logprobs themselves stay in the raw output
        out["proposal_pit"] = condition_pits(sampled, settings, settings.get("logprobs_mode") or "tempered")
    if (settings or {}).get("purpose") == "quality":
        # a quality probe's answers whole (graded tasks run their code, parse their JSON): every distinct answer
        # per prompt, at most ANSWER_KEPT_CHARS each, control characters other than newlines and tabs dropped
        out["answers"] = dict((pid, sorted(set(kept_answer(r["text"]) for r in requests if r["prompt_id"] == pid)))
                              for pid in sorted(set(r["prompt_id"] for r in requests)))
    if settings is not None:
        out["settings"] = public_settings(settings)
        out["complete"] = len(rounds) >= settings.get("repetitions", 0)
    return out
