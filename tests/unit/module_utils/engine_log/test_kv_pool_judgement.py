"""module_utils/engine_log/kv_pool.py, called directly: the KV pool of the latest boot, clamp or page rounding."""
import pytest

from ansible.module_utils.engine_log import kv_pool
from ansible.module_utils.engine_log.kv_pool import DEFAULT_PAGE_SIZE, KINDS, below_min_message, evaluate
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.engine_log.scan import scan_text

import engine_logs as L

GIB = 1 << 30
MARKER = "[2026-09-24 02:51:10] server_args=ServerArgs(tp_size=3, max_total_tokens=%s, node_rank=2)\n"
MEMORY = ("[2026-09-24 02:53:01 TP2 EP2] DSV4 memory calculation: bytes_per_full_token=1670.75, "
          "available_bytes=%s, c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=0.00 GB\n")
POOL = "[2026-09-24 02:53:02 TP2 EP2] DSV4 pool sizes: full=%d, swa=13312, c128=%d\n"


def facts_of(*boots):
    return scan_text(L.text(*boots), name="spark1.log", kinds=KINDS)


def test_the_report_s_pin_is_clamped_on_the_head():
    res = evaluate(facts_of(L.boot(0, requested=750000, allocated=491520)))
    assert (res["allocated_tokens"], res["allocated_from"]) == (491520, "pool_sizes")
    assert (res["requested_tokens"], res["requested_from"]) == (750000, "server_args")
    assert (res["page_size"], res["page_size_from"]) == (256, "server_args")
    assert res["requested_rounded_tokens"] == 749824 and res["page_rounded"] is False
    assert res["clamped"] is True and res["clamped_by_tokens"] == 749824 - 491520
    assert res["max_total_num_tokens"] == 491520 and res["available_gpu_mem_printed"] == "7.68 GB"
    assert res["available_bytes_printed"] == "1.04 GB" and res["available_bytes"] == round(1.04 * GIB)
    assert res["bytes_per_full_token"] == 1670.75
    assert (res["max_running_requests"], res["context_len"], res["chunked_prefill_size"]) == (4, 1048576, 1024)
    assert res["pool"]["full"] == 491520 and res["pool_lines"] == 2
    assert not any(k.startswith("_") for k in list(res["pool"]) + list(res["memory"]))   # reader's keys stay inside
    assert res["rank"] == 0 and res["source"] == "spark1.log" and res["partial_last_line"] is None


def test_a_pin_given_as_parameter_beats_server_args():
    res = evaluate(facts_of(L.boot(0, requested=750000, allocated=491520)), 491520)
    assert (res["requested_tokens"], res["requested_from"]) == (491520, "parameter")
    assert res["clamped"] is False and res["clamped_by_tokens"] == 0


def test_page_rounding_is_not_a_clamp():
    res = evaluate(facts_of(L.boot(0, requested=3000000, allocated=2999808)))
    assert res["requested_rounded_tokens"] == 2999808 and res["page_rounded"] is True
    assert res["clamped"] is False and res["clamped_by_tokens"] == 0


def test_a_smaller_page_size_of_the_marker_rounds_finer():
    res = evaluate(facts_of(L.boot(1, requested=1000, allocated=512, page_size=64)))
    assert (res["page_size"], res["requested_rounded_tokens"], res["clamped"]) == (64, 960, True)


def test_without_a_pin_nothing_is_judged_and_the_page_size_is_sglang_s():
    facts = scan_text(MARKER % "None" + MEMORY % "2.00 GB" + POOL % (1000, 8), kinds=KINDS)
    res = evaluate(facts)
    assert res["requested_tokens"] is None and res["requested_from"] is None
    assert res["clamped"] is None and res["clamped_by_tokens"] is None and res["page_rounded"] is None
    assert (res["page_size"], res["page_size_from"]) == (DEFAULT_PAGE_SIZE, "default") == (256, "default")
    assert res["available_bytes"] == 2 * GIB and res["rank"] == 2


def test_a_worker_is_judged_from_its_own_pool_line():
    res = evaluate(facts_of(L.boot(2)))
    assert res["allocated_from"] == "pool_sizes" and res["max_total_num_tokens"] is None   # rank 0 prints that
    assert res["max_running_requests"] == 4 and res["chunked_prefill_size"] == 1024      # from server_args
    assert res["context_len"] is None and res["rank"] == 2 and res["clamped"] is True


def test_the_last_pool_line_is_the_one_allocated():
    text = MARKER % 750000 + MEMORY % "1.04 GB" + POOL % (524288, 4096) + POOL % (491520, 3840)
    res = evaluate(scan_text(text, kinds=KINDS))
    assert res["allocated_tokens"] == 491520 and res["pool_lines"] == 2 and res["pool"]["c128"] == 3840


def test_no_pool_line_falls_back_to_max_total():
    text = "".join(line + "\n" for _s, line in L.boot(0) if "pool sizes" not in line)
    res = evaluate(scan_text(text, kinds=KINDS))
    assert (res["allocated_tokens"], res["allocated_from"]) == (491520, "max_total_num_tokens")
    assert res["pool"] is None and res["pool_lines"] == 0


def test_memory_without_any_pool_names_both_lines_and_the_memory_left():
    with pytest.raises(EngineLogError) as err:
        evaluate(scan_text(MARKER % 750000 + MEMORY % "0.01 GB", name="oom.log", kinds=KINDS))
    msg = str(err.value)
    assert "oom.log" in msg and "'DSV4 pool sizes: full=' or 'max_total_num_tokens='" in msg
    assert "no pool was allocated" in msg and "0.01 GB" in msg


@pytest.mark.parametrize("text, missing", [
    (MEMORY % "1.04 GB" + POOL % (491520, 3840), "boot marker ('server_args=')"),
    (MARKER % 750000 + POOL % (491520, 3840), "'DSV4 memory calculation:'"),
])
def test_a_boot_without_marker_or_memory_line_is_refused(text, missing):
    with pytest.raises(EngineLogError) as err:
        evaluate(scan_text(text, name="w.log", kinds=KINDS))
    assert "w.log" in str(err.value) and missing in str(err.value)


def test_below_min_message_gives_the_figures():
    res = evaluate(facts_of(L.boot(0)))
    assert below_min_message("spark1 rank 0", res, 600000) == (
        "spark1 rank 0: KV pool 491,520 tokens < min_tokens 600,000 (requested 750,000, available_bytes=1.04 GB)")
    res["requested_tokens"] = None
    assert "(requested unknown, available_bytes=1.04 GB)" in below_min_message("spark1", res, 600000)


@pytest.mark.parametrize("allocated, requested, page, expected", [
    (491520, 750000, 256, (749824, True)),       # the report's clamp
    (2999808, 3000000, 256, (2999808, False)),   # page rounding is not a clamp
    (3000000, 3000000, 256, (2999808, False)),   # a pool above the rounded request
    (None, 750000, 256, (None, None)),
    (491520, None, 256, (None, None)),
    (491520, True, 256, (None, None)),           # a bool is no token count
])
def test_clamp_of_tells_a_clamp_from_page_rounding(allocated, requested, page, expected):
    assert kv_pool.clamp_of(allocated, requested, page) == expected


@pytest.mark.parametrize("server_args, expected", [
    ({"page_size": 64}, (64, "server_args")), ({"page_size": "64"}, (64, "server_args")),
    ({}, (256, "default")), (None, (256, "default")), ({"page_size": 0}, (256, "default")),
    ({"page_size": -1}, (256, "default")), ({"page_size": "x"}, (256, "default")),
])
def test_page_size_of_falls_back_to_the_engine_default(server_args, expected):
    assert kv_pool.page_size_of(server_args) == expected


def test_the_memory_ledger_judges_a_clamp_with_the_same_rule():
    from ansible.module_utils.engine_log import memory_ledger
    assert memory_ledger.clamp_of is kv_pool.clamp_of
