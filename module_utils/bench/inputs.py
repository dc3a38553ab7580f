# -*- coding: utf-8 -*-
"""The inputs of a decode benchmark: the prompt files and the settings, checked before any request.

``load_prompts`` reads a workload (a JSON list of prompts, each a string, ``{"messages": [...]}`` or
``{"prompt": ..., "system": ...}``, ids unique) and ``validate_settings`` completes a settings dict
from ``DEFAULTS`` and refuses what would make rounds incomparable (fewer than ``MIN_REPETITIONS``
measured rounds, sampling without a seed, ...). Both raise ``BenchError`` naming the file or the
setting. Used by ``decode_bench`` (which re-exports them) and the ``decode_bench`` module.
"""
from __future__ import absolute_import, division, print_function

import json

from ansible.module_utils.bench.client import BenchError

__metaclass__ = type

MIN_REPETITIONS = 5
DEFAULTS = {
    "model": "deepseek-v4.1-flash",         # the served model name (SPEC: /v1/models lists it)
    "concurrency": [1, 4],
    "repetitions": 5,
    "warmups": 1,
    "max_tokens": 256,
    "temperature": 0.0,
    "top_p": None,
    "top_k": None,
    "seed": None,
    "failed_repetition_retries": 2,
    "thinking": False,
    "stream": True,
    "timeout": 300.0,
    "prompts_per_stream": None,
    "greedy_streams": 0,
    # logprobs asked of every request (``logprobs: true, top_logprobs: N``; 0: not asked), and what the engine
    # reports: ``tempered`` (SGLang's default: after the request's temperature) or ``original``
    # (SGLANG_RETURN_ORIGINAL_LOGPROB set); the stage checks' proposal test reads them (verify_checks.py)
    "top_logprobs": 0,
    "logprobs_mode": "tempered",
    # timing: a measured condition (>= MIN_REPETITIONS rounds); quality: answers judged, no speed drawn from
    # them (the long-context needles: one round of requests that each prefill up to 100k tokens)
    "purpose": "timing",
}
PURPOSES = ("timing", "quality")
MAX_TOP_LOGPROBS = 20           # the OpenAI API's bound
# ---------------------------------------------------------------------------------------------
# Prompts and settings
# ---------------------------------------------------------------------------------------------

def _prompt_entry(item, index, path):
    """One prompt file entry -> {'id': str, 'messages': [...]}.

    Accepted forms: a string (one user message); ``{"messages": [...]}``; ``{"prompt": str}`` with
    an optional ``"system"``; each may carry an ``"id"``, and ``"thinking": true|false`` (the request's
    ``chat_template_kwargs.thinking`` for this prompt, over the settings' own: a thinking workload).
    """
    where = "%s: prompt %d" % (path, index)
    if isinstance(item, str):
        if not item.strip():
            raise BenchError("%s is empty" % where)
        return {"id": "p%d" % index, "messages": [{"role": "user", "content": item}]}
    if not isinstance(item, dict):
        raise BenchError("%s must be a string or an object, not %s" % (where, type(item).__name__))
    pid = str(item.get("id") or "p%d" % index)
    if "thinking" in item and not isinstance(item["thinking"], bool):
        raise BenchError("%s: thinking must be true or false, not %r" % (where, item["thinking"]))
    extra = {"thinking": item["thinking"]} if "thinking" in item else {}
    if "messages" in item:
        msgs = item["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            raise BenchError("%s: messages must be a non-empty list of {role, content} strings" % where)
        return dict({"id": pid, "messages": [dict(m) for m in msgs]}, **extra)
    text = item.get("prompt", item.get("content"))
    if not isinstance(text, str) or not text.strip():
        raise BenchError("%s has no messages and no prompt text" % where)
    msgs = []
    if item.get("system"):
        msgs.append({"role": "system", "content": str(item["system"])})
    msgs.append({"role": "user", "content": text})
    return dict({"id": pid, "messages": msgs}, **extra)


def load_prompts(path):
    """Read a JSON list of prompts -> list of {'id', 'messages'[, 'thinking']} (see :func:`_prompt_entry`).
    The file may instead be ``{"prompts": [...]}``, with ``"thinking": true`` there for every prompt it holds
    that does not say otherwise (a thinking workload: reasoning and answer both counted)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        raise BenchError("cannot read prompt file %s: %s" % (path, exc))
    except ValueError as exc:
        raise BenchError("prompt file %s is not valid JSON: %s" % (path, exc))
    if isinstance(data, dict) and isinstance(data.get("prompts"), list):
        if "thinking" in data:
            if not isinstance(data["thinking"], bool):
                raise BenchError("prompt file %s: thinking must be true or false, not %r" % (path, data["thinking"]))
            data = [dict(item, thinking=item.get("thinking", data["thinking"])) if isinstance(item, dict)
                    else {"prompt": item, "thinking": data["thinking"]} for item in data["prompts"]]
        else:
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
    nullable = ("prompts_per_stream", "top_p", "top_k", "seed")
    s.update(dict((k, v) for k, v in settings.items() if v is not None or k in nullable))
    if s["purpose"] not in PURPOSES:
        raise BenchError("purpose=%r refused: one of %s" % (s["purpose"], ", ".join(PURPOSES)))
    if int(s["repetitions"]) < (MIN_REPETITIONS if s["purpose"] == "timing" else 1):
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
    if float(s["temperature"]) < 0:
        raise BenchError("temperature must be >= 0, got %s" % s["temperature"])
    if s["top_p"] is not None and not 0 < float(s["top_p"]) <= 1:
        raise BenchError("top_p must be in (0, 1], got %s" % s["top_p"])
    if s["top_k"] is not None and int(s["top_k"]) < 1:
        raise BenchError("top_k must be >= 1, got %s" % s["top_k"])
    if s["seed"] is not None and int(s["seed"]) < 0:
        raise BenchError("seed must be >= 0, got %s" % s["seed"])
    if float(s["temperature"]) > 0 and s["seed"] is None:
        raise BenchError("sampled requests (temperature=%s) need a fixed seed: repeats must sample alike to be "
                         "compared" % s["temperature"])
    greedy = int(s["greedy_streams"] or 0)
    if greedy < 0:
        raise BenchError("greedy_streams must be >= 0, got %s" % s["greedy_streams"])
    if greedy and (float(s["temperature"]) <= 0 or greedy >= min(conc)):
        raise BenchError("greedy_streams=%d makes mixed greedy/sampled batches: it needs temperature > 0 and fewer "
                         "greedy streams than the lowest concurrency (%d)" % (greedy, min(conc)))
    s["greedy_streams"] = greedy
    if not 0 <= int(s["top_logprobs"] or 0) <= MAX_TOP_LOGPROBS:
        raise BenchError("top_logprobs must be 0 (not asked) to %d, got %s" % (MAX_TOP_LOGPROBS, s["top_logprobs"]))
    s["top_logprobs"] = int(s["top_logprobs"] or 0)
    if s["logprobs_mode"] not in ("tempered", "original"):
        raise BenchError("logprobs_mode must be tempered or original, got %r" % (s["logprobs_mode"],))
    if int(s["failed_repetition_retries"]) < 0:
        raise BenchError("failed_repetition_retries must be >= 0, got %s" % s["failed_repetition_retries"])
    for key in ("repetitions", "warmups", "max_tokens", "failed_repetition_retries"):
        s[key] = int(s[key])
    for key in ("top_k", "seed"):
        s[key] = None if s[key] is None else int(s[key])
    s["top_p"] = None if s["top_p"] is None else float(s["top_p"])
    s["temperature"] = float(s["temperature"])
    s["timeout"] = float(s["timeout"])
    s["thinking"] = bool(s["thinking"])
    s["stream"] = bool(s["stream"])
    return s
