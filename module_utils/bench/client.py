# -*- coding: utf-8 -*-
"""One chat completion request against an OpenAI-compatible endpoint (standard library only).

One subject: sending a request and reading its answer, streamed or not, as SPEC section 3 ("The
engine's HTTP API") describes it; ``decode_bench.py`` builds rounds and conditions on top. Tokens come
from ``usage.completion_tokens`` only (a response without usage is an error, never an estimate); the
API key is sent as ``Authorization: Bearer`` and scrubbed from every message (before a server's text
is cut to length, so a cut cannot leave part of it).

What a request record carries beyond the tokens: the time to the first generated text, to the first
reasoning text (``delta.reasoning_content``) and to the first answer text (``delta.content``) apart;
the gaps between text-bearing stream messages (inter-token latency: the engine sends one message per
speculative step, so a gap is a step); ``reasoning_tokens`` (``usage.reasoning_tokens`` or
``usage.completion_tokens_details.reasoning_tokens``); the other numeric counts of
``completion_tokens_details`` (newer builds' speculative accept counts) as they are; the answer's
``logprobs.content`` entries (token, logprob, top_logprobs) when the request asked for them, gathered over
the stream's chunks (None when the engine sent none).
A request that ends in an error event (``data: {"error": {..., "code": 503}}``) or with
``finish_reason: "abort"`` is not an exception: its record says ``failed`` with the error's own code
(``"abort"`` for an abort) and message, and the caller counts it as a failed repetition, never a
measurement. Errors before the stream (HTTP 4xx/5xx) still raise, with the body's ``code``.
"""
from __future__ import absolute_import, division, print_function

import json
import socket
import threading
import time

from ansible.module_utils.base.secrets import redact_text

try:                                    # Python 3
    import http.client as http_client
    from urllib.parse import urlsplit
except ImportError:                     # pragma: no cover - Python 2 is not supported on the fleet
    import httplib as http_client       # noqa
    from urlparse import urlsplit       # noqa

__metaclass__ = type

ERROR_BODY_CHARS = 500


class BenchError(Exception):
    """A benchmark request (or its set-up) failed. ``str()`` never contains the API key."""

    def __init__(self, message, url=None, status=None, host_label=None, api_key=None, code=None):
        self.url = url
        self.status = status
        self.code = code                # the error body's own ``code`` when the server sent one
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


# ---------------------------------------------------------------------------------------------
# One request
# ---------------------------------------------------------------------------------------------

def _delta_text(choice):
    """(content, reasoning) text of a stream choice's delta or a response choice's message."""
    d = choice.get("delta") or choice.get("message") or {}
    return d.get("content") or "", d.get("reasoning_content") or ""


def _logprob_entries(choice):
    """The ``logprobs.content`` entries of a stream choice or a response choice ({token, logprob,
    top_logprobs}), or None when the choice carries none."""
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    content = lp.get("content") if isinstance(lp, dict) else None
    return [e for e in content if isinstance(e, dict)] if isinstance(content, list) else None


def _int_count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_details(usage):
    """(reasoning_tokens, speculative counts) of a usage object.

    ``reasoning_tokens`` is read at the top of usage (SGLang) or in ``completion_tokens_details``
    (the OpenAI place); None when the server sent neither. The counts are every other non-negative
    integer of ``completion_tokens_details`` (e.g. accepted/rejected prediction tokens), as named.
    """
    if not isinstance(usage, dict):
        return None, {}
    details = usage.get("completion_tokens_details")
    details = details if isinstance(details, dict) else {}
    reasoning = _int_count(usage.get("reasoning_tokens"))
    if reasoning is None:
        reasoning = _int_count(details.get("reasoning_tokens"))
    spec = dict((k, v) for k, v in details.items() if k != "reasoning_tokens" and _int_count(v) is not None)
    return reasoning, spec


def error_fields(err):
    """``{"code", "message", "type"}`` of an error object (``{"error": {...}}`` or an error body)."""
    if isinstance(err, dict):
        code = err.get("code")
        return {"code": code if isinstance(code, (int, str)) and not isinstance(code, bool) else None,
                "message": str(err.get("message") or ""), "type": err.get("type")}
    return {"code": None, "message": str(err), "type": None}


def _body_code(text):
    """The ``code`` of an error body (``{"object":"error",...,"code":400}``), or None."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if isinstance(obj, dict):
        return error_fields(obj.get("error") if isinstance(obj.get("error"), dict) else obj)["code"]
    return None


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

    def _error(self, message, status=None, code=None):
        return BenchError(message, url=self.full_url, status=status, host_label=self.host_label,
                          api_key=self.api_key, code=code)

    def _timed_out(self, t0):
        return self._error("timed out after %.1f s (timeout=%s s for the whole request)"
                           % (time.monotonic() - t0, self.timeout), status="timeout")

    def _connection(self):
        cls = http_client.HTTPSConnection if self.scheme == "https" else http_client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def request(self, body):
        """Send one request; returns a record dict (see :func:`run_benchmark` raw output).

        Raises :class:`BenchError` on HTTP errors, timeouts, bad JSON or a missing usage count; an
        error event or an abort gives a record with ``failed`` and ``error`` (code, message) instead.
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
                                      status=resp.status, code=_body_code(text))
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

    def _failure(self, err):
        """A failed request's error: its own code and the message, key redacted and cut."""
        fields = error_fields(err)
        fields["message"] = self._clip(fields["message"])
        return fields

    def _read_json(self, resp, t0):
        raw = resp.read()
        t_end = time.monotonic()
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise self._error("response is not JSON: %r" % self._clip(raw.decode("utf-8", "replace")),
                              status=resp.status)
        if not isinstance(obj, dict):
            raise self._error("response is not a JSON object: %r" % self._clip(json.dumps(obj)), status=resp.status)
        usage = obj.get("usage")
        choices = obj.get("choices") or [{}]
        content, reasoning = _delta_text(choices[0])
        finish = choices[0].get("finish_reason")
        error = None
        if obj.get("error"):
            error = self._failure(obj["error"])
        elif finish == "abort":
            error = {"code": "abort", "message": "finish_reason abort", "type": None}
        tokens = _usage_tokens(usage)
        if tokens is None and error is None:
            raise self._error("response has no usage.completion_tokens; refusing to estimate tokens",
                              status="missing usage")
        reasoning_tokens, spec = usage_details(usage)
        return {"ttft_s": None, "ttft_reasoning_s": None, "ttft_answer_s": None, "gaps_s": [],
                "logprobs": _logprob_entries(choices[0]),
                "wall_s": t_end - t0, "end": t_end, "completion_tokens": tokens,
                "reasoning_tokens": reasoning_tokens, "speculative": spec,
                "prompt_tokens": (usage or {}).get("prompt_tokens") if isinstance(usage, dict) else None,
                "text": content, "reasoning": reasoning, "finish_reason": finish,
                "failed": error is not None, "error": error, "messages": None, "raw": obj}

    def _read_stream(self, resp, t0):
        events = []
        content, reasoning = [], []
        usage = None
        ttft = ttft_r = ttft_a = None
        last_text = None
        gaps = []
        finish = None
        error = None
        done = False
        data_lines = []
        n_messages = 0
        logprobs = None                         # the answer's logprobs.content, chunk after chunk
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
            now = time.monotonic()
            events.append(obj)
            if not isinstance(obj, dict):
                continue
            if obj.get("error"):
                # after the stream started an error is an event, then [DONE]: a failed request
                error = error or self._failure(obj["error"])
                continue
            if obj.get("usage") is not None:
                usage = obj["usage"]
            text_here = False
            for choice in obj.get("choices") or []:
                c, r = _delta_text(choice)
                if r and ttft_r is None:
                    ttft_r = now - t0
                if c and ttft_a is None:
                    ttft_a = now - t0
                if c or r:
                    text_here = True
                content.append(c)
                reasoning.append(r)
                entries = _logprob_entries(choice)
                if entries is not None:
                    logprobs = [] if logprobs is None else logprobs
                    logprobs.extend(entries)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
            if text_here:
                if ttft is None:
                    ttft = now - t0
                if last_text is not None:
                    gaps.append(now - last_text)
                last_text = now
                n_messages += 1
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
                    if isinstance(obj, dict) and obj.get("error"):
                        error = error or self._failure(obj["error"])
                except ValueError:
                    pass
        if error is None and finish == "abort":
            error = {"code": "abort", "message": "finish_reason abort after %d content message(s)" % n_messages,
                     "type": None}
        tokens = _usage_tokens(usage)
        if tokens is None and error is None:
            raise self._error("stream ended without a usage chunk (stream_options.include_usage) after %d "
                              "content message(s); refusing to count stream messages as tokens" % n_messages,
                              status="missing usage")
        reasoning_tokens, spec = usage_details(usage)
        return {"ttft_s": ttft, "ttft_reasoning_s": ttft_r, "ttft_answer_s": ttft_a, "gaps_s": gaps,
                "logprobs": logprobs,
                "wall_s": t_end - t0, "end": t_end, "completion_tokens": tokens,
                "reasoning_tokens": reasoning_tokens, "speculative": spec,
                "prompt_tokens": usage.get("prompt_tokens") if isinstance(usage, dict) else None,
                "text": "".join(content), "reasoning": "".join(reasoning), "finish_reason": finish,
                "failed": error is not None, "error": error, "messages": n_messages,
                "done": done, "raw": events}
