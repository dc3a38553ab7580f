"""The kv_pool module, run through its entry point like Ansible runs it."""
import os

import pytest

from modrun import run_module


import kv_pool

HERE = os.path.join(os.path.dirname(__file__), "..")  # tests/unit
FIX = os.path.join(HERE, "fixtures")
TWO_BOOTS = os.path.join(FIX, "two_boots_rank1.log")
LAB_LOG = os.path.join(HERE, "..", "..", "lab", "seed", "dsv41.log")
GIB = 1 << 30


def run(args, run_command=None):
    return run_module(kv_pool.main, args, run_command=run_command)


def test_report_boot_two_boots_fixture():
    res = run({"log_path": TWO_BOOTS, "requested_tokens": 750000, "host_label": "spark2",
                                    "count_boots": True})
    assert not res.get("failed") and res["changed"] is False
    assert res["allocated_tokens"] == 491520 and res["allocated_from"] == "pool_sizes"   # latest boot, not 524288
    assert res["max_total_num_tokens"] == 491520
    assert res["requested_tokens"] == 750000 and res["requested_from"] == "parameter"
    assert res["clamped"] is True
    assert res["available_bytes_printed"] == "1.04 GB"
    assert res["available_bytes"] == round(1.04 * GIB) == 1116691497                 # GB printed = 2**30
    assert res["bytes_per_full_token"] == 1670.75
    assert (res["max_running_requests"], res["context_len"], res["chunked_prefill_size"]) == (4, 1048576, 1024)
    assert res["pool_lines"] == 2 and res["boots_seen"] == 2
    assert res["pool"] == {"full": 491520, "swa": 61440, "c128": 3840}
    assert res["available_gpu_mem_printed"] == "2.81 GB"
    assert res["rank"] == 1                                   # node_rank of the server_args line
    assert res["source"] == TWO_BOOTS


def test_lab_seed_log_head_boot():
    # The lab's saved head log interleaves the start-up lines of the three ranks; it holds two boots.
    res = run({"log_path": LAB_LOG, "host_label": "spark1", "count_boots": True})
    assert not res.get("failed"), res
    assert res["boots_seen"] >= 2
    assert res["allocated_tokens"] == 491520 and res["max_total_num_tokens"] == 491520
    assert res["requested_tokens"] == 750000 and res["requested_from"] == "server_args"
    assert res["clamped"] is True and res["rank"] == 0
    assert res["available_bytes_printed"] == "1.04 GB" and res["available_bytes"] == 1116691497
    assert res["pool_lines"] == 2 and res["max_running_requests"] == 4


def test_requested_defaults_to_server_args():
    res = run({"log_path": TWO_BOOTS})
    assert res["requested_tokens"] == 750000 and res["requested_from"] == "server_args" and res["clamped"] is True


def test_not_clamped_when_pin_fits():
    res = run({"log_path": TWO_BOOTS, "requested_tokens": 491520})
    assert res["clamped"] is False


def test_min_tokens_fails_with_figures():
    res = run({"log_path": LAB_LOG, "host_label": "spark1", "rank": 0,
                                    "requested_tokens": 750000, "min_tokens": 600000})
    assert res["failed"] is True
    assert res["msg"] == ("spark1 rank 0: KV pool 491,520 tokens < min_tokens 600,000 "
                          "(requested 750,000, available_bytes=1.04 GB)")
    assert res["allocated_tokens"] == 491520                  # figures still returned


def test_min_tokens_passes():
    res = run({"log_path": TWO_BOOTS, "min_tokens": 491520})
    assert not res.get("failed") and res["allocated_tokens"] == 491520


def test_rank_from_log_in_message():
    res = run({"log_path": TWO_BOOTS, "host_label": "spark2", "min_tokens": 10 ** 6})
    assert res["failed"] and res["msg"].startswith("spark2 rank 1: KV pool 491,520 tokens < min_tokens 1,000,000")


def test_missing_memory_lines_fail_naming_source_and_line():
    log = os.path.join(FIX, "drift_fatal.log")
    res = run({"log_path": log, "host_label": "spark3", "rank": 2})
    assert res["failed"] and res["msg"].startswith("spark3 rank 2: ")
    assert "drift_fatal.log" in res["msg"] and "'DSV4 memory calculation:'" in res["msg"]


def test_memory_without_pool_fails(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text("[2026-09-24 02:51:10] server_args=ServerArgs(tp_size=3, max_total_tokens=750000, node_rank=2)\n"
                   "[2026-09-24 02:53:01 TP2 EP2] DSV4 memory calculation: bytes_per_full_token=1670.75, "
                   "available_bytes=0.01 GB, c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=0.00 GB\n"
                   "[2026-09-24 02:53:01 TP2 EP2] RuntimeError: Not enough memory.\n")
    res = run({"log_path": str(log), "host_label": "spark3"})
    assert res["failed"] and "oom.log" in res["msg"]
    assert "'DSV4 pool sizes: full=' or 'max_total_num_tokens='" in res["msg"] and "0.01 GB" in res["msg"]


def test_pool_missing_falls_back_to_max_total(tmp_path):
    log = tmp_path / "nopool.log"
    text = "".join(line for line in open(TWO_BOOTS) if "pool sizes" not in line)
    log.write_text(text)
    res = run({"log_path": str(log)})
    assert res["allocated_tokens"] == 491520 and res["allocated_from"] == "max_total_num_tokens"
    assert res["pool_lines"] == 0 and res["pool"] is None


def test_case_variant_and_colours(tmp_path):
    log = tmp_path / "dsv4.log"
    esc = "\x1b"
    log.write_text("[2026-09-24 02:51:10] server_args=ServerArgs(tp_size=3, max_total_tokens=None, node_rank=0)\n"
                   "[2026-09-24 02:53:01 TP0 EP0] " + esc + "[32mDSv4 memory calculation: bytes_per_full_token=1670.75, "
                   "available_bytes=2.00 GB, full_token=1.00 GB" + esc + "[0m\n"
                   "[2026-09-24 02:53:01 TP0 EP0] DSv4 pool sizes: full=1000, swa=1, c128=1\n"
                   "[2026-09-24 02:53:02 TP0 EP0] DSv4 pool sizes: full=2000, swa=1, c128=1\n")
    res = run({"log_path": str(log)})
    assert res["allocated_tokens"] == 2000 and res["available_bytes"] == 2 * GIB
    assert res["requested_tokens"] is None and res["clamped"] is None and res["max_total_num_tokens"] is None


def test_check_mode_same_result():
    normal = run({"log_path": TWO_BOOTS})
    checked = run({"log_path": TWO_BOOTS, "_ansible_check_mode": True})
    assert checked["changed"] is False and not checked.get("skipped")
    for key in ("allocated_tokens", "clamped", "available_bytes", "boots_seen"):
        assert checked[key] == normal[key]


def test_docker_path():
    out = "".join("2026-09-24T02:5%d:00.%09dZ %s" % (i // 60 % 10, i, line)
                  for i, line in enumerate(open(TWO_BOOTS)))
    res = run({"container": "dsv41-worker", "host_label": "spark2", "requested_tokens": 750000,
                                    "count_boots": True},
              run_command=lambda cmd: (0, out, ""))
    assert not res.get("failed"), res
    assert res["_calls"] == [["docker", "inspect", "--format", "{{json .State}}", "dsv41-worker"],
                             ["docker", "logs", "--timestamps", "dsv41-worker"]]   # counting boots: the whole log
    assert res["source"] == "docker logs dsv41-worker"
    assert res["allocated_tokens"] == 491520 and res["clamped"] is True and res["boots_seen"] == 2


def test_docker_failure():
    res = run({"container": "dsv41-worker", "host_label": "spark2", "rank": 1},
              run_command=lambda cmd: (1, "", "Error response from daemon: No such container: dsv41-worker"))
    assert res["failed"] and res["msg"].startswith("spark2 rank 1: docker logs dsv41-worker")
    assert "No such container" in res["msg"]


def test_missing_log_file(tmp_path):
    res = run({"log_path": str(tmp_path / "none.log"), "host_label": "spark1"})
    assert res["failed"] and "none.log" in res["msg"] and "cannot open" in res["msg"]


@pytest.mark.parametrize("args, needle", [
    ({"log_path": TWO_BOOTS, "container": "x"}, "mutually exclusive"),
    ({}, "one of the following is required"),
    ({"log_path": TWO_BOOTS, "min_tokens": 0}, "min_tokens must be a positive"),
    ({"log_path": TWO_BOOTS, "requested_tokens": -1}, "requested_tokens must be a positive"),
])
def test_argument_validation(args, needle):
    res = run(args)
    assert res["failed"] and needle in res["msg"]


def test_documentation_blocks_parse():
    import yaml
    doc = yaml.safe_load(kv_pool.DOCUMENTATION)
    assert doc["module"] == "kv_pool"
    assert doc["extends_documentation_fragment"] == ["engine_log_source"]
    assert set(doc["options"]) == {"requested_tokens",
                                   "min_tokens", "rank", "host_label"}
    yaml.safe_load(kv_pool.EXAMPLES)
    ret = yaml.safe_load(kv_pool.RETURN)
    assert {"allocated_tokens", "max_total_num_tokens", "requested_tokens", "clamped", "available_bytes_printed",
            "available_bytes", "bytes_per_full_token", "max_running_requests", "context_len",
            "chunked_prefill_size", "pool_lines", "boots_seen"} <= set(ret)
    assert "2**30" in kv_pool.RETURN
