"""module_utils/engine_log/autotune.py, called directly: a rank's autotune verdict and the cache files it used."""
import hashlib
import os

import pytest

from ansible.module_utils.engine_log.autotune import VERDICTS, autotune_verdict, cache_files, evaluate, expect_message
from ansible.module_utils.engine_log.lines import EngineLogError
from ansible.module_utils.engine_log.scan import scan_text

ENGINE_ROOT = "/root/.cache/sglang/flashinfer/autotune"
HASH = "05cc0d96dc7e28b8"
FP = hashlib.sha256(b"launch").hexdigest()


def full(rank, digest=HASH, version="0.6.18", sm="sm121"):
    return "%s/%s/%s/%s/rank_tp%d_pp0_dp0.json" % (ENGINE_ROOT, version, sm, digest, rank)


def facts(rank, *events, name="spark.log"):
    """The latest boot of one rank: its marker, then ``events`` (message texts) with the rank's prefix."""
    pre = "[2026-09-25 10:00:00 TP%d EP%d] " % (rank, rank)
    text = "[2026-09-25 09:59:59] server_args=ServerArgs(tp_size=3, node_rank=%d)\n" % rank
    return scan_text(text + "".join(pre + e + "\n" for e in events), name=name)


def stock(rank, passes=2, completed=2, path=None):
    events = ["Running FlashInfer autotune with cache: %s" % (path or full(rank))] * passes
    return events + ["FlashInfer autotune completed."] * completed


def tree(tmp_path, files):
    """A cache root holding ``files`` ({relative path: text})."""
    root = tmp_path / "autotune"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


def autotune(**kw):
    a = {"disagree": 0, "runs": [], "run_count": 0, "completed": 0, "armed": 0, "reused": [], "tuned_saved": [],
         "drift": []}
    a.update(kw)
    return a


@pytest.mark.parametrize("facts_, verdict", [
    (autotune(), "none"),
    (autotune(run_count=2, completed=2, disagree=2), "tuned"),                # stock engine: always retunes
    (autotune(disagree=1), "tuned"),
    (autotune(armed=1, reused=["a", "a"]), "reused"),
    (autotune(armed=1, reused=["a"], disagree=1), "mixed"),                   # reused, yet the ranks disagreed
    (autotune(armed=1, tuned_saved=["a", "a"], run_count=2), "tuned"),
    (autotune(armed=1, reused=["a"], tuned_saved=["b"]), "mixed"),            # a partial hit
    (autotune(armed=1), "none"),
    (autotune(armed=1, reused=["a"], drift=["sym"]), "failed"),               # a drifted hook beats everything
])
def test_the_verdict_of_one_rank(facts_, verdict):
    assert autotune_verdict(facts_) == verdict and verdict in VERDICTS


def test_a_stock_boot_ties_its_runs_to_the_rank_s_cache_file(tmp_path):
    rel = "0.6.18/sm121/%s/rank_tp0_pp0_dp0.json" % HASH
    root = tree(tmp_path, {rel: "{}\n", "0.6.18/sm121/%s/rank_tp1_pp0_dp0.json" % HASH: "{}\n"})
    res = evaluate(facts(0, *stock(0)), 0, root)
    assert res["verdict"] == "tuned" and res["armed"] is False and res["tuned_count"] == 2
    assert res["runs"] == [full(0), full(0)] and res["completed"] == 2 and res["problems"] == []
    (entry,) = res["cache_files"]                                             # rank 0's only
    assert entry["path"] == os.path.join(root, rel) and entry["outcome"] == "run" and entry["in_latest_boot"]
    assert entry["sha256"] == hashlib.sha256(b"{}\n").hexdigest() and entry["size"] == 3
    assert (entry["flashinfer_version"], entry["sm"], entry["hash"]) == ("0.6.18", "sm121", HASH)
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")
    assert res["cache_root"] == root and res["cache_root_exists"] is True and res["source"] == "spark.log"


def test_the_adapter_s_short_names_match_the_files_and_reused_wins(tmp_path):
    rel = "0.6.18/sm121/%s/rank_tp1_pp0_dp0.json" % HASH
    root = tree(tmp_path, {rel: "{}\n", rel + ".launch": FP + "\n"})
    res = evaluate(facts(1, "[autotune_keep] armed", "[autotune_keep] reused %s/rank_tp1_pp0_dp0.json" % HASH,
                         "[autotune_keep] reused %s/rank_tp1_pp0_dp0.json" % HASH), 1, root)
    assert res["verdict"] == "reused" and res["reused_count"] == 2 and res["tuned_count"] == 0
    (entry,) = res["cache_files"]
    assert entry["outcome"] == "reused" and entry["fingerprint"] == FP
    assert entry["sidecar"] == entry["path"] + ".launch"
    assert entry["sidecar_sha256"] == hashlib.sha256((FP + "\n").encode()).hexdigest()
    # the short names carry no version: it comes from the file the boot used
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")


def test_a_sidecar_that_is_not_a_fingerprint_gives_none(tmp_path):
    rel = "0.6.18/sm121/%s/rank_tp0_pp0_dp0.json" % HASH
    root = tree(tmp_path, {rel: "{}\n", rel + ".launch": "not a digest\n"})
    (entry,) = cache_files(root, 0, {})
    assert entry["sidecar"] is not None and entry["fingerprint"] is None
    assert entry["in_latest_boot"] is False and entry["outcome"] is None


def test_without_a_file_of_the_boot_the_newest_file_gives_the_version(tmp_path):
    root = tree(tmp_path, {"0.6.17/sm121/aaaa/rank_tp0_pp0_dp0.json": "{}", "0.6.18/sm120/bbbb/rank_tp0_pp0_dp0.json": "{}"})
    os.utime(os.path.join(root, "0.6.17/sm121/aaaa/rank_tp0_pp0_dp0.json"), (1, 1))
    res = evaluate(facts(0, "[autotune_keep] armed", "[autotune_keep] reused cccc/rank_tp0_pp0_dp0.json"), 0, root)
    assert [f["in_latest_boot"] for f in res["cache_files"]] == [False, False]
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm120")


def test_another_rank_s_files_and_an_unfinished_run_are_problems(tmp_path):
    res = evaluate(facts(2, *stock(1, passes=2, completed=1)), 2, str(tmp_path / "missing"))
    assert res["problems"] == ["the log names cache files of rank(s) rank_tp1, expected rank_tp2",
                               "2 autotune run(s) but 1 completed"]
    assert res["cache_files"] == [] and res["cache_root_exists"] is False
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")     # from the engine's full path


def test_a_drifted_hook_fails_and_is_named(tmp_path):
    res = evaluate(facts(0, "[autotune_keep] armed", "DSV41_AUTOTUNE_KEEP: AutoTuner.load is gone; engine drifted"),
                   0, str(tmp_path))
    assert res["verdict"] == "failed" and res["drift_symbols"] == ["AutoTuner.load"]
    assert res["problems"] == res["drift"] == ["DSV41_AUTOTUNE_KEEP: AutoTuner.load is gone; engine drifted"]


def test_a_boot_without_autotune_lines_is_refused(tmp_path):
    with pytest.raises(EngineLogError) as err:
        evaluate(facts(0, "Load weight begin. avail mem=111.47 GB", name="quiet.log"), 0, str(tmp_path))
    assert "quiet.log" in str(err.value) and "FlashInfer autotune / [autotune_keep]" in str(err.value)


def test_expect_message_names_the_verdict_counts_problems_and_log(tmp_path):
    res = evaluate(facts(2, *stock(1, passes=2, completed=1)), 2, str(tmp_path))
    assert expect_message("spark3 rank 2", res, ["reused", "mixed"]) == (
        "spark3 rank 2: autotune verdict tuned, expected reused or mixed (reused 0, tuned 2, disagreements 0; "
        "the log names cache files of rank(s) rank_tp1, expected rank_tp2; 2 autotune run(s) but 1 completed; "
        "spark.log, latest boot)")
    res["problems"], res["boots_seen"] = [], 3
    assert expect_message("spark3 rank 2", res, ["reused"]).endswith(
        "(reused 0, tuned 2, disagreements 0; spark.log, latest of 3 boot(s))")
