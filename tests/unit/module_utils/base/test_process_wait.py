"""module_utils/base/process_wait.py: waiting a bounded time for a process that was asked to stop; its state."""
import os
import shutil
import signal
import subprocess
import time

from ansible.module_utils.base.process_wait import proc_stat, wait_gone


def test_a_process_already_gone_is_not_waited_for():
    start = time.monotonic()
    assert wait_gone(lambda: False, 10) is True
    assert time.monotonic() - start < 1


def test_it_polls_until_the_process_is_gone():
    answers = [True, True, False]
    assert wait_gone(lambda: answers.pop(0), 10, step=0.01) is True
    assert answers == []


def test_a_process_that_stays_is_given_up_on_after_the_wait():
    start = time.monotonic()
    assert wait_gone(lambda: True, 0.2, step=0.01) is False
    assert 0.2 <= time.monotonic() - start < 2


def test_a_real_process_stopped_by_sigterm():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert wait_gone(lambda: proc.poll() is None, 0.1, step=0.01) is False    # still running
        proc.send_signal(signal.SIGTERM)
        assert wait_gone(lambda: proc.poll() is None, 10, step=0.01) is True
    finally:
        proc.kill()
        proc.wait()


def test_proc_stat_reads_state_and_start_past_a_command_name_with_a_parenthesis(tmp_path):
    odd = tmp_path / "a) b ) c"            # /proc/PID/stat shows the command as "(a) b ) c)"
    shutil.copy("/bin/sleep", odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        state, start = proc_stat(child.pid)
        assert state in ("R", "S") and start >= proc_stat(os.getpid())[1]
    finally:
        child.kill()
        child.wait()
    assert proc_stat(child.pid) is None     # reaped: no /proc entry
    assert proc_stat(2 ** 22 + 1) is None  # above pid_max
