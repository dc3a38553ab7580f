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
import socket
import statistics
import threading
import time

from ansible.module_utils.secret_rule import redact as redact_data, redact_text

try:                                    # Python 3
    import http.client as http_client
    from urllib.parse import urlsplit
except ImportError:                     # pragma: no cover - Python 2 is not supported on the fleet
    import httplib as http_client       # noqa
    from urlparse import urlsplit       # noqa

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
ERROR_BODY_CHARS = 500


class BenchError(Exception):
    """A benchmark request (or its set-up) failed. ``str()`` never contains the API key."""

    def __init__(self, message, url=None, status=None, host_label=None, api_key=None):
        self.url = url
        self.status = status
        self.host_label = host_label
        self.detail = redact(message, api_key)
        parts = []
        if host_label:
            parts.append(host_label)
        if url:
            parts.append(url)
        head = " -> ".join(parts)
        text = self.detail
        if status is not None:
            text = "status %s: %s" % (status, text)
        super(BenchError, self).__init__("%s: %s" % (head, text) if head else text)


def redact(text, api_key):
    """``text`` with the API key replaced (as is and JSON-escaped; the one secret rule's redact_text)."""
    return redact_text("%s" % (text,), [api_key] if api_key else [])


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


def endpoint(url):
    """Base URL -> (scheme, host, port, path) of the chat completions endpoint.

    ``http://spark1:8888`` and ``http://spark1:8888/v1`` both give ``/v1/chat/completions``; a URL
    already ending in ``/chat/completions`` is used as is.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError("url must be http(s)://host[:port][/v1], got %r" % url)
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        if not path.endswith("/v1"):
            path += "/v1"
        path += "/chat/completions"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, path


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
# One request
# ---------------------------------------------------------------------------------------------

def _delta_text(choice):
    """(content, reasoning) text of a stream choice's delta or a response choice's message."""
    d = choice.get("delta") or choice.get("message") or {}
    return d.get("content") or "", d.get("reasoning_content") or ""


def _usage_tokens(usage):
    if not isinstance(usage, dict):
        return None
    ct = usage.get("completion_tokens")
    if isinstance(ct, bool) or not isinstance(ct, int) or ct < 0:
        return None
    return ct


class Client(object):
    """Sends chat completion requests to one endpoint."""

    def __init__(self, url, api_key=None, timeout=300.0, host_label=None):
        self.url = url
        self.scheme, self.host, self.port, self.path = endpoint(url)
        self.api_key = api_key
        self.timeout = float(timeout)
        self.host_label = host_label
        self.full_url = "%s://%s:%s%s" % (self.scheme, self.host, self.port, self.path)

    def _clip(self, text):
        """Server text for a message: the key redacted first, then cut (a cut key would not match)."""
        return redact(text, self.api_key)[:ERROR_BODY_CHARS]

    def _error(self, message, status=None):
        return BenchError(message, url=self.full_url, status=status, host_label=self.host_label,
                          api_key=self.api_key)

    def _timed_out(self, t0):
        return self._error("timed out after %.1f s (timeout=%s s for the whole request)"
                           % (time.monotonic() - t0, self.timeout), status="timeout")

    def _connection(self):
        cls = http_client.HTTPSConnection if self.scheme == "https" else http_client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def request(self, body):
        """Send one request; returns a record dict (see :func:`run_benchmark` raw output).

        Raises :class:`BenchError` on HTTP errors, timeouts, bad JSON, error events or a missing
        usage count.
        """
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if body.get("stream")
                   else "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        conn = self._connection()
        t0 = time.monotonic()
        # `timeout` bounds each socket operation, and also the whole request: a server that trickles
        # a byte now and then never trips a per-read timeout, so a watchdog closes the socket at the
        # deadline and the request fails as timed out.
        expired = []
        sockets = []        # the connection hands its socket to the response (conn.sock becomes None)

        def expire():
            expired.append(True)
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except (OSError, socket.error):
                    pass

        watchdog = threading.Timer(self.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                conn.connect()
                sockets.append(conn.sock)
                conn.request("POST", self.path, body=data, headers=headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    text = resp.read(ERROR_BODY_CHARS * 4).decode("utf-8", "replace").strip()
                    raise self._error("HTTP %s %s: %s" % (resp.status, resp.reason, self._clip(text)),
                                      status=resp.status)
                if body.get("stream"):
                    rec = self._read_stream(resp, t0)
                else:
                    rec = self._read_json(resp, t0)
                if expired:
                    raise socket.timeout()
            except socket.timeout:
                raise self._timed_out(t0)
            except (socket.error, http_client.HTTPException) as exc:
                if expired:
                    raise self._timed_out(t0)
                raise self._error("%s: %s" % (type(exc).__name__, exc), status="connection error")
            except BenchError:
                if expired:
                    raise self._timed_out(t0)
                raise
        finally:
            watchdog.cancel()
            conn.close()
        rec["start"] = t0
        return rec

    def _read_json(self, resp, t0):
        raw = resp.read()
        t_end = time.monotonic()
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise self._error("response is not JSON: %r" % self._clip(raw.decode("utf-8", "replace")),
                              status=resp.status)
        if isinstance(obj, dict) and obj.get("error"):
            raise self._error("error in response: %s" % self._clip(json.dumps(obj["error"])),
                              status=resp.status)
        tokens = _usage_tokens(obj.get("usage") if isinstance(obj, dict) else None)
        if tokens is None:
            raise self._error("response has no usage.completion_tokens; refusing to estimate tokens",
                              status="missing usage")
        choices = obj.get("choices") or [{}]
        content, reasoning = _delta_text(choices[0])
        return {"ttft_s": None, "wall_s": t_end - t0, "end": t_end, "completion_tokens": tokens,
                "prompt_tokens": (obj.get("usage") or {}).get("prompt_tokens"), "text": content,
                "reasoning": reasoning, "finish_reason": choices[0].get("finish_reason"),
                "messages": None, "raw": obj}

    def _read_stream(self, resp, t0):
        events = []
        content, reasoning = [], []
        usage = None
        ttft = None
        finish = None
        done = False
        data_lines = []
        n_messages = 0
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
                continue
            if line != "" or not data_lines:
                continue                         # comments, event:/id: fields, stray blank lines
            payload = "\n".join(data_lines)
            data_lines = []
            if payload.strip() == "[DONE]":
                done = True
                break
            try:
                obj = json.loads(payload)
            except ValueError:
                raise self._error("stream event is not JSON: %r" % self._clip(payload), status=resp.status)
            events.append(obj)
            if not isinstance(obj, dict):
                continue
            if obj.get("error"):
                raise self._error("error event in stream: %s" % self._clip(json.dumps(obj["error"])),
                                  status=resp.status)
            if obj.get("usage") is not None:
                usage = obj["usage"]
            for choice in obj.get("choices") or []:
                c, r = _delta_text(choice)
                if (c or r) and ttft is None:
                    ttft = time.monotonic() - t0
                if c or r:
                    n_messages += 1
                content.append(c)
                reasoning.append(r)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        t_end = time.monotonic()
        if data_lines and not done:             # last event without its blank line
            payload = "\n".join(data_lines)
            if payload.strip() == "[DONE]":
                done = True
            else:
                try:
                    obj = json.loads(payload)
                    events.append(obj)
                    if isinstance(obj, dict) and obj.get("usage") is not None:
                        usage = obj["usage"]
                except ValueError:
                    pass
        tokens = _usage_tokens(usage)
        if tokens is None:
            raise self._error("stream ended without a usage chunk (stream_options.include_usage) after %d "
                              "content message(s); refusing to count stream messages as tokens" % n_messages,
                              status="missing usage")
        return {"ttft_s": ttft, "wall_s": t_end - t0, "end": t_end, "completion_tokens": tokens,
                "prompt_tokens": usage.get("prompt_tokens"), "text": "".join(content),
                "reasoning": "".join(reasoning), "finish_reason": finish, "messages": n_messages,
                "done": done, "raw": events}


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
