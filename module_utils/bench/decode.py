# -*- coding: utf-8 -*-
"""Decode benchmark against an OpenAI-compatible chat endpoint (standard library only).

The logic of the ``decode_bench`` module; every function here is usable directly (tests do).
Method (SPEC section 3, "Measuring"):

* Decode speed is ``usage.completion_tokens`` divided by wall time. Stream messages are NEVER
  counted as tokens (the engine commits several tokens per speculative step, so one SSE message
  often carries several tokens). Streaming requests send ``stream_options.include_usage`` and a
  response without a usage chunk is an error; non-streaming responses must carry ``usage``.
* For each workload (a JSON list of prompts) and each concurrency level C: ``warmups`` rounds
  (measured like the others, then discarded), then ``repetitions`` (>= 5) measured rounds.
  A round is C threads ("streams") started together; stream i sends the workload's prompts in
  turn starting at prompt ``i mod len(prompts)`` (``prompts_per_stream`` of them, default all),
  one request after the other. Same prompts, limits and settings in every round.
* Per request: TTFT (first chunk carrying generated text, streaming only; first reasoning and first
  answer text apart), the gaps between text-bearing messages, wall time, ``completion_tokens`` and
  ``reasoning_tokens`` (from usage), the reasoning and answer texts.
* A request that ends in an error event or ``finish_reason: "abort"`` fails its round: a failed
  repetition, never a measurement. It is counted and reported with the error's own code, and up to
  ``failed_repetition_retries`` extra rounds per condition replace failed ones; a condition left with
  fewer than ``repetitions`` measured rounds is reported in ``incomplete``.
* Sampled requests (temperature > 0) carry a fixed ``seed`` (refused without one) and the same
  ``top_p``/``top_k`` in every request, so repeats are comparable; ``max_completion_tokens`` (which
  overrides the deprecated ``max_tokens``) is sent with the same limit as ``max_tokens``.
  Per round: aggregate tok/s = sum(completion_tokens) / round wall time (first request sent to
  last response finished); per-stream tok/s = a stream's tokens / that stream's own wall time,
  and the round's per-stream figure is the median over its streams.
  Per condition (``decode_bench_summary``): median/min/max/stdev (sample standard deviation) over
  the measured rounds of both rates, TTFT and inter-token latency in ms, reasoning and answer tokens,
  request counts, ``distinct_outputs`` (distinct output texts per prompt across every measured
  request of that prompt; 1 for each prompt means deterministic), distinct answers apart from
  distinct reasoning, failed repetitions with their error codes.
* Every request opens its own HTTP connection (like a fresh client); TTFT therefore includes
  connecting. The API key is sent as ``Authorization: Bearer`` and is scrubbed from every error
  message (before a server's text is cut to length, so a cut cannot leave part of it) and from the
  raw output. The raw record is redacted as data before it is encoded as JSON
  (``module_utils/base/secrets.py``: the key's value wherever it appears, also JSON-escaped inside a
  string the server built, and the values of secret-named fields), so a key holding ``"`` or ``\\``
  is found as it is, not in its escaped form.
"""
from __future__ import absolute_import, division, print_function

import statistics
import threading
import time

from ansible.module_utils.bench.client import BenchError, Client, redact
from ansible.module_utils.bench.inputs import load_prompts, validate_settings
from ansible.module_utils.bench.record import raw_round as _raw_round, write_raw
from ansible.module_utils.bench.summary import public_settings, round_failed, round_failures, summarize

__metaclass__ = type


def build_body(messages, settings, greedy=False, thinking=None):
    """The request body; ``greedy`` sends temperature 0 without the sampling parameters (the greedy
    streams of a mixed batch); ``thinking`` (a prompt's own, else None) overrides the settings' switch."""
    if greedy:
        settings = dict(settings, temperature=0.0, top_p=None, top_k=None, seed=None)
    body = {
        "model": settings["model"],
        "messages": messages,
        "max_tokens": settings["max_tokens"],
        "max_completion_tokens": settings["max_tokens"],
        "temperature": settings["temperature"],
        "chat_template_kwargs": {"thinking": settings["thinking"] if thinking is None else bool(thinking)},
        "stream": settings["stream"],
    }
    for key in ("top_p", "top_k", "seed"):
        if settings.get(key) is not None:
            body[key] = settings[key]
    if settings.get("top_logprobs"):
        # the target's distribution at every committed position (OpenAI chat API, as SGLang serves it)
        body["logprobs"] = True
        body["top_logprobs"] = settings["top_logprobs"]
    if settings["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


# ---------------------------------------------------------------------------------------------
# Rounds and conditions
# ---------------------------------------------------------------------------------------------

def stream_plan(n_prompts, concurrency, prompts_per_stream=None):
    """Prompt indices each stream sends in a round: stream i starts at i mod n, in turn."""
    per = n_prompts if prompts_per_stream is None else int(prompts_per_stream)
    return [[(i + j) % n_prompts for j in range(per)] for i in range(concurrency)]


def run_round(client, prompts, settings, concurrency, on_request=None):
    """One round: ``concurrency`` streams started together. Returns the round dict.

    ``on_request()`` is called from the stream's thread as each request ends (the progress record).

    Raises the first :class:`BenchError` of any stream (the others stop after their current request).
    A request that failed on the server's side (error event, abort) is kept in its stream with
    ``failed`` set and the stream goes on, so the other streams keep their load; the round is then a
    failed repetition (``failed`` in the round dict).
    """
    assignment = stream_plan(len(prompts), concurrency, settings.get("prompts_per_stream"))
    barrier = threading.Barrier(concurrency + 1)
    stop = threading.Event()
    streams = [{"stream": i, "requests": [], "error": None} for i in range(concurrency)]

    def worker(st, indices):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:     # pragma: no cover
            return
        st["start"] = time.monotonic()
        for idx in indices:
            if stop.is_set():
                break
            greedy = st["stream"] < settings.get("greedy_streams", 0)
            body = build_body(prompts[idx]["messages"], settings, greedy=greedy,
                              thinking=prompts[idx].get("thinking"))
            try:
                rec = client.request(body)
            except BenchError as exc:
                st["error"] = exc
                stop.set()
                break
            except Exception as exc:          # a bug or an unexpected library error: keep the key out
                st["error"] = client._error("%s: %s" % (type(exc).__name__, exc), status="client error")
                stop.set()
                break
            rec["prompt_index"] = idx
            rec["prompt_id"] = prompts[idx]["id"]
            rec["greedy"] = body["temperature"] <= 0
            rec["request"] = body
            st["requests"].append(rec)
            if on_request:
                on_request()
        st["end"] = time.monotonic()

    threads = [threading.Thread(target=worker, args=(streams[i], assignment[i])) for i in range(concurrency)]
    for t in threads:
        t.daemon = True
        t.start()
    barrier.wait()
    t0 = time.monotonic()
    started_at = time.time()
    for t in threads:
        t.join()
    t1 = time.monotonic()
    ended_at = time.time()
    for st in streams:
        if st["error"] is not None:
            raise st["error"]
    wall = t1 - t0
    total = 0
    per_stream = []
    for st in streams:
        tokens = sum(r["completion_tokens"] or 0 for r in st["requests"])
        own = st["end"] - st["start"]
        st["tokens"] = tokens
        st["wall_s"] = own
        st["tok_s"] = tokens / own if own > 0 else 0.0
        per_stream.append(st["tok_s"])
        total += tokens
    return {
        "concurrency": concurrency,
        "wall_s": wall,
        # wall-clock bounds (epoch seconds): the engine's log lines of this round fall between them
        "started_at": started_at, "ended_at": ended_at,
        "completion_tokens": total,
        "aggregate_tok_s": total / wall if wall > 0 else 0.0,
        "per_stream_tok_s": statistics.median(per_stream),
        "per_stream_tok_s_all": per_stream,
        "streams": streams,
        "failed": round_failed({"streams": streams}),
    }


def plan(workloads, settings):
    """What a run would send: one entry per condition (no request is sent)."""
    out = []
    for name in sorted(workloads):
        prompts = workloads[name]
        n = len(prompts) if prompts is not None else None
        for c in settings["concurrency"]:
            per = settings.get("prompts_per_stream") or n
            out.append({
                "workload": name, "concurrency": c, "prompts": n,
                "warmup_rounds": settings["warmups"], "rounds": settings["repetitions"],
                "requests_per_round": None if per is None else c * per,
                "requests_total": None if per is None else
                c * per * (settings["warmups"] + settings["repetitions"]),
            })
    return out


def run_benchmark(url, workloads, settings, api_key=None, host_label=None, raw_output=None,
                  measured_on=None, progress=None):
    """Run every workload at every concurrency level. Returns the result dict.

    ``workloads``: {name: [prompt, ...]} as returned by :func:`load_prompts`.
    ``raw_output``: path of a JSON file receiving every request and response (written also when a
    request fails, then the error is re-raised).
    ``progress``: a ``decode_bench_progress.BenchProgress`` told as each round starts, each request
    ends and each round ends, and how the run ended.
    """
    settings = validate_settings(settings)
    client = Client(url, api_key=api_key, timeout=settings["timeout"], host_label=host_label)
    results = []
    sent = 0
    raw = {"url": client.full_url, "host_label": host_label, "measured_on": measured_on,
           "settings": public_settings(settings), "started": time.time(), "conditions": [], "error": None}
    try:
        for name in sorted(workloads):
            prompts = workloads[name]
            for c in settings["concurrency"]:
                cond = {"workload": name, "concurrency": c, "rounds": []}
                raw["conditions"].append(cond)
                warm, measured, failures = [], [], []
                failed_measured = failed_warm = 0
                i = 0
                # failed repetitions are replaced by extra rounds, up to failed_repetition_retries of them
                while len(measured) < settings["repetitions"] and (
                        failed_measured <= settings["failed_repetition_retries"]):
                    if progress:
                        progress.round_started(name, c, i, settings["warmups"], settings["repetitions"],
                                               settings.get("prompts_per_stream") or len(prompts))
                    rd = run_round(client, prompts, settings, c,
                                   on_request=progress.request_done if progress else None)
                    sent += sum(len(st["requests"]) for st in rd["streams"])
                    is_warm = i < settings["warmups"]
                    kind = "warmup" if is_warm else "measured"
                    number = i if is_warm else i - settings["warmups"]
                    if rd["failed"]:
                        failures.extend(round_failures(rd, kind, number))
                        if is_warm:
                            failed_warm += 1
                        else:
                            failed_measured += 1
                    elif is_warm:
                        warm.append(rd)
                    else:
                        measured.append(rd)
                    cond["rounds"].append(_raw_round(rd, kind, number))
                    if progress:
                        progress.round_done(rd)
                    i += 1
                    if failed_measured > settings["failed_repetition_retries"]:
                        break
                res = summarize(measured, prompts, warm, workload=name, settings=settings, failures=failures,
                                failed_rounds=failed_measured, failed_warmups=failed_warm)
                res["concurrency"] = c
                res["prompt_ids"] = [p["id"] for p in prompts]
                results.append(res)
    except BenchError as exc:
        raw["error"] = str(exc)
        if progress:
            progress.finish(redact(exc, api_key))
        if raw_output:
            write_raw(raw_output, raw, api_key)
        raise
    raw["finished"] = time.time()
    raw["results"] = results
    if progress:
        progress.finish()
    if raw_output:
        write_raw(raw_output, raw, api_key)
    summary = {}
    for res in results:
        summary.setdefault(res["workload"], {})["c%d" % res["concurrency"]] = {
            "aggregate_tok_s_median": res["aggregate_tok_s"]["median"],
            "per_stream_tok_s_median": res["per_stream_tok_s"]["median"],
            "ttft_ms_median": res["ttft_ms_median"],
            "distinct_outputs": res["distinct_outputs"],
            "itl_ms_median": res["itl_ms_median"],
            "ttft_answer_ms_median": res["ttft_answer_ms_median"],
            "distinct_answers": res["distinct_answers"],
            "rounds": res["rounds"],
            "failed_repetitions": res["failed_repetitions"],
            "error_codes": res["error_codes"],
        }
    incomplete = ["%s C%d: %d of %d measured repetitions (%d failed, error codes %s)"
                  % (r["workload"], r["concurrency"], r["rounds"], settings["repetitions"], r["failed_repetitions"],
                     ", ".join("%s x%d" % kv for kv in sorted(r["error_codes"].items())) or "none")
                  for r in results if r["rounds"] < settings["repetitions"]]
    return {
        "url": client.full_url,
        "host_label": host_label,
        "measured_on": measured_on,
        "settings": public_settings(settings),
        "results": results,
        "summary": summary,
        "raw_output": raw_output,
        "requests_sent": sent,
        "failed_repetitions": sum(r["failed_repetitions"] for r in results),
        "incomplete": incomplete,
    }
