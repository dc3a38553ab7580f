# -*- coding: utf-8 -*-
"""Follow a packer started in the background (Ansible ``async``, ``poll: 0``) to its end.

One call is one round: it reads the async job's results file and the packer's progress record
(:class:`pack_progress.Progress`) and says whether the packer still runs (with its progress),
finished, failed (with its own error) or died without a result, and in the last case removes the
``.partial`` it left. Standard library only; shipped to the target with the ``engram_pack_wait``
module.

The async wrapper writes ``{"started": true, "finished": false}`` into the results file when it
starts the module and replaces it with the module's own result at the end. When the module dies
without printing one, the wrapper writes a failure of its own instead (its ``cmd``/``data`` keys,
or ``Timeout exceeded`` after it killed the job at its time limit); when the wrapper dies with it
(a SIGKILL to the process group, the OOM killer, a reboot), the file says "started" forever. So a
round never trusts the results file alone: a packer whose recorded pid is gone is dead whatever the
file says.
"""
from __future__ import annotations

import json
import os
import signal
import time

from ansible.module_utils.base.process_wait import wait_gone
from ansible.module_utils.base.process_wait import pid_alive
from ansible.module_utils.engram.lock import dest_lock, utc_text
from ansible.module_utils.engram.progress import RUNNING_STATES, eta_text, read_progress
from ansible.module_utils.base.host_label import host_label as this_host
from ansible.module_utils.engram.shard_format import EngramPackError, fsync_dir
from ansible.module_utils.engram.provenance import remove_own_file

# The async wrapper kills a job at its limit only on its next 5 s check, then reports: a packer still
# alive this long past its limit escaped it.
OVERDUE_GRACE_SECONDS = 60
# Seconds a packer stopped at its time limit gets to unwind (remove its .partial, record why).
STOP_WAIT_SECONDS = 15
# A running packer that has not moved its record for this long is reported as stalled (a hung
# NFS read looks like this); it is still followed, and only stopped at its time limit.
STALL_SECONDS = 60


def read_async_job(results_file):
    """``(status, data)`` of an async results file: status is missing, unreadable, running or finished."""
    try:
        with open(results_file, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return "missing", None
    except OSError:
        return "unreadable", None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return "unreadable", None
    if not isinstance(data, dict):
        return "unreadable", None
    # As async_status reads it: the start record carries "started"; any final result does not.
    if "started" in data and not data.get("finished"):
        return "running", data
    return "finished", data


def wrapper_failure(job):
    """The async wrapper's own failure (the module printed no result), or None for a module result.

    Returns "timed_out" when the wrapper killed the job at its time limit, "killed" otherwise.
    """
    if job.get("msg") == "Timeout exceeded" and "child_pid" in job:
        return "timed_out"
    if "cmd" in job and ("data" in job or "outdata" in job):
        return "killed"
    return None


def _number(value, default=0):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def progress_text(record):
    """'38.29% (6,471,680 of 16,900,096 bytes), 1.0 MiB/s, ETA 10 s' from a progress record."""
    done, total = int(_number(record.get("done_bytes"))), int(_number(record.get("total_bytes")))
    return "%.2f%% (%s of %s bytes), %.1f MiB/s, ETA %s" % (
        _number(record.get("percent"), 0.0), "{:,}".format(done), "{:,}".format(total),
        _number(record.get("mib_s"), 0.0), eta_text(record.get("eta_s")))


def _matches(record, run_id, layer, rank):
    """Whether a progress record belongs to the run being followed (not to an earlier one)."""
    if run_id and record.get("run_id") != run_id:
        return False
    return record.get("layer") == layer and record.get("rank") == rank


def _fields(record):
    """The progress figures a round returns (zeros before the packer has reported). Few on purpose:
    every round's result is printed."""
    record = record or {}
    return {"percent": _number(record.get("percent"), 0.0), "done_bytes": int(_number(record.get("done_bytes"))),
            "total_bytes": int(_number(record.get("total_bytes"))), "mib_s": _number(record.get("mib_s"), 0.0),
            "eta_s": record.get("eta_s"), "max_mib_s": _number(record.get("max_mib_s")), "pid": record.get("pid")}


def remove_dead_partial(record, cleanup=True):
    """Remove the .partial a dead packer left, under the destination lock; return (removed, note).

    The lock makes sure no live pack is writing that file now: if another holds it, nothing is
    touched. The final-named file is never touched (complete by the rename protocol if present).
    """
    partial, final = record.get("partial_path"), record.get("path")
    if not partial:
        return False, "it had not created a .partial"
    removed, note = False, "no .partial is left"
    if os.path.lexists(partial):
        if not cleanup:
            note = "its .partial %s is left (cleanup is off; the next pack overwrites it)" % partial
        else:
            dest = os.path.dirname(partial)
            try:
                with dest_lock(dest, 0, {"purpose": "removing the .partial of dead packer pid %s"
                                         % record.get("pid")}):
                    # Only a regular file of the packer's uid: a link or FIFO planted there is left alone.
                    removed = remove_own_file(partial)
                    fsync_dir(dest)
                note = "removed its %s" % partial if removed else "no .partial is left"
            except EngramPackError as exc:
                note = "left its .partial %s in place: %s" % (partial, exc)
            except OSError as exc:
                note = "could not remove its .partial %s: %s" % (partial, exc.strerror or exc)
    if final and os.path.exists(final):
        note += "; the final-named %s exists (published before it died: complete by the rename protocol)" % final
    else:
        note += "; no final-named shard exists for this layer"
    return removed, note


def _dead(label, record, how, cleanup):
    """Result for a packer that ended without a result of its own."""
    out = _fields(record)
    removed, note = remove_dead_partial(record, cleanup) if record else (False, "it left no progress record")
    pid = "pid %s" % record["pid"] if record else "its pid unknown"
    causes = {
        "killed": "is gone without a result (killed, e.g. SIGKILL, the OOM killer or a reboot)",
        "killed_with_job": "is gone and its async job has not reported (killed, possibly together with "
                           "its job: e.g. SIGKILL to the process group, the OOM killer or a reboot)",
        "timed_out": "was killed at its async time limit (engram_pack_layer_timeout)",
    }
    msg = "%s: the packer (%s) %s" % (label, pid, causes[how])
    if record:
        elapsed = _number(record.get("updated")) - _number(record.get("started"))
        msg += '. Last progress: %s, %.1f s after it started at %s; its last message: "%s"' % (
            progress_text(record) if record.get("total_bytes") else "none yet", elapsed,
            utc_text(record.get("started")), record.get("message"))
    msg += ". %s%s. Rerun the play to pack this layer again." % (note[0].upper(), note[1:])
    out.update(finished=True, failed=True, state="timed_out" if how == "timed_out" else "killed",
               changed=removed, partial_removed=removed, msg=msg)
    return out


def stop_packer(record, wait=STOP_WAIT_SECONDS):
    """SIGTERM the packer of ``record`` (only if its pid is still that process) and wait for it to
    unwind (it removes its .partial and records its error). Returns True once it is gone."""
    pid, start = record["pid"], record.get("pid_start")
    if not pid_alive(pid, start):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return wait_gone(lambda: pid_alive(pid, start), wait, step=0.1)


def _past_limit(label, record, why, progress_file, cleanup):
    """A packer still running past its time limit: stop it (unless cleanup is off) and say so."""
    out = _fields(record)
    pid = record["pid"]
    head = "%s: the packer (pid %s) ran past its time limit (engram_pack_layer_timeout): %s, at %s" % (
        label, pid, why, progress_text(record))
    if not cleanup:
        out.update(finished=True, failed=True, changed=False, state="timed_out",
                   msg="%s. It still runs and holds the destination lock; stop it with kill -TERM %s (it then "
                       "removes its .partial) or wait for it, and rerun." % (head, pid))
        return out
    if not stop_packer(record):
        out.update(finished=True, failed=True, changed=True, state="timed_out",
                   msg="%s. It did not end within %d s of a SIGTERM; it still holds the destination lock: "
                       "look at the host (a hung NFS read?) before rerunning." % (head, STOP_WAIT_SECONDS))
        return out
    last = read_progress(progress_file)
    if last is None or last.get("pid") != pid:
        last = record
    removed, note = remove_dead_partial(last)
    out.update(_fields(last))
    out.update(finished=True, failed=True, changed=True, state="timed_out", partial_removed=removed,
               msg='%s. Stopped it with SIGTERM; its last message: "%s". %s%s. Rerun the play (with a longer '
                   'engram_pack_layer_timeout if the pack is only slow) to pack this layer again.'
                   % (head, last.get("message"), note[0].upper(), note[1:]))
    return out


def follow_pack(results_file, progress_file, layer, rank, run_id=None, host_label=None, startup_grace=120.0,
                time_limit=0, cleanup=True, now=None):
    """One round of following a background packer. Returns a dict.

    Always: ``finished`` (the packer ended), ``failed``, ``state`` (starting, waiting_lock, packing,
    done, failed, killed, timed_out, lost), ``msg`` (one line naming host, rank and layer:
    progress while running, the packer's own error, or how it died), ``changed`` and the progress
    figures (``percent``, ``done_bytes``, ``total_bytes``, ``mib_s``, ``eta_s``, ``max_mib_s``,
    ``pid``). When done: ``shard_path``, ``bytes``, ``seconds``, ``throughput_mib_s``,
    ``state_before``, ``packer_changed``. (Not ``path``: Ansible would add that file's attributes,
    ``state`` included, to the result.)
    ``time_limit`` (seconds, 0 for none): a packer still running a minute past it, or after the async
    wrapper gave up on it, is stopped with SIGTERM (when ``cleanup``); ``startup_grace`` bounds a job
    that never writes a progress record. With ``cleanup`` off nothing is stopped or removed.
    """
    now = time.time() if now is None else now
    label = "%s (rank %d) layer %d" % (this_host(host_label), rank, layer)
    job_state, job = read_async_job(results_file)
    record = read_progress(progress_file)
    if record is not None and not _matches(record, run_id, layer, rank):
        record = None  # an earlier run's record at the same path
    out = _fields(record)
    out.update(finished=False, failed=False, changed=False)

    if job_state == "finished":
        how = wrapper_failure(job)
        if how and record is not None and pid_alive(record["pid"], record.get("pid_start")):
            # The wrapper gave up at the limit but the packer still runs: the wrapper kills the job's
            # process group, which can miss a module started before it was moved into that group.
            return _past_limit(label, record, "its async job ended (%s)" % job.get("msg"), progress_file, cleanup)
        if how:
            return _dead(label, record, how, cleanup)
        if job.get("failed"):
            out.update(finished=True, failed=True, state="failed",
                       msg="%s: the packer failed: %s" % (label, job.get("msg", "no message")))
            return out
        out.update(finished=True, state="done", shard_path=job.get("path"), bytes=job.get("bytes"),
                   seconds=job.get("seconds"), throughput_mib_s=job.get("throughput_mib_s"),
                   state_before=job.get("state_before"), packer_changed=bool(job.get("changed")))
        if job.get("state_before") == "complete" or not job.get("changed"):
            out["msg"] = "%s: %s is already complete; nothing written" % (label, job.get("path"))
        else:
            out["msg"] = "%s: done: %s, %s bytes in %s s (%s MiB/s)" % (
                label, job.get("path"), "{:,}".format(int(_number(job.get("bytes")))), job.get("seconds"),
                job.get("throughput_mib_s"))
        if job.get("reclaimed_lock"):
            out["msg"] += "; took over the destination lock from %s" % job["reclaimed_lock"]
        out.update(percent=100.0, done_bytes=int(_number(job.get("bytes"))), total_bytes=int(_number(job.get("bytes"))),
                   eta_s=0)
        return out

    # The job is running (or its file is missing or mid-replace): the packer's pid decides.
    if record is None:
        started = job_started(results_file)
        if job_state == "missing":
            out.update(finished=True, failed=True, state="lost",
                       msg="%s: the async job file %s is gone and the packer left no progress record in %s; "
                           "there is nothing to follow. Check for a packer still running on the host before "
                           "rerunning." % (label, results_file, progress_file))
        elif started is not None and now - started > startup_grace:
            out.update(finished=True, failed=True, state="lost",
                       msg="%s: the packer has written no progress record in %s within %d s of its start "
                           "(async job %s); it may never have started. Check the host before rerunning."
                           % (label, progress_file, startup_grace, results_file))
        else:
            out.update(state="starting", msg="%s: starting (no progress record in %s yet)" % (label, progress_file))
        return out

    if not pid_alive(record["pid"], record.get("pid_start")):
        if record["state"] == "done":
            # It finished and exited; its async wrapper has not written (or could not write) the result.
            out.update(finished=True, state="done", shard_path=record.get("path"), bytes=record.get("total_bytes"),
                       msg="%s: done: %s" % (label, record.get("message")))
            return out
        if record["state"] == "failed":
            out.update(finished=True, failed=True, state="failed",
                       msg="%s: the packer failed: %s" % (label, record.get("message")))
            return out
        how = "killed_with_job" if job_state == "running" else "killed"
        started = job_started(results_file)
        if time_limit and job_state == "running" and started is not None and now - started >= time_limit - 2:
            # The wrapper has killed it at the limit and writes "Timeout exceeded" a second later. (Its
            # clock starts just before it writes the results file: hence the two seconds' slack.)
            how = "timed_out"
        return _dead(label, record, how, cleanup)

    # Alive.
    state = record["state"] if record["state"] in RUNNING_STATES else "packing"
    if state == "packing":
        line = progress_text(record)
    else:
        line = "%s (pid %s): %s" % (state.replace("_", " "), record["pid"], record.get("message"))
    since_update = now - _number(record.get("updated"), now)
    if since_update > STALL_SECONDS:
        line += "; no progress for %d s (a slow or hung read of the checkpoint?)" % since_update
    elapsed = now - _number(record.get("started"), now)
    if time_limit and elapsed > time_limit + OVERDUE_GRACE_SECONDS:
        return _past_limit(label, record, "it still ran %d s after it started, past its %d s limit"
                           % (elapsed, time_limit), progress_file, cleanup)
    out.update(state=state, msg="%s: %s" % (label, line))
    return out


def job_started(results_file):
    """When the async job began: its results file is written once at the start and again only at the end."""
    try:
        return os.stat(results_file).st_mtime
    except OSError:
        return None
