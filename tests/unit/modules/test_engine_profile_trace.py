"""engine_profile_trace and module_utils/engine_log/profile_trace: the kernels of a profiled window, per rank.

The listing script runs for real (the fake ``docker exec`` runs it with this Python on a scratch
directory laid out as the container's profiler directory would be)."""
import gzip
import json
import os
import subprocess
import sys

import pytest

from ansible.module_utils.engine_log import profile_trace as pt
from modrun import run_module

import engine_profile_trace as mod


def trace(path, names, cat="kernel", mtime=None, events=None):
    events = list(events or []) + [{"name": n, "ph": "X", "cat": cat, "ts": i, "dur": 1} for i, n in enumerate(names)]
    events.append({"name": "process_name", "ph": "M", "args": {"name": "python"}})
    data = json.dumps({"traceEvents": events})
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(data)
    else:
        path.write_text(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def docker_exec_here(cmd):
    """``docker exec <container> python3 -c SCRIPT DIR SINCE`` run by this Python, locally."""
    assert cmd[:2] == ["docker", "exec"] and cmd[3:5] == ["python3", "-c"], cmd
    res = subprocess.run([sys.executable, "-c", cmd[5], *cmd[6:]], text=True, capture_output=True)
    return res.returncode, res.stdout, res.stderr


def test_lists_the_window_s_traces_of_every_rank_gzip_included(tmp_path):
    trace(tmp_path / "100-TP-0.trace.json", ["wo_a_bf16_gemv (target)"], mtime=100)  # an earlier window
    trace(tmp_path / "200-TP-0.trace.json", ["wo_a_fp8_gemv_g4 (target)", "wo_a_fp8_gemv_g4 (draft)"], mtime=200)
    trace(tmp_path / "200-TP-1-EP-1.trace.json.gz", ["wo_a_fp8_gemv_g4 (draft)"], mtime=201)
    (tmp_path / "notes.json").write_text("{}")
    out = run_module(mod.main, {"container": "dsv41-head", "directory": str(tmp_path), "since": 150},
                     run_command=docker_exec_here)
    assert not out.get("failed"), out
    assert [(os.path.basename(t["path"]), t["rank"]) for t in out["traces"]] == [
        ("200-TP-0.trace.json", 0), ("200-TP-1-EP-1.trace.json.gz", 1)]
    assert out["kernels"] == ["wo_a_fp8_gemv_g4 (draft)", "wo_a_fp8_gemv_g4 (target)"]
    assert out["changed"] is False and out["unreadable"] == []


def test_rank_filter_and_a_trace_still_being_written(tmp_path):
    trace(tmp_path / "200-TP-0.trace.json", ["a"], mtime=200)
    (tmp_path / "200-TP-2.trace.json").write_text('{"traceEvents": [{"name": "b", "ph"')
    os.utime(tmp_path / "200-TP-2.trace.json", (200, 200))
    out = run_module(mod.main, {"container": "c", "directory": str(tmp_path), "since": 150, "rank": 2},
                     run_command=docker_exec_here, check_mode=True)
    assert out["traces"] == [] and out["kernels"] == []
    assert len(out["unreadable"]) == 1 and out["unreadable"][0].startswith(str(tmp_path / "200-TP-2.trace.json"))


def test_uncategorised_events_count_when_no_kernel_is_marked(tmp_path):
    trace(tmp_path / "5-TP-0.trace.json", ["gemm_x"], cat=None, mtime=5)
    listing = mod.read_traces(docker_exec_here, "docker", "c", str(tmp_path), 0)
    assert listing["kernels"] == ["gemm_x"]


def test_a_missing_directory_and_a_failed_exec_name_the_source(tmp_path):
    out = run_module(mod.main, {"container": "dsv41-worker", "directory": str(tmp_path / "nope"), "since": 0,
                                "host_label": "spark2"}, run_command=docker_exec_here)
    assert out["failed"] and out["msg"].startswith("spark2: docker dsv41-worker:%s: %s: No such file" % (
        tmp_path / "nope", tmp_path / "nope")), out["msg"]
    out = run_module(mod.main, {"container": "gone", "since": 0, "host_label": "spark3"},
                     run_command=lambda cmd: (1, "", "Error: No such container: gone"))
    assert out["failed"] and out["msg"] == ("spark3: docker gone:/tmp: docker exec exited 1: "
                                            "Error: No such container: gone")


@pytest.mark.parametrize("text", ["", "Traceback ...", "[]"])
def test_a_listing_that_is_not_the_script_s_output_is_refused(text):
    with pytest.raises(pt.TraceError, match="^spark1: "):
        pt.parse_listing(text, "spark1")


def test_rank_of_reads_the_file_name():
    assert pt.rank_of("/tmp/1764555000-TP-2.trace.json.gz") == 2
    assert pt.rank_of("/tmp/1764555000.12-TP-1-EP-1.trace.json.gz") == 1
    assert pt.rank_of("/tmp/x.trace.json") is None


def kernel(name, tid, dur):
    return {"name": name, "ph": "X", "cat": "kernel", "ts": 0, "dur": dur, "tid": tid}


def test_exposed_time_counts_only_the_compute_stream(tmp_path):
    # synchronous gather on the compute stream (7): exposed; prefetched on a side stream (8): only the wait
    trace(tmp_path / "1-TP-0.trace.json", [], mtime=10, events=[
        kernel("moe_b12x_dense", 7, 30000), kernel("engram_gather", 7, 1000), kernel("engram_gather", 7, 200)])
    trace(tmp_path / "1-TP-1.trace.json", [], mtime=10, events=[
        kernel("moe_b12x_dense", 7, 30000), kernel("engram_prefetch_wait", 7, 150), kernel("engram_gather", 8, 1000)])
    out0 = run_module(mod.main, {"container": "c", "directory": str(tmp_path), "since": 0, "rank": 0,
                                 "exposed_pattern": "engram"}, run_command=docker_exec_here)
    out1 = run_module(mod.main, {"container": "c", "directory": str(tmp_path), "since": 0, "rank": 1,
                                 "exposed_pattern": "engram"}, run_command=docker_exec_here)
    assert out0["exposed_us"] == 1200.0 and out1["exposed_us"] == 150.0
    assert run_module(mod.main, {"container": "c", "directory": str(tmp_path), "since": 0},
                      run_command=docker_exec_here)["exposed_us"] is None
    bad = run_module(mod.main, {"container": "c", "since": 0, "exposed_pattern": "engram(", "host_label": "spark1"},
                     run_command=docker_exec_here)
    assert bad["failed"] and bad["msg"].startswith("spark1: exposed_pattern is not a regular expression")


def test_step_profile_of_each_rank_names_the_engram_share_of_its_compute_stream(tmp_path):
    # rank 0 gathers on the compute stream (unpacked: 2,500 us); rank 1 prefetched on a side stream (a 150 us wait)
    trace(tmp_path / "1-TP-0.trace.json", [], mtime=10, events=[
        kernel("moe_b12x_dense", 7, 30000), kernel("flash_attn_verify", 7, 8000), kernel("engram_gather", 7, 2500)])
    trace(tmp_path / "1-TP-1.trace.json", [], mtime=10, events=[
        kernel("moe_b12x_dense", 7, 30000), kernel("engram_prefetch_wait", 7, 150), kernel("engram_gather", 8, 1000)])
    args = {"container": "c", "directory": str(tmp_path), "since": 0, "profile_patterns": {"engram": "engram"}}
    p0 = run_module(mod.main, dict(args, rank=0), run_command=docker_exec_here)["step_profile"]
    p1 = run_module(mod.main, dict(args, rank=1), run_command=docker_exec_here)["step_profile"]
    assert p0 == {"traces": 1, "compute_us": 40500.0, "side_us": 0.0, "exposed_us": {"engram": 2500.0},
                  "exposed_share_pct": {"engram": 6.17},
                  "top": [["moe_b12x_dense", 30000.0], ["flash_attn_verify", 8000.0], ["engram_gather", 2500.0]]}
    assert p1["exposed_us"] == {"engram": 150.0} and p1["side_us"] == 1000.0 and p1["compute_us"] == 30150.0
    # two traces of one rank (two windows): averaged; no durations at all: None, never a zero profile
    listing = {"traces": [{"streams": {"7": {"a": 100.0, "engram_x": 100.0}}},
                          {"streams": {"7": {"a": 300.0, "engram_x": 100.0}, "8": {"b": 50.0}}}]}
    prof = pt.step_profile(listing, {"engram": "^engram"}, top=1)
    assert prof["compute_us"] == 300.0 and prof["side_us"] == 25.0 and prof["top"] == [["a", 200.0]]
    assert prof["exposed_share_pct"] == {"engram": 33.33}
    assert pt.step_profile({"traces": [{"streams": {}}]}, {"engram": "engram"}) is None
    bad = run_module(mod.main, dict(args, profile_patterns={"engram": "engram("}, host_label="spark2"),
                     run_command=docker_exec_here)
    assert bad["failed"] and bad["msg"].startswith("spark2: profile_patterns.engram is not a regular expression")


def test_the_benchmark_role_s_profile_filters_keep_every_rank_and_name_a_missing_trace():
    import benchmark_filters as bf
    prof = {"traces": 1, "compute_us": 40500.0, "side_us": 0.0, "exposed_us": {"engram": 2500.0},
            "exposed_share_pct": {"engram": 6.17}, "top": [["moe_b12x_dense", 30000.0], ["engram_gather", 2500.0]]}
    results = [
        {"item": {"item": "spark2"}, "step_profile": prof, "traces": [{"path": "/tmp/1-TP-1.trace.json"}]},
        {"item": {"item": "spark1"}, "step_profile": dict(prof, exposed_share_pct={"engram": 2.5}),
         "traces": [{"path": "/tmp/1-TP-0.trace.json"}]},
        {"item": {"item": "spark3"}, "step_profile": None, "traces": [],
         "msg": "14:41:07 UTC spark3 rank 2: no trace in dsv41-worker:/tmp since the profiled window began 5 min ago"},
        {"item": {"item": "spark4"}, "failed": True, "msg": "spark4: docker exec exited 125: no such container"},
    ]
    hostvars = {"spark1": {"dsv41_rank": 0}, "spark2": {"dsv41_rank": 1}, "spark3": {"dsv41_rank": 2},
                "spark4": {"dsv41_rank": 3}}
    out = bf.dsv41_step_profiles(results, hostvars)
    assert out["spark2"] == {"rank": 1, "profile": prof, "traces": ["/tmp/1-TP-1.trace.json"], "missing": None}
    assert out["spark3"]["profile"] is None and "no trace in dsv41-worker:/tmp" in out["spark3"]["missing"]
    assert out["spark4"]["missing"] == "spark4: docker exec exited 125: no such container"
    lines = bf.dsv41_step_profile_rows(out)
    assert lines[0] == ("spark1 rank 0: compute stream 40500.0 us, side streams 0.0 us; engram 2500.0 us (2.5%); "
                        "longest: moe_b12x_dense 30000, engram_gather 2500")
    assert lines[1].startswith("spark2 rank 1: ") and "(6.17%)" in lines[1]
    assert lines[2].startswith("spark3 rank 2: no step profile (14:41:07 UTC spark3 rank 2: no trace")
    assert lines[3] == "spark4 rank 3: no step profile (spark4: docker exec exited 125: no such container)"
