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
* Per request: TTFT (first chunk carrying generated text, streaming only), wall time,
  ``completion_tokens`` (from usage), the output text.
  Per round: aggregate tok/s = sum(completion_tokens) / round wall time (first request sent to
  last response finished); per-stream tok/s = a stream's tokens / that stream's own wall time,
  and the round's per-stream figure is the median over its streams.
  Per condition: median/min/max/stdev (sample standard deviation) over the measured rounds of
  both rates, TTFT median/min/max in ms over all measured requests, total completion tokens,
  request counts and ``distinct_outputs`` (distinct output texts per prompt across every measured
  request of that prompt; 1 for each prompt means deterministic).
* Every request opens its own HTTP connection (like a fresh client); TTFT therefore includes
  connecting. The API key is sent as ``Authorization: Bearer`` and is scrubbed from every error
  message (before a server's text is cut to length, so a cut cannot leave part of it) and from the
  raw output. The raw record is redacted as data before it is encoded as JSON
  (``module_utils/secret_rule.py``: the key's value wherever it appears, also JSON-escaped inside a
  string the server built, and the values of secret-named fields), so a key holding ``"`` or ``\\``
  is found as it is, not in its escaped form.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import statistics
import threading
import time

from ansible.module_utils.secret_rule import redact as redact_data
# One request (client, errors, endpoint) lives in decode_bench_client; re-exported for the module and tests.
from ansible.module_utils.decode_bench_client import (  # noqa: F401
    ERROR_BODY_CHARS, BenchError, Client, endpoint, redact)

__metaclass__ = type

MIN_REPETITIONS = 5
DEFAULTS = {
    "model": "DeepSeek-V4.1-Flash",
    "concurrency": [1, 4],
    "repetitions": 5,
    "warmups": 1,
    "max_tokens": 256,
    "temperature": 0.0,
    "thinking": False,
    "stream": True,
    "timeout": 300.0,
    "prompts_per_stream": None,
}
# ---------------------------------------------------------------------------------------------
# Prompts and settings
# ---------------------------------------------------------------------------------------------

def _prompt_entry(item, index, path):
    """One prompt file entry -> {'id': str, 'messages': [...]}.

    Accepted forms: a string (one user message); ``{"messages": [...]}``; ``{"prompt": str}`` with
    an optional ``"system"``; each may carry an ``"id"``.
    """
    where = "%s: prompt %d" % (path, index)
    if isinstance(item, str):
        if not item.strip():
            raise BenchError("%s is empty" % where)
        return {"id": "p%d" % index, "messages": [{"role": "user", "content": item}]}
    if not isinstance(item, dict):
        raise BenchError("%s must be a string or an object, not %s" % (where, type(item).__name__))
    pid = str(item.get("id") or "p%d" % index)
    if "messages" in item:
        msgs = item["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            raise BenchError("%s: messages must be a non-empty list of {role, content} strings" % where)
        return {"id": pid, "messages": [dict(m) for m in msgs]}
    text = item.get("prompt", item.get("content"))
    if not isinstance(text, str) or not text.strip():
        raise BenchError("%s has no messages and no prompt text" % where)
    msgs = []
    if item.get("system"):
        msgs.append({"role": "system", "content": str(item["system"])})
    msgs.append({"role": "user", "content": text})
    return {"id": pid, "messages": msgs}


def load_prompts(path):
    """Read a JSON list of prompts -> list of {'id', 'messages'} (see :func:`_prompt_entry`)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        raise BenchError("cannot read prompt file %s: %s" % (path, exc))
    except ValueError as exc:
        raise BenchError("prompt file %s is not valid JSON: %s" % (path, exc))
    if isinstance(data, dict) and isinstance(data.get("prompts"), list):
        data = data["prompts"]
    if not isinstance(data, list) or not data:
        raise BenchError("prompt file %s must hold a non-empty JSON list of prompts" % path)
    prompts = [_prompt_entry(item, i, path) for i, item in enumerate(data)]
    ids = [p["id"] for p in prompts]
    if len(set(ids)) != len(ids):
        raise BenchError("prompt file %s: prompt ids are not unique" % path)
    return prompts


def validate_settings(settings):
    """Check and complete a settings dict (keys of DEFAULTS). Returns a new dict."""
    s = dict(DEFAULTS)
    s.update(dict((k, v) for k, v in settings.items() if v is not None or k == "prompts_per_stream"))
    if int(s["repetitions"]) < MIN_REPETITIONS:
        raise BenchError("repetitions=%s refused: at least %d measured repetitions per condition"
                         % (s["repetitions"], MIN_REPETITIONS))
    conc = [int(c) for c in (s["concurrency"] or [])]
    if not conc or any(c < 1 for c in conc):
        raise BenchError("concurrency must be a non-empty list of integers >= 1, got %r" % (s["concurrency"],))
    s["concurrency"] = conc
    if int(s["warmups"]) < 0:
        raise BenchError("warmups must be >= 0, got %s" % s["warmups"])
    if int(s["max_tokens"]) < 1:
        raise BenchError("max_tokens must be >= 1, got %s" % s["max_tokens"])
    if float(s["timeout"]) <= 0:
        raise BenchError("timeout must be > 0 seconds, got %s" % s["timeout"])
    if s["prompts_per_stream"] is not None and int(s["prompts_per_stream"]) < 1:
        raise BenchError("prompts_per_stream must be >= 1, got %s" % s["prompts_per_stream"])
    for key in ("repetitions", "warmups", "max_tokens"):
        s[key] = int(s[key])
    s["temperature"] = float(s["temperature"])
    s["timeout"] = float(s["timeout"])
    s["thinking"] = bool(s["thinking"])
    s["stream"] = bool(s["stream"])
    return s


def build_body(messages, settings):
    body = {
        "model": settings["model"],
        "messages": messages,
        "max_tokens": settings["max_tokens"],
        "temperature": settings["temperature"],
        "chat_template_kwargs": {"thinking": settings["thinking"]},
        "stream": settings["stream"],
    }
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


def run_round(client, prompts, settings, concurrency):
    """One round: ``concurrency`` streams started together. Returns the round dict.

    Raises the first :class:`BenchError` of any stream (the others stop after their current request).
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
            body = build_body(prompts[idx]["messages"], settings)
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
            rec["request"] = body
            st["requests"].append(rec)
        st["end"] = time.monotonic()

    threads = [threading.Thread(target=worker, args=(streams[i], assignment[i])) for i in range(concurrency)]
    for t in threads:
        t.daemon = True
        t.start()
    barrier.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    t1 = time.monotonic()
    for st in streams:
        if st["error"] is not None:
            raise st["error"]
    wall = t1 - t0
    total = 0
    per_stream = []
    for st in streams:
        tokens = sum(r["completion_tokens"] for r in st["requests"])
        own = st["end"] - st["start"]
        st["tokens"] = tokens
        st["wall_s"] = own
        st["tok_s"] = tokens / own if own > 0 else 0.0
        per_stream.append(st["tok_s"])
        total += tokens
    return {
        "concurrency": concurrency,
        "wall_s": wall,
        "completion_tokens": total,
        "aggregate_tok_s": total / wall if wall > 0 else 0.0,
        "per_stream_tok_s": statistics.median(per_stream),
        "per_stream_tok_s_all": per_stream,
        "streams": streams,
    }


def _spread(values):
    if not values:
        return {"median": None, "min": None, "max": None, "stdev": None, "rounds": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "rounds": list(values),
    }


def summarize(rounds, prompts, warmup_rounds=(), workload=None, settings=None):
    """Statistics of one condition (workload x concurrency) from its measured rounds."""
    requests = [r for rd in rounds for st in rd["streams"] for r in st["requests"]]
    ttfts = [r["ttft_s"] * 1000.0 for r in requests if r.get("ttft_s") is not None]
    outputs = dict((p["id"], set()) for p in prompts)
    for r in requests:
        outputs[r["prompt_id"]].add((r.get("reasoning") or "", r["text"]))
    per_prompt = dict((pid, len(texts)) for pid, texts in outputs.items() if texts)
    distinct = max(per_prompt.values()) if per_prompt else 0
    # sha256 of each distinct (reasoning, answer) per prompt: greedy answers can be compared across
    # concurrency levels and arms without carrying the texts
    digests = dict((pid, sorted(hashlib.sha256(json.dumps(list(t)).encode("utf-8")).hexdigest()[:16] for t in texts))
                   for pid, texts in outputs.items() if texts)
    degenerate = sum(1 for r in requests if _degenerate(r["text"]))
    out = {
        "workload": workload,
        "concurrency": rounds[0]["concurrency"] if rounds else None,
        "aggregate_tok_s": _spread([rd["aggregate_tok_s"] for rd in rounds]),
        "per_stream_tok_s": _spread([rd["per_stream_tok_s"] for rd in rounds]),
        "ttft_ms_median": statistics.median(ttfts) if ttfts else None,
        "ttft_ms_min": min(ttfts) if ttfts else None,
        "ttft_ms_max": max(ttfts) if ttfts else None,
        "completion_tokens_total": sum(r["completion_tokens"] for r in requests),
        "requests": len(requests),
        "rounds": len(rounds),
        "warmup_rounds": len(warmup_rounds),
        "warmup_requests": sum(len(st["requests"]) for rd in warmup_rounds for st in rd["streams"]),
        "round_wall_s": [rd["wall_s"] for rd in rounds],
        "distinct_outputs": distinct,
        "distinct_outputs_per_prompt": per_prompt,
        "deterministic": distinct == 1,
        "output_digests": digests,
        "degenerate_outputs": degenerate,
        "finish_reasons": _count(r.get("finish_reason") for r in requests),
    }
    if settings is not None:
        out["settings"] = public_settings(settings)
    return out


def _degenerate(text):
    """An answer of several tokens that are all the same one (what non-finite logits decode to)."""
    words = (text or "").split()
    return len(words) >= 4 and len(set(words)) == 1


def _count(items):
    out = {}
    for item in items:
        key = str(item)
        out[key] = out.get(key, 0) + 1
    return out


def public_settings(settings):
    keys = ("model", "max_tokens", "temperature", "thinking", "stream", "repetitions", "warmups",
            "concurrency", "timeout", "prompts_per_stream")
    return dict((k, settings.get(k)) for k in keys)


def _raw_request(rec):
    return {
        "prompt_id": rec["prompt_id"], "prompt_index": rec["prompt_index"],
        "request": rec["request"], "ttft_ms": None if rec["ttft_s"] is None else rec["ttft_s"] * 1000.0,
        "wall_s": rec["wall_s"], "completion_tokens": rec["completion_tokens"],
        "prompt_tokens": rec.get("prompt_tokens"), "finish_reason": rec.get("finish_reason"),
        "content_messages": rec.get("messages"), "text": rec["text"], "reasoning": rec.get("reasoning"),
        "response": rec["raw"],
    }


def _raw_round(rd, kind, number):
    return {
        "kind": kind, "round": number, "wall_s": rd["wall_s"], "completion_tokens": rd["completion_tokens"],
        "aggregate_tok_s": rd["aggregate_tok_s"], "per_stream_tok_s": rd["per_stream_tok_s_all"],
        "streams": [{"stream": st["stream"], "wall_s": st["wall_s"], "tokens": st["tokens"],
                     "requests": [_raw_request(r) for r in st["requests"]]} for st in rd["streams"]],
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
    """
    settings = validate_settings(settings)
    client = Client(url, api_key=api_key, timeout=settings["timeout"], host_label=host_label)
    results = []
    raw = {"url": client.full_url, "host_label": host_label, "measured_on": measured_on,
           "settings": public_settings(settings), "started": time.time(), "conditions": [], "error": None}
    try:
        for name in sorted(workloads):
            prompts = workloads[name]
            for c in settings["concurrency"]:
                cond = {"workload": name, "concurrency": c, "rounds": []}
                raw["conditions"].append(cond)
                warm, measured = [], []
                for i in range(settings["warmups"] + settings["repetitions"]):
                    rd = run_round(client, prompts, settings, c)
                    is_warm = i < settings["warmups"]
                    (warm if is_warm else measured).append(rd)
                    cond["rounds"].append(_raw_round(rd, "warmup" if is_warm else "measured",
                                                     i if is_warm else i - settings["warmups"]))
                    if progress:
                        progress(name, c, i, is_warm, rd)
                res = summarize(measured, prompts, warm, workload=name, settings=settings)
                res["prompt_ids"] = [p["id"] for p in prompts]
                results.append(res)
    except BenchError as exc:
        raw["error"] = str(exc)
        if raw_output:
            write_raw(raw_output, raw, api_key)
        raise
    raw["finished"] = time.time()
    raw["results"] = results
    if raw_output:
        write_raw(raw_output, raw, api_key)
    summary = {}
    for res in results:
        summary.setdefault(res["workload"], {})["c%d" % res["concurrency"]] = {
            "aggregate_tok_s_median": res["aggregate_tok_s"]["median"],
            "per_stream_tok_s_median": res["per_stream_tok_s"]["median"],
            "ttft_ms_median": res["ttft_ms_median"],
            "distinct_outputs": res["distinct_outputs"],
        }
    return {
        "url": client.full_url,
        "host_label": host_label,
        "measured_on": measured_on,
        "settings": public_settings(settings),
        "results": results,
        "summary": summary,
        "raw_output": raw_output,
        "requests_sent": sum(r["requests"] + r["warmup_requests"] for r in results),
    }


def write_raw(path, raw, api_key=None):
    """Write the raw record atomically (``.partial`` then rename), redacted before it is encoded.

    Redacting the data rather than the JSON text: a key echoed by the server that holds ``"`` or
    ``\\`` appears escaped in the text (``\\"``) and would not match there. The text is checked
    again afterwards (the key in any escaped form left is replaced too).
    """
    safe = redact_data(raw, [api_key] if api_key else [])
    text = redact(json.dumps(safe, indent=1, sort_keys=False, default=str), api_key)
    d = os.path.dirname(os.path.abspath(path))
    if d and not os.path.isdir(d):
        os.makedirs(d)
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
