"""The engine stand-in's boot settings: the lab knobs (old build, knob file, boot pacing), the image's run entrypoint,
a rank that disagrees on the block size.
"""
from __future__ import annotations

import re
import time

import pytest

from engine_standin import Proc, TS, WORKER_DONE, boot_worker, engine_argv, marker_dict, messages, ns_of


def test_old_build_formats(lab):
    proc = boot_worker(lab, rank=0, env={"LAB_ENGINE_BUILD": "old", "API_KEY": "sk-old"})
    err = proc.stream("stderr")
    marker = err.splitlines()[0]
    assert re.match(rf"\[{TS}\] server_args=ServerArgs\(model_path='/srv/models/DeepSeek-V4\.1-Flash', ", marker)
    assert marker.endswith(")") and "node_rank=0" in marker and "max_total_tokens=750000" in marker
    assert "api_key='***'" in marker and "sk-old" not in proc.text()
    msgs = messages(err)
    assert ("Exact nvme Engram layer=1 rank=0 rows=[0,10) cache_budget=0.0GiB ways=4 io_threads=96") in msgs
    assert "packed=" not in err
    assert any(m.startswith("DSv4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, ")
               for m in msgs) and not re.search(r"\bDSV4 ", err)   # ("DSV41 TP padding" is another word)
    assert [m for m in msgs if m.startswith("DSv4 pool sizes")][-1] == "DSv4 pool sizes: full=491520, swa=61440, c128=3840"
    assert "Capture cuda graph bs [1, 2, 3, 4]" in msgs and "Capture draft cuda graph bs [1, 2, 3, 4]" in msgs
    assert any(m.startswith("Capture cuda graph end. Time elapsed: ") for m in msgs)
    assert any(re.fullmatch(r"Load weight end\. type=DeepseekV4ForCausalLM, dtype=torch\.bfloat16, avail mem=[\d.]+ GB, "
                            r"mem usage=94\.00 GB\.", m) for m in msgs)
    assert "Engine startup timings" not in err and "max_total_num_tokens=491520" in err


def test_knob_file_and_environment_precedence(lab):
    knobs = lab["tmp"] / "engine.env"
    knobs.write_text("# lab knobs\nLAB_ENGINE_BUILD=old\nexport LAB_ENGINE_OFFLOAD=ignored\nDSV41_WO_A_W8=1\n")
    env = {"LAB_ENGINE_ENV_FILE": str(knobs)}
    old = boot_worker(lab, env=env)
    assert "server_args=ServerArgs(" in old.stream("stderr")
    assert "[wo_a_w8]" not in old.text(), "only LAB_* keys come from the file"
    new = boot_worker(lab, env={**env, "LAB_ENGINE_BUILD": "new"})
    assert "] server_args={" in new.stream("stderr"), "the environment wins over the file"


def test_boot_seconds_knob_spreads_the_boot(lab):
    knobs = lab["tmp"] / "engine.env"
    knobs.write_text("LAB_ENGINE_BOOT_SECONDS=3\n")
    proc = Proc(lab, engine_argv("worker", 1), env={"LAB_ENGINE_ENV_FILE": str(knobs)})
    try:
        proc.wait_for(WORKER_DONE, timeout=30)
        took = time.monotonic() - proc.started
    finally:
        proc.stop()
    assert 2.4 <= took <= 20, took
    recs = proc.records()
    first = next(r for r in recs if "server_args=" in r["log"])
    load = next(r for r in recs if "Load weight end. elapsed=" in r["log"] and "DeepseekV4ForCausalLM," in r["log"])
    span = (ns_of(recs[-1]["time"]) - ns_of(first["time"])) / 1e9
    assert span >= 2.4, "the lines are spread over the boot (by their json-file times)"
    elapsed = float(re.search(r"elapsed=([\d.]+) s", load["log"]).group(1))
    assert elapsed >= 1.6, "target load is most of a real boot (541.76 of 767 s)"
    assert first["time"] < load["time"]


def test_run_entrypoint_takes_the_settings_from_the_environment(lab):
    """`docker run ... IMAGE run`: the image's entrypoint builds the engine's arguments from -e variables."""
    env = {"NODE_RANK": "2", "TP_SIZE": "3", "EP_SIZE": "3", "MAX_TOTAL_TOKENS": "750000", "MEM_FRACTION_STATIC": "0.95",
           "CHUNKED_PREFILL_SIZE": "2048", "MAX_RUNNING_REQUESTS": "4", "DIST_INIT_ADDR": "192.168.100.11:20000",
           "PORT": str(lab["port"]), "MODEL_PATH": "/srv/models/DeepSeek-V4.1-Flash", "MOE_RUNNER_BACKEND": ""}
    proc = Proc(lab, ["run"], env)
    try:
        proc.wait_for(WORKER_DONE)
    finally:
        proc.stop()
    marker = next(m for m in messages(proc.stream("stderr")) if m.startswith("server_args={"))
    for field in ("'node_rank': 2", "'chunked_prefill_size': 2048", "'max_total_tokens': 750000",
                  "'dist_init_addr': '192.168.100.11:20000'", "'moe_runner_backend': 'auto'"):
        assert field in marker, field


@pytest.mark.parametrize("rank,block,expected", [(2, 5, 3), (2, 3, 4), (1, 5, 5)])
def test_rank_length_mismatch_makes_the_last_worker_disagree(lab, rank, block, expected):
    proc = boot_worker(lab, {"LAB_ENGINE_FAULT": "rank_length_mismatch"}, rank=rank, block=block)
    args = marker_dict(proc.stream("stderr"))
    assert args["speculative_dspark_block_size"] == expected
    assert args["speculative_num_draft_tokens"] == expected + 1
