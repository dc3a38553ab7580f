# -*- coding: utf-8 -*-
"""Is the GPU clock lock in force?  Established from the journal, because nothing else can tell
(standard library only; used by the ``clock_lock_status`` module).

Why the journal: the 560/580 drivers have no read-back of a lock.  ``nvidia-smi -q -d CLOCK`` has no
"Locked Clocks" or "GPU Clock Min/Max" lines, ``clocks.max.sm`` is the hardware maximum with or
without a lock, and NVML has no getter for locked clocks (SPEC section 3, "Clocks").  What can be
seen is who changed the clocks, when, in the current boot:

=========================  ====================================================================
the clock-lock unit        systemd's job lines (``UNIT=<unit>``, ``JOB_TYPE=start``,
                           ``JOB_RESULT=done|failed``, ``INVOCATION_ID``; ``EXIT_STATUS`` on
                           "Main process exited") and the unit's stdout (``_SYSTEMD_UNIT=<unit>``,
                           ``_SYSTEMD_INVOCATION_ID``): ``GPU clocks set to "(gpuClkMin 0,
                           gpuClkMax 2200)" for GPU 0000000F:01:00.0`` then ``All done.``
the clock-reset unit       the same job lines for the unit the role starts to run ``-rgc``
sudo                       ``SYSLOG_IDENTIFIER=sudo``: ``   zurih : TTY=pts/0 ; PWD=/home/zurih ;
                           USER=root ; COMMAND=/usr/bin/nvidia-smi -rgc`` (a refusal puts its
                           reason first: ``zurih : command not allowed ; ...``; nothing ran)
other units                ``SYSLOG_IDENTIFIER=nvidia-smi`` lines ``GPU clocks set to ...`` from a
                           unit that is not the clock-lock unit (someone else's lock)
=========================  ====================================================================

Entries are ordered by ``__MONOTONIC_TIMESTAMP`` (then the cursor's sequence number) and only those
of the running system manager count (``__MONOTONIC_TIMESTAMP`` >= systemd's
``UserspaceTimestampMonotonic``, with ``journalctl -b 0``): a lock from an earlier boot is gone.

What stays invisible is listed in :data:`BLIND_SPOTS` and returned with every verdict.
"""
from __future__ import absolute_import, division, print_function

import time

from ansible.module_utils.host.journal import PERMISSION_DENIED_TEXTS, grep_unsupported
from ansible.module_utils.host.nvidia_smi import parse_clocks_set, parse_sm_clock
from ansible.module_utils.host.sudo_commands import clock_actions, parse_sudo, sudo_kind
from ansible.module_utils.host.unit_journal import (
    as_int, entry_message, journal_args, order_key, parse_journal_json, run_failure, this_manager, unit_matches,
    unit_runs, when,
)

__metaclass__ = type
BLIND_SPOTS = (
    "There is no read-back of a clock lock: nvidia-smi and NVML do not report locked clocks, so the lock "
    "in force is inferred from the journal of this boot, not read from the GPU.",
    "A clock change that leaves no journal line is invisible: nvidia-smi run from a root shell or a root "
    "login (no sudo line), a script or program run through sudo that calls nvidia-smi or NVML itself, "
    "a root cron job, a service whose output does not reach the journal.",
    "A GPU reset or driver reload (nvidia-smi -r from a root shell, an Xid recovery, unloading the "
    "nvidia module) clears the lock without a line this check reads.",
    "A sudo line shows that a command was started as root, not that it succeeded; a journal that was "
    "rotated, vacuumed or rate-limited may lack lines.",
)


class ClockLockError(Exception):
    """An impossible request (a desired state or a lock range that cannot be)."""


# ---------------------------------------------------------------------------------------------
# events and the verdict
# ---------------------------------------------------------------------------------------------
def clock_events(entries, unit, reset_unit):
    """Every visible clock change in ``entries`` (ordered), oldest first::

        {kind: lock|reset, source: unit|reset-unit|sudo|other-unit, who, text, min, max, entry}

    and the root sessions whose commands are not visible: {"shell": [...], "ansible": [...]}.
    """
    events, opaque = [], {"shell": [], "ansible": []}
    for run in unit_runs(entries, unit):
        if run["result"] == "done" and run["set"]:
            events.append({"kind": "lock", "source": "unit", "who": "unit %s" % unit,
                           "text": "-lgc %d,%d" % (run["set"]["min"], run["set"]["max"]),
                           "min": run["set"]["min"], "max": run["set"]["max"], "entry": run["set_entry"]})
    if reset_unit:
        for run in unit_runs(entries, reset_unit):
            if run["result"] == "done":
                events.append({"kind": "reset", "source": "reset-unit", "who": "unit %s" % reset_unit,
                               "text": "-rgc", "min": None, "max": None, "entry": run["end_entry"]})
    for e in entries:
        ident = e.get("SYSLOG_IDENTIFIER")
        if ident == "sudo":
            rec = parse_sudo(entry_message(e))
            if rec is None or not rec["ran"]:
                continue
            if rec["fields"].get("USER", "root") != "root":
                continue              # only root may change clocks
            kind = sudo_kind(rec["command"])
            if kind == "clock":
                for act in clock_actions(rec["command"]):
                    events.append({"kind": "lock" if act["action"] == "lock" else "reset", "source": "sudo",
                                   "who": rec["user"], "text": act["text"], "min": act["min"],
                                   "max": act["max"], "entry": e})
            elif kind in opaque:
                opaque[kind].append({"user": rec["user"], "command": rec["command"][:120], "entry": e})
        elif ident == "nvidia-smi" and e.get("_SYSTEMD_UNIT") not in (unit, reset_unit):
            clocks = parse_clocks_set(entry_message(e))
            if clocks:
                who = "unit %s" % e.get("_SYSTEMD_UNIT") if e.get("_SYSTEMD_UNIT") else "an unknown process"
                events.append({"kind": "lock", "source": "other-unit", "who": who,
                               "text": "-lgc %s,%s" % (clocks["min"], clocks["max"]),
                               "min": clocks["min"], "max": clocks["max"], "entry": e})
    events.sort(key=lambda ev: order_key(ev["entry"]))
    return events, opaque


def _after(entry, ref):
    return ref is None or order_key(entry) > order_key(ref)


def _describe(ev):
    """``manual -rgc by zurih (sudo) at T`` / ``-rgc by unit nvidia-clock-reset.service at T``."""
    if ev["source"] == "sudo":
        return "manual %s by %s (sudo) at %s" % (ev["text"], ev["who"], when(ev["entry"]))
    return "%s by %s at %s" % (ev["text"], ev["who"], when(ev["entry"]))


def _public(ev):
    return {"kind": ev["kind"], "source": ev["source"], "who": ev["who"], "command": ev["text"],
            "min": ev["min"], "max": ev["max"], "time": when(ev["entry"])}


def _public_run(run, unit):
    if run is None:
        return None
    return {"time": when(run["set_entry"] or run["end_entry"] or run["start_entry"]),
            "result": run["result"], "exit_status": run["exit_status"], "invocation": run["invocation"],
            "output": run["output"], "set": run["set"], "permission_denied": run["permission_denied"],
            "failure": run_failure(run, unit) if run["result"] not in (None, "done") else None}


def evaluate(entries, desired, unit, expected_min, expected_max, reset_unit=None, unit_state=None,
             manager_start_us=None, sm_clock_mhz=None, journal_note=None):
    """The verdict on the clock lock from journal ``entries`` of this boot.

    ``desired`` is ``locked`` or ``unlocked``; ``unit_state`` is ``systemctl show`` of the clock-lock
    unit (``ActiveState``, ``Result``, ``InvocationID``...); ``sm_clock_mhz`` a sample of the SM clock
    (a value above the lock's maximum contradicts a lock); ``journal_note`` says why the journal could
    not be read (the verdict is then ``unknown``).

    Returns {verdict: locked|unlocked|drift|unknown, in_state, message, failure, reasons, unit_run, last_run,
    reset_run, later_events, events, opaque_root_sessions, cannot_verify}; ``failure`` names the failed
    latest run of the unit that should have brought the desired state (lock unit or reset unit).
    """
    if desired not in ("locked", "unlocked"):
        raise ClockLockError("desired state %r is neither locked nor unlocked" % (desired,))
    if expected_min is None or expected_max is None or expected_min < 0 or expected_max <= expected_min:
        raise ClockLockError("requested lock %r,%r is not a range 0 <= min < max" % (expected_min, expected_max))
    state = unit_state or {}
    entries = this_manager(entries or [], manager_start_us)
    runs = unit_runs(entries, unit)
    events, opaque = clock_events(entries, unit, reset_unit)
    reset_runs = unit_runs(entries, reset_unit) if reset_unit else []
    last_reset_run = reset_runs[-1] if reset_runs else None
    last_run = runs[-1] if runs else None
    good = [r for r in runs if r["result"] == "done" and r["set"]]
    lock_run = good[-1] if good else None
    ref = lock_run["set_entry"] if lock_run else None
    later = [ev for ev in events if _after(ev["entry"], ref) and not (ev["source"] == "unit")]
    reasons, verdict = [], None
    declared = "%d,%d" % (expected_min, expected_max)

    if journal_note:
        verdict = "unknown"
        reasons.append("the journal could not be read: %s" % journal_note)
    elif desired == "locked":
        if lock_run is None:
            failed = [r for r in runs if r["result"] not in (None, "done")]
            if failed:
                verdict = "drift"
                reasons.append("no successful run of %s this boot; the last one failed: %s"
                               % (unit, run_failure(failed[-1], unit)))
            elif [r for r in runs if r["result"] == "done"]:
                verdict = "unknown"
                reasons.append("%s ran this boot but its 'GPU clocks set to' line is not in the journal" % unit)
            elif state.get("ActiveState") == "active" and state.get("Result") == "success":
                verdict = "unknown"
                reasons.append("%s is active but none of its runs is in this boot's journal (rotated or "
                               "vacuumed?)" % unit)
            else:
                verdict = "drift"
                reasons.append("no run of %s this boot (unit %s)" % (unit, state.get("ActiveState") or "not loaded"))
        else:
            applied = "%d,%d" % (lock_run["set"]["min"], lock_run["set"]["max"])
            for ev in later:
                reasons.append("%s after the unit's run" % _describe(ev))
            if applied != declared:
                reasons.append("the unit applied %s at %s; the inventory declares %s"
                               % (applied, when(lock_run["set_entry"]), declared))
            if last_run is not lock_run:
                if last_run["result"] == "done":
                    reasons.append("a later run of %s succeeded without a 'GPU clocks set to' line in the "
                                   "journal" % unit)
                elif last_run["result"]:
                    reasons.append("%s (after the run that applied %s at %s)"
                                   % (run_failure(last_run, unit), applied, when(lock_run["set_entry"])))
                else:
                    reasons.append("a later run of %s has not finished" % unit)
            active = state.get("ActiveState")
            if active is not None and active != "active":
                reasons.append("%s is %s now (result %s)" % (unit, active, state.get("Result") or "-"))
            inv = state.get("InvocationID")
            if inv and lock_run["invocation"] and inv != lock_run["invocation"] and active == "active" \
                    and not [r for r in runs if r["invocation"] == inv]:
                reasons.append("the unit's current run (%s) is not in the journal" % inv)
            if sm_clock_mhz is not None and sm_clock_mhz > expected_max:
                reasons.append("the SM clock reads %d MHz now, above the lock's maximum %d MHz"
                               % (sm_clock_mhz, expected_max))
            if not reasons:
                verdict = "locked"
                message = ("locked (unit applied %s at %s this boot, no later manual clock command)"
                           % (applied, when(lock_run["set_entry"])))
            elif all(r.startswith(("the unit's current run", "a later run of")) for r in reasons):
                verdict = "unknown"      # the journal is missing lines, nothing says the lock changed
            else:
                verdict = "drift"
    else:
        locks = [ev for ev in events if ev["kind"] == "lock"]
        resets = [ev for ev in events if ev["kind"] == "reset"]
        last_lock = locks[-1] if locks else None
        last_reset = resets[-1] if resets else None
        if last_lock is None:
            verdict = "unlocked"
            message = ("unlocked (no clock lock applied this boot%s; the GPU starts unlocked)"
                       % ("; last reset: %s" % _describe(last_reset) if last_reset else ""))
        elif last_reset is not None and order_key(last_reset["entry"]) > order_key(last_lock["entry"]):
            verdict = "unlocked"
            message = "unlocked (%s, after %s; no later -lgc)" % (_describe(last_reset), _describe(last_lock))
        else:
            verdict = "drift"
            reasons.append("locked: %s, no later -rgc" % _describe(last_lock))
            if last_reset_run is not None and last_reset_run["result"] not in (None, "done"):
                reasons.append(run_failure(last_reset_run, reset_unit))

    if verdict in ("drift", "unknown"):
        message = "%s (%s)" % (verdict, "; ".join(reasons))

    unseen = []
    since = ref if desired == "locked" else None
    shells = [o for o in opaque["shell"] if _after(o["entry"], since)]
    become = [o for o in opaque["ansible"] if _after(o["entry"], since)]
    if shells:
        users = sorted(set(o["user"] for o in shells))
        unseen.append("%d root shell session(s) through sudo %s (by %s): what ran inside them is not in "
                      "the journal." % (len(shells), "since the unit's run" if since else "this boot",
                                        ", ".join(users)))
    if become:
        unseen.append("%d Ansible task(s) ran as root %s (this check among them): sudo logs only "
                      "Ansible's wrapper, not the task's command." % (len(become), "since the unit's run"
                                                                       if since else "this boot"))
    relevant, relevant_unit = (last_run, unit) if desired == "locked" else (last_reset_run, reset_unit)
    failure = None
    if verdict != desired and relevant is not None and relevant["result"] not in (None, "done"):
        failure = run_failure(relevant, relevant_unit)
    return {
        "verdict": verdict,
        "failure": failure,
        "in_state": verdict == desired,
        "message": message,
        "reasons": reasons,
        "desired": desired,
        "declared": {"min": expected_min, "max": expected_max},
        "unit_run": _public_run(lock_run, unit),
        "last_run": _public_run(last_run, unit),
        "reset_run": _public_run(last_reset_run, reset_unit),
        "later_events": [_public(ev) for ev in later],
        "events": [_public(ev) for ev in events],
        "opaque_root_sessions": {"shell": len(shells), "ansible": len(become)},
        "blind_spots": list(BLIND_SPOTS),
        "unseen_sessions": unseen,
        "cannot_verify": list(BLIND_SPOTS) + unseen,
    }


# ---------------------------------------------------------------------------------------------
# gathering (read-only commands through ``run(args) -> (rc, out, err)``; rc None: not found)
# ---------------------------------------------------------------------------------------------
def parse_show(text):
    """``systemctl show -p A -p B`` output -> {A: value, ...}."""
    out = {}
    for line in (text or "").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def gather(run, desired, unit, expected_min, expected_max, reset_unit=None, nvidia_smi="nvidia-smi",
           sample_clock=True, settle_seconds=0, sleep=None, clock=None):
    """Read the journal, the unit and (optionally) an SM clock sample, then :func:`evaluate`.

    With ``settle_seconds`` (right after the caller started a unit) the reading is repeated, every
    half second up to that long, until the verdict is the desired state or the unit's last run
    failed: journald writes a unit's lines asynchronously, a moment after ``systemctl`` returns.
    Adds {manager_start_us, unit_state, sm_clock_mhz, notes, journal_entries, readings} to the result.
    """
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    deadline = clock() + max(0, settle_seconds or 0)
    readings = 0
    while True:
        res = _gather_once(run, desired, unit, expected_min, expected_max, reset_unit, nvidia_smi, sample_clock)
        readings += 1
        if res["in_state"] or res["failure"] or clock() >= deadline:
            res["readings"] = readings
            return res
        sleep(0.5)


def _gather_once(run, desired, unit, expected_min, expected_max, reset_unit, nvidia_smi, sample_clock):
    notes, journal_note = [], None
    rc, out, err = run(["systemctl", "show", "-p", "UserspaceTimestampMonotonic"])
    manager_start = as_int(parse_show(out).get("UserspaceTimestampMonotonic")) if rc == 0 else None
    if manager_start is None:
        notes.append("the system manager's start time is unknown; counting the whole boot")
    props = ["LoadState", "ActiveState", "SubState", "Result", "UnitFileState", "InvocationID", "ExecMainStatus"]
    rc, out, err = run(["systemctl", "show", unit] + ["-p" + p for p in props])
    unit_state = parse_show(out) if rc == 0 else {}
    units = [unit] + ([reset_unit] if reset_unit else [])
    entries = []
    rc, out, err = run(journal_args(unit_matches(units) + ["SYSLOG_IDENTIFIER=sudo"]))
    low = (err or "").lower()
    if rc is None:
        journal_note = "journalctl not found"
    elif rc != 0 or (any(s in low for s in PERMISSION_DENIED_TEXTS) and not out.strip()):
        journal_note = "journalctl exited %s: %s" % (rc, (err or out).strip()[-300:])
    else:
        if "not seeing messages from other users" in low or any(s in low for s in PERMISSION_DENIED_TEXTS):
            journal_note = "partial journal (run with become): %s" % err.strip()[-200:]
        entries = parse_journal_json(out)
        rc, out, err = run(journal_args(["SYSLOG_IDENTIFIER=nvidia-smi"], grep="^GPU clocks set to"))
        if rc == 0:
            entries += parse_journal_json(out, "journalctl -g")
        elif rc is not None and grep_unsupported(rc, out, err):
            notes.append("this journalctl cannot filter by pattern: locks set by other units were not looked for")
        elif rc not in (0, 1) or (err or "").strip():
            notes.append("looking for locks set by other units failed: %s" % (err or out).strip()[-200:])
    sm = None
    if sample_clock:
        rc, out, err = run([nvidia_smi, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"])
        sm = parse_sm_clock(out) if rc == 0 else None
        if sm is None:
            notes.append("no SM clock sample (%s)" % ("nvidia-smi not found" if rc is None
                                                     else (err or out or "rc %s" % rc).strip()[-200:]))
    res = evaluate(entries, desired, unit, expected_min, expected_max, reset_unit=reset_unit,
                   unit_state=unit_state, manager_start_us=manager_start, sm_clock_mhz=sm,
                   journal_note=journal_note)
    res.update(manager_start_us=manager_start, unit_state=unit_state, sm_clock_mhz=sm, notes=notes,
               journal_entries=len(entries))
    return res
