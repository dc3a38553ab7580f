"""decode_bench: module_utils logic against a local fake OpenAI endpoint, and the module entry point."""
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes
from ansible.module_utils.bench import decode as db
from ansible.module_utils.bench import client as bench_client, inputs, summary

import decode_bench

KEY = "sk-test-SECRET-4242"


class FakeEngine(object):
    """Behaviour of the fake endpoint; tests change the attributes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.bodies = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.api_key = KEY
        self.messages = 20            # SSE content messages per response
        self.per_message = 3          # tokens per message ("tok tok tok")
        self.usage_tokens = 60        # what usage.completion_tokens says
        self.send_usage = True
        self.status = 200
        self.random_text = False
        self.odd_first = 0            # the first N requests get a different text (warm-up detector)
        self.delay = 0.0              # seconds before the first content message
        self.chunked = False          # HTTP/1.1 chunked transfer encoding (uvicorn style)
        self.echo = None              # a header echoed back in the text and a secret-named field
        self.pad_401 = 0              # characters of padding before the echoed key in a 401 body
        self.reasoning_messages = 0   # the first N messages are reasoning_content, the rest content
        self.usage_extra = {}         # merged into usage (reasoning_tokens, completion_tokens_details)
        self.fail = {}                # request number -> "error" (event, code 503) or "abort", half-way
        self.error_body = None        # the body of a status != 200 answer (default an error message)
        self.logprobs = False         # answer a request asking for logprobs with them (two equally likely tokens)

    def text_for(self, body, n_request):
        prompt = body["messages"][-1]["content"]
        if self.random_text:
            return ["w%d" % random.randint(0, 10 ** 9) for _ in range(self.messages)]
        if self.echo is not None:
            return ["you sent %s" % self.echo] + ["e%d" % i for i in range(self.messages - 1)]
        if n_request < self.odd_first:
            return ["warm%d" % i for i in range(self.messages)]
        return ["%s-%d" % (prompt[:8], i) for i in range(self.messages)]


def make_server(engine):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _json(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _write(self, data):
            if engine.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self.wfile.write(data)
            self.wfile.flush()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with engine.lock:
                n = len(engine.bodies)
                engine.bodies.append(body)
            if engine.echo is not None:
                engine.echo = self.headers.get("Authorization")
            if engine.api_key and self.headers.get("Authorization") != "Bearer " + engine.api_key:
                self._json(401, {"error": {"message": "%sbad key %s" % ("x" * engine.pad_401,
                                                                         self.headers.get("Authorization"))}})
                return
            if engine.status != 200:
                self._json(engine.status, engine.error_body or {"error": {"message": "engine exploded"}})
                return
            with engine.lock:
                engine.in_flight += 1
                engine.max_in_flight = max(engine.max_in_flight, engine.in_flight)
            done = []

            def leave():
                # before the answer's last bytes: the client may send its next request the moment it has
                # read them, before this handler's thread runs again (that request would count twice)
                if not done:
                    done.append(True)
                    with engine.lock:
                        engine.in_flight -= 1
            try:
                time.sleep(engine.delay)
                words = engine.text_for(body, n)
                pieces = [" ".join([w] * engine.per_message) for w in words]
                usage = dict({"prompt_tokens": 7, "completion_tokens": engine.usage_tokens,
                              "total_tokens": 7 + engine.usage_tokens}, **engine.usage_extra)
                fail = engine.fail.get(n)
                nr = engine.reasoning_messages
                if not body.get("stream"):
                    leave()
                    if fail == "error":
                        self._json(200, {"error": {"message": "lost a rank", "code": 503}})
                        return
                    message = {"role": "assistant", "content": " ".join(pieces[nr:])}
                    if nr:
                        message["reasoning_content"] = " ".join(pieces[:nr])
                    self._json(200, {"choices": [{"index": 0, "message": message,
                                                  "finish_reason": "abort" if fail else "length"}],
                                     "usage": usage if engine.send_usage else None})
                    return
                if engine.chunked:
                    self.protocol_version = "HTTP/1.1"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if engine.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()

                def sse(obj):
                    if engine.echo is not None and isinstance(obj, dict):
                        obj = dict(obj, session_token="tok-private-9876")
                    if obj == "[DONE]" and not engine.chunked:
                        leave()
                    self._write(("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode())

                sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "usage": None})
                for i, piece in enumerate(pieces):
                    if fail and i == len(pieces) // 2:
                        break
                    field = "reasoning_content" if i < nr else "content"
                    choice = {"index": 0, "delta": {field: (" " if i not in (0, nr) else "") + piece},
                              "finish_reason": None}
                    if engine.logprobs and body.get("logprobs"):
                        choice["logprobs"] = {"content": [
                            {"token": w, "logprob": -0.6931, "top_logprobs": [
                                {"token": w, "logprob": -0.6931}, {"token": "other", "logprob": -0.6931}]}
                            for w in piece.split()]}
                    sse({"choices": [choice], "usage": None})
                if fail == "error":
                    sse({"error": {"message": "lost a rank", "type": "ServiceUnavailableError", "code": 503}})
                    sse("[DONE]")
                    return
                sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "abort" if fail else "length"}],
                     "usage": None})
                if engine.send_usage and (body.get("stream_options") or {}).get("include_usage"):
                    sse({"choices": [], "usage": usage})
                sse("[DONE]")
                if engine.chunked:
                    leave()
                    self.wfile.write(b"0\r\n\r\n")
            finally:
                leave()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


@pytest.fixture
def engine():
    eng = FakeEngine()
    server = make_server(eng)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    t.daemon = True
    t.start()
    eng.url = "http://127.0.0.1:%d" % server.server_address[1]
    yield eng
    server.shutdown()
    server.server_close()


@pytest.fixture
def prompt_files(tmp_path):
    prose = tmp_path / "prose.json"
    prose.write_text(json.dumps(["Write a haiku about frost.",
                                 {"id": "story", "messages": [{"role": "user", "content": "Tell a story."}]}]))
    code = tmp_path / "code.json"
    code.write_text(json.dumps([{"id": "rev", "prompt": "Write code to reverse a list.", "system": "Be brief."}]))
    return {"prose": str(prose), "code": str(code)}


def settings(**kw):
    s = {"concurrency": [1], "repetitions": 5, "warmups": 1, "timeout": 5}
    s.update(kw)
    return s


def bench(engine, prompt_files, names=("prose",), **kw):
    workloads = dict((n, inputs.load_prompts(prompt_files[n])) for n in names)
    return db.run_benchmark(engine.url, workloads, settings(**kw), api_key=KEY, host_label="spark2",
                            measured_on="lab output")


# --------------------------------------------------------------------------- module_utils


def test_stream_tokens_come_from_usage_not_messages(engine, prompt_files):
    client = bench_client.Client(engine.url, api_key=KEY, timeout=5)
    rec = client.request(db.build_body([{"role": "user", "content": "hi"}], inputs.validate_settings({})))
    assert rec["messages"] == 20 and rec["completion_tokens"] == 60      # 20 SSE messages of 3 tokens
    assert rec["text"].split()[:3] == ["hi-0", "hi-0", "hi-0"] and len(rec["text"].split()) == 60
    assert rec["ttft_s"] is not None and 0 < rec["ttft_s"] <= rec["wall_s"]
    body = engine.bodies[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"thinking": False}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("deepseek-v4.1-flash", 256, 0.0)

    engine.usage_tokens = 47                      # usage is the only source, whatever the messages say
    res = bench(engine, prompt_files)
    (r,) = res["results"]
    assert r["requests"] == 10 and r["completion_tokens_total"] == 47 * 10
    agg = r["aggregate_tok_s"]
    assert len(agg["rounds"]) == 5 and agg["min"] <= agg["median"] <= agg["max"] and agg["stdev"] >= 0
    assert r["ttft_ms_median"] > 0 and r["per_stream_tok_s"]["median"] > 0


def test_chunked_transfer_encoding(engine, prompt_files):
    engine.chunked = True
    rec = bench_client.Client(engine.url, api_key=KEY).request(
        db.build_body([{"role": "user", "content": "x"}], inputs.validate_settings({})))
    assert rec["completion_tokens"] == 60 and rec["messages"] == 20 and rec["done"] is True


def test_aggregate_rate_is_usage_over_round_wall(engine, prompt_files):
    engine.delay = 0.02
    res = bench(engine, prompt_files, concurrency=[2])
    (r,) = res["results"]
    # every round: 2 streams x 2 prompts x 60 tokens over the round's wall time
    for rate, wall in zip(r["aggregate_tok_s"]["rounds"], r["round_wall_s"]):
        assert rate == pytest.approx(240 / wall)
    assert r["aggregate_tok_s"]["median"] > r["per_stream_tok_s"]["median"]


def test_non_stream_mode(engine, prompt_files):
    res = bench(engine, prompt_files, stream=False)
    (r,) = res["results"]
    assert r["completion_tokens_total"] == 600 and r["ttft_ms_median"] is None
    assert all(b["stream"] is False and "stream_options" not in b for b in engine.bodies)
    engine.send_usage = False
    with pytest.raises(bench_client.BenchError) as err:
        bench(engine, prompt_files, stream=False)
    assert err.value.status == "missing usage"


def test_missing_usage_chunk_fails(engine, prompt_files):
    engine.send_usage = False
    with pytest.raises(bench_client.BenchError) as err:
        bench(engine, prompt_files)
    msg = str(err.value)
    assert err.value.status == "missing usage"
    assert msg.startswith("spark2 -> %s/v1/chat/completions: status missing usage" % engine.url)
    assert "refusing to count stream messages as tokens" in msg and "20 content message(s)" in msg
    assert len(engine.bodies) == 1                 # stops at the first failure


def test_401_fails_without_the_key(engine, prompt_files):
    workloads = {"prose": inputs.load_prompts(prompt_files["prose"])}
    with pytest.raises(bench_client.BenchError) as err:
        db.run_benchmark(engine.url, workloads, settings(), api_key="sk-wrong-key-123", host_label="spark3")
    msg = str(err.value)
    assert err.value.status == 401 and "status 401" in msg and "spark3" in msg and engine.url in msg
    assert "sk-wrong-key-123" not in msg and "***" in msg           # the server echoed it; scrubbed


def test_server_error_and_timeout(engine, prompt_files):
    engine.status = 503
    with pytest.raises(bench_client.BenchError) as err:
        bench(engine, prompt_files)
    assert err.value.status == 503 and "engine exploded" in str(err.value)
    engine.status = 200
    engine.delay = 1.0
    with pytest.raises(bench_client.BenchError) as err:
        bench(engine, prompt_files, timeout=0.2)
    assert err.value.status == "timeout" and "timed out" in str(err.value)


def test_repetitions_below_five_refused(engine, prompt_files):
    with pytest.raises(bench_client.BenchError) as err:
        bench(engine, prompt_files, repetitions=4)
    assert "repetitions=4 refused" in str(err.value)
    assert engine.bodies == []


def test_warmups_are_discarded(engine, prompt_files):
    engine.odd_first = 4                            # the 2 warm-up rounds x 2 prompts answer differently
    res = bench(engine, prompt_files, warmups=2)
    (r,) = res["results"]
    assert len(engine.bodies) == 14 == res["requests_sent"]
    assert r["requests"] == 10 and r["warmup_requests"] == 4 and r["warmup_rounds"] == 2
    assert r["completion_tokens_total"] == 600
    assert r["distinct_outputs"] == 1 and r["deterministic"] is True     # warm-up texts are not counted


def test_distinct_outputs(engine, prompt_files):
    res = bench(engine, prompt_files)
    (r,) = res["results"]
    assert r["distinct_outputs"] == 1 and r["distinct_outputs_per_prompt"] == {"p0": 1, "story": 1}
    engine.random_text = True
    res = bench(engine, prompt_files)
    (r,) = res["results"]
    assert r["distinct_outputs"] == 5 and r["distinct_outputs_per_prompt"] == {"p0": 5, "story": 5}
    assert r["deterministic"] is False


def test_concurrency_four_runs_four_in_flight(engine, prompt_files):
    engine.delay = 0.05
    res = bench(engine, prompt_files, concurrency=[4], warmups=0, prompts_per_stream=1)
    assert engine.max_in_flight == 4
    (r,) = res["results"]
    assert r["requests"] == 20 and r["concurrency"] == 4
    # stream i starts at prompt i mod 2: each round sends p0, story, p0, story
    firsts = [b["messages"][-1]["content"] for b in engine.bodies]
    assert firsts.count("Write a haiku about frost.") == 10 and firsts.count("Tell a story.") == 10
    assert r["distinct_outputs_per_prompt"] == {"p0": 1, "story": 1}


def test_stream_plan():
    assert db.stream_plan(3, 4) == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert db.stream_plan(6, 2, 2) == [[0, 1], [1, 2]]


def test_prompt_files_validation(tmp_path):
    bad = tmp_path / "bad.json"
    for content, needle in [("{", "not valid JSON"), ("[]", "non-empty JSON list"), ("[5]", "prompt 0 must be"),
                            ('[{"messages": []}]', "messages must be"), ('["a", {"id": "p0", "prompt": "b"}]',
                                                                         "not unique")]:
        bad.write_text(content)
        with pytest.raises(bench_client.BenchError) as err:
            inputs.load_prompts(str(bad))
        assert needle in str(err.value)


def test_a_thinking_workload_asks_every_prompt_with_thinking_on_unless_a_prompt_says_otherwise(engine, tmp_path):
    path = tmp_path / "thinking.json"
    path.write_text(json.dumps({"thinking": True, "prompts": [
        "why", {"id": "p1", "prompt": "how"}, {"id": "off", "prompt": "no", "thinking": False}]}))
    prompts = inputs.load_prompts(str(path))
    assert [p.get("thinking") for p in prompts] == [True, True, False]
    db.run_benchmark(engine.url, {"thinking": prompts}, settings(concurrency=[1], prompts_per_stream=3),
                     api_key=KEY, host_label="spark2", measured_on="lab output")
    asked = dict((b["messages"][-1]["content"], b["chat_template_kwargs"]) for b in engine.bodies)
    assert asked == {"why": {"thinking": True}, "how": {"thinking": True}, "no": {"thinking": False}}
    # a plain list keeps the settings' own switch
    path.write_text(json.dumps(["plain"]))
    assert inputs.load_prompts(str(path)) == [{"id": "p0", "messages": [{"role": "user", "content": "plain"}]}]
    assert db.build_body([], inputs.validate_settings({"thinking": True}))["chat_template_kwargs"] == {"thinking": True}
    assert db.build_body([], inputs.validate_settings({}), thinking=True)["chat_template_kwargs"] == {"thinking": True}


def test_a_thinking_value_that_is_not_a_boolean_is_refused_naming_the_file_and_prompt(tmp_path):
    bad = tmp_path / "bad.json"
    for content, needle in [('{"thinking": "yes", "prompts": ["a"]}', "thinking must be true or false, not 'yes'"),
                            ('[{"prompt": "a", "thinking": 1}]', "prompt 0: thinking must be true or false, not 1")]:
        bad.write_text(content)
        with pytest.raises(bench_client.BenchError) as err:
            inputs.load_prompts(str(bad))
        assert needle in str(err.value) and str(bad) in str(err.value)


@pytest.mark.parametrize("name", ["prose", "code", "json", "math", "thinking"])
def test_shipped_prompt_files(name):
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "benchmark", "files", "prompts", name + ".json")
    prompts = inputs.load_prompts(path)
    assert len(prompts) >= 6
    lengths = [sum(len(m["content"]) for m in p["messages"]) for p in prompts]
    assert max(lengths) > 3 * min(lengths)                     # different lengths
    assert all(p["id"].startswith(name) for p in prompts)
    # the thinking workload asks every prompt with thinking on; the others leave it to the settings
    assert all(p.get("thinking") is (True if name == "thinking" else None) for p in prompts)


def test_endpoint_forms():
    assert bench_client.endpoint("http://spark1:8888") == ("http", "spark1", 8888, "/v1/chat/completions")
    assert bench_client.endpoint("http://spark1:8888/v1/") == ("http", "spark1", 8888, "/v1/chat/completions")
    assert bench_client.endpoint("https://h/v1/chat/completions")[2:] == (443, "/v1/chat/completions")
    with pytest.raises(bench_client.BenchError):
        bench_client.endpoint("spark1:8888")


# --------------------------------------------------------------------------- module entry point


def run(monkeypatch, capsys, args):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    if hasattr(basic, "_ANSIBLE_PROFILE"):
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        decode_bench.main()
    return json.loads(capsys.readouterr().out)


def test_module_run_writes_raw_output(monkeypatch, capsys, engine, prompt_files, tmp_path):
    raw = tmp_path / "out" / "raw.json"
    res = run(monkeypatch, capsys, {"url": engine.url, "api_key": KEY, "prompt_files": prompt_files,
                                    "concurrency": [1, 2], "raw_output": str(raw), "measured_on": "lab output",
                                    "host_label": "spark2", "timeout": 5})
    assert not res.get("failed"), res
    assert res["changed"] is True and res["measured_on"] == "lab output"
    assert [(r["workload"], r["concurrency"]) for r in res["results"]] == [
        ("code", 1), ("code", 2), ("prose", 1), ("prose", 2)]
    assert set(res["summary"]) == {"prose", "code"} and set(res["summary"]["prose"]) == {"c1", "c2"}
    assert res["results"][0]["settings"]["repetitions"] == 5 and res["settings"]["max_tokens"] == 256
    # code: 1 prompt; prose: 2 prompts; (C1 + C2) x (1 warm-up + 5) rounds
    assert len(engine.bodies) == res["requests_sent"] == (1 + 2) * 6 * 3
    assert KEY not in json.dumps(res)
    record = json.loads(raw.read_text())
    assert KEY not in raw.read_text() and record["measured_on"] == "lab output"
    kinds = [rd["kind"] for rd in record["conditions"][0]["rounds"]]
    assert kinds == ["warmup"] + ["measured"] * 5
    req = record["conditions"][0]["rounds"][1]["streams"][0]["requests"][0]
    assert req["completion_tokens"] == 60 and req["content_messages"] == 20
    assert req["response"][-1]["usage"]["completion_tokens"] == 60          # every stream event kept


def test_module_check_mode_sends_nothing(monkeypatch, capsys, engine, prompt_files, tmp_path):
    res = run(monkeypatch, capsys, {"url": engine.url, "api_key": KEY, "prompt_files": prompt_files,
                                    "raw_output": str(tmp_path / "raw.json"), "_ansible_check_mode": True})
    assert res["skipped"] is True and res["changed"] is False
    assert engine.bodies == [] and not (tmp_path / "raw.json").exists()
    assert {(p["workload"], p["concurrency"], p["requests_total"]) for p in res["plan"]} == {
        ("code", 1, 6), ("code", 4, 24), ("prose", 1, 12), ("prose", 4, 48)}
    missing = run(monkeypatch, capsys, {"url": engine.url, "prompt_files": {"prose": str(tmp_path / "nope.json")},
                                        "_ansible_check_mode": True})
    assert missing["skipped"] is True and "prose" in missing["unreadable_prompt_files"]


def test_module_401_message(monkeypatch, capsys, engine, prompt_files):
    res = run(monkeypatch, capsys, {"url": engine.url, "api_key": "sk-nope-777", "prompt_files": prompt_files,
                                    "host_label": "spark3"})
    assert res["failed"] is True and res["status"] == 401
    assert res["msg"].startswith("spark3 -> %s/v1/chat/completions: status 401" % engine.url)
    assert "sk-nope-777" not in json.dumps(res)


def test_module_refuses_few_repetitions(monkeypatch, capsys, engine, prompt_files):
    res = run(monkeypatch, capsys, {"url": engine.url, "prompt_files": prompt_files, "repetitions": 3,
                                    "host_label": "spark2"})
    assert res["failed"] and "repetitions=3 refused" in res["msg"] and res["msg"].startswith("spark2: ")
    assert engine.bodies == []


def test_module_missing_usage(monkeypatch, capsys, engine, prompt_files):
    engine.send_usage = False
    res = run(monkeypatch, capsys, {"url": engine.url, "api_key": KEY, "prompt_files": prompt_files,
                                    "host_label": "spark2"})
    assert res["failed"] and res["status"] == "missing usage" and engine.url in res["msg"]


def test_documentation_blocks_parse():
    import yaml
    doc = yaml.safe_load(decode_bench.DOCUMENTATION)
    assert doc["module"] == "decode_bench"
    assert {"url", "api_key", "model", "prompt_files", "concurrency", "repetitions", "warmups", "max_tokens",
            "temperature", "thinking", "stream", "timeout", "raw_output", "host_label", "measured_on"} <= set(doc["options"])
    yaml.safe_load(decode_bench.EXAMPLES)
    yaml.safe_load(decode_bench.RETURN)


# --------------------------------------------------------------------------- redaction of raw output

ODD_KEY = 'sk-"quoted\\back-4242'      # a key holding a quote and a backslash


def test_echoed_key_with_quotes_is_redacted_before_encoding(monkeypatch, capsys, engine, prompt_files, tmp_path):
    engine.api_key = ODD_KEY
    engine.echo = ""
    raw = tmp_path / "raw.json"
    res = run(monkeypatch, capsys, {"url": engine.url, "api_key": ODD_KEY, "prompt_files": {"code": prompt_files["code"]},
                                    "concurrency": [1], "raw_output": str(raw), "host_label": "spark2", "timeout": 5})
    assert not res.get("failed"), res
    text = raw.read_text()
    record = json.loads(text)
    req = record["conditions"][0]["rounds"][1]["streams"][0]["requests"][0]
    assert req["text"].startswith("you sent Bearer ***")                  # echoed in the content, redacted
    events = [e for e in req["response"] if isinstance(e, dict)]
    assert events and all(e["session_token"] == "***" for e in events)    # a secret-named field
    for secret in (ODD_KEY, json.dumps(ODD_KEY)[1:-1], "quoted", "tok-private-9876"):
        assert secret not in text and secret not in json.dumps(res)


def test_key_cut_by_the_message_limit_is_still_redacted(engine, prompt_files):
    # body: '{"error": {"message": "' + padding + 'bad key Bearer sk-...': the cut falls inside the key
    engine.pad_401 = bench_client.ERROR_BODY_CHARS - 48
    workloads = {"prose": inputs.load_prompts(prompt_files["prose"])}
    wrong = "sk-wrong-key-0123456789abcdef"
    body = json.dumps({"error": {"message": "x" * engine.pad_401 + "bad key Bearer " + wrong}})
    assert "sk-wrong" in body[:bench_client.ERROR_BODY_CHARS] and wrong not in body[:bench_client.ERROR_BODY_CHARS]
    with pytest.raises(bench_client.BenchError) as err:
        db.run_benchmark(engine.url, workloads, settings(), api_key=wrong, host_label="spark3")
    assert err.value.status == 401 and "Bearer ***" in str(err.value)
    assert "sk-wrong" not in str(err.value)


def test_a_trickling_server_hits_the_overall_deadline():
    """A server that sends a byte every 0.2 s never trips a per-read timeout; the whole request
    still ends at the client's timeout (an overall deadline), as a clean timeout error."""
    import socket as so
    listener = so.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    stop = threading.Event()

    def serve():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ")
        while not stop.is_set():
            try:
                conn.sendall(b"x")
            except OSError:
                break
            time.sleep(0.2)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = bench_client.Client("http://127.0.0.1:%d/v1/chat/completions" % listener.getsockname()[1], timeout=1.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(bench_client.BenchError) as err:
            client.request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    finally:
        stop.set()
        listener.close()
    assert err.value.status == "timeout" and "for the whole request" in str(err.value)
    assert time.monotonic() - t0 < 5


def _round(c, texts):
    reqs = [{"prompt_id": "p0", "text": t, "reasoning": "", "completion_tokens": len(t.split()), "ttft_s": 0.1,
             "finish_reason": "length"} for t in texts]
    return {"concurrency": c, "aggregate_tok_s": 10.0, "per_stream_tok_s": 10.0, "wall_s": 1.0,
            "streams": [{"requests": reqs}]}


def test_summary_digests_tell_answers_apart_and_count_degenerate_ones():
    prompts = [{"id": "p0", "messages": []}]
    same = summary.summarize([_round(1, ["a b c"]), _round(1, ["a b c"])], prompts)
    other = summary.summarize([_round(4, ["a b d"])], prompts)
    assert len(same["output_digests"]["p0"]) == 1 and same["output_digests"] != other["output_digests"]
    nan = summary.summarize([_round(1, ["! ! ! ! !", "a b c"])], prompts)
    assert nan["degenerate_outputs"] == 1 and same["degenerate_outputs"] == 0


def test_a_quality_probe_keeps_each_distinct_answer_whole_and_a_timing_run_does_not():
    prompts = [{"id": "p0", "messages": []}]
    code = "```python\ndef gcd(a, b):\n\twhile b:\n        a, b = b, a % b\n    return a\n```\x1b[31m"
    probe = summary.summarize([_round(1, [code, code, "x" * 20000])], prompts, settings={"purpose": "quality", "repetitions": 1})
    kept = probe["answers"]["p0"]
    assert len(kept) == 2 and code.replace("\x1b", "") in kept        # lines and tabs kept, escapes dropped
    assert max(len(a) for a in kept) == 16000 and kept[-1].endswith("\u2026")
    timing = summary.summarize([_round(1, [code])], prompts, settings={"purpose": "timing", "repetitions": 1})
    assert "answers" not in timing and len(timing["answer_excerpts"]["p0"]) == 1


def test_bench_rows_filter_formats_each_condition():
    import benchmark_filters as bf
    row = {"workload": "prose", "concurrency": 4, "requests": 40, "distinct_outputs": 1, "ttft_ms_median": 81.26,
           "aggregate_tok_s": {"median": 12.345, "min": 11.0, "max": 13.0, "stdev": 0.5},
           "per_stream_tok_s": {"median": 3.1}}
    assert bf.dsv41_bench_rows([row]) == [{"w": "prose", "c": "C4", "agg": "12.35 [11.0..13.0] sd 0.5", "per": "3.1",
                                           "ttft": "81.0", "itl": "-", "n": 40, "distinct": 1, "failed": "0"}]
    row.update(itl_ms_median=30.04, failed_repetitions=2, error_codes={"503": 1, "abort": 1})
    assert bf.dsv41_bench_rows([row])[0]["itl"] == "30.0"
    assert bf.dsv41_bench_rows([row])[0]["failed"] == "2 (503 x1, abort x1)"
