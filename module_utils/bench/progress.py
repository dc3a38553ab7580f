# -*- coding: utf-8 -*-
"""The decode benchmark's progress record and the lines an operator follows it by (standard library only).

A benchmark on the fleet runs for tens of minutes (a condition is about 40 requests of 256 tokens at
~17 tok/s, ten minutes or more), so the ``decode_bench`` module, started as an async job, rewrites a
small JSON record after every request and every round; ``decode_bench_follow`` reads it once per wait
round and turns it into lines.

The record (``version`` 1): ``run_id`` (chosen by the caller, so a follower tells this job's record from
an earlier one at the same path), ``label`` (the condition: baseline or an arm), ``host``, ``pid`` and
``pid_start`` (``base/process_wait.pid_alive``), ``state`` (running, done, failed), ``started`` and ``updated``
(epoch seconds), ``plan`` (one entry per workload x concurrency: rounds and requests), ``units_done`` and
``units_total`` (a unit is one request slot of a stream, so a C4 round counts as much as a C1 round: each
stream sends its requests one after the other), ``current`` (the round running: workload, concurrency,
kind, number, requests done of the round's), ``rounds`` (each finished round: workload, concurrency,
kind, number of, rates, wall time, when, ETA then) and ``message`` (the error of a failed run).
"""
from __future__ import annotations

import json
import os
import threading
import time

from ansible.module_utils.base.process_wait import process_start_ticks
from ansible.module_utils.engram.lock import read_json_file
from ansible.module_utils.engram.progress import eta_text

PROGRESS_VERSION = 1
STATES = ("running", "done", "failed")
# Requests finish every few milliseconds on a fast lab engine: the record is rewritten at most this often
# between rounds (a round's end is always written), so following costs the benchmark nothing.
REQUEST_WRITE_INTERVAL_S = 0.5


def clock_text(epoch):
    """'14:40:01 UTC': the time of day a line happened (a benchmark runs within hours)."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch)) if isinstance(epoch, (int, float)) else "?"


def _write_atomic(path, record):
    """The record as JSON, written beside the target and renamed over it (a reader never sees half)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(record, handle, sort_keys=True)
    os.replace(tmp, path)


class BenchProgress(object):
    """Writes the progress record while ``decode_bench.run_benchmark`` runs (``progress=``).

    Called from the benchmark's stream threads (``request_done``) and its main thread (the rest), so
    every change happens under one lock. With no path nothing is written (the module without
    ``progress_file``). A record that cannot be written stops nobody: the benchmark is what matters,
    and the follower then reports no progress.
    """

    def __init__(self, path, plan, run_id=None, label=None, host=None, clock=time.time):
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._written = 0.0
        now = clock()
        units = sum(_depth(p) * (p["warmup_rounds"] + p["rounds"]) for p in plan)
        self.record = {"version": PROGRESS_VERSION, "run_id": run_id, "label": label, "host": host,
                       "pid": os.getpid(), "pid_start": process_start_ticks(os.getpid()), "state": "running",
                       "started": now, "updated": now, "plan": plan, "units_done": 0, "units_total": units,
                       "current": None, "rounds": [], "message": None}

    def start(self):
        """Write the first record; raises OSError when the path cannot be written (said before any request)."""
        if self.path:
            _write_atomic(self.path, self.record)

    def _write(self, force=False):
        now = self._clock()
        self.record["updated"] = now
        if not self.path or (not force and now - self._written < REQUEST_WRITE_INTERVAL_S):
            return
        try:
            _write_atomic(self.path, self.record)
            self._written = now
        except (IOError, OSError):
            pass

    def round_started(self, workload, concurrency, index, warmups, repetitions, depth):
        """Round ``index`` (0-based, warm-ups first) of a condition begins."""
        with self._lock:
            warm = index < warmups
            self.record["current"] = {
                "workload": workload, "concurrency": concurrency, "kind": "warmup" if warm else "measured",
                "number": index + 1 if warm else index - warmups + 1, "of": warmups if warm else repetitions,
                "requests_done": 0, "requests": depth * concurrency, "depth": depth}
            self._write(force=True)

    def request_done(self):
        with self._lock:
            cur = self.record["current"]
            if cur:
                cur["requests_done"] += 1
            self._write()

    def round_done(self, rd):
        """The running round ended (``rd``: ``decode_bench.run_round``'s dict). A failed repetition is
        replaced by an extra round, which adds its units to the total."""
        with self._lock:
            cur = self.record["current"] or {}
            depth = cur.get("depth") or 1
            rec = self.record
            rec["units_done"] += depth
            if rd.get("failed") and cur.get("kind") == "measured":
                rec["units_total"] += depth
            now = self._clock()
            elapsed = now - rec["started"]
            left = max(0, rec["units_total"] - rec["units_done"])
            rec["rounds"].append({
                "workload": cur.get("workload"), "concurrency": cur.get("concurrency"), "kind": cur.get("kind"),
                "number": cur.get("number"), "of": cur.get("of"), "failed": bool(rd.get("failed")),
                "aggregate_tok_s": round(rd.get("aggregate_tok_s") or 0.0, 2),
                "per_stream_tok_s": round(rd.get("per_stream_tok_s") or 0.0, 2),
                "wall_s": round(rd.get("wall_s") or 0.0, 2), "at": now, "elapsed_s": round(elapsed, 1),
                "eta_s": round(elapsed / rec["units_done"] * left, 1) if rec["units_done"] else None})
            rec["current"] = None
            self._write(force=True)

    def finish(self, error=None):
        with self._lock:
            self.record["state"] = "failed" if error else "done"
            self.record["message"] = error
            self.record["current"] = None
            self._write(force=True)


def _depth(entry):
    """Requests each stream sends one after the other in a round of a plan entry (``decode_bench.plan``)."""
    per_round, c = entry.get("requests_per_round"), entry.get("concurrency") or 1
    return max(1, int(per_round // c)) if per_round else 1


def read_progress(path, run_id=None):
    """This run's progress record at ``path``, or None (missing, unreadable, another run's)."""
    record = read_json_file(path)
    if (record is None or record.get("version") != PROGRESS_VERSION or record.get("state") not in STATES
            or not isinstance(record.get("pid"), int) or isinstance(record.get("pid"), bool)):
        return None
    if run_id and record.get("run_id") != run_id:
        return None
    return record


def _head(record, host_label=None):
    label = record.get("label")
    return "%s benchmark%s" % (host_label or record.get("host") or "?", " " + label if label else "")


def _which(entry):
    kind = "warm-up" if entry.get("kind") == "warmup" else "repetition"
    return "%s C%s %s %s of %s" % (entry.get("workload"), entry.get("concurrency"), kind, entry.get("number"),
                                   entry.get("of"))


def round_line(record, entry, host_label=None):
    """One finished round: '14:40:01 UTC spark2 benchmark baseline: prose C1 repetition 3 of 5 done,
    16.9 tok/s (16.9 per stream) in 47 s; elapsed 6 min 02 s, ETA 11 min 30 s'."""
    if entry.get("failed"):
        what = "FAILED (an error event or an abort; not a measurement, an extra round replaces it)"
    else:
        what = "done, %.1f tok/s (%.1f per stream) in %.0f s" % (
            entry.get("aggregate_tok_s") or 0.0, entry.get("per_stream_tok_s") or 0.0, entry.get("wall_s") or 0.0)
    return "%s %s: %s %s; elapsed %s, ETA %s" % (clock_text(entry.get("at")), _head(record, host_label),
                                                 _which(entry), what, eta_text(entry.get("elapsed_s")),
                                                 eta_text(entry.get("eta_s")))


def round_lines(record, host_label=None):
    """A line for every round finished so far, oldest first (warm-ups included: they are time spent)."""
    return [round_line(record, e, host_label) for e in record.get("rounds") or []]


def figures(record, now):
    """(elapsed seconds, ETA seconds or None, rounds done, rounds planned) of a record at ``now``."""
    elapsed = max(0.0, now - (record.get("started") or now))
    done, total = record.get("units_done") or 0, record.get("units_total") or 0
    cur = record.get("current") or {}
    # the running round's finished requests count too, a stream's share of them
    partial = (cur.get("requests_done") or 0) / float(cur.get("concurrency") or 1) if cur else 0.0
    units = done + min(partial, cur.get("depth") or 0)
    eta = elapsed / units * max(0.0, total - units) if units else None
    return elapsed, eta, len(record.get("rounds") or []), planned_rounds(record)


def planned_rounds(record):
    """Rounds a record's benchmark plans: warm-ups and repetitions of every plan entry, plus one for each
    failed repetition (an extra round replaces it). Entries that are not what the benchmark writes (a
    record broken on disk) count for nothing instead of raising."""
    planned = sum(int(p.get("warmup_rounds") or 0) + int(p.get("rounds") or 0)
                  for p in record.get("plan") or [] if isinstance(p, dict))
    extra = sum(1 for r in record.get("rounds") or []
                if isinstance(r, dict) and r.get("failed") and r.get("kind") == "measured")
    return planned + extra


def measured_rounds(rounds):
    """The measured repetitions among a record's finished rounds: warm-ups and failed rounds left out."""
    return [r for r in rounds or [] if isinstance(r, dict) and r.get("kind") != "warmup" and not r.get("failed")]


def status_line(record, now, host_label=None):
    """Where a running benchmark is at ``now``: '14:40:31 UTC spark2 benchmark baseline: prose C1
    repetition 3 of 5 running (4 of 8 requests); 8 of 36 rounds done; elapsed 6 min 32 s, ETA 11 min 02 s'."""
    elapsed, eta, rounds, planned = figures(record, now)
    cur = record.get("current")
    if cur:
        where = "%s running (%s of %s requests)" % (_which(cur), cur.get("requests_done"), cur.get("requests"))
    else:
        done = record.get("rounds") or []
        if rounds and rounds >= planned:
            where = "every round done, writing the result"
        elif done:
            # name the round it left: a benchmark that dies here is found by where it stopped
            where = "between rounds, after %s" % _which(done[-1])
        else:
            where = "starting its first round"
    return "%s %s: %s; %d of %d rounds done; elapsed %s, ETA %s" % (
        clock_text(now), _head(record, host_label), where, rounds, planned, eta_text(elapsed), eta_text(eta))
