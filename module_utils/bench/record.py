# -*- coding: utf-8 -*-
"""The decode benchmark's raw record: every request and response of a run, kept for every repetition.

One subject: the JSON file ``decode_bench`` writes (warm-ups and failed repetitions included and
marked as such), built from the rounds of ``decode_bench.run_round`` and written atomically. The
record is redacted as data before it is encoded as JSON (``module_utils/base/secrets.py``: the key's
value wherever it appears, also JSON-escaped inside a string the server built, and the values of
secret-named fields), so a key holding ``"`` or ``\\`` is found as it is, not in its escaped form.
"""
from __future__ import absolute_import, division, print_function

import json
import os

from ansible.module_utils.base.secrets import redact, redact_text

__metaclass__ = type


def _ms(seconds):
    return None if seconds is None else seconds * 1000.0


def raw_request(rec):
    return {
        "prompt_id": rec["prompt_id"], "prompt_index": rec["prompt_index"],
        "request": rec["request"], "ttft_ms": _ms(rec["ttft_s"]),
        "ttft_reasoning_ms": _ms(rec.get("ttft_reasoning_s")), "ttft_answer_ms": _ms(rec.get("ttft_answer_s")),
        "itl_gaps_ms": [g * 1000.0 for g in rec.get("gaps_s") or []],
        "wall_s": rec["wall_s"], "completion_tokens": rec["completion_tokens"],
        "reasoning_tokens": rec.get("reasoning_tokens"), "speculative": rec.get("speculative"),
        "failed": bool(rec.get("failed")), "error": rec.get("error"),
        "prompt_tokens": rec.get("prompt_tokens"), "finish_reason": rec.get("finish_reason"),
        "content_messages": rec.get("messages"), "text": rec["text"], "reasoning": rec.get("reasoning"),
        "response": rec["raw"],
    }


def raw_round(rd, kind, number):
    return {
        "kind": kind, "round": number, "failed": rd.get("failed", False), "wall_s": rd["wall_s"],
        "completion_tokens": rd["completion_tokens"],
        "aggregate_tok_s": rd["aggregate_tok_s"], "per_stream_tok_s": rd["per_stream_tok_s_all"],
        "streams": [{"stream": st["stream"], "wall_s": st["wall_s"], "tokens": st["tokens"],
                     "requests": [raw_request(r) for r in st["requests"]]} for st in rd["streams"]],
    }


def write_raw(path, raw, api_key=None):
    """Write the raw record atomically (``.partial`` then rename), redacted before it is encoded.

    Redacting the data rather than the JSON text: a key echoed by the server that holds ``"`` or
    ``\\`` appears escaped in the text (``\\"``) and would not match there. The text is checked
    again afterwards (the key in any escaped form left is replaced too).
    """
    keys = [api_key] if api_key else []
    text = redact_text(json.dumps(redact(raw, keys), indent=1, sort_keys=False, default=str), keys)
    d = os.path.dirname(os.path.abspath(path))
    if d and not os.path.isdir(d):
        os.makedirs(d)
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
