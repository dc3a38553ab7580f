"""The engine-log modules on logs in the real engine's formats (new and old builds, head and
workers, both docker streams), through their entry points and their logic directly."""
import pytest

from modrun import run_module

from ansible.module_utils.engine_log import scan
from ansible.module_utils.engine_log.kv_pool import evaluate

import autotune_status
import engine_boot_facts
import engine_boot_log
import engram_packed
import kv_pool
import engine_logs as L


def write(tmp_path, name, *boots):
    path = tmp_path / name
    path.write_text(L.text(*boots))
    return str(path)


def docker(*boots):
    out, err = L.docker_streams(*boots)
    return lambda cmd: (0, out, err)


# --------------------------------------------------------------------------- kv_pool

def test_page_rounding_is_not_a_clamp(tmp_path):
    log = write(tmp_path, "head.log", L.boot(0, requested=3000000, allocated=2999808))
    res = run_module(kv_pool.main, {"log_path": log, "host_label": "spark1"})
    assert not res.get("failed"), res
    assert (res["requested_tokens"], res["requested_from"], res["allocated_tokens"]) == (3000000, "server_args", 2999808)
    assert res["page_size"] == 256 and res["page_size_from"] == "server_args"
    assert res["requested_rounded_tokens"] == 2999808 and res["page_rounded"] is True
    assert res["clamped"] is False and res["clamped_by_tokens"] == 0


def test_reports_clamp_of_the_report(tmp_path):
    log = write(tmp_path, "head.log", L.boot(0, requested=750000, allocated=491520))
    res = run_module(kv_pool.main, {"log_path": log, "host_label": "spark1"})
    assert res["clamped"] is True and res["requested_rounded_tokens"] == 749824
    assert res["clamped_by_tokens"] == 749824 - 491520 and res["page_rounded"] is False


def test_page_size_from_marker(tmp_path):
    facts = scan.scan_file(write(tmp_path, "w.log", L.boot(2, requested=1000, allocated=512, page_size=64)))
    res = evaluate(facts)
    assert res["page_size"] == 64 and res["requested_rounded_tokens"] == 960 and res["clamped"] is True


@pytest.mark.parametrize("build", ["new", "old"])
def test_workers_are_verified_from_their_own_lines(build):
    res = run_module(kv_pool.main, {"container": "dsv41-worker", "host_label": "spark3"},
                   run_command=docker(L.boot(2, build=build)))
    assert not res.get("failed"), res
    assert res["allocated_from"] == "pool_sizes" and res["max_total_num_tokens"] is None    # rank 0 prints that
    assert res["rank"] == 2 and res["clamped"] is True


def test_malformed_available_bytes_fails_naming_source_and_line(tmp_path):
    boot = L.boot(0, available="1.0.4 GB")
    line_no = 1 + [l for _s, l in boot].index(next(l for _s, l in boot if "memory calculation" in l))
    log = write(tmp_path, "head.log", boot)
    res = run_module(kv_pool.main, {"log_path": log, "host_label": "spark1"})
    assert res["failed"] and log in res["msg"] and "malformed value available_bytes='1.0.4 GB'" in res["msg"]
    assert "line %d:" % line_no in res["msg"] and "Traceback" not in res["msg"]


def test_plain_byte_available_bytes(tmp_path):
    res = evaluate(scan.scan_file(write(tmp_path, "w.log", L.boot(1, available="9490000000"))))
    assert res["available_bytes"] == 9490000000 and res["available_bytes_printed"] == "9490000000"
    assert res["memory"]["available_gib"] == pytest.approx(9490000000 / 2 ** 30)


# --------------------------------------------------------------------------- engram_packed

ROWS = {"1": L.ROWS[1], "14": L.ROWS[14]}


def packed(rank=1, run_command=None, **kw):
    args = {"rank": rank, "tp_size": 3, "rows_total": ROWS, "require_packed": True, "host_label": "spark2"}
    args.update(kw)
    return run_module(engram_packed.main, args, run_command=run_command)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_six_checks_pass_on_real_logs_both_streams(rank):
    res = packed(rank=rank, container="dsv41-x", run_command=docker(L.boot(rank, disagree=2)))
    assert not res.get("failed"), res
    assert res["all_ok"] and [l["rows_ok"] for l in res["layers"]] == [True, True]


def test_latest_boot_died_after_marker_fails_despite_earlier_packed_boot(tmp_path):
    log = write(tmp_path, "w.log", L.boot(1), L.boot(1, die_after_marker=True))
    res = packed(log_path=log)
    assert res["failed"] and "'Exact ... Engram layer=1'" in res["msg"] and "layers attached: none" in res["msg"]


def test_echo_changes_nothing(tmp_path):
    echo = [("stderr", "[2026-09-11 23:40:00 TP1 EP1] Receive: obj=GenerateReqInput(text='Exact nvme Engram layer=14 "
                       "rank=1 rows=[128005561,256011122) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) "
                       "scales=0.0GiB io_threads=96 packed=True server_args={}')")]
    log = write(tmp_path, "w.log", L.boot(1, packed=(True, False)), echo)
    res = packed(log_path=log, require_packed=False)
    assert not res.get("failed") and res["all_packed"] is False and res["layers"][1]["packed"] is False


def test_old_build_packed_is_unknown_not_true(tmp_path):
    res = packed(log_path=write(tmp_path, "w.log", L.boot(1, build="old")))
    assert res["failed"] and "layer 1 packed=unknown (this engine build prints no packed= flag)" in res["msg"]


def test_fatal_attributed_to_rank_and_layer(tmp_path):
    log = write(tmp_path, "w.log", L.boot(2, fatal=(14, "does not match this rank's range; re-run the pack step")))
    res = packed(rank=2, log_path=log)
    assert res["failed"] and "fatal on rank 2 while attaching layer 14: Engram retrieval failed" in res["msg"]


# --------------------------------------------------------------------------- autotune_status / boot facts / boot log

def test_autotune_reused_keys_hash_and_file(tmp_path):
    root = tmp_path / "autotune"
    f = root / "0.6.18" / "sm121" / L.HASH / "rank_tp1_pp0_dp0.json"
    f.parent.mkdir(parents=True)
    f.write_text("{}")
    res = run_module(autotune_status.main,
                   {"container": "dsv41-worker", "rank": 1, "cache_root": str(root), "expect": ["reused"]},
                   run_command=docker(L.boot(1, keep="reused")))
    assert not res.get("failed"), res
    (entry,) = res["cache_files"]
    assert entry["in_latest_boot"] and entry["outcome"] == "reused" and entry["hash"] == L.HASH
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121") and res["problems"] == []


def test_stock_head_two_disagreements(tmp_path):
    res = run_module(autotune_status.main,
                   {"log_path": write(tmp_path, "h.log", L.boot(0, disagree=2)), "rank": 0,
                    "cache_root": str(tmp_path / "none")})
    assert res["verdict"] == "tuned" and res["disagreements"] == 2 and res["flashinfer_version"] == "0.6.18"


def test_boot_facts_and_boot_log_agree_on_the_latest_boot(tmp_path):
    first, second = L.boot(0, packed=(False, False)), L.boot(0, decode=2)
    facts = run_module(engine_boot_facts.main, {"container": "dsv41-head"},
                     run_command=docker(first, second))["boot"]
    assert facts["marker_found"] and facts["engram"][0]["packed"] is True and facts["decode"]["count"] == 2
    log = run_module(engine_boot_log.main, {"container": "dsv41-head"},
                   run_command=docker(first, second))
    assert log["content"] == L.text(second) and log["marker_found"] and log["changed"] is False
    tail = run_module(engine_boot_log.main, {"container": "dsv41-head", "tail_lines": 3},
                    run_command=docker(first, second))
    assert tail["content"] == "".join(l + "\n" for _s, l in second[-3:])


def test_boot_log_errors(tmp_path):
    res = run_module(engine_boot_log.main, {"log_path": str(tmp_path / "none"), "host_label": "spark3"})
    assert res["failed"] and res["msg"].startswith("spark3: cannot read the engine log") and "none" in res["msg"]
    res = run_module(engine_boot_log.main, {"log_path": "/x", "max_bytes": 10})
    assert res["failed"] and "max_bytes" in res["msg"]
