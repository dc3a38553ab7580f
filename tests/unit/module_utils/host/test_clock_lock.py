"""module_utils/host/clock_lock.py and the clock_lock_status module, on journal JSON shaped as systemd 252 and
sudo 1.9 write it (field names, MESSAGE_IDs, invocation ids, sudo's padded ``user : TTY=... ; COMMAND=...``).
"""
import json
import uuid

import pytest

from ansible.module_utils.host import clock_lock as cl, sudo_commands, unit_journal

import clock_lock_status
from modrun import run_module

UNIT = "nvidia-clock-lock.service"
RESET = "nvidia-clock-reset.service"
BOOT = "b47217f1d0064288b68105019155d0ac"
SET_LINE = 'GPU clocks set to "(gpuClkMin %d, gpuClkMax %d)" for GPU 0000000F:01:00.0'
NO_PERMISSION = "The current user does not have permission to change clocks for GPU 0000000F:01:00.0."
DESC = {UNIT: "Lock GPU graphics clocks to 0,2200 MHz (dsv41 fleet)",
        RESET: "Reset GPU graphics clocks (nvidia-smi -rgc, dsv41 clocks experiment)"}
MANAGER_START = 2_900_000          # systemd's UserspaceTimestampMonotonic in these journals


class Journal:
    """Builds ``journalctl -b 0 -o json`` lines in the order and shape the real tools write them."""

    def __init__(self, mono=3_000_000, real=1_796_048_699_000_000):
        self.mono, self.real, self.seq, self.entries, self.pid = mono, real, 0x40, [], 900

    def at(self, seconds):
        """Move the clock on (seconds)."""
        self.mono += int(seconds * 1e6)
        self.real += int(seconds * 1e6)
        return self

    def _add(self, fields):
        self.mono += 1500
        self.real += 1500
        self.seq += 1
        e = {"__CURSOR": "s=2ef1d993962e41869cbc564f333e94fa;i=%x;b=%s;m=%x;t=%x;x=da8c41835965ed54"
                         % (self.seq, BOOT, self.mono, self.real),
             "__REALTIME_TIMESTAMP": str(self.real), "__MONOTONIC_TIMESTAMP": str(self.mono), "_BOOT_ID": BOOT,
             "_HOSTNAME": "spark2", "PRIORITY": "6", "SYSLOG_FACILITY": "3"}
        e.update(fields)
        self.entries.append(e)
        return e

    def pid1(self, unit, message, inv, **fields):
        return self._add(dict({"_PID": "1", "_COMM": "systemd", "SYSLOG_IDENTIFIER": "systemd",
                               "_SYSTEMD_UNIT": "init.scope", "UNIT": unit, "_TRANSPORT": "journal",
                               "INVOCATION_ID": inv, "MESSAGE": message}, **fields))

    def stdout(self, unit, inv, message, cmdline):
        fields = {"_PID": str(self.pid), "_COMM": "nvidia-smi", "SYSLOG_IDENTIFIER": "nvidia-smi",
                  "_SYSTEMD_UNIT": unit, "_TRANSPORT": "stdout", "_CMDLINE": cmdline, "MESSAGE": message}
        if inv:
            fields["_SYSTEMD_INVOCATION_ID"] = inv
        return self._add(fields)

    def run(self, unit, output, status=0, remain=True, output_inv=True, finish=True):
        """One start of a oneshot unit: Starting, its output, then Finished or the three failure lines."""
        inv = uuid.uuid4().hex
        self.pid += 7
        desc = DESC.get(unit, unit)
        self.pid1(unit, "Starting %s - %s..." % (unit, desc), inv, JOB_TYPE="start",
                  MESSAGE_ID="7d4958e842da4a758f6c1cdc7b36dcc5", JOB_ID="80")
        cmd = "/usr/bin/nvidia-smi -lgc 0,2200" if unit == UNIT else "/usr/bin/nvidia-smi -rgc"
        for line in output:
            self.stdout(unit, inv if output_inv else None, line, cmd)
        if not finish:
            return inv
        if status == 0:
            if not remain:
                self.pid1(unit, "%s: Deactivated successfully." % unit, inv, MESSAGE_ID="7ad2d189f7e94e70a38c781354912448")
            self.pid1(unit, "Finished %s - %s." % (unit, desc), inv, JOB_TYPE="start", JOB_RESULT="done",
                      MESSAGE_ID="39f53479d3a045ac8e11786248231fbf")
        else:
            self.pid1(unit, "%s: Main process exited, code=exited, status=%d/NOPERMISSION" % (unit, status), inv,
                      EXIT_CODE="exited", EXIT_STATUS=str(status), MESSAGE_ID="98e322203f7a4ed290d09fe03c09fe15")
            self.pid1(unit, "%s: Failed with result 'exit-code'." % unit, inv, UNIT_RESULT="exit-code",
                      MESSAGE_ID="d9b373ed55a64feb8242e02dbe79a49c")
            self.pid1(unit, "Failed to start %s - %s." % (unit, desc), inv, JOB_TYPE="start", JOB_RESULT="failed",
                      MESSAGE_ID="be02cf6855d2428ba40df7e9d022f03d")
        return inv

    def lock(self, lo=0, hi=2200, **kw):
        return self.run(UNIT, [SET_LINE % (lo, hi), "All done."], **kw)

    def stop_for_restart(self, inv):
        """What systemctl restart of an active RemainAfterExit unit logs before the new start (systemd 252)."""
        self.pid1(UNIT, "%s: Deactivated successfully." % UNIT, inv, MESSAGE_ID="7ad2d189f7e94e70a38c781354912448")
        self.pid1(UNIT, "Stopped %s - %s." % (UNIT, DESC[UNIT]), inv, JOB_TYPE="restart", JOB_RESULT="done",
                  MESSAGE_ID="9d1aaa27d60140bd96365438aad20286")
        self.pid1(UNIT, "Stopping %s - %s..." % (UNIT, DESC[UNIT]), inv, JOB_TYPE="stop",
                  MESSAGE_ID="de5b426a63be47a7b6ac3eaac82e2f6f")

    def sudo(self, user, command, tty="pts/0", target="root", refusal=None):
        """sudo's command line (padded user), then PAM's session lines when the command ran."""
        parts = ([refusal] if refusal else []) + (["TTY=%s" % tty] if tty else []) + \
            ["PWD=/home/%s" % user, "USER=%s" % target, "COMMAND=%s" % command]
        common = {"_PID": str(self.pid), "_COMM": "sudo", "SYSLOG_IDENTIFIER": "sudo", "_TRANSPORT": "syslog",
                  "SYSLOG_FACILITY": "10", "_UID": "1000", "_CMDLINE": "sudo " + command}
        self.pid += 3
        e = self._add(dict(common, MESSAGE="%8s : %s" % (user, " ; ".join(parts)), PRIORITY="5"))
        if not refusal:
            self._add(dict(common, MESSAGE="pam_unix(sudo:session): session opened for user root(uid=0) by %s(uid=1000)"
                           % user))
            self._add(dict(common, MESSAGE="pam_unix(sudo:session): session closed for user root"))
        return e

    def text(self):
        return "".join(json.dumps(e) + "\n" for e in self.entries)


ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "SubState": "exited", "Result": "success",
          "UnitFileState": "enabled"}


def verdict(j, desired="locked", state=None, **kw):
    entries = unit_journal.parse_journal_json(j.text())
    st = dict(ACTIVE, **(state or {}))
    if "InvocationID" not in st:
        invs = [e.get("INVOCATION_ID") for e in entries if e.get("UNIT") == UNIT and e.get("INVOCATION_ID")]
        st["InvocationID"] = invs[-1] if invs else ""
    return cl.evaluate(entries, desired, UNIT, 0, 2200, reset_unit=RESET, unit_state=st,
                       manager_start_us=kw.pop("manager_start_us", MANAGER_START), **kw)


def boot_lock():
    """A boot where the unit locked the clocks (the usual state of a Spark)."""
    j = Journal()
    j.lock()
    return j


# --------------------------------------------------------------------------------------------
# sudo and nvidia-smi command lines
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("message, expected", [
    ("   zurih : TTY=pts/1 ; PWD=/home/zurih ; USER=root ; COMMAND=/usr/bin/nvidia-smi -rgc",
     {"user": "zurih", "ran": True, "reason": None, "command": "/usr/bin/nvidia-smi -rgc",
      "fields": {"TTY": "pts/1", "PWD": "/home/zurih", "USER": "root"}}),
    ("     mia : PWD=/home/mia ; USER=root ; COMMAND=/usr/bin/sh -c 'nvidia-smi -q -d CLOCK | head -3'",
     {"user": "mia", "ran": True, "reason": None, "command": "/usr/bin/sh -c 'nvidia-smi -q -d CLOCK | head -3'",
      "fields": {"PWD": "/home/mia", "USER": "root"}}),
    ("   zurih : command not allowed ; TTY=pts/1 ; PWD=/home/zurih ; USER=root ; COMMAND=/usr/bin/nvidia-smi -rgc",
     {"user": "zurih", "ran": False, "reason": "command not allowed", "command": "/usr/bin/nvidia-smi -rgc",
      "fields": {"TTY": "pts/1", "PWD": "/home/zurih", "USER": "root"}}),
    ("     ops : 3 incorrect password attempts ; TTY=pts/2 ; PWD=/tmp ; USER=root ; COMMAND=/usr/bin/nvidia-smi -lgc 0,1500",
     {"user": "ops", "ran": False, "reason": "3 incorrect password attempts",
      "command": "/usr/bin/nvidia-smi -lgc 0,1500", "fields": {"TTY": "pts/2", "PWD": "/tmp", "USER": "root"}}),
])
def test_parse_sudo_command_lines(message, expected):
    assert sudo_commands.parse_sudo(message) == expected


@pytest.mark.parametrize("message", [
    "pam_unix(sudo:session): session opened for user root(uid=0) by zurih(uid=1000)",
    "pam_limits(sudo:session): Could not set limit for 'core' to soft=0, hard=-1: Operation not permitted; uid=1000,euid=0",
    "",
])
def test_parse_sudo_ignores_other_sudo_lines(message):
    assert sudo_commands.parse_sudo(message) is None


@pytest.mark.parametrize("command, actions", [
    ("/usr/bin/nvidia-smi -rgc", [("reset", None, None)]),
    ("/usr/bin/nvidia-smi --reset-gpu-clocks", [("reset", None, None)]),
    ("/usr/bin/nvidia-smi -i 0 -lgc 0,1500", [("lock", 0, 1500)]),
    ("/usr/bin/nvidia-smi --lock-gpu-clocks=300,2000", [("lock", 300, 2000)]),
    ("/usr/bin/nvidia-smi -lgc 2190", [("lock", 2190, 2190)]),
    ("/usr/bin/nvidia-smi -r", [("gpu-reset", None, None)]),
    ("/usr/bin/sh -c 'nvidia-smi -rgc; nvidia-smi -lgc 0,2200'", [("reset", None, None), ("lock", 0, 2200)]),
    ("/usr/bin/bash -c 'nvidia-smi -rgc && echo ok'", [("reset", None, None)]),
    ("/usr/bin/timeout 10 /usr/bin/nvidia-smi -rgc", [("reset", None, None)]),
    ("/usr/bin/nvidia-smi -q -d CLOCK", []),
    ("/usr/bin/sh -c 'nvidia-smi -q | sort -r'", []),
    ("/usr/bin/grep -r nvidia-smi /etc", []),
    ("/usr/bin/systemctl restart nvidia-clock-lock.service", []),
])
def test_clock_actions(command, actions):
    assert [(a["action"], a["min"], a["max"]) for a in sudo_commands.clock_actions(command)] == actions


@pytest.mark.parametrize("command, kind", [
    ("/bin/sh -c echo BECOME-SUCCESS-upskowwxeukywyhlilscyxabgocpfjuh ; /usr/bin/python3", "ansible"),
    ("/bin/bash", "shell"),
    ("/usr/bin/su -", "shell"),
    ("/usr/bin/nvidia-smi -rgc", "clock"),
    ("/usr/bin/apt update", "other"),
    ("/usr/bin/bash -c 'apt update'", "other"),
])
def test_sudo_kind(command, kind):
    assert sudo_commands.sudo_kind(command) == kind


# --------------------------------------------------------------------------------------------
# journal and unit runs
# --------------------------------------------------------------------------------------------
def test_parse_journal_json_drops_a_half_written_last_line_only():
    j = boot_lock()
    text = j.text()
    assert len(unit_journal.parse_journal_json(text + '{"__CURSOR": "s=1;i=9')) == len(j.entries)
    with pytest.raises(unit_journal.JournalError, match=r"journalctl: line 2 is not journal JSON"):
        unit_journal.parse_journal_json(text.replace("\n", "\nnot json\n", 1))
    with pytest.raises(unit_journal.JournalError, match="line 1 is not a journal entry"):
        unit_journal.parse_journal_json("[1, 2]\n{}\n")


def test_unit_runs_boot_restart_and_failure():
    j = Journal()
    first = j.lock()
    j.at(60).stop_for_restart(first)
    second = j.lock()
    j.at(60).stop_for_restart(second)
    third = j.run(UNIT, [NO_PERMISSION], status=4)
    runs = unit_journal.unit_runs(unit_journal.this_manager(unit_journal.parse_journal_json(j.text()), MANAGER_START), UNIT)
    assert [(r["invocation"], r["result"]) for r in runs] == [(first, "done"), (second, "done"), (third, "failed")]
    assert runs[0]["set"] == {"min": 0, "max": 2200, "gpu": "0000000F:01:00.0"}
    assert runs[0]["output"] == [SET_LINE % (0, 2200), "All done."]
    assert runs[2]["exit_status"] == 4 and runs[2]["permission_denied"] and runs[2]["set"] is None
    assert unit_journal.run_failure(runs[2], UNIT) == (
        "nvidia-clock-lock.service run at %s failed with exit status 4: %s" % (unit_journal.when(runs[2]["end_entry"]), NO_PERMISSION))


def test_output_without_invocation_id_belongs_to_the_open_run():
    j = Journal()
    j.lock(output_inv=False)
    (run,) = unit_journal.unit_runs(unit_journal.parse_journal_json(j.text()), UNIT)
    assert run["result"] == "done" and run["set"]["max"] == 2200


def test_when_is_utc():
    assert unit_journal.when({"__REALTIME_TIMESTAMP": "1796048699640416"}) == "2026-11-30 14:24:59 UTC"


# --------------------------------------------------------------------------------------------
# verdicts: locked
# --------------------------------------------------------------------------------------------
def test_locked_after_the_units_run():
    j = boot_lock()
    r = verdict(j)
    t = unit_journal.when(j.entries[1])
    assert r["verdict"] == "locked" and r["in_state"]
    assert r["message"] == "locked (unit applied 0,2200 at %s this boot, no later manual clock command)" % t
    assert r["unit_run"]["set"] == {"min": 0, "max": 2200, "gpu": "0000000F:01:00.0"} and r["failure"] is None
    assert r["cannot_verify"][:len(cl.BLIND_SPOTS)] == list(cl.BLIND_SPOTS)
    assert "no read-back" in r["cannot_verify"][0]


def test_manual_reset_through_sudo_after_the_unit_is_drift():
    j = boot_lock()
    e = j.at(120).sudo("zurih", "/usr/bin/nvidia-smi -rgc")
    r = verdict(j)
    assert r["verdict"] == "drift" and not r["in_state"]
    assert r["message"] == "drift (manual -rgc by zurih (sudo) at %s after the unit's run)" % unit_journal.when(e)
    assert r["later_events"] == [{"kind": "reset", "source": "sudo", "who": "zurih", "command": "-rgc",
                                  "min": None, "max": None, "time": unit_journal.when(e)}]


def test_a_reset_before_the_units_run_does_not_count():
    j = Journal()
    j.sudo("zurih", "/usr/bin/nvidia-smi -rgc")
    j.at(5).lock()
    assert verdict(j)["verdict"] == "locked"


@pytest.mark.parametrize("kwargs", [
    {"command": "/usr/bin/nvidia-smi -rgc", "refusal": "command not allowed"},   # sudo refused: nothing ran
    {"command": "/usr/bin/nvidia-smi -rgc", "target": "zurih"},                  # not root: no privilege
    {"command": "/usr/bin/nvidia-smi -q -d CLOCK"},                               # a query
    {"command": "/usr/bin/systemctl status nvidia-clock-lock.service"},
])
def test_sudo_lines_that_change_no_clock(kwargs):
    j = boot_lock()
    j.at(30).sudo("zurih", **kwargs)
    assert verdict(j)["verdict"] == "locked"


@pytest.mark.parametrize("command, text", [
    ("/usr/bin/nvidia-smi -lgc 0,2200", "manual -lgc 0,2200 by ops (sudo)"),   # any later -lgc: not the unit's
    ("/usr/bin/nvidia-smi -lgc 0,1500", "manual -lgc 0,1500 by ops (sudo)"),
    ("/usr/bin/nvidia-smi -r", "manual -r (GPU reset) by ops (sudo)"),
    ("/usr/bin/sh -c 'nvidia-smi -rgc; sleep 1'", "manual -rgc by ops (sudo)"),
])
def test_any_later_clock_command_is_drift(command, text):
    j = boot_lock()
    j.at(30).sudo("ops", command)
    r = verdict(j)
    assert r["verdict"] == "drift" and r["message"].startswith("drift (%s at " % text), r["message"]


def test_a_lock_by_another_unit_is_drift():
    j = boot_lock()
    j.at(30).stdout("gpu-tune.service", uuid.uuid4().hex, SET_LINE % (0, 1500), "/usr/bin/nvidia-smi -lgc 0,1500")
    r = verdict(j)
    assert r["verdict"] == "drift"
    assert r["message"].startswith("drift (-lgc 0,1500 by unit gpu-tune.service at ")


def test_a_run_of_the_reset_unit_after_the_lock_is_drift():
    j = boot_lock()
    j.at(30).run(RESET, ["All done."], remain=False)
    r = verdict(j)
    assert r["verdict"] == "drift" and "-rgc by unit nvidia-clock-reset.service at" in r["message"]


def test_a_later_failed_run_is_drift_naming_the_message():
    j = Journal()
    inv = j.lock()
    j.at(60).stop_for_restart(inv)
    j.run(UNIT, [NO_PERMISSION], status=4)
    r = verdict(j, state={"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"})
    assert r["verdict"] == "drift"
    assert r["failure"].endswith("failed with exit status 4: " + NO_PERMISSION)
    assert r["message"].startswith("drift (nvidia-clock-lock.service run at ")
    assert "is failed now (result exit-code)" in r["message"]


def test_no_successful_run_this_boot():
    j = Journal()
    j.run(UNIT, [NO_PERMISSION], status=4)
    r = verdict(j, state={"ActiveState": "failed", "Result": "exit-code"})
    assert r["verdict"] == "drift" and r["message"].startswith(
        "drift (no successful run of nvidia-clock-lock.service this boot; the last one failed: ")
    assert NO_PERMISSION in r["failure"]
    r = verdict(Journal(), state={"ActiveState": "inactive", "Result": "success"})
    assert r["message"] == "drift (no run of nvidia-clock-lock.service this boot (unit inactive))"


def test_runs_before_the_running_system_manager_do_not_count():
    """The lab host restarted in the same kernel boot: its earlier life is in `journalctl -b 0`."""
    j = boot_lock()
    r = verdict(j, manager_start_us=j.mono + 1, state={"ActiveState": "inactive"})
    assert r["verdict"] == "drift" and "no run of" in r["message"]


def test_inactive_unit_is_drift():
    r = verdict(boot_lock(), state={"ActiveState": "inactive", "SubState": "dead"})
    assert r["verdict"] == "drift" and r["reasons"] == ["nvidia-clock-lock.service is inactive now (result success)"]


def test_other_values_than_declared_are_drift():
    j = Journal()
    j.lock(0, 1800)
    r = verdict(j)
    assert r["verdict"] == "drift" and "the unit applied 0,1800 at" in r["message"] and "declares 0,2200" in r["message"]


def test_a_clock_above_the_lock_contradicts_it():
    r = verdict(boot_lock(), sm_clock_mhz=2418)
    assert r["message"] == "drift (the SM clock reads 2418 MHz now, above the lock's maximum 2200 MHz)"
    assert verdict(boot_lock(), sm_clock_mhz=2200)["verdict"] == "locked"
    assert verdict(boot_lock(), sm_clock_mhz=208)["verdict"] == "locked"


@pytest.mark.parametrize("build, state, reason", [
    (lambda j: j.run(UNIT, ["All done."]), {}, "ran this boot but its 'GPU clocks set to' line is not in the journal"),
    (lambda j: None, {"InvocationID": "ab" * 16}, "is active but none of its runs is in this boot's journal"),
    (lambda j: (j.lock(), j.at(5).run(UNIT, ["All done."])), {},
     "a later run of nvidia-clock-lock.service succeeded without a 'GPU clocks set to' line"),
    (lambda j: (j.lock(), j.at(5).run(UNIT, [], finish=False)), {},
     "a later run of nvidia-clock-lock.service has not finished"),
])
def test_missing_evidence_is_unknown(build, state, reason):
    j = Journal()
    build(j)
    r = verdict(j, state=state)
    assert r["verdict"] == "unknown" and reason in r["message"], r["message"]


def test_unreadable_journal_is_unknown():
    r = verdict(boot_lock(), journal_note="No journal files were opened due to insufficient permissions.")
    assert r["verdict"] == "unknown" and "insufficient permissions" in r["message"]


def test_root_sessions_the_journal_cannot_see_into_are_said():
    j = boot_lock()
    j.at(10).sudo("zurih", "/bin/bash")
    j.sudo("mia", "/usr/bin/su -")
    j.sudo("mia", "/bin/sh -c echo BECOME-SUCCESS-upskowwxeukywyhlilscyxabgocpfjuh ; /usr/bin/python3", tty=None)
    r = verdict(j)
    assert r["verdict"] == "locked"    # nothing visible changed the clocks ...
    assert r["opaque_root_sessions"] == {"shell": 2, "ansible": 1}    # ... and the output says what it cannot see
    assert r["unseen_sessions"][0].startswith("2 root shell session(s) through sudo since the unit's run (by mia, zurih)")
    assert r["cannot_verify"][-2:] == r["unseen_sessions"]


def test_bad_requests_are_errors():
    with pytest.raises(cl.ClockLockError, match="neither locked nor unlocked"):
        cl.evaluate([], "on", UNIT, 0, 2200)
    with pytest.raises(cl.ClockLockError, match="2200,2200 is not a range"):
        cl.evaluate([], "locked", UNIT, 2200, 2200)


# --------------------------------------------------------------------------------------------
# verdicts: unlocked
# --------------------------------------------------------------------------------------------
def test_unlocked_after_the_reset_unit():
    j = boot_lock()
    j.at(30).run(RESET, ["All done."], remain=False)
    r = verdict(j, "unlocked", state={"ActiveState": "inactive", "UnitFileState": "disabled"})
    assert r["verdict"] == "unlocked" and r["in_state"]
    assert r["message"].startswith("unlocked (-rgc by unit nvidia-clock-reset.service at ")
    assert ", after -lgc 0,2200 by unit nvidia-clock-lock.service at " in r["message"]
    assert r["message"].endswith("; no later -lgc)")


def test_unlocked_by_a_manual_reset_and_without_any_lock():
    j = boot_lock()
    j.at(30).sudo("zurih", "/usr/bin/nvidia-smi -rgc")
    assert verdict(j, "unlocked")["verdict"] == "unlocked"
    r = verdict(Journal(), "unlocked", state={"ActiveState": "inactive"})
    assert r["message"] == "unlocked (no clock lock applied this boot; the GPU starts unlocked)"


def test_a_lock_after_the_reset_is_drift_when_unlocked_is_declared():
    j = Journal()
    j.run(RESET, ["All done."], remain=False)
    j.at(30).lock()
    r = verdict(j, "unlocked")
    assert r["verdict"] == "drift" and r["message"].startswith("drift (locked: -lgc 0,2200 by unit nvidia-clock-lock.service at ")


def test_a_failed_reset_is_drift_naming_the_message():
    j = boot_lock()
    j.at(30).run(RESET, [NO_PERMISSION], status=4, remain=False)
    r = verdict(j, "unlocked")
    assert r["verdict"] == "drift"
    assert r["failure"].startswith("nvidia-clock-reset.service run at ") and r["failure"].endswith(NO_PERMISSION)
    assert r["reset_run"]["permission_denied"]


# --------------------------------------------------------------------------------------------
# gathering and the module entry point
# --------------------------------------------------------------------------------------------
def fake_host(journal, other_locks="", show=None, sm="208\n", grep_rc=1):
    """run(args) answering as a lab host with this journal; records nothing itself."""
    unit_show = "\n".join("%s=%s" % kv for kv in dict(ACTIVE, **(show or {})).items()) + "\n"

    def run(args):
        if args[:3] == ["systemctl", "show", "-p"]:
            return 0, "UserspaceTimestampMonotonic=%d\n" % MANAGER_START, ""
        if args[:2] == ["systemctl", "show"]:
            return 0, unit_show, ""
        if args[0] == "journalctl" and "-g" in args:
            return (0, other_locks, "") if other_locks else (grep_rc, "", "")
        if args[0] == "journalctl":
            return 0, journal.text() if hasattr(journal, "text") else journal(), ""
        if args[0].endswith("nvidia-smi"):
            return 0, sm, ""
        raise AssertionError("unexpected command %r" % (args,))
    return run


def test_gather_asks_the_journal_for_the_units_and_sudo_of_this_boot():
    calls = []
    run = fake_host(boot_lock())

    def recording(args):
        calls.append(args)
        return run(args)
    r = cl.gather(recording, "locked", UNIT, 0, 2200, reset_unit=RESET, nvidia_smi="/usr/bin/nvidia-smi")
    assert r["verdict"] == "locked" and r["manager_start_us"] == MANAGER_START and r["sm_clock_mhz"] == 208
    journal = [c for c in calls if c[0] == "journalctl"]
    assert journal[0][:4] == ["journalctl", "-b", "0", "-o"]
    assert journal[0][-9:] == ["_SYSTEMD_UNIT=" + UNIT, "+", "UNIT=" + UNIT, "+", "_SYSTEMD_UNIT=" + RESET, "+",
                               "UNIT=" + RESET, "+", "SYSLOG_IDENTIFIER=sudo"][-9:]
    assert journal[1][-3:] == ["-g", "^GPU clocks set to", "SYSLOG_IDENTIFIER=nvidia-smi"]
    assert ["/usr/bin/nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"] in calls


def test_gather_settles_while_journald_catches_up():
    """Right after systemctl restart the Finished line may not be in the journal yet."""
    j = Journal()
    j.lock()
    full = j.text()
    partial = "".join(line + "\n" for line in full.splitlines()[:-1])   # without "Finished"
    texts = iter([partial, partial, full])
    now = [0.0]
    r = cl.gather(fake_host(lambda: next(texts)), "locked", UNIT, 0, 2200, reset_unit=RESET, settle_seconds=5,
                  sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert r["verdict"] == "locked" and r["readings"] == 3
    texts = iter([partial] * 20)
    now = [0.0]
    r = cl.gather(fake_host(lambda: next(texts)), "locked", UNIT, 0, 2200, reset_unit=RESET, settle_seconds=2,
                  sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert r["verdict"] == "unknown" and r["readings"] == 5


def test_gather_reports_an_unreadable_journal():
    def run(args):
        if args[0] == "journalctl":
            return 1, "", "No journal files were opened due to insufficient permissions."
        return fake_host(Journal())(args)
    r = cl.gather(run, "locked", UNIT, 0, 2200)
    assert r["verdict"] == "unknown" and "insufficient permissions" in r["message"]


def test_module_entry_point_is_read_only_and_reports_the_verdict():
    j = boot_lock()
    e = j.at(60).sudo("zurih", "/usr/bin/nvidia-smi -rgc")
    run = fake_host(j)
    out = run_module(clock_lock_status.main,
                   {"state": "locked", "_ansible_check_mode": True}, run_command=lambda cmd: run(cmd))
    assert out["changed"] is False and out["verdict"] == "drift" and out["in_state"] is False
    assert out["message"] == "drift (manual -rgc by zurih (sudo) at %s after the unit's run)" % unit_journal.when(e)
    assert out["cannot_verify"][0] == cl.BLIND_SPOTS[0] and out["host"]
    assert any(c[0] == "journalctl" for c in out["_calls"])
    assert not any(c[0] == "systemctl" and c[1] not in ("show",) for c in out["_calls"]), "reads only"


def test_module_rejects_an_impossible_lock():
    out = run_module(clock_lock_status.main, {"min_mhz": 2200, "max_mhz": 2200},
                   run_command=fake_host(boot_lock()))
    assert out["failed"] and "requested lock 2200,2200 is not a range" in out["msg"] and out["host"] in out["msg"]


def test_gather_says_when_journalctl_cannot_look_for_other_units_locks():
    def run(args):
        if args[0] == "journalctl" and "-g" in args:
            return 1, "", "journalctl: Compiled without pattern matching support"
        return fake_host(boot_lock())(args)
    r = cl.gather(run, "locked", UNIT, 0, 2200, reset_unit=RESET)
    assert r["verdict"] == "locked"
    assert r["notes"] == ["this journalctl cannot filter by pattern: locks set by other units were not looked for"]
