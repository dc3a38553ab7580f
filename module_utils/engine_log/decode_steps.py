# -*- coding: utf-8 -*-
"""Committed tokens per speculative step and step time from the engine's ``Decode batch`` lines.

One subject: the speculative-step figures the stages need (SPEC section 3, "Measuring"; the report's
"committed tokens per speculative step / step time") when the server's responses do not carry them:
the rank-0 log's ``Decode batch, #running-req: 1, ..., accept len: 3.08, accept rate: 0.41, ...,
gen throughput (token/s): 3.12, #queue-req: 0`` lines. The line itself is read by the one engine log
reader (``engine_log.parse_line``: prefixes, colour and cursor codes, CRLF); this module only turns
the fields into figures.

* ``accept len`` is the committed tokens per step of each running request (the bonus token included).
* ``gen throughput`` is the batch's tokens per second over the logging interval, so one step of the
  batch takes ``#running-req * accept len / gen throughput`` seconds.
* Older builds print no ``accept len``: their lines are counted but give no figure, and the result
  says so instead of guessing.
* Only the latest boot counts (lines after the last ``server_args`` marker); a half-written last line
  (no trailing newline and no ``#queue-req``, the line's last field) is left out.
"""
from __future__ import absolute_import, division, print_function

import calendar
import statistics
import time

from ansible.module_utils.engine_log.messages import classify, parse_line
from ansible.module_utils.engine_log.lines import split_messages

__metaclass__ = type


def _num(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _epoch(stamp):
    """Epoch seconds of a logging prefix's time (``2026-09-24 02:55:01``, read as UTC: the containers'
    clock), or None."""
    try:
        return calendar.timegm(time.strptime(stamp.replace("T", " ")[:19], "%Y-%m-%d %H:%M:%S"))
    except (TypeError, ValueError):
        return None


def _line_time(line):
    """The logging prefix time of the Decode batch message of a physical line (epoch), or None."""
    for msg in split_messages(line):
        ev = classify(msg.text)
        if ev is not None and ev[0] == "decode":
            return _epoch(msg.time)
    return None


def decode_batch_lines(text, running=None, window=None):
    """``Decode batch`` lines of the latest boot in ``text`` (str or bytes) as dicts.

    Each dict: ``running_req``, ``accept_len``, ``accept_rate``, ``gen_throughput`` (None when the
    line lacks the field) and ``queue_req``. ``running``: keep only lines with that many running
    requests (a C1 figure from C1 lines). ``window``: ``(start, end)`` epoch seconds; keep only lines
    whose logging prefix falls in it (one second of slack each side: the prefix has whole seconds).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text or ""
    lines = text.splitlines()
    partial_last = bool(lines) and not text.endswith(("\n", "\r"))
    out = []
    for i, line in enumerate(lines):
        ev = parse_line(line)
        if ev is None:
            continue
        kind, fields = ev
        if kind == "boot":
            out = []                    # an earlier boot's lines say nothing about this one
            continue
        if kind != "decode":
            continue
        if partial_last and i == len(lines) - 1 and "queue_req" not in fields:
            continue
        rec = {"running_req": _num(fields.get("running_req")), "accept_len": _num(fields.get("accept_len")),
               "accept_rate": _num(fields.get("accept_rate")),
               "gen_throughput": _num(fields.get("gen_throughput_token_s")),
               "queue_req": _num(fields.get("queue_req"))}
        if running is not None and rec["running_req"] != float(running):
            continue
        if window is not None:
            at = _line_time(line)
            if at is None or not window[0] - 1 <= at <= window[1] + 1:
                continue
        out.append(rec)
    return out


def _describe(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def step_time_s(rec):
    """Seconds one step of the batch took, from one line (None when a field is missing or zero)."""
    if not rec.get("accept_len") or not rec.get("gen_throughput") or not rec.get("running_req"):
        return None
    return rec["running_req"] * rec["accept_len"] / rec["gen_throughput"]


def step_stats(text, running=None, window=None):
    """Committed tokens per step and step time (ms) over the latest boot's ``Decode batch`` lines.

    Returns ``lines`` (count), ``committed_tokens_per_step``, ``step_ms`` and ``accept_rate`` (each
    median/min/max/n, or None) and ``missing``: why a figure is absent (None when both are there).
    """
    recs = decode_batch_lines(text, running=running, window=window)
    per_step = [r["accept_len"] for r in recs if r["accept_len"] is not None]
    steps = [step_time_s(r) * 1000.0 for r in recs if step_time_s(r) is not None]
    rates = [r["accept_rate"] for r in recs if r["accept_rate"] is not None]
    missing = None
    where = ("" if running is None else " with #running-req: %s" % running) + ("" if window is None else
                                                                             " in the measured window")
    if not recs:
        missing = "no Decode batch line%s in the latest boot" % where
    elif not per_step:
        missing = ("%d Decode batch line(s)%s but none carries accept len (an older engine build); committed "
                   "tokens per step and step time need it" % (len(recs), where))
    elif not steps:
        missing = "no Decode batch line%s carries a non-zero gen throughput; step time unknown" % where
    return {"lines": len(recs), "committed_tokens_per_step": _describe(per_step), "step_ms": _describe(steps),
            "accept_rate": _describe(rates), "missing": missing}


def condition_steps(logs, ranks, concurrency=(1,)):
    """Speculative-step figures of one condition from the head rank's latest boot (only rank 0 prints
    ``Decode batch`` lines): ``all`` lines, and ``C<n>`` for each concurrency in ``concurrency``.
    ``logs``: host -> latest-boot text; ``ranks``: host -> rank. None when no rank 0 log was read."""
    heads = [h for h, r in (ranks or {}).items() if int(r) == 0 and h in (logs or {})]
    if not heads:
        return None
    text = logs[heads[0]]
    out = {"host": heads[0], "all": step_stats(text)}
    for c in concurrency:
        out["C%d" % int(c)] = step_stats(text, running=int(c))
    return out


# Speculative-step figures a definition may judge by (experiment_stats.DIRECTIONS), one value per measured round.
ROUND_METRICS = ("committed_per_s", "committed_per_step", "step_ms")


def round_metrics(text, result):
    """{metric: {"rounds": [one value per measured round]}} of one decode_bench result from rank 0's Decode batch
    lines logged in each round's window at the result's concurrency: committed tokens per step (median), step
    time in ms (median) and their quotient, committed tokens per second of step time (the report's rank for
    the block size). When a round has no usable line: ``{"unmeasured": {metric: why}}`` instead (the verdict
    then names the metric as unmeasured, and why); {} for a result without round windows."""
    windows = result.get("round_windows") or []
    if not windows or not result.get("concurrency"):
        return {}
    per, ms, quotient = [], [], []
    for n, (start, end) in enumerate(windows, 1):
        st = step_stats(text, running=int(result["concurrency"]), window=(start, end))
        p, m = st["committed_tokens_per_step"], st["step_ms"]
        if not p or not m or not m["median"]:
            why = "round %d of %d (%s to %s UTC): %s" % (n, len(windows), _clock(start), _clock(end),
                                                         st["missing"] or "step time is zero")
            return {"unmeasured": dict((metric, why) for metric in ROUND_METRICS)}
        per.append(p["median"])
        ms.append(m["median"])
        quotient.append(round(p["median"] / (m["median"] / 1000.0), 3))
    return {"committed_per_step": {"rounds": per}, "step_ms": {"rounds": ms}, "committed_per_s": {"rounds": quotient}}


def _clock(epoch):
    try:
        return time.strftime("%H:%M:%S", time.gmtime(float(epoch)))
    except (TypeError, ValueError, OverflowError):
        return str(epoch)


def with_round_metrics(results, logs, ranks):
    """``results`` (a condition's decode_bench results), each with :func:`round_metrics` from the head rank's
    latest boot added (copies; the results are returned as they are without rank 0's log)."""
    heads = [h for h, r in (ranks or {}).items() if int(r) == 0 and h in (logs or {})]
    if not heads:
        return list(results or [])
    return [dict(r, **round_metrics(logs[heads[0]], r)) for r in results or []]


def workload_steps(logs, ranks, results, concurrency=1):
    """Per workload, the speculative-step figures of the lines rank 0 logged while that workload ran at
    ``concurrency`` (the decode_bench result's ``window``), and the rank the report uses for the block
    size: committed tokens per step divided by step time (``committed_per_s``: medians, tokens per
    second of step time). {workload: step_stats + committed_per_s}; {} without rank 0's log or windows."""
    heads = [h for h, r in (ranks or {}).items() if int(r) == 0 and h in (logs or {})]
    if not heads:
        return {}
    out = {}
    for r in results or []:
        if int(r.get("concurrency") or 0) != int(concurrency) or not r.get("window"):
            continue
        st = step_stats(logs[heads[0]], running=int(concurrency), window=(r["window"]["start"], r["window"]["end"]))
        per, ms = st["committed_tokens_per_step"], st["step_ms"]
        st["committed_per_s"] = (round(per["median"] / (ms["median"] / 1000.0), 2)
                                 if per and ms and ms["median"] else None)
        out[r["workload"]] = st
    return out
