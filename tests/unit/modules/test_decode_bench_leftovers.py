"""What an interrupted experiment run leaves on the load-generating worker: a benchmark still running as an async
job without its controller (module_utils/bench/follow.leftovers, the decode_bench_leftovers module), stopped
by the rollback, with the rounds it finished kept in the interrupted run's record (experiment_record)."""
import json
import os
import time

import decode_bench_leftovers
from modrun import run_module
from ansible.module_utils.base import process_wait
from ansible.module_utils.bench import follow
from ansible.module_utils.bench import progress as bp
from ansible.module_utils.experiment import record as rec_md
from test_decode_bench import engine, prompt_files  # noqa: F401 (fixtures)
from test_decode_bench_wait import async_bench  # noqa: F401 (fixture)

RUN = "20261204T140905Z-stage_c_fence"


def _record(directory, name, run_id, pid, pid_start, state="running", rounds=()):
    record = {"version": 1, "run_id": run_id, "label": run_id.rsplit("-", 1)[-1], "host": "spark2", "pid": pid,
              "pid_start": pid_start, "state": state, "started": 1796393374.0, "updated": 1796393705.0,
              "plan": [{"workload": "code", "concurrency": 1, "rounds": 5, "warmup_rounds": 1}],
              "units_done": 0, "units_total": 48, "current": None, "rounds": list(rounds)}
    path = directory / name
    path.write_text(json.dumps(record))
    return str(path)


def _until(predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_benchmark_left_running_is_stopped_and_its_finished_rounds_kept(tmp_path, async_bench, engine):  # noqa: F811
    engine.delay = 0.2       # eight requests a round: a few seconds per round
    work = tmp_path / "bench"
    work.mkdir()
    progress = str(work / ("%s-baseline.progress.json" % RUN))
    async_bench(progress_file=progress, run_id=RUN + "-baseline")
    assert _until(lambda: len((bp.read_progress(progress) or {}).get("rounds") or []) >= 2), "two rounds finished"
    record = bp.read_progress(progress)
    pid, start = record["pid"], record["pid_start"]
    try:
        # check mode: reported, nothing stopped
        check = run_module(decode_bench_leftovers.main, {"directory": str(work), "run": RUN, "host_label": "spark2"},
                           check_mode=True)
        assert check["changed"] is True and process_wait.pid_alive(pid, start)
        (entry,) = check["benchmarks"]
        assert (entry["label"], entry["running"], entry["stopped"]) == ("baseline", True, False)
        assert check["lines"][0].startswith("spark2 benchmark baseline is still running (pid %d): it would be "
                                            "stopped with SIGTERM; " % pid)
        # the real run stops it and keeps every round it had finished
        out = run_module(decode_bench_leftovers.main, {"directory": str(work), "run": RUN, "host_label": "spark2"})
        assert out["changed"] is True and not process_wait.pid_alive(pid, start)
        (entry,) = out["benchmarks"]
        assert entry["running"] and entry["stopped"] and entry["plan_rounds"] == 6
        kinds = [(r["kind"], r["number"]) for r in entry["rounds"]]
        assert kinds[:2] == [("warmup", 1), ("measured", 1)] and all(r["aggregate_tok_s"] > 0 for r in entry["rounds"])
        measured = len(entry["rounds"]) - 1
        assert out["lines"][0].startswith("spark2 benchmark baseline was still running (pid %d): stopped with SIGTERM; "
                                          "%d of 6 rounds finished, %d measured repetition(s) kept in the record: "
                                          "prose C1 #1 " % (pid, len(entry["rounds"]), measured))
        # a second rollback finds it ended and changes nothing
        again = run_module(decode_bench_leftovers.main, {"directory": str(work), "run": RUN, "host_label": "spark2"})
        assert again["changed"] is False and not again["benchmarks"][0]["running"]
    finally:
        if process_wait.pid_alive(pid, start):
            os.kill(pid, 9)


def test_other_runs_planted_names_and_recycled_pids_are_left_alone(tmp_path):
    me, my_start = os.getpid(), process_wait.process_start_ticks(os.getpid())
    # a record of another run in the same directory, one named like this run's but carrying another run id
    _record(tmp_path, "20261204T000000Z-stage_d_wo_a-baseline.progress.json", "20261204T000000Z-stage_d_wo_a-baseline",
            me, my_start)
    _record(tmp_path, "%s-w8.progress.json" % RUN, "someone-else-w8", me, my_start)
    # a symlink at a record's name (to this process's own live record) is never followed
    target = _record(tmp_path, "elsewhere.json", RUN + "-prefetch", me, my_start)
    os.symlink(target, str(tmp_path / ("%s-prefetch.progress.json" % RUN)))
    # this run's record whose pid is now another process (this test's own, started at another time)
    _record(tmp_path, "%s-baseline.progress.json" % RUN, RUN + "-baseline", me, my_start + 1,
            rounds=[{"workload": "code", "concurrency": 1, "kind": "measured", "number": 1, "of": 5,
                     "aggregate_tok_s": 25.86, "per_stream_tok_s": 25.86, "wall_s": 79.2, "failed": False}])
    out = follow.leftovers(str(tmp_path), RUN)
    assert [(e["label"], e["running"], e["stopped"]) for e in out] == [("baseline", False, False)]
    assert follow.leftover_lines(out, "spark2") == [
        "spark2 benchmark baseline had died without finishing (its record still says running); 1 of 6 rounds "
        "finished, 1 measured repetition(s) kept in the record: code C1 #1 25.9 tok/s"]
    assert follow.leftovers(str(tmp_path / "missing"), RUN) == []


def test_the_module_refuses_a_run_id_that_is_a_path(tmp_path):
    out = run_module(decode_bench_leftovers.main, {"directory": str(tmp_path), "run": "../x"})
    assert out["failed"] and out["msg"] == "run '../x' is not an experiment run id"


def test_the_interrupted_record_lists_the_cut_off_benchmark_s_repetitions_unjudged():
    rounds = [{"workload": "code", "concurrency": 1, "kind": "warmup", "number": 1, "of": 1, "aggregate_tok_s": 25.9,
               "per_stream_tok_s": 25.9},
              {"workload": "code", "concurrency": 1, "kind": "measured", "number": 1, "of": 5, "aggregate_tok_s": 25.86,
               "per_stream_tok_s": 25.86}]
    record = {"definition": {"name": "stage_c_fence", "stage": "C", "description": "Fence.", "arms": []},
              "verdicts": [], "conditions": {},
              "interrupted": {"condition": "baseline", "step": "benchmark", "measured": [],
                              "unfinished_benchmarks": [{"label": "baseline", "state": "running", "stopped": True,
                                                         "rounds": rounds, "plan_rounds": 24}]}}
    md = rec_md.markdown(record)
    line = ("Benchmark **baseline** was cut off after 2 of 24 rounds (running, stopped by the rollback); its measured "
            "repetitions, kept here and not judged: code C1 repetition 1 of 5: 25.9 tok/s (25.9 per stream).")
    assert line in md and md.index("**Interrupted**") < md.index(line) < md.index("## Verdicts")


def test_a_benchmark_of_another_user_is_named_not_forced(tmp_path, monkeypatch):
    me, my_start = os.getpid(), process_wait.process_start_ticks(os.getpid())
    _record(tmp_path, "%s-baseline.progress.json" % RUN, RUN + "-baseline", me, my_start)

    def denied(pid, sig):
        raise PermissionError(1, "Operation not permitted")
    from ansible.module_utils.engram import follow as engram_follow
    monkeypatch.setattr(engram_follow.os, "kill", denied)
    (entry,) = follow.leftovers(str(tmp_path), RUN)
    assert entry["running"] and not entry["stopped"]
    assert follow.leftover_lines([entry], "spark2")[0].startswith(
        "spark2 benchmark baseline is still running (pid %d) and did not stop on SIGTERM: stop it with kill -KILL %d"
        % (me, me))


def test_a_record_broken_on_disk_counts_what_it_can_and_never_raises(tmp_path):
    """A plan entry or round that is not what the benchmark writes (a half-written or edited record) counts for
    nothing: the rollback still lists the record and its good rounds instead of failing on it."""
    me = os.getpid()
    path = _record(tmp_path, "%s-baseline.progress.json" % RUN, RUN + "-baseline", me,
                   process_wait.process_start_ticks(me) + 1, state="failed",
                   rounds=[{"workload": "code", "concurrency": 1, "kind": "measured", "number": 1, "of": 5,
                            "aggregate_tok_s": 25.86, "per_stream_tok_s": 25.86, "wall_s": 79.2, "failed": True},
                           "garbage"])
    record = json.loads(open(path).read())
    record["plan"] += ["not an entry", {"workload": "prose", "concurrency": 2, "rounds": None}]
    open(path, "w").write(json.dumps(record))
    (entry,) = follow.leftovers(str(tmp_path), RUN)
    # 5 repetitions + 1 warm-up of the good entry, nothing of the broken ones, one extra for the failed repetition
    assert entry["plan_rounds"] == 7 and bp.planned_rounds(record) == 7
    assert [r["number"] for r in entry["rounds"]] == [1] and not entry["finished"]
    assert bp.figures(record, record["updated"])[2:] == (2, 7)
