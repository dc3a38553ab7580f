"""The engine stand-in's HTTP API (SPEC section 3): health while booting, models, auth and errors, answers streamed and
not, reasoning, refused sampling, seeds, the stream-error and abort knobs, the serving lines.
"""
from __future__ import annotations

import json
import re
import urllib.error

import pytest

from engine_standin import (CHAT, MAIN, Proc, answer, engine_argv, free_port, head_with, marker_dict, messages, phys,
                            request, sse_events)


def test_head_health_503_while_booting_then_200(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"LAB_ENGINE_BOOT_SECONDS": "3", "LAB_ENGINE_FAST": "0"},
                name="head-slow")
    try:
        proc.wait_for("Init torch distributed begin.")
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/health", key=None)
        assert exc.value.code == 503 and exc.value.read() == b""
        with pytest.raises(urllib.error.HTTPError) as exc:     # a chat request while booting: the error object
            request(port, "/v1/chat/completions", CHAT, key=None)
        body = json.load(exc.value)
        assert exc.value.code == 503 and body["object"] == "error" and body["code"] == 503
        text = proc.wait_for(f"Ready: API on port {port}", timeout=30)
        assert "Ready:" not in proc.stream("stderr") and proc.stream("stdout").endswith(f"Ready: API on port {port}\n")
        with request(port, "/health", key=None) as r:
            assert r.status == 200 and r.read() == b""
        with request(port, "/health_generate", key=None) as r:
            assert r.status == 200 and r.read() == b""
        assert '"GET /health HTTP/1.1" 503' in proc.stream("stderr")
        msgs = messages(text)
        assert msgs.index("The server is fired up and ready to roll!") < msgs.index(f"Ready: API on port {port}")
    finally:
        assert proc.stop() == 0


def test_head_models_auth_and_errors(head):
    port = head["port"]
    with request(port, "/v1/models") as r:
        assert json.load(r)["data"][0]["id"] == "deepseek-v4.1-flash"
    with request(port, "/v1/models", header="x-api-key") as r:
        assert r.status == 200
    for key in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(port, "/v1/chat/completions", CHAT, key=key)
        assert exc.value.code == 401 and json.load(exc.value) == {"error": "Unauthorized"}
    with pytest.raises(urllib.error.HTTPError) as exc:
        request(port, "/v1/chat/completions", {"messages": "not a list"})
    body = json.load(exc.value)
    assert exc.value.code == 400 and body["object"] == "error" and body["code"] == 400 and body["message"]
    text = head["proc"].text()
    assert "sk-test-secret" not in text
    assert marker_dict(head["proc"].stream("stderr"))["api_key"] == "[REDACTED]"


def test_head_non_stream_usage_determinism_and_limits(head):
    port = head["port"]
    outs = []
    for _ in range(2):
        with request(port, "/v1/chat/completions", CHAT) as r:
            data = json.load(r)
        usage = data["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert 64 <= usage["completion_tokens"] <= 200
        assert len(data["choices"][0]["message"]["content"].split()) == usage["completion_tokens"]
        outs.append(data["choices"][0]["message"]["content"])
    assert outs[0] == outs[1]
    with request(port, "/v1/chat/completions", {**CHAT, "max_tokens": 10}) as r:
        data = json.load(r)
    assert data["usage"]["completion_tokens"] == 10 and data["choices"][0]["finish_reason"] == "length"
    with request(port, "/v1/chat/completions", {**CHAT, "max_tokens": 10, "max_completion_tokens": 20}) as r:
        assert json.load(r)["usage"]["completion_tokens"] == 20, "max_completion_tokens overrides max_tokens"
    think = {**CHAT, "max_tokens": 400, "chat_template_kwargs": {"thinking": True}}
    with request(port, "/v1/chat/completions", think) as r:
        data = json.load(r)
    msg, usage = data["choices"][0]["message"], data["usage"]
    assert len(msg["reasoning_content"].split()) == usage["reasoning_tokens"] == 256
    assert len(msg["content"].split()) + 256 == usage["completion_tokens"]


def test_head_stream_several_tokens_per_message(head):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with request(head["port"], "/v1/chat/completions", body) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["delta"].get("content"), "the role chunk comes with the first text"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    pieces = [p for p in pieces if p]
    tokens = sum(len(p.split()) for p in pieces)
    assert tokens == usage["completion_tokens"]
    assert len(pieces) < tokens  # several tokens per SSE message (speculative commits)
    assert max(len(p.split()) for p in pieces) >= 2


def test_head_serving_lines_rank0(head):
    with request(head["port"], "/v1/chat/completions", CHAT) as r:
        json.load(r)
    head["proc"].wait_for("Engram layer=14 lookups=")  # written when the request leaves the batch
    # the access line follows the response's last bytes, which may come after the request left the batch
    head["proc"].wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK')
    err = head["proc"].stream("stderr")
    msgs = messages(err)
    decode = [m for m in msgs if m.startswith("Decode batch")]
    assert decode and re.fullmatch(
        r"Decode batch, #running-req: 1, #full token: \d+, full token usage: \d\.\d\d, #swa token: \d+, "
        r"swa token usage: \d\.\d\d, accept len: \d+\.\d\d, accept rate: \d\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0", decode[-1]), decode[-1]
    for layer in (1, 14):
        assert any(re.fullmatch(rf"Engram layer={layer} lookups=\d+ hit_rate=0\.0% reads=\d+ cache=0\.0GiB\(4-way\) "
                                r"scales=0\.0GiB threads=96 packed=False", m) for m in msgs), layer
    assert any(re.fullmatch(r'INFO:     127\.0\.0\.1:\d+ - "POST /v1/chat/completions HTTP/1\.1" 200 OK', m) for m in msgs)
    assert any(re.search(r"Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: 0, ", m) for m in msgs)


def test_echoed_request_stays_inside_its_record(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"LAB_ENGINE_LOG_REQUESTS": "1", "LAB_ENGINE_SPEED": "200"})
    try:
        proc.wait_for(f"Ready: API on port {port}")
        fake = ("hi\nserver_args={'node_rank': 7}\n[2026-09-24 02:39:10 TP0 EP0] Exact nvme Engram layer=1 rank=0 "
                "rows=[0,10) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 packed=True")
        with request(port, "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": fake}]}, key=None) as r:
            json.load(r)
        err = proc.stream("stderr")
        (echo,) = [ln for ln in phys(err) if "Receive: obj=ChatCompletionRequest(" in ln]
        assert MAIN.match(echo) and "server_args=" in echo and "packed=True" in echo
        assert not any(ln.startswith(("server_args=", "[2026-09-24")) for ln in phys(err))
        assert "packed=True" not in err.replace(echo, "")
    finally:
        proc.stop()


def test_head_sigterm_clean(lab):
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), name="head2")
    proc.wait_for("Ready: API on port")
    assert proc.stop() == 0
    assert phys(proc.stream("stderr"))[-3].endswith("] Received sigterm=15, shutting down.")


STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}


def test_head_stream_reasoning_apart_only_with_thinking(head):
    port = head["port"]
    events = sse_events(port, {**STREAM, "max_tokens": 400, "chat_template_kwargs": {"thinking": True}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    # all the reasoning first, then the answer; the first text right after the role chunk is reasoning
    assert kinds[0] == "reasoning_content" and "content" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "content")
    assert "reasoning_content" in deltas[1]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and all("usage" not in c or c["usage"] is None for c in chunks[:-1])
    reasoning = sum(len(d["reasoning_content"].split()) for d in deltas if d.get("reasoning_content"))
    answer = sum(len(d["content"].split()) for d in deltas if d.get("content"))
    assert reasoning == usage["reasoning_tokens"] == 256 and reasoning + answer == usage["completion_tokens"]
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")

    plain = sse_events(port, {**CHAT, "stream": True})          # no thinking, no include_usage
    assert not any(c["choices"][0]["delta"].get("reasoning_content") for c in plain[:-1] if c["choices"])
    assert not any(c.get("usage") for c in plain[:-1]), "usage only when stream_options.include_usage"


def test_head_refuses_bad_sampling_before_the_stream(head):
    for bad in ({"top_p": 1.5}, {"temperature": -1}, {"max_completion_tokens": -3}, {"top_k": 0}):
        with pytest.raises(urllib.error.HTTPError) as exc:
            request(head["port"], "/v1/chat/completions", {**STREAM, **bad})
        body = json.load(exc.value)
        assert exc.value.code == 400 and body["object"] == "error" and body["code"] == 400, bad
        assert list(bad)[0] in body["message"]


def test_head_seeded_sampling_repeats_and_the_seed_matters(head):
    port = head["port"]
    sampled = {**CHAT, "temperature": 0.7, "top_p": 0.95, "top_k": 20, "seed": 7}
    assert answer(port, sampled) == answer(port, sampled)
    assert answer(port, sampled) != answer(port, {**sampled, "seed": 8})
    assert answer(port, sampled) != answer(port), "sampled is not the greedy answer"


def test_stream_error_knob_sends_an_error_event_then_done(lab):
    port, proc = head_with(lab, {"LAB_ENGINE_STREAM_ERROR_EVERY": "2"})
    try:
        ok = sse_events(port, STREAM)                          # request 1
        assert ok[-2]["usage"]["completion_tokens"] > 0
        bad = sse_events(port, STREAM)                         # request 2: the knob's
        assert bad[-1] == "[DONE]" and set(bad[-2]) == {"error"}
        assert bad[-2]["error"]["code"] == 503 and bad[-2]["error"]["message"]
        assert any(c.get("choices") and c["choices"][0]["delta"].get("content") for c in bad[:-2]), "mid-stream"
        assert not any(c.get("usage") or (c.get("choices") and c["choices"][0].get("finish_reason"))
                       for c in bad[:-2]), "no finish chunk and no usage after an error"
        answer(port)                                           # request 3
        with pytest.raises(urllib.error.HTTPError) as exc:    # request 4, not streamed
            answer(port)
        body = json.load(exc.value)
        assert exc.value.code == 503 and body["object"] == "error" and body["code"] == 503
    finally:
        assert proc.stop() == 0


def test_abort_knob_finishes_with_abort_and_usage(lab):
    port, proc = head_with(lab, {"LAB_ENGINE_ABORT_EVERY": "1", "LAB_ENGINE_SPEC_USAGE": "1"})
    try:
        events = sse_events(port, {**STREAM, "max_tokens": 1000})
        assert events[-1] == "[DONE]" and events[-2]["choices"] == []
        assert events[-3]["choices"][0]["finish_reason"] == "abort"
        usage = events[-2]["usage"]
        streamed = sum(len(c["choices"][0]["delta"].get("content", "").split()) for c in events[:-2] if c["choices"])
        assert 0 < streamed == usage["completion_tokens"] < 1000
        details = usage["completion_tokens_details"]
        # every step commits its own token plus the accepted draft tokens; K=3 drafts per step
        assert details["accepted_prediction_tokens"] < usage["completion_tokens"]
        assert (details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"]) % 3 == 0
        with request(port, "/v1/chat/completions", CHAT) as r:
            data = json.load(r)
        assert data["choices"][0]["finish_reason"] == "abort" and data["usage"]["completion_tokens"] > 0
    finally:
        assert proc.stop() == 0
