"""The engine stand-in's streams: logging prefixes, the boot marker, lines only rank 0 prints, the order of both
streams in the json-file log, and the seeded log's lines as the engine writes them.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine_standin import (CHAT, DISAGREE, DOCKER, MAIN, Proc, ROOT, TS, boot_worker, engine_argv, free_port,
                            marker_dict, messages, ns_of, phys, request)


SEED_LOG = ROOT / "lab" / "seed" / "dsv41.log"

SCHED = re.compile(rf"^\[{TS} TP(\d) EP\1\] ")          # scheduler logging prefix

RANK0_ONLY = ("max_total_num_tokens=", "Engine startup timings", DISAGREE, "Decode batch", "sglang is using nccl",
              "DSpark draft proposal")


def test_streams_prefixes_and_dict_marker(lab):
    proc = boot_worker(lab)
    out, err = proc.stream("stdout"), proc.stream("stderr")
    assert out == "", "a stock worker prints nothing with print()"
    lines = phys(err)
    marker = lines[0]
    assert MAIN.match(marker) and marker.split("] ", 1)[1].startswith("server_args={'model_path': ")
    assert 16_800 <= len(marker.encode()) <= 17_400, len(marker)   # the real head's is 17,130 bytes
    args = marker_dict(err)
    assert {k: args[k] for k in ("model_path", "max_total_tokens", "page_size", "nnodes", "node_rank", "tp_size",
                                 "api_key", "speculative_algorithm", "speculative_num_draft_tokens", "ep_size",
                                 "mem_fraction_static", "max_running_requests", "chunked_prefill_size")} == {
        "model_path": "/srv/models/DeepSeek-V4.1-Flash", "max_total_tokens": 750000, "page_size": 256, "nnodes": 3,
        "node_rank": 1, "tp_size": 3, "api_key": None, "speculative_algorithm": "DSPARK",
        "speculative_num_draft_tokens": 4, "ep_size": 3, "mem_fraction_static": 0.95, "max_running_requests": 4,
        "chunked_prefill_size": 1024}
    assert any(isinstance(v, dict) and v for v in args.values()) and any(isinstance(v, list) and v for v in args.values())
    assert None in args.values() and True in args.values()
    assert marker.count("server_args=") == 1 and len([ln for ln in lines if "server_args=" in ln]) == 1
    # every physical stderr line: a logging record, or raw tqdm output (bars and their redraws)
    for ln in lines[1:]:
        assert SCHED.match(ln) and SCHED.match(ln).group(1) == "1" or MAIN.match(ln) \
            or ln.startswith(("Capturing batches", "\rCapturing batches")), repr(ln[:120])
    assert not any(ln.startswith("Ready:") for ln in lines)
    # rows [10,20) of 30 and [11,22) of 33 for rank 1 of 3
    assert ("Exact nvme Engram layer=1 rank=1 rows=[10,20) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) "
            "scales=0.0GiB io_threads=96 packed=False") in messages(err)
    assert "Exact nvme Engram layer=14 rank=1 rows=[11,22) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) " \
           "scales=0.0GiB io_threads=96 packed=False" in messages(err)
    # json-file records: stamped in write order, nanosecond times strictly increasing
    times = [r["time"] for r in proc.records()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", t) for t in times)
    ns = [ns_of(t) for t in times]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)


def test_rank0_only_lines_absent_on_workers(lab):
    for rank in (1, 2):
        err = boot_worker(lab, rank=rank).stream("stderr")
        for needle in RANK0_ONLY:
            assert needle not in err, (rank, needle)
    # a second boot finds caches: still no disagreement line on a worker, but rank 0 has it
    assert DISAGREE not in boot_worker(lab, rank=1).stream("stderr")
    boot_worker(lab, rank=0)
    rank0 = boot_worker(lab, rank=0).stream("stderr")
    for needle in ("max_total_num_tokens=", "Engine startup timings (s): load_weight=", DISAGREE,
                   "sglang is using nccl==2.27.7", "DSpark draft proposal"):
        assert needle in rank0, needle


def test_ssd_offload_mode(lab):
    err = boot_worker(lab, env={"OFFLOAD_MODE": "ssd"}).stream("stderr")
    assert "Exact ssd Engram layer=1 rank=1 rows=[10,20)" in err and "Exact nvme" not in err


def test_streams_keep_their_order_in_the_log(lab):
    """A print() line written between two logging records is stamped between them (docker logs order)."""
    proc = boot_worker(lab, env={"DSV41_AUTOTUNE_KEEP": "1"})
    recs = proc.records()
    idx = lambda needle: next(i for i, r in enumerate(recs) if needle in r["log"])
    armed = idx("[autotune_keep] armed")
    assert recs[armed]["stream"] == "stdout"
    assert idx("Init torch distributed ends") < armed < idx("Load weight begin")
    saved = [i for i, r in enumerate(recs) if "[autotune_keep] tuned and saved" in r["log"]]
    completed = [i for i, r in enumerate(recs) if "FlashInfer autotune completed." in r["log"]]
    assert len(saved) == len(completed) == 2 and all(c < s for c, s in zip(completed, saved))


def _docker_logs_of(proc, tmp: Path, name: str, *flags: str) -> subprocess.CompletedProcess:
    """`docker logs FLAGS NAME` of a container whose json-file log is what this engine run wrote."""
    env = {**os.environ, "LAB_DOCKER_STATE_DIR": str(tmp / f"docker-{name}")}
    subprocess.run([sys.executable, str(DOCKER), "create", "--name", name, "dsv41-sglang:tp3"], env=env, check=True,
                   capture_output=True)
    shutil.copy(proc.log, tmp / f"docker-{name}" / "logs" / f"{name}.log")
    return subprocess.run([sys.executable, str(DOCKER), "logs", *flags, name], env=env, capture_output=True, check=True)


@pytest.mark.parametrize("build", ["new", "old"])
def test_marker_is_two_json_file_records_and_logs_t_stamps_inside_it(lab, build):
    """The marker is over docker's 16 KiB message limit (the real head's: 17,130 bytes): the supervisor keeps it as
    two records, the first 16 KiB without a newline, and `docker logs -t` stamps the second part inside the
    line, as real docker does."""
    proc = boot_worker(lab, rank=0 if build == "old" else 1, env={"LAB_ENGINE_BUILD": build, "API_KEY": "k"})
    recs = proc.records()
    i = next(i for i, r in enumerate(recs) if "server_args=" in r["log"])
    first, second = recs[i], recs[i + 1]
    assert len(first["log"].encode()) == 16384 and not first["log"].endswith("\n")
    assert second["log"].endswith(")\n" if build == "old" else "}\n") and second["stream"] == "stderr"
    assert "server_args=" not in second["log"] and ns_of(second["time"]) > ns_of(first["time"])
    line = first["log"] + second["log"]
    size = len(line.encode()) - 1
    if build == "new":
        assert 16_800 <= size <= 17_400, size
        assert ast.literal_eval(line.split("] server_args=", 1)[1])["node_rank"] == 1
    else:
        assert 16_384 < size <= 17_400, size
        assert line.split("] ", 1)[1].startswith("server_args=ServerArgs(model_path=") and "node_rank=0," in line
    err = _docker_logs_of(proc, lab["tmp"], f"m-{build}", "-t").stderr.decode()
    (stamped,) = [ln for ln in err.split("\n") if "server_args=" in ln]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z "
    assert re.match(stamp + re.escape(first["log"][:40]), stamped)
    inside = re.search(stamp, stamped[40:])
    assert inside and 40 + inside.start() == len(first["log"]) + 31, "the second part's time, inside the line"
    assert stamped[40 + inside.end():] == second["log"][:-1]
    plain = _docker_logs_of(proc, lab["tmp"], f"p-{build}").stderr.decode()
    assert line in plain, "without -t the line comes back whole"


def test_seed_log_lines_are_engine_lines(lab):
    """Every message of the saved report boot (lab/seed/dsv41.log) has the shape of a line the engine prints."""
    def shapes(text):
        out = set()
        for m in messages(text):
            m = re.sub(r"\x1b\[[0-9;]*m", "", m)
            if m.startswith("Capturing batches"):
                m = "Capturing batches"
            elif m.startswith("server_args="):
                m = "server_args=" + m[len("server_args=")]
            m = re.sub(r"[0-9a-f]{16}", "H", m)
            out.add(re.sub(r"\d+(\.\d+)?", "N", m))
        return out

    boot_worker(lab, rank=0)  # caches exist for the next boot: the stock warning
    port = free_port()
    proc = Proc(lab, engine_argv("head", 0, port=port), env={"API_KEY": "k", "LAB_ENGINE_SPEED": "200"})
    try:
        proc.wait_for(f"Ready: API on port {port}")
        with request(port, "/health", key=None):
            pass
        with request(port, "/v1/chat/completions", CHAT, key="k") as r:
            json.load(r)
        proc.wait_for("Engram layer=14 lookups=")
        # the access line is written after the response has gone: wait for it, not for the client
        proc.wait_for('"POST /v1/chat/completions HTTP/1.1" 200 OK')
    finally:
        proc.stop()
    engine = shapes(proc.text())
    seed = SEED_LOG.read_bytes().decode()  # not read_text(): it turns tqdm's \r into \n
    latest = seed[seed.rfind("] server_args=") - 21:]
    missing = shapes(latest) - engine
    assert not missing, sorted(missing)
