"""The HTTP API: the head's OpenAI-compatible endpoints, health and profiling, and a worker's dummy health
server (SGLang's, on the other nodes)."""
from __future__ import annotations

import json
import os
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import knobs
from .constants import CONTEXT_LEN, SERVED_MODEL_NAME
from .engine import Engine
from .output import log_main
from .pacing import speed_sleep
from .profiler import profile_trace
from .sampling import logprob_entry


def check_sampling(body: dict) -> None:
    """The request checks the engine makes before generating (ValueError -> 400 with the error object)."""
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{key} must be a non-negative integer, got {v!r}")
    t = body.get("temperature")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
        raise ValueError(f"temperature must be a non-negative number, got {t!r}")
    p = body.get("top_p")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {p!r}")
    k = body.get("top_k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or (k < 1 and k != -1)):
        raise ValueError(f"top_k must be -1 (disabled) or at least 1, got {k!r}")


def make_handler(engine: Engine | None):
    """HTTP handler of the head (engine given) or of a worker's dummy health server (None)."""
    served = engine.args.served_model_name if engine else SERVED_MODEL_NAME

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *a):  # access lines are written by access() in uvicorn's form
            pass

        def access(self, code: int) -> None:
            phrase = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                      503: "Service Unavailable"}.get(code, "")
            log_main(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                     f'"{self.command} {self.path} HTTP/1.1" {code} {phrase}'.rstrip())

        def send_body(self, code: int, data: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            if data:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.access(code)

        def send_json(self, code: int, obj) -> None:
            self.send_body(code, json.dumps(obj).encode())

        def send_error_obj(self, code: int, message: str, kind: str) -> None:
            self.send_json(code, {"object": "error", "message": message, "type": kind, "param": None, "code": code})

        def authorized(self) -> bool:
            key = os.environ.get("API_KEY", "")
            if not key:
                return True
            if (self.headers.get("Authorization", "") == f"Bearer {key}"
                    or self.headers.get("x-api-key", "") == key):
                return True
            self.send_json(401, {"error": "Unauthorized"})
            return False

        def ready(self) -> bool:
            return engine is None or engine.ready.is_set()

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                if not self.ready():
                    self.send_body(503, b"")
                    return
                if path == "/health_generate" and engine is not None:
                    speed_sleep(engine.step_ms() / 1000.0)  # one token
                self.send_body(200, b"")
            elif path == "/v1/models" and engine is not None:
                if self.authorized():
                    self.send_json(200, {"object": "list", "data": [
                        {"id": served, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                         "root": served, "max_model_len": CONTEXT_LEN}]})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if engine is not None and path in ("/start_profile", "/stop_profile"):
                if not self.ready():
                    self.send_error_obj(503, "The server is not ready yet", "ServiceUnavailableError")
                elif path == "/start_profile":
                    engine.profiling = time.monotonic()
                    self.send_body(200, b"Start profiling.", "text/plain")
                elif engine.profiling is None:
                    self.send_error_obj(400, "Profiling is not in progress. Call /start_profile first.",
                                        "BadRequestError")
                else:
                    engine.profiling = None
                    trace = profile_trace(0, bool((engine.state or {}).get("packed")))
                    if engine.ranks is not None:
                        with engine.ranks.lock:
                            engine.ranks.profiles_done += 1
                    engine.run.log(f"Profiling done. Traces are saved to: {os.path.dirname(trace)}")
                    self.send_body(200, b"Stop profiling. This will take some time.", "text/plain")
                return
            if engine is None or path != "/v1/chat/completions":
                self.send_json(404, {"detail": "Not Found"})
                return
            if not self.authorized():
                return
            try:
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    raise ValueError("messages must be a list")
                check_sampling(body)
            except ValueError as exc:
                self.send_error_obj(400, f"bad request: {exc}", "BadRequestError")
                return
            if not self.ready():
                self.send_error_obj(503, "The server is not ready yet", "ServiceUnavailableError")
                return
            if knobs.on("LAB_ENGINE_LOG_REQUESTS"):
                log_main(f"Receive: obj=ChatCompletionRequest(messages={body.get('messages')!r}, "
                         f"model={body.get('model')!r}, stream={bool(body.get('stream'))!r}, "
                         f"max_tokens={body.get('max_tokens')!r}, temperature={body.get('temperature')!r})")
            plan = engine.plan(body)
            engine.enter(plan)
            start = time.monotonic()
            n_tokens = 0
            n_steps = 0
            left = []

            def leave():
                # the request leaves the batch when its last step is done, before its client can read the end of
                # the answer: a client that sends its next request at once never finds this one still running
                # (the real scheduler's #running-req counts only the requests of that decode step)
                if not left:
                    left.append(True)
                    engine.leave(plan, n_tokens, n_steps, time.monotonic() - start)
            try:
                speed_sleep((60.0 + 0.05 * plan["prompt_tokens"]) / 1000.0)
                rid = "chatcmpl-" + uuid.uuid4().hex[:24]
                created = int(time.time())
                model = body.get("model") or served

                def usage():
                    u = {"prompt_tokens": plan["prompt_tokens"], "completion_tokens": n_tokens,
                         "total_tokens": plan["prompt_tokens"] + n_tokens}
                    if plan["reasoning"]:
                        u["reasoning_tokens"] = min(plan["reasoning"], n_tokens)
                    if knobs.on("LAB_ENGINE_SPEC_USAGE"):
                        u["completion_tokens_details"] = {
                            "accepted_prediction_tokens": plan["accepted"],
                            "rejected_prediction_tokens": plan["proposed"] - plan["accepted"]}
                    return u

                def logprobs_at(i, word):
                    """The logprobs.content entry of the token committed at position i (when asked)."""
                    if not plan["logprobs"]:
                        return None
                    dists = plan.get("dists")
                    return logprob_entry(word, dists[i] if dists and i < len(dists) else None, plan["vocab"],
                                         plan["top_logprobs"], " " if i else "")

                cut_error = {"message": "The engine failed while generating (lab knob LAB_ENGINE_STREAM_ERROR_EVERY)",
                             "type": "ServiceUnavailableError", "param": None, "code": 503}

                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    self.access(200)

                    def sse(*objs) -> None:
                        data = "".join(f"data: {o if isinstance(o, str) else json.dumps(o)}\n\n" for o in objs)
                        self.wfile.write(data.encode())
                        self.wfile.flush()

                    def chunk(delta, finish=None):
                        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

                    first = True
                    cut = False
                    for block in engine.steps(plan):
                        pieces = []
                        for word in block:
                            field = "reasoning_content" if n_tokens < plan["reasoning"] else "content"
                            if pieces and pieces[-1][0] == field:
                                pieces[-1][1].append(word)
                                pieces[-1][2].append(logprobs_at(n_tokens, word))
                            else:
                                pieces.append((field, [word], [logprobs_at(n_tokens, word)]))
                            n_tokens += 1
                        n_steps += 1
                        out = [chunk({"role": "assistant", "content": ""})] if first else []
                        for field, ws, lps in pieces:
                            piece = chunk({field: ("" if first else " ") + " ".join(ws)})
                            if plan["logprobs"]:
                                piece["choices"][0]["logprobs"] = {"content": lps}
                            out.append(piece)
                            first = False
                        sse(*out)
                        if plan["cut"] and n_tokens >= plan["cut_at"]:
                            cut = True
                            break
                    leave()
                    if cut and plan["cut"] == "error":
                        sse({"error": cut_error}, "[DONE]")   # no finish chunk, no usage: the real shape
                        return
                    if first:
                        sse(chunk({"role": "assistant", "content": ""}))
                    sse(chunk({}, "abort" if cut else plan["finish"]))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [], "usage": usage()})
                    sse("[DONE]")
                else:
                    out = []
                    for block in engine.steps(plan):
                        out.extend(block)
                        n_steps += 1
                        if plan["cut"] and len(out) >= plan["cut_at"]:
                            break
                    n_tokens = len(out)
                    leave()
                    if plan["cut"] == "error":
                        self.send_json(503, {"object": "error", **cut_error})
                        return
                    message = {"role": "assistant", "content": " ".join(out[plan["reasoning"]:])}
                    if plan["reasoning"]:
                        message["reasoning_content"] = " ".join(out[:plan["reasoning"]])
                    choice = {"index": 0, "message": message,
                              "finish_reason": "abort" if plan["cut"] else plan["finish"]}
                    if plan["logprobs"]:
                        choice["logprobs"] = {"content": [logprobs_at(i, w) for i, w in enumerate(out)]}
                    self.send_json(200, {
                        "id": rid, "object": "chat.completion", "created": created, "model": model,
                        "choices": [choice], "usage": usage()})
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                leave()

    return Handler


class HTTPServer(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
