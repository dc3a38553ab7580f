"""module_utils/engine_log/packed.py, called directly: packed=True per Engram layer, on the rank's own rows."""
import pytest

from ansible.module_utils.engine_log.lines import ENGRAM_KINDS, EngineLogError
from ansible.module_utils.engine_log.packed import evaluate, not_ok_message, rows_total_map
from ansible.module_utils.engine_log.scan import scan_text

import ckpt_factory
import engine_logs as L

ROWS = dict(L.ROWS)
PERIODIC = ("[2026-09-11 23:50:00 TP1 EP1] Engram layer=%d lookups=9000 hit_rate=0.0%% reads=9000 cache=0.0GiB(4-way) "
            "scales=0.0GiB threads=96 packed=%s\n")


def facts(boot, extra="", name="spark2.log"):
    return scan_text(L.text(boot) + extra, name=name, kinds=ENGRAM_KINDS)


def test_a_packed_boot_on_the_rank_s_own_rows_is_ok():
    res = evaluate(facts(L.boot(1)), 1, 3, [1, 14], ROWS)
    assert res["all_packed"] is True and res["all_ok"] is True and res["problems"] == [] and res["fatal"] == []
    l1, l14 = res["layers"]
    assert (l1["lo"], l1["hi"]) == (l1["expected_lo"], l1["expected_hi"]) == L.rank_range(1, 1)
    assert (l14["expected_lo"], l14["expected_hi"]) == L.rank_range(14, 1) and l14["rows_total"] == ROWS[14]
    assert l1["rows_ok"] is True and l1["rank_ok"] is True and l1["rank"] == 1
    assert (l1["packed"], l1["periodic_packed"], l1["periodic_lines"], l1["periodic_unpacked"]) == (True, True, 1, 0)
    assert l14["shard"] == "engram-l14-r1of3.bin" and l1["io_threads"] == 96 and l1["mode"] == "nvme"
    assert res["source"] == "spark2.log" and res["partial_last_line"] is None


def test_an_unpacked_layer_is_named():
    res = evaluate(facts(L.boot(1, packed=(True, False))), 1, 3, [1, 14], ROWS)
    assert res["all_packed"] is False and res["all_ok"] is False
    assert res["problems"] == ["layer 14 packed=False"]


def test_an_older_build_prints_no_flag_and_is_not_taken_as_packed():
    res = evaluate(facts(L.boot(1, build="old")), 1, 3, [1], {})
    assert res["layers"][0]["packed"] is None and res["all_packed"] is False
    assert res["problems"] == ["layer 1 packed=unknown (this engine build prints no packed= flag)"]


def test_packed_at_start_but_not_while_serving():
    res = evaluate(facts(L.boot(1), PERIODIC % (1, False) + PERIODIC % (1, True)), 1, 3, [1, 14], ROWS)
    l1 = res["layers"][0]
    assert (l1["packed"], l1["periodic_packed"], l1["periodic_lines"], l1["periodic_unpacked"]) == (True, True, 3, 1)
    assert res["problems"] == ["layer 1 packed=True at start but 1 periodic line(s) packed=False"]


def test_another_rank_s_log_or_rows_are_mismatches_after_the_unpacked_layers():
    res = evaluate(facts(L.boot(1, packed=(True, False))), 2, 3, [1, 14], ROWS)
    lo, hi = L.rank_range(1, 1)
    elo, ehi = L.rank_range(1, 2)
    assert res["all_ok"] is False and res["all_packed"] is False
    assert res["problems"][:3] == ["layer 14 packed=False", "layer 1 logged rank=1, expected 2",
                                   "layer 1 rows [%d,%d) expected [%d,%d)" % (lo, hi, elo, ehi)]


def test_without_row_counts_the_rows_are_not_judged():
    (l1,) = evaluate(facts(L.boot(1)), 1, 3, [1], {})["layers"]
    assert l1["rows_ok"] is None and l1["expected_lo"] is None and l1["rows_total"] is None


def test_a_fatal_error_after_the_layers_attached_is_a_problem():
    boot = L.boot(1) + [("stdout", "Engram retrieval failed: packed Engram shard /x/engram-l1-r1of3.bin (errno=5)")]
    res = evaluate(facts(boot), 1, 3, [1, 14], ROWS)
    assert res["all_packed"] is True and res["all_ok"] is False
    (fatal,) = res["fatal"]
    assert fatal["layer"] is None and fatal["rank"] == 1 and fatal["attached_layers"] == [1, 14]
    assert res["problems"] == ["fatal on rank 1 after layers 1, 14 were attached: " + fatal["line"]]


def test_a_layer_never_attached_is_refused_with_the_fatal_error_that_explains_it():
    boot = L.boot(2, fatal=(14, "does not match this rank's range; re-run the pack step"))
    with pytest.raises(EngineLogError) as err:
        evaluate(facts(boot, name="spark3.log"), 2, 3, [1, 14], ROWS)
    msg = str(err.value)
    assert "spark3.log" in msg and "'Exact ... Engram layer=14'" in msg and "layers attached: [1]" in msg
    assert "fatal on rank 2 while attaching layer 14: Engram retrieval failed" in msg


def test_a_log_without_a_boot_marker_is_refused():
    text = "".join(line + "\n" for _s, line in L.boot(1)[1:])
    with pytest.raises(EngineLogError, match=r"boot marker \('server_args='\)"):
        evaluate(scan_text(text, kinds=ENGRAM_KINDS), 1, 3, [1], {})


def test_row_counts_given_as_text_keep_only_the_layers_asked_for():
    assert rows_total_map({"1": "5", "14": 7, "3": 9}, None, [1, 14]) == {1: 5, 14: 7}
    assert rows_total_map(None, None, [14]) == {14: None}
    with pytest.raises(ValueError, match=r"rows_total: 'one': 5 is not an integer layer -> row count"):
        rows_total_map({"one": 5}, None, [1])


def test_row_counts_come_from_the_checkpoint_s_tables(tmp_path):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "ckpt"), rows={1: 3000, 14: 4100}, sparse=True)
    assert rows_total_map(None, ckpt["dir"], [1, 14]) == {1: 3000, 14: 4100}


def test_not_ok_message_lists_the_problems_and_the_log():
    res = evaluate(facts(L.boot(1, packed=(True, False))), 1, 3, [1, 14], ROWS)
    assert not_ok_message("spark2 rank 1", res) == "spark2 rank 1: layer 14 packed=False (spark2.log, latest boot)"
    res["boots_seen"] = 2
    assert not_ok_message("spark2 rank 1", res).endswith("(spark2.log, latest of 2 boot(s))")
