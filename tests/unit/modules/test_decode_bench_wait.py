"""Following a background decode benchmark: the progress record (module_utils/bench/progress), one
round of the wait (decode_bench_follow, the decode_bench_wait module through its entry point), the action
plugin that shows each line once, and the real thing: decode_bench under ansible-core's async_wrapper
against a fake endpoint, followed to its end, and killed mid-run."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from unittest import mock

import pytest

import ckpt_factory
import decode_bench
import decode_bench_wait
from modrun import run_module
from ansible.module_utils.base import process_wait
from ansible.module_utils.bench import decode as db
from ansible.module_utils.bench import inputs
from ansible.module_utils.bench import follow
from ansible.module_utils.bench import progress as bp
from test_decode_bench import KEY, engine, prompt_files  # noqa: F401 (fixtures)

ME = os.getpid()
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "action_plugins")
PLAN = [{"workload": "prose", "concurrency": 1, "prompts": 8, "warmup_rounds": 1, "rounds": 5,
         "requests_per_round": 8, "requests_total": 48}]


class Clock(object):
    def __init__(self, start=1764670800.0):  # 2025-12-02 10:20:00 UTC
        self.now = start

    def __call__(self):
        return self.now


def _progress(tmp_path, clock, plan=PLAN, label="baseline"):
    path = str(tmp_path / "progress.json")
    p = bp.BenchProgress(path, plan, run_id="run-1", label=label, host="spark2", clock=clock)
    p.start()
    return p, path


def _round(rate=17.0, failed=False, wall=120.0):
    return {"aggregate_tok_s": rate, "per_stream_tok_s": rate, "wall_s": wall, "failed": failed}


# --------------------------------------------------------------------------- the record and its lines

def test_a_line_per_finished_repetition_with_rate_elapsed_and_eta(tmp_path):
    clock = Clock()
    p, path = _progress(tmp_path, clock)
    for index in range(3):                          # the warm-up, then repetitions 1 and 2
        p.round_started("prose", 1, index, 1, 5, 8)
        clock.now += 120
        p.round_done(_round(16.94))
    record = bp.read_progress(path, "run-1")
    lines = bp.round_lines(record, "spark2")
    assert lines[0] == ("10:22:00 UTC spark2 benchmark baseline: prose C1 warm-up 1 of 1 done, 16.9 tok/s "
                        "(16.9 per stream) in 120 s; elapsed 2 min 00 s, ETA 10 min 00 s")
    # 3 of 6 rounds in 6 minutes: 6 minutes left
    assert lines[2] == ("10:26:00 UTC spark2 benchmark baseline: prose C1 repetition 2 of 5 done, 16.9 tok/s "
                        "(16.9 per stream) in 120 s; elapsed 6 min 00 s, ETA 6 min 00 s")


def test_status_line_counts_the_running_repetition_s_requests(tmp_path):
    clock = Clock()
    p, path = _progress(tmp_path, clock)
    p.round_started("prose", 1, 0, 1, 5, 8)
    clock.now += 120
    p.round_done(_round())
    p.round_started("prose", 1, 1, 1, 5, 8)
    for _ in range(4):
        clock.now += 15
        p.request_done()
    clock.now += 1  # past the write interval: the last request is on disk
    p.request_done()
    record = bp.read_progress(path)
    assert bp.status_line(record, clock.now, "spark2") == (
        "10:23:01 UTC spark2 benchmark baseline: prose C1 repetition 1 of 5 running (5 of 8 requests); "
        "1 of 6 rounds done; elapsed 3 min 01 s, ETA 8 min 07 s")  # 13 of 48 units in 181 s


def test_status_line_between_rounds_names_the_round_it_left(tmp_path):
    clock = Clock()
    p, path = _progress(tmp_path, clock)
    assert "baseline: starting its first round; 0 of 6 rounds done" in bp.status_line(p.record, clock.now)
    p.round_started("prose", 1, 0, 1, 5, 8)
    clock.now += 120
    p.round_done(_round())
    # a benchmark killed here is found by where it stopped, not only "between rounds"
    assert bp.status_line(bp.read_progress(path), clock.now, "spark2") == (
        "10:22:00 UTC spark2 benchmark baseline: between rounds, after prose C1 warm-up 1 of 1; "
        "1 of 6 rounds done; elapsed 2 min 00 s, ETA 10 min 00 s")


def test_requests_are_written_at_most_every_half_second(tmp_path):
    clock = Clock()
    p, path = _progress(tmp_path, clock)
    p.round_started("prose", 4, 0, 1, 5, 8)
    for _ in range(10):                               # ten requests within 0.1 s: one write at most
        clock.now += 0.01
        p.request_done()
    assert bp.read_progress(path)["current"]["requests_done"] == 0
    clock.now += 0.5
    p.request_done()
    assert bp.read_progress(path)["current"]["requests_done"] == 11


def test_a_failed_repetition_says_so_and_adds_its_replacement_round(tmp_path):
    clock = Clock()
    p, path = _progress(tmp_path, clock, label=None)
    p.round_started("prose", 1, 1, 1, 5, 8)
    clock.now += 60
    p.round_done(_round(failed=True))
    record = bp.read_progress(path)
    assert record["units_total"] == 56
    line = bp.round_lines(record)[0]
    assert line.startswith("10:21:00 UTC spark2 benchmark: prose C1 repetition 1 of 5 FAILED (an error event")
    assert bp.figures(record, clock.now)[2:] == (1, 7)


def test_records_of_another_run_or_shape_are_not_read(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"version": 1, "run_id": "old", "pid": 1, "state": "running"}))
    assert bp.read_progress(str(path), "run-1") is None
    path.write_text(json.dumps({"version": 1, "run_id": "run-1", "pid": True, "state": "running"}))
    assert bp.read_progress(str(path), "run-1") is None
    path.write_text("{half")
    assert bp.read_progress(str(path)) is None


def test_run_benchmark_tells_the_progress_every_round_and_request(engine, prompt_files, tmp_path):  # noqa: F811
    workloads = {"prose": inputs.load_prompts(prompt_files["prose"])}
    settings = inputs.validate_settings({"concurrency": [1, 2], "repetitions": 5, "warmups": 1, "timeout": 5})
    path = str(tmp_path / "progress.json")
    p = bp.BenchProgress(path, db.plan(workloads, settings), run_id="r", label="w8", host="spark2")
    p.start()
    db.run_benchmark(engine.url, workloads, settings, api_key=KEY, host_label="spark2", progress=p)
    record = bp.read_progress(path, "r")
    assert record["state"] == "done"
    assert [(r["concurrency"], r["kind"], r["number"]) for r in record["rounds"]] == (
        [(1, "warmup", 1)] + [(1, "measured", n) for n in range(1, 6)]
        + [(2, "warmup", 1)] + [(2, "measured", n) for n in range(1, 6)])
    assert record["units_done"] == record["units_total"] == 24  # 12 rounds of 2 requests a stream
    assert all(r["aggregate_tok_s"] > 0 for r in record["rounds"])


# --------------------------------------------------------------------------- one round of the wait

RUNNING_JOB = {"started": True, "finished": False, "ansible_job_id": "j1.42"}


def _job(tmp_path, data, age=0.0):
    path = tmp_path / "job"
    path.write_text(json.dumps(data))
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return str(path)


def _record(tmp_path, alive=True, **fields):
    """A progress record with this process as the benchmark (alive), or a gone one (same pid, other start)."""
    record = {"version": 1, "run_id": "run-1", "label": "baseline", "host": "spark2", "pid": ME,
              "pid_start": process_wait.process_start_ticks(ME) + (0 if alive else 1), "state": "running",
              "started": time.time() - 30, "updated": time.time(), "plan": PLAN, "units_done": 8,
              "units_total": 48, "rounds": [dict(_round(), workload="prose", concurrency=1, kind="warmup",
                                                 number=1, of=1, at=time.time() - 5, elapsed_s=25, eta_s=125)],
              "current": {"workload": "prose", "concurrency": 1, "kind": "measured", "number": 1, "of": 5,
                          "requests_done": 2, "requests": 8, "depth": 8}, "message": None}
    record.update(fields)
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(record))
    return str(path)


def _follow(job, progress, **kw):
    return follow.follow_bench(job, progress, run_id="run-1", host_label="spark2", **kw)


def test_running_reports_where_it_is_and_every_finished_round(tmp_path):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path))
    assert (out["finished"], out["failed"], out["state"]) == (False, False, "running")
    assert "spark2 benchmark baseline: prose C1 repetition 1 of 5 running (2 of 8 requests); 1 of 6 rounds" in out["msg"]
    assert len(out["lines"]) == 1 and "warm-up 1 of 1 done" in out["lines"][0]


def test_done_when_the_job_reports(tmp_path):
    out = _follow(_job(tmp_path, {"changed": True, "requests_sent": 48, "results": []}),
                  _record(tmp_path, state="done"))
    assert (out["finished"], out["failed"], out["state"]) == (True, False, "done")
    assert out["msg"].startswith("spark2: benchmark done: 48 requests in ")


def test_the_benchmark_s_own_failure_ends_the_wait_with_its_message(tmp_path):
    out = _follow(_job(tmp_path, {"failed": True, "msg": "spark2: http://spark1:8888/v1: HTTP 401"}),
                  _record(tmp_path, state="failed"))
    assert (out["finished"], out["failed"], out["msg"]) == (True, True, "spark2: http://spark1:8888/v1: HTTP 401")


def test_a_killed_benchmark_ends_the_wait_at_once_whatever_the_job_file_says(tmp_path):
    out = _follow(_job(tmp_path, RUNNING_JOB), _record(tmp_path, alive=False))
    assert (out["finished"], out["failed"], out["state"]) == (True, True, "killed")
    assert "is gone without a result" in out["msg"] and "repetition 1 of 5 running" in out["msg"]


def test_a_finished_record_gives_the_wrapper_a_moment_then_says_it_never_reported(tmp_path):
    job = _job(tmp_path, RUNNING_JOB)
    assert _follow(job, _record(tmp_path, alive=False, state="done"))["state"] == "running"
    late = _follow(job, _record(tmp_path, alive=False, state="done", updated=time.time() - 60))
    assert (late["finished"], late["failed"]) == (True, True)
    assert "never reported" in late["msg"]


def test_wrapper_timeout_and_lost_jobs(tmp_path):
    timed = _follow(_job(tmp_path, {"failed": True, "msg": "Timeout exceeded", "child_pid": 1}), _record(tmp_path),
                    time_limit=600)
    assert (timed["state"], timed["failed"]) == ("timed_out", True) and "(600 s)" in timed["msg"]
    missing = str(tmp_path / "progress-none.json")
    assert _follow(_job(tmp_path, RUNNING_JOB), missing)["state"] == "starting"
    assert _follow(_job(tmp_path, RUNNING_JOB, age=300), missing)["state"] == "lost"
    assert _follow(str(tmp_path / "no-job"), missing)["state"] == "lost"


def test_past_its_time_limit_it_is_stopped(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        progress = _record(tmp_path, pid=child.pid, pid_start=process_wait.process_start_ticks(child.pid),
                           started=time.time() - 700)
        out = _follow(_job(tmp_path, RUNNING_JOB), progress, time_limit=600)
        assert (out["state"], out["failed"], out["changed"]) == ("timed_out", True, True)
        assert "stopped it with SIGTERM" in out["msg"]
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        child.kill()


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_entry_point(tmp_path, check_mode):
    args = {"results_file": _job(tmp_path, RUNNING_JOB), "progress_file": _record(tmp_path), "run_id": "run-1",
            "host_label": "spark2"}
    out = run_module(decode_bench_wait.main, args, check_mode=check_mode)
    assert not out.get("failed") and out["state"] == "running" and len(out["lines"]) == 1
    dead = run_module(decode_bench_wait.main, dict(args, progress_file=_record(tmp_path, alive=False)))
    assert dead["failed"] and dead["state"] == "killed"


def test_decode_bench_refuses_a_progress_file_it_cannot_write(tmp_path, engine, prompt_files):  # noqa: F811
    out = run_module(decode_bench.main, {"url": engine.url, "api_key": KEY, "prompt_files": prompt_files,
                                         "concurrency": [1], "progress_file": str(tmp_path / "no" / "p.json"),
                                         "host_label": "spark2"})
    assert out["failed"] and out["msg"].startswith("spark2: cannot write the progress file %s" % (tmp_path / "no"))
    assert engine.bodies == [], "nothing sent"


# --------------------------------------------------------------------------- the action plugin

def _plugin(register="bench_wait", args=None):
    """The action plugin as ansible-core loads it: from its file (its links share a module name with the
    library's modules, so it is never put on sys.path)."""
    spec = importlib.util.spec_from_file_location("follow_rounds_plugin", os.path.join(PLUGINS, "follow_rounds.py"))
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    ActionModule = plugin.ActionModule
    task = SimpleNamespace(action="decode_bench_wait", args=args or {"results_file": "/j"}, register=register,
                           async_val=0, check_mode=False, diff=False, no_log=False, environment=None,
                           delegate_to=None, become=False)
    action = ActionModule.__new__(ActionModule)
    action._task = task
    action._supports_check_mode, action._supports_async = True, False
    return action


def _round_of(action, module_result, task_vars):
    with mock.patch("ansible.plugins.action.ActionBase.run", return_value={}), \
            mock.patch.object(type(action), "_execute_module", return_value=dict(module_result)):
        return action.run(task_vars=task_vars)


def test_the_plugin_shows_every_round_and_each_line_once():
    action = _plugin()
    first = _round_of(action, {"lines": ["a", "b"], "msg": "now 1", "finished": False}, {})
    assert first["lines"] == ["a", "b"] and first["_ansible_verbose_always"] is True
    second = _round_of(_plugin(), {"lines": ["a", "b", "c"], "msg": "now 2"}, {"bench_wait": first})
    assert second["lines"] == ["c"] and second["msg"] == "now 2"
    # the same register from another job (other arguments): every line is new
    other = _round_of(_plugin(args={"results_file": "/k"}), {"lines": ["x"], "msg": "m"}, {"bench_wait": second})
    assert other["lines"] == ["x"]
    # no lines: shown as any task's (the round that returns what was waited for)
    final = _round_of(_plugin(), {"traces": [1], "msg": "found"}, {"bench_wait": second})
    assert "_ansible_verbose_always" not in final and "lines_seen" not in final


def test_the_wait_modules_are_links_to_the_one_plugin():
    for name in ("decode_bench_wait.py", "engine_profile_trace.py"):
        assert os.readlink(os.path.join(PLUGINS, name)) == "follow_rounds.py"
    library = os.path.join(os.path.dirname(__file__), "..", "..", "..", "library")
    assert os.path.exists(os.path.join(library, "decode_bench_wait.py"))


# --------------------------------------------------------------------------- the real async wrapper

@pytest.fixture
def async_bench(tmp_path, monkeypatch, engine, prompt_files):  # noqa: F811
    """decode_bench started under ansible-core's async_wrapper, as ``async:``/``poll: 0`` does."""
    monkeypatch.setenv("ANSIBLE_ASYNC_DIR", str(tmp_path / "async"))
    python, bootstrap = ckpt_factory.python_with_module_utils()
    script = tmp_path / "decode_bench_module.py"
    script.write_text("#!%s\n%simport runpy\nrunpy.run_path(%r, run_name='__main__')\n"
                      % (python, bootstrap, decode_bench.__file__))
    script.chmod(0o755)
    jobs = []

    def start(**extra):
        progress = str(tmp_path / "progress.json")
        args = tmp_path / "args"
        module_args = {"url": engine.url, "api_key": KEY, "prompt_files": {"prose": prompt_files["prose"]},
                       "concurrency": [1], "repetitions": 5, "warmups": 1, "timeout": 5, "progress_file": progress,
                       "run_id": "run-1", "label": "baseline", "host_label": "spark2"}
        module_args.update(extra)
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
        out = subprocess.run([sys.executable, "-m", "ansible.modules.async_wrapper", "j%d" % len(jobs), "60",
                              str(script), str(args)], check=True, text=True, stdout=subprocess.PIPE,
                             env=dict(os.environ), cwd=str(tmp_path)).stdout
        job = {"results_file": json.loads(out)["results_file"], "progress": progress}
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        record = bp.read_progress(job["progress"])
        if record and process_wait.pid_alive(record["pid"], record["pid_start"]):
            os.kill(record["pid"], signal.SIGKILL)


def _wait(job, stop_when=None, rounds=400):
    seen, last = [], None
    for _ in range(rounds):
        last = follow.follow_bench(job["results_file"], job["progress"], run_id="run-1", host_label="spark2",
                                   time_limit=60)
        seen.append(last)
        if last["finished"] or (stop_when and stop_when(last)):
            break
        time.sleep(0.05)
    return seen, last


def test_a_real_async_benchmark_is_followed_round_by_round_to_its_end(async_bench, engine):  # noqa: F811
    engine.delay = 0.05
    job = async_bench()
    seen, last = _wait(job)
    assert (last["state"], last["failed"]) == ("done", False), last
    assert any(s["state"] == "running" for s in seen), "followed while it ran"
    assert len(last["lines"]) == 6 and "repetition 5 of 5 done" in last["lines"][-1]
    # what async_status then returns: the module's own result, figures included
    with open(job["results_file"]) as handle:
        assert json.load(handle)["summary"]["prose"]["c1"]["rounds"] == 5


def test_a_benchmark_killed_mid_run_ends_the_wait_in_the_next_round(async_bench, engine):  # noqa: F811
    engine.delay = 0.2
    job = async_bench()
    _, running = _wait(job, stop_when=lambda out: len(out["lines"]) >= 1)
    assert running["state"] == "running"
    os.kill(bp.read_progress(job["progress"])["pid"], signal.SIGKILL)
    seen, out = _wait(job, rounds=40)     # the kernel takes a moment to end it
    assert (out["finished"], out["failed"], out["state"]) == (True, True, "killed"), out
    # its last progress is named: the round running, or the round it had just finished
    assert len(seen) < 40 and re.search(r"Last: .* prose C1 (warm-up|repetition) \d of \d", out["msg"]), out["msg"]


def test_the_trace_wait_says_what_it_waits_for_until_the_trace_is_there():
    from ansible.module_utils.engine_log import profile_trace
    now = 1764670835.0
    waiting = profile_trace.wait_report({"traces": [], "kernels": [], "unreadable": ["/tmp/x: truncated"]},
                                        "spark2", 1, "dsv41-worker", "/tmp", now - 35, now=now)
    assert waiting == {"lines": [], "msg": "10:20:35 UTC spark2 rank 1: no trace in dsv41-worker:/tmp since the "
                                           "profiled window began 35 s ago (written asynchronously after "
                                           "/stop_profile); 1 still being written"}
    found = profile_trace.wait_report({"traces": [{}], "kernels": ["a", "b"], "unreadable": []}, "spark2", 1,
                                      "dsv41-worker", "/tmp", now - 35, now=now)
    assert found == {"msg": "10:20:35 UTC spark2 rank 1: 1 trace(s), 2 kernel names"}, "shown as any task's"


def test_status_once_every_round_is_done():
    clock = Clock()
    p = bp.BenchProgress(None, PLAN[:1], label="w8", host="spark2", clock=clock)
    for index in range(6):
        p.round_started("prose", 1, index, 1, 5, 8)
        p.round_done(_round())
    assert "w8: every round done, writing the result; 6 of 6 rounds done" in bp.status_line(p.record, clock.now)


def test_a_round_with_a_wait_reports_after_it_or_as_soon_as_the_benchmark_ends(tmp_path, async_bench, engine):  # noqa: F811
    job, progress = _job(tmp_path, RUNNING_JOB), _record(tmp_path)
    t0 = time.monotonic()
    assert _follow(job, progress, wait=0.5)["state"] == "running" and time.monotonic() - t0 >= 0.5
    engine.delay = 0.05
    real = async_bench()
    t0 = time.monotonic()
    out = follow.follow_bench(real["results_file"], real["progress"], run_id="run-1", host_label="spark2", wait=30)
    assert out["state"] == "done" and time.monotonic() - t0 < 20, "one round, ended with the benchmark"
    assert len(out["lines"]) == 6
