"""Following a background packer (module_utils/engram/follow and the engram_pack_wait module).

Two layers: each verdict from hand-made async results files and progress records (the formats
the async wrapper and the packer write), then the real thing: ansible-core's own async_wrapper
running the engram_pack module, finished, failed, stopped, killed alone, killed with its job, and
stopped at its time limit.
"""
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import ckpt_factory
from modrun import run_module
import engram_pack
import engram_pack_wait
from ansible.module_utils.base import process_wait
from ansible.module_utils.engram import follow as fw
from ansible.module_utils.engram import packer, progress as pack_progress
from ansible.module_utils.engram.shard_format import partial_name, shard_name

HOST = os.uname().nodename
ME = os.getpid()


def _job(tmp_path, data, age=0.0):
    path = tmp_path / "job"
    path.write_text(json.dumps(data))
    if age:
        then = time.time() - age
        os.utime(path, (then, then))
    return str(path)


RUNNING_JOB = {"started": True, "finished": False, "ansible_job_id": "j1.42"}


def _record(tmp_path, dest, alive=True, **fields):
    """A progress record as the packer writes it; ``alive`` makes its pid this process, else a
    process that is gone (this pid with another start time: what a reused pid looks like)."""
    record = {"version": 1, "run_id": "run-1", "host": HOST, "pid": ME,
              "pid_start": process_wait.process_start_ticks(ME) + (0 if alive else 1), "layer": 1, "rank": 1,
              "tp_size": 3, "state": "packing", "path": os.path.join(dest, shard_name(1, 1, 3)),
              "partial_path": os.path.join(dest, partial_name(1, 1, 3)), "done_bytes": 6471680,
              "total_bytes": 16900096, "percent": 38.29, "mib_s": 1.03, "eta_s": 9.7, "max_mib_s": 1.0,
              "started": time.time() - 6, "updated": time.time(), "message": "writing rows 64000..127999"}
    record.update(fields)
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(record))
    return str(path)


def _follow(job, progress, **kw):
    kw.setdefault("run_id", "run-1")
    return fw.follow_pack(job, progress, 1, 1, host_label="spark2", **kw)


def _partial(dest, size=1000):
    path = os.path.join(dest, partial_name(1, 1, 3))
    with open(path, "wb") as handle:
        handle.write(b"x" * size)
    return path


# --------------------------------------------------------------------------- running

def test_running_reports_progress_line(tmp_path, dest):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest))
    assert out["finished"] is False and out["failed"] is False and out["state"] == "packing"
    assert out["msg"] == "spark2 (rank 1) layer 1: 38.29% (6,471,680 of 16,900,096 bytes), 1.0 MiB/s, ETA 10 s"
    assert (out["percent"], out["done_bytes"], out["total_bytes"], out["pid"]) == (38.29, 6471680, 16900096, ME)
    assert (out["mib_s"], out["eta_s"], out["max_mib_s"]) == (1.03, 9.7, 1.0)


def test_waiting_for_the_lock_says_so(tmp_path, dest):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(
        tmp_path, dest, state="waiting_lock", message="taking the destination lock /x/.engram-pack.lock"))
    assert out["finished"] is False and out["state"] == "waiting_lock"
    assert "waiting lock (pid %d): taking the destination lock" % ME in out["msg"]


def test_a_stalled_packer_is_still_followed_and_flagged(tmp_path, dest):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, updated=time.time() - 300))
    assert out["finished"] is False and "no progress for 300 s" in out["msg"]


def test_starting_before_the_first_record(tmp_path):
    out = _follow(_job(tmp_path, RUNNING_JOB), str(tmp_path / "none.json"))
    assert out["finished"] is False and out["state"] == "starting" and out["pid"] is None


def test_an_earlier_runs_record_is_ignored(tmp_path, dest):
    """The same progress path holds the last run's record (a dead pid) until the new packer writes."""
    job = _job(tmp_path, RUNNING_JOB)
    progress = _record(tmp_path, dest, alive=False, run_id="run-0", state="packing")
    out = _follow(job, progress)
    assert out["finished"] is False and out["state"] == "starting"
    other_layer = _record(tmp_path, dest, layer=14)
    assert _follow(job, other_layer)["state"] == "starting"


def test_no_record_past_the_startup_grace_is_lost(tmp_path):
    out = _follow(_job(tmp_path, RUNNING_JOB, age=200), str(tmp_path / "none.json"), startup_grace=120)
    assert out["finished"] is True and out["failed"] is True and out["state"] == "lost"
    assert "no progress record" in out["msg"] and "within 120 s" in out["msg"]


def test_job_file_and_record_both_missing_is_lost(tmp_path):
    out = _follow(str(tmp_path / "nojob"), str(tmp_path / "none.json"))
    assert out["finished"] is True and out["failed"] is True and out["state"] == "lost"


def test_packer_past_its_limit_is_reported_and_left_alone_without_cleanup(tmp_path, dest):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, started=time.time() - 1000), time_limit=600,
                  cleanup=False)
    assert out["finished"] is True and out["failed"] is True and out["state"] == "timed_out"
    assert "pid %d" % ME in out["msg"] and "past its 600 s limit" in out["msg"] and "kill -TERM %d" % ME in out["msg"]


# --------------------------------------------------------------------------- finished

def test_done_from_the_module_result(tmp_path, dest):
    job = _job(tmp_path, {"changed": True, "path": "/e/engram-l1-r1of3.bin", "bytes": 16900096, "seconds": 16.4,
                          "throughput_mib_s": 1.0, "state_before": "missing", "invocation": {"module_args": {}}})
    out = _follow(job, _record(tmp_path, dest, alive=False, state="done", percent=100.0))
    assert out["finished"] is True and out["failed"] is False and out["state"] == "done"
    assert out["msg"] == "spark2 (rank 1) layer 1: done: /e/engram-l1-r1of3.bin, 16,900,096 bytes in 16.4 s (1.0 MiB/s)"
    assert out["packer_changed"] is True and out["percent"] == 100.0
    job = _job(tmp_path, {"changed": True, "path": "/e/engram-l1-r1of3.bin", "bytes": 16900096, "seconds": 16.4,
                          "throughput_mib_s": 1.0, "state_before": "partial", "invocation": {"module_args": {}},
                          "reclaimed_lock": "a record left by a holder that died: pid 77 on spark2 (layer 1)"})
    out = _follow(job, _record(tmp_path, dest, alive=False, state="done", percent=100.0))
    assert out["msg"].endswith("; took over the destination lock from a record left by a holder that died: "
                               "pid 77 on spark2 (layer 1)")


def test_failed_reports_the_packers_own_error(tmp_path, dest):
    error = "host spark2: not enough space in /data for engram-l1-r1of3.bin: deficit 12 bytes"
    job = _job(tmp_path, {"failed": True, "msg": error, "invocation": {"module_args": {}}})
    out = _follow(job, _record(tmp_path, dest, alive=False, state="failed", message=error))
    assert out["finished"] is True and out["failed"] is True and out["state"] == "failed"
    assert out["msg"] == "spark2 (rank 1) layer 1: the packer failed: " + error


def test_killed_alone_the_wrapper_reports_no_result(tmp_path, dest):
    """SIGKILL to the module only: the wrapper writes its own failure (no JSON from the module)."""
    partial = _partial(dest)
    job = _job(tmp_path, {"failed": True, "cmd": "/x/AnsiballZ_engram_pack.py", "data": "", "stderr": "",
                          "msg": "Traceback ... JSONDecodeError: Expecting value", "ansible_job_id": "j1.42"})
    out = _follow(job, _record(tmp_path, dest, alive=False))
    assert out["finished"] is True and out["failed"] is True and out["state"] == "killed"
    assert out["changed"] is True and out["partial_removed"] is True and not os.path.exists(partial)
    assert "spark2 (rank 1) layer 1: the packer (pid %d) is gone without a result" % ME in out["msg"]
    assert "38.29% (6,471,680 of 16,900,096 bytes)" in out["msg"]
    assert 'its last message: "writing rows 64000..127999"' in out["msg"]
    assert "Removed its %s; no final-named shard exists for this layer" % partial in out["msg"]
    assert "JSONDecodeError" not in out["msg"]


def test_killed_with_its_job_is_detected_from_the_pid(tmp_path, dest):
    """SIGKILL to the process group: the results file says "started" forever; the pid decides."""
    partial = _partial(dest)
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, alive=False))
    assert out["finished"] is True and out["failed"] is True and out["state"] == "killed"
    assert "is gone and its async job has not reported" in out["msg"] and not os.path.exists(partial)


def test_killed_at_the_limit_before_the_wrapper_says_so(tmp_path, dest):
    """The wrapper kills the job at its limit and writes "Timeout exceeded" only a second later."""
    out = _follow(_job(tmp_path, RUNNING_JOB, age=61), _record(tmp_path, dest, alive=False), time_limit=60)
    assert out["state"] == "timed_out" and "killed at its async time limit" in out["msg"]


def test_job_given_up_while_the_packer_still_runs(tmp_path, dest):
    partial = _partial(dest)
    job = _job(tmp_path, {"msg": "Timeout exceeded", "failed": True, "child_pid": 4321})
    out = _follow(job, _record(tmp_path, dest), cleanup=False)
    assert out["finished"] is True and out["failed"] is True and out["state"] == "timed_out"
    assert "its async job ended (Timeout exceeded)" in out["msg"] and "kill -TERM %d" % ME in out["msg"]
    assert os.path.exists(partial)


def test_timed_out_job(tmp_path, dest):
    partial = _partial(dest)
    job = _job(tmp_path, {"msg": "Timeout exceeded", "failed": True, "child_pid": 4321})
    out = _follow(job, _record(tmp_path, dest, alive=False))
    assert out["finished"] is True and out["state"] == "timed_out"
    assert "killed at its async time limit" in out["msg"] and not os.path.exists(partial)


def test_dead_packer_whose_record_says_done_or_failed(tmp_path, dest):
    job = _job(tmp_path, RUNNING_JOB)
    done = _follow(job, _record(tmp_path, dest, alive=False, state="done", message="wrote /e/x.bin"))
    assert done["finished"] is True and done["failed"] is False and done["state"] == "done"
    failed = _follow(job, _record(tmp_path, dest, alive=False, state="failed", message="host h: boom"))
    assert failed["failed"] is True and failed["msg"].endswith("the packer failed: host h: boom")


def test_partial_is_left_while_another_pack_holds_the_lock(tmp_path, dest):
    partial = _partial(dest)
    fd = os.open(os.path.join(dest, ".engram-pack.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, alive=False))
    finally:
        os.close(fd)
    assert out["state"] == "killed" and out["changed"] is False and os.path.exists(partial)
    assert "Left its .partial %s in place: host %s: another engram pack holds" % (partial, HOST) in out["msg"]


def test_final_shard_is_never_touched(tmp_path, dest):
    final = os.path.join(dest, shard_name(1, 1, 3))
    with open(final, "wb") as handle:
        handle.write(b"published")
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, alive=False))
    assert "the final-named %s exists" % final in out["msg"]
    with open(final, "rb") as handle:
        assert handle.read() == b"published"


def test_read_async_job_states(tmp_path):
    assert fw.read_async_job(str(tmp_path / "none")) == ("missing", None)
    assert fw.read_async_job(_job(tmp_path, RUNNING_JOB))[0] == "running"
    assert fw.read_async_job(_job(tmp_path, {"changed": False}))[0] == "finished"
    (tmp_path / "half").write_text('{"started": tr')
    assert fw.read_async_job(str(tmp_path / "half")) == ("unreadable", None)


# --------------------------------------------------------------------------- module entry point

def _run(args, check_mode=False):
    return run_module(engram_pack_wait.main, args, check_mode=check_mode)


def _args(job, progress):
    return {"results_file": job, "progress_file": progress, "run_id": "run-1", "layer": 1, "rank": 1,
            "host_label": "spark2"}


def test_module_running_then_killed(tmp_path, dest):
    running = _run(_args(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest)))
    assert running.get("failed") is not True and running["finished"] is False and "38.29%" in running["msg"]
    partial = _partial(dest)
    killed = _run(_args(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, alive=False)))
    assert killed["failed"] is True and killed["finished"] is True and killed["state"] == "killed"
    assert killed["changed"] is True and not os.path.exists(partial)


def test_module_done_keeps_its_own_state(tmp_path, dest):
    """The shard exists when the wait reports it: the result must not pick up Ansible's file
    attributes (whose "state: file" would replace "done")."""
    final = os.path.join(dest, shard_name(1, 1, 3))
    with open(final, "wb") as handle:
        handle.write(b"x" * 100)
    job = _job(tmp_path, {"changed": True, "path": final, "bytes": 100, "seconds": 0.1, "throughput_mib_s": 0.0,
                          "state_before": "missing", "invocation": {"module_args": {}}})
    out = _run(_args(job, _record(tmp_path, dest, alive=False, state="done")))
    assert out["state"] == "done" and out["finished"] is True and out["shard_path"] == final and "uid" not in out


def test_module_check_mode_removes_nothing(tmp_path, dest):
    partial = _partial(dest)
    out = _run(_args(_job(tmp_path, RUNNING_JOB), _record(tmp_path, dest, alive=False)), check_mode=True)
    assert out["failed"] is True and out["state"] == "killed" and os.path.exists(partial)
    assert "cleanup is off" in out["msg"]


def test_module_documentation_is_yaml():
    import yaml
    doc = yaml.safe_load(engram_pack_wait.DOCUMENTATION)
    assert set(doc["options"]) == {"results_file", "progress_file", "run_id", "layer", "rank", "host_label",
                                   "time_limit", "startup_grace", "cleanup"}
    yaml.safe_load(engram_pack_wait.EXAMPLES)
    returned = set(yaml.safe_load(engram_pack_wait.RETURN))
    assert {"finished", "state", "msg", "percent", "done_bytes", "total_bytes", "mib_s", "eta_s", "pid"} <= returned


# --------------------------------------------------------------------------- the real async wrapper

@pytest.fixture
def async_pack(tmp_path, monkeypatch):
    """Start engram_pack under ansible-core's async_wrapper, as ``async:``/``poll: 0`` does.

    Returns start(max_mib_s, time_limit) -> {"results_file", "progress", "dest", "ckpt"}. Every
    process it started is killed at the end.
    """
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "ckpt"), rows={1: 3 * 4000, 14: 30})["dir"]
    dest = tmp_path / "engram"
    dest.mkdir()
    monkeypatch.setenv("ANSIBLE_ASYNC_DIR", str(tmp_path / "async"))
    python, bootstrap = ckpt_factory.python_with_module_utils()
    # The wrapper runs "<script> <argsfile>" with the interpreter from the script's shebang.
    script = tmp_path / "engram_pack_module.py"
    script.write_text("#!%s\n%simport runpy\nrunpy.run_path(%r, run_name='__main__')\n"
                      % (python, bootstrap, engram_pack.__file__))
    script.chmod(0o755)
    started_jobs = []

    def start(max_mib_s=1.0, time_limit=60, fail=False):
        progress = str(tmp_path / "progress.json")
        args = tmp_path / "args"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
            "checkpoint": ckpt if not fail else str(tmp_path / "nowhere"), "dest": str(dest), "layer": 1,
            "rank": 1, "tp_size": 3, "max_mib_s": max_mib_s, "progress_file": progress, "run_id": "run-1"}}))
        out = subprocess.run([sys.executable, "-m", "ansible.modules.async_wrapper", "j1", str(time_limit), str(script), str(args)],
                             check=True, text=True, stdout=subprocess.PIPE, env=dict(os.environ), cwd=str(tmp_path)).stdout
        started = json.loads(out)
        job = {"results_file": started["results_file"], "progress": progress, "dest": str(dest), "ckpt": ckpt}
        started_jobs.append(job)
        return job

    yield start
    for job in started_jobs:  # a packer the test did not end (or a failed test left running)
        record = pack_progress.read_progress(job["progress"])
        if record and process_wait.pid_alive(record["pid"], record["pid_start"]):
            os.kill(record["pid"], signal.SIGKILL)


def _until_finished(job, rounds=200, delay=0.05, stop_when=None, time_limit=60):
    """The role's wait: one follow_pack per round until it says finished. Returns (rounds, last)."""
    for count in range(1, rounds + 1):
        out = fw.follow_pack(job["results_file"], job["progress"], 1, 1, run_id="run-1", host_label="spark2",
                             time_limit=time_limit)
        if out["finished"] or (stop_when and stop_when(out)):
            return count, out
        time.sleep(delay)
    raise AssertionError("not finished after %d rounds: %s" % (rounds, out))


def _packing(out):
    return out["state"] == "packing" and out["percent"] > 10


def _files(dest):
    return sorted(n for n in os.listdir(dest) if n != ".engram-pack.lock")


def test_wrapper_finished(async_pack):
    job = async_pack(max_mib_s=2.0)
    count, out = _until_finished(job)
    assert out["state"] == "done" and out["failed"] is False and count > 3, out
    assert out["shard_path"].endswith(shard_name(1, 1, 3)) and out["bytes"] == 4096 + 4000 * 264
    with open(out["shard_path"], "rb") as handle:
        assert handle.read() == ckpt_factory.expected_shard(job["ckpt"], 1, 1, 3)


def test_wrapper_packer_error(async_pack):
    job = async_pack(fail=True)
    _, out = _until_finished(job)
    assert out["state"] == "failed" and "checkpoint index not found" in out["msg"]
    assert out["msg"].startswith("spark2 (rank 1) layer 1: the packer failed: ")


@pytest.mark.parametrize("how", ["term", "kill_module", "kill_group"])
def test_wrapper_packer_stopped_or_killed(async_pack, how):
    job = async_pack(max_mib_s=1.0)
    _, running = _until_finished(job, stop_when=_packing)
    assert running["finished"] is False
    pid = running["pid"]
    if how == "term":
        os.kill(pid, signal.SIGTERM)
    elif how == "kill_module":
        os.kill(pid, signal.SIGKILL)
    else:
        # The module and the wrapper process that runs it (its parent), as a SIGKILL to the whole job
        # does: nothing is left to write the results file.
        with open("/proc/%d/stat" % pid) as handle:
            wrapper = int(handle.read().rsplit(")", 1)[1].split()[1])
        os.kill(wrapper, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    count, out = _until_finished(job)
    assert count <= 100 and out["finished"] is True and out["failed"] is True  # 5 s at most, not the time limit
    assert out["msg"].startswith("spark2 (rank 1) layer 1: ")
    if how == "term":
        assert out["state"] == "failed" and "was stopped by SIGTERM at " in out["msg"]
        assert "no .partial is left and no final-named shard was written" in out["msg"]
    else:
        # Killed alone, the wrapper reports a failure of its own a moment later (a round may come
        # first); killed with it, nothing ever does: the pid decides in both cases.
        assert out["state"] == "killed" and "spark2 (rank 1) layer 1: the packer (pid %d) is gone" % pid in out["msg"]
        assert out["partial_removed"] is True and "no final-named shard exists for this layer" in out["msg"]
        time.sleep(1.5)
        assert fw.read_async_job(job["results_file"])[0] == ("finished" if how == "kill_module" else "running")
    assert _files(job["dest"]) == []
    # The rerun takes the lock at once and packs the layer whole.
    result = packer.pack_layer(job["ckpt"], job["dest"], 1, 1, 3)
    assert result["state_before"] == "missing"
    with open(result["path"], "rb") as handle:
        assert handle.read() == ckpt_factory.expected_shard(job["ckpt"], 1, 1, 3)


def test_wrapper_time_limit(async_pack):
    """The wrapper kills the job at its limit; when it misses the module (it kills a process group
    the module may not have joined yet), the wait stops the packer itself. Either way: timed out,
    nothing left, nothing running."""
    job = async_pack(max_mib_s=0.2, time_limit=3)  # a 5 s pack
    count, out = _until_finished(job, rounds=400, time_limit=3)
    assert out["state"] == "timed_out" and out["failed"] is True, out
    assert ("killed at its async time limit" in out["msg"] or "Stopped it with SIGTERM" in out["msg"]), out["msg"]
    assert _files(job["dest"]) == [] and not process_wait.pid_alive(out["pid"])


def test_packer_running_past_its_limit_is_stopped(tmp_path, dest):
    """A live packer (a real process) a minute past its limit is sent SIGTERM; it unwinds itself."""
    big = ckpt_factory.make_checkpoint(str(tmp_path / "big"), rows={1: 3 * 6000, 14: 30})["dir"]
    progress = str(tmp_path / "progress.json")
    python, bootstrap = ckpt_factory.python_with_module_utils()
    script = bootstrap + (
        "import sys\nfrom ansible.module_utils.engram import packer\n"
        "with packer.stop_signals_unwind():\n"
        "    packer.pack_layer(sys.argv[1], sys.argv[2], 1, 1, 3, progress_path=sys.argv[3], max_mib_s=0.5, run_id='run-1')\n")
    child = subprocess.Popen([python, "-c", script, big, dest, progress], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            record = pack_progress.read_progress(progress)
            if record and record["state"] == "packing" and record["percent"] > 5:
                break
            time.sleep(0.05)
        out = _follow(_job(tmp_path, RUNNING_JOB), progress, time_limit=10, now=time.time() + 100)
        assert out["state"] == "timed_out" and out["failed"] is True and out["changed"] is True
        assert "pid %d" % child.pid in out["msg"] and "Stopped it with SIGTERM" in out["msg"]
        assert "was stopped by SIGTERM at " in out["msg"]  # the packer's own last message
        assert child.wait(timeout=10) != 0
        assert sorted(os.listdir(dest)) == [".engram-pack.lock"]
    finally:
        child.kill()
        child.wait()
