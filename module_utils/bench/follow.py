# -*- coding: utf-8 -*-
"""Follow a decode benchmark started in the background (``async``, ``poll: 0``) to its end, one round per call.

A round reads the async job's results file (``engram_follow.read_async_job``: the same reader as the
packer's wait) and the benchmark's progress record (``decode_bench_progress``), and says whether the
benchmark still runs (a status line, plus a line for every round it finished), finished, failed with its
own message, or died without a result. As for the packer, the results file alone is never trusted: a
benchmark whose recorded pid is gone is dead whatever the file says (a SIGKILL to the process group
leaves it at "started" forever).
"""
from __future__ import annotations

import os
import time

from ansible.module_utils.bench.progress import (measured_rounds, planned_rounds, read_progress, round_lines,
                                                        status_line)
from ansible.module_utils.engram.follow import job_started, read_async_job, stop_packer, wrapper_failure
from ansible.module_utils.base.process_wait import pid_alive
from ansible.module_utils.engram.progress import eta_text

# The async wrapper kills a job at its limit on its next 5 s check: a benchmark still alive this long past
# its limit escaped it and is stopped by the wait.
OVERDUE_GRACE_SECONDS = 60
# A benchmark that ended (its record says so, its pid is gone) gives its async wrapper this long to write
# the result before the wait says the job never reported.
REPORT_GRACE_SECONDS = 15
# How often a round that waits for the benchmark's end looks again (reading two small files).
WAIT_STEP_SECONDS = 0.2


def _out(state, msg, record=None, now=None, finished=False, failed=False, host_label=None, changed=False):
    out = {"finished": finished, "failed": failed, "changed": changed, "state": state, "msg": msg,
           "lines": round_lines(record, host_label) if record else []}
    if record:
        out["elapsed_s"] = round(max(0.0, (now or time.time()) - (record.get("started") or 0)), 1)
    return out


def follow_bench(results_file, progress_file, run_id=None, host_label=None, time_limit=0, startup_grace=120.0,
                 cleanup=True, wait=0.0, now=None):
    """One round. Returns ``finished`` (the wait's ``until``), ``failed``, ``state`` (starting, running,
    done, failed, killed, timed_out, lost), ``msg`` (one line: the benchmark's status, its own error or how
    it died), ``lines`` (a line per finished round, oldest first) and ``elapsed_s``.

    ``wait`` (seconds): while the benchmark runs, the round looks again every WAIT_STEP_SECONDS and reports
    when it has ended or ``wait`` has passed, so the rounds of a wait are paced here (the task's ``delay``
    0) and the last one ends with the benchmark, not up to a poll later.
    ``time_limit`` (the task's ``async``, 0 for none): a benchmark still running a minute past it is stopped
    with SIGTERM (when ``cleanup``); ``startup_grace`` bounds a job that never writes a progress record.
    """
    if now is not None or wait <= 0:
        return _round(results_file, progress_file, run_id, host_label, time_limit, startup_grace, cleanup, now)
    deadline = time.monotonic() + wait
    while True:
        out = _round(results_file, progress_file, run_id, host_label, time_limit, startup_grace, cleanup, None)
        left = deadline - time.monotonic()
        if out["finished"] or left <= 0:
            return out
        time.sleep(min(WAIT_STEP_SECONDS, left))


def _round(results_file, progress_file, run_id, host_label, time_limit, startup_grace, cleanup, now):
    """One look at the job and the record (``follow_bench`` without the wait)."""
    now = time.time() if now is None else now
    label = host_label or "this host"
    job_state, job = read_async_job(results_file)
    record = read_progress(progress_file, run_id)

    def line():
        return status_line(record, now, host_label) if record else "%s: no progress record yet" % label

    if job_state == "finished":
        how = wrapper_failure(job)
        if how == "timed_out":
            return _out("timed_out", "%s: the benchmark was killed at its time limit (%s s). Last: %s"
                        % (label, time_limit or "?", line()), record, now, True, True, host_label)
        if how:
            return _out("killed", "%s: the benchmark's process is gone without a result (%s). Last: %s"
                        % (label, job.get("msg") or "killed", line()), record, now, True, True, host_label)
        if job.get("failed"):
            return _out("failed", str(job.get("msg") or "%s: the benchmark failed" % label), record, now,
                        True, True, host_label)
        total = "%s requests" % job.get("requests_sent", "?")
        elapsed = eta_text(now - record["started"]) if record else "?"
        return _out("done", "%s: benchmark done: %s in %s" % (label, total, elapsed), record, now, True,
                    host_label=host_label)

    started = job_started(results_file)
    if record is None:
        if job_state == "missing":
            return _out("lost", "%s: the async job file %s is gone and the benchmark left no progress record in %s"
                        % (label, results_file, progress_file), finished=True, failed=True)
        if started is not None and now - started > startup_grace:
            return _out("lost", "%s: the benchmark has written no progress record in %s within %d s of its start "
                        "(async job %s)" % (label, progress_file, startup_grace, results_file),
                        finished=True, failed=True)
        return _out("starting", "%s: benchmark starting (no progress record in %s yet)" % (label, progress_file))

    if not pid_alive(record["pid"], record.get("pid_start")):
        if record["state"] == "failed":
            return _out("failed", "%s: the benchmark failed: %s" % (label, record.get("message")), record, now,
                        True, True, host_label)
        if record["state"] == "done" and now - (record.get("updated") or now) < REPORT_GRACE_SECONDS:
            # it ended a moment ago; its async wrapper writes the result next
            return _out("running", line(), record, now, host_label=host_label)
        why = ("it ended but its async job never reported" if record["state"] == "done"
               else "it is gone without a result (killed, e.g. SIGKILL, the OOM killer or a reboot)")
        return _out("killed", "%s: the benchmark (pid %s): %s. Last: %s" % (label, record["pid"], why, line()),
                    record, now, True, True, host_label)

    elapsed = now - (record.get("started") or now)
    if time_limit and elapsed > time_limit + OVERDUE_GRACE_SECONDS:
        stopped = cleanup and stop_packer(record)
        return _out("timed_out", "%s: the benchmark (pid %s) ran past its time limit (%s s)%s. Last: %s"
                    % (label, record["pid"], time_limit, "; stopped it with SIGTERM" if stopped else
                       "; it still runs: stop it with kill -TERM %s" % record["pid"], line()),
                    record, now, True, True, host_label, changed=bool(stopped))
    return _out("running", line(), record, now, host_label=host_label)


# A progress record is named after the benchmark's run id: <experiment run id>-<call>.progress.json.
PROGRESS_SUFFIX = ".progress.json"


def leftovers(directory, run, stop=True):
    """The benchmarks an experiment run ``run`` started in ``directory`` on this host, for a run that was
    interrupted (its controller killed while a benchmark ran: the async job goes on without it and keeps
    loading the engine, up to its time limit, through the rollback's boot and into the next run).

    Each progress record whose run id is ``<run>-<call>`` is read; a benchmark whose process still runs
    (its pid and start time, so a recycled pid is never signalled) is stopped with SIGTERM when ``stop``.
    Returns one entry per record, oldest first: ``label`` (the condition), ``file``, ``state`` (the
    record's), ``running`` (before this call), ``stopped``, ``finished`` (it ended by itself, done),
    ``rounds`` (every round it finished: workload, concurrency, kind, number, of, the rates and wall time,
    failed) and ``plan_rounds`` (warm-ups and repetitions planned, plus one per failed repetition). Records of other runs, symlinks and unreadable files are left alone."""
    out = []
    prefix = "%s-" % run
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not (name.startswith(prefix) and name.endswith(PROGRESS_SUFFIX)):
            continue
        path = os.path.join(directory, name)
        record = read_progress(path)         # refuses a symlink or FIFO planted at the name
        if record is None or not str(record.get("run_id") or "").startswith(prefix):
            continue
        running = pid_alive(record["pid"], record.get("pid_start"))
        try:
            stopped = bool(running and stop and stop_packer(record))
        except PermissionError:          # another user's process: named in the line, never forced
            stopped = False
        keys = ("workload", "concurrency", "kind", "number", "of", "aggregate_tok_s", "per_stream_tok_s", "wall_s",
                "failed", "at")
        rounds = [dict((k, r.get(k)) for k in keys) for r in (record.get("rounds") or []) if isinstance(r, dict)]
        planned = planned_rounds(record)      # as its progress lines counted them
        out.append({"label": record.get("label") or name[len(prefix):-len(PROGRESS_SUFFIX)], "file": path,
                    "state": record["state"], "pid": record["pid"], "running": running, "stopped": stopped,
                    # ended by itself with every round done: its figures are in its condition's results
                    "finished": record["state"] == "done" and not running,
                    "rounds": rounds, "plan_rounds": planned, "started": record.get("started")})
    return sorted(out, key=lambda e: e.get("started") or 0)


def leftover_lines(entries, host_label, check_mode=False):
    """One line per benchmark that did not finish (a finished one's figures are in its condition's results):
    whether it was (or would be) stopped and what it had finished."""
    lines = []
    for e in entries:
        if e["finished"]:
            continue
        measured = measured_rounds(e["rounds"])
        if e["running"] and check_mode:
            how = "is still running (pid %s): it would be stopped with SIGTERM" % e["pid"]
        elif e["running"] and e["stopped"]:
            how = "was still running (pid %s): stopped with SIGTERM" % e["pid"]
        elif e["running"]:
            how = "is still running (pid %s) and did not stop on SIGTERM: stop it with kill -KILL %s" % (
                e["pid"], e["pid"])
        elif e["state"] == "running":
            how = "had died without finishing (its record still says running)"
        else:
            how = "had ended (%s)" % e["state"]
        lines.append("%s benchmark %s %s; %d of %d rounds finished, %d measured repetition(s) kept in the record%s"
                     % (host_label, e["label"], how, len(e["rounds"]), e["plan_rounds"], len(measured),
                        ": " + ", ".join("%s C%s #%s %.1f tok/s" % (r["workload"], r["concurrency"], r["number"],
                                                                     r.get("aggregate_tok_s") or 0.0)
                                         for r in measured) if measured else ""))
    return lines
