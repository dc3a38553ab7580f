"""The autotune_status module, run through its entry point like Ansible runs it."""
import hashlib
import json
import os

import pytest

from modrun import run_module


import autotune_status

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SEED_LOG = os.path.join(ROOT, "lab", "seed", "dsv41.log")          # the report's boot: stock engine
KEEP_HEAD = os.path.join(FIX, "autotune_keep_head.log")             # one pass reused, one tuned and saved
DRIFT = os.path.join(FIX, "drift_fatal.log")
HASH = "6779985a30fe55c4"
CONTAINER_ROOT = "/root/.cache/sglang/flashinfer/autotune"
FP = hashlib.sha256(b"lab launch").hexdigest()


def cpath(rank, digest=HASH, version="0.6.18", sm="sm121"):
    return "%s/%s/%s/%s/rank_tp%d_pp0_dp0.json" % (CONTAINER_ROOT, version, sm, digest, rank)


def boot_log(tmp_path, name, rank, events):
    """A log with an earlier stock boot and a latest boot made of ``events`` (message strings)."""
    pre = "[2026-09-25 10:00:%02d TP%d EP%d] " % (0, rank, rank)
    lines = ["[2026-09-25 09:00:00] server_args=ServerArgs(tp_size=3, node_rank=%d)" % rank,
             pre + "FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
                   "ranks agree on the tactics.",
             pre + "Running FlashInfer autotune with cache: %s" % cpath(rank),
             pre + "FlashInfer autotune completed.",
             "[2026-09-25 10:00:00] server_args=ServerArgs(tp_size=3, node_rank=%d)" % rank]
    lines += [pre + e for e in events]
    lines.append("[2026-09-25 10:05:00] Ready: API on port 8888")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def reused_boot(tmp_path, rank=1):
    return boot_log(tmp_path, "reused.log", rank, [
        "[autotune_keep] armed",
        "Capturing target cuda graphs (bs 1..4)", "[autotune_keep] reused %s" % cpath(rank),
        "Capturing draft cuda graphs (bs 1..4)", "[autotune_keep] reused %s" % cpath(rank)])


def tuned_boot(tmp_path, rank=1):
    events = ["[autotune_keep] armed"]
    for _ in ("target", "draft"):
        events += ["Running FlashInfer autotune with cache: %s" % cpath(rank), "FlashInfer autotune completed.",
                   "[autotune_keep] tuned and saved %s" % cpath(rank)]
    return boot_log(tmp_path, "tuned.log", rank, events)


def cache_tree(tmp_path, ranks=(0, 1, 2), digest=HASH, sidecar=True):
    root = tmp_path / "autotune"
    for r in ranks:
        d = root / "0.6.18" / "sm121" / digest
        d.mkdir(parents=True, exist_ok=True)
        f = d / ("rank_tp%d_pp0_dp0.json" % r)
        f.write_text(json.dumps({"rank": r, "tactics": {"moe_gemm_m1": r}}) + "\n")
        if sidecar:
            (d / ("rank_tp%d_pp0_dp0.json.launch" % r)).write_text(FP + "\n")
    return str(root)


def run(args, run_command=None):
    return run_module(autotune_status.main, args, run_command=run_command)


def test_stock_boot_with_two_disagreements(tmp_path):
    root = cache_tree(tmp_path, sidecar=False)
    res = run({"log_path": SEED_LOG, "rank": 0, "cache_root": root, "host_label": "spark1",
                                    "count_boots": True})
    assert not res.get("failed"), res.get("msg")
    assert res["verdict"] == "tuned" and res["armed"] is False and res["changed"] is False
    assert res["disagreements"] == 2 and res["completed"] == 2 and res["tuned_count"] == 2
    assert res["runs"] == [cpath(0), cpath(0)] and res["reused"] == [] and res["reused_count"] == 0
    assert res["boots_seen"] == 2 and res["source"] == SEED_LOG
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")
    (f,) = res["cache_files"]
    assert f["path"] == os.path.join(root, "0.6.18", "sm121", HASH, "rank_tp0_pp0_dp0.json")
    assert f["in_latest_boot"] is True and f["outcome"] == "run" and f["hash"] == HASH
    assert f["sidecar"] is None and f["sidecar_sha256"] is None
    with open(f["path"], "rb") as fh:
        data = fh.read()
    assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["size"] == len(data)
    assert res["problems"] == [] and res["drift"] == []


def test_retention_boot_reuses_twice(tmp_path):
    root = cache_tree(tmp_path)
    res = run({"log_path": reused_boot(tmp_path), "rank": 1, "cache_root": root,
                                    "expect": ["reused"], "count_boots": True})
    assert not res.get("failed"), res.get("msg")
    assert res["verdict"] == "reused" and res["armed"] is True
    assert res["reused"] == [cpath(1), cpath(1)] and res["reused_count"] == 2
    assert res["tuned_saved"] == [] and res["tuned_count"] == 0 and res["disagreements"] == 0
    assert res["runs"] == [] and res["boots_seen"] == 2
    (f,) = res["cache_files"]
    assert f["path"].endswith("rank_tp1_pp0_dp0.json") and f["outcome"] == "reused"
    assert f["sidecar"] == f["path"] + ".launch" and f["fingerprint"] == FP
    assert f["sidecar_sha256"] == hashlib.sha256((FP + "\n").encode()).hexdigest()


def test_retention_boot_tuned_and_saved(tmp_path):
    root = cache_tree(tmp_path)
    res = run({"log_path": tuned_boot(tmp_path), "rank": 1, "cache_root": root,
                                    "expect": ["tuned"]})
    assert not res.get("failed"), res.get("msg")
    assert res["verdict"] == "tuned" and res["armed"] is True
    assert res["tuned_saved"] == [cpath(1), cpath(1)] and res["tuned_count"] == 2 and res["reused_count"] == 0
    assert res["runs"] == [cpath(1), cpath(1)] and res["completed"] == 2
    assert res["cache_files"][0]["outcome"] == "tuned_saved"


def test_mixed_partial_hit(tmp_path):
    res = run({"log_path": KEEP_HEAD, "rank": 0, "cache_root": str(tmp_path / "none")})
    assert not res.get("failed"), res.get("msg")
    assert res["verdict"] == "mixed" and res["reused_count"] == 1 and res["tuned_count"] == 1
    assert [os.path.basename(os.path.dirname(p)) for p in res["reused"]] == ["3f9a0c1d"]
    assert [os.path.basename(os.path.dirname(p)) for p in res["tuned_saved"]] == ["77aa01be"]
    assert res["cache_files"] == [] and res["cache_root_exists"] is False
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")


def test_mixed_across_cache_files(tmp_path):
    root = tmp_path / "autotune"
    for digest in ("3f9a0c1d", "77aa01be", "0ld0ld0ld"):
        d = root / "0.6.18" / "sm121" / digest
        d.mkdir(parents=True)
        (d / "rank_tp0_pp0_dp0.json").write_text("{}\n")
        (d / "rank_tp1_pp0_dp0.json").write_text("{}\n")
    res = run({"log_path": KEEP_HEAD, "rank": 0, "cache_root": str(root)})
    files = {os.path.basename(os.path.dirname(f["path"])): f for f in res["cache_files"]}
    assert sorted(files) == ["0ld0ld0ld", "3f9a0c1d", "77aa01be"]                 # rank_tp0 only
    assert files["3f9a0c1d"]["outcome"] == "reused" and files["77aa01be"]["outcome"] == "tuned_saved"
    assert files["0ld0ld0ld"]["in_latest_boot"] is False and files["0ld0ld0ld"]["outcome"] is None


def test_disagreement_beside_reuse_is_mixed(tmp_path):
    log = boot_log(tmp_path, "odd.log", 2, [
        "[autotune_keep] armed", "[autotune_keep] reused %s" % cpath(2),
        "FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all ranks "
        "agree on the tactics.", "[autotune_keep] reused %s" % cpath(2)])
    res = run({"log_path": log, "rank": 2, "cache_root": str(tmp_path), "expect": ["reused"]})
    assert res["failed"] and res["verdict"] == "mixed"
    assert "autotune verdict mixed, expected reused (reused 2, tuned 0, disagreements 1" in res["msg"]


def test_drift_failure(tmp_path):
    res = run({"log_path": DRIFT, "rank": 2, "cache_root": str(tmp_path), "host_label": "spark3",
                                    "count_boots": True})
    assert not res.get("failed"), res.get("msg")
    assert res["verdict"] == "failed" and res["armed"] is True
    assert res["drift"] == ["DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted"]
    assert res["drift_symbols"] == ["_autotune_cache_digest"] and res["boots_seen"] == 1
    failed = run({"log_path": DRIFT, "rank": 2, "cache_root": str(tmp_path),
                                       "host_label": "spark3", "expect": ["reused", "tuned"]})
    assert failed["failed"]
    assert failed["msg"].startswith("spark3 rank 2: autotune verdict failed, expected reused or tuned (reused 0, "
                                    "tuned 0, disagreements 0; DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; "
                                    "engine drifted; %s, latest boot)" % DRIFT)


def test_log_without_autotune_lines_fails_naming_source(tmp_path):
    log = tmp_path / "quiet.log"
    log.write_text("[2026-09-25 10:00:00] server_args=ServerArgs(tp_size=3)\n"
                   "[2026-09-25 10:05:00] Ready: API on port 8888\n")
    res = run({"log_path": str(log), "rank": 0, "host_label": "spark1"})
    assert res["failed"]
    assert res["msg"].startswith("spark1 rank 0: %s: no FlashInfer autotune / [autotune_keep] line in the latest "
                                 "boot" % log)
    assert res["source"] == str(log)


def test_only_the_latest_boot_counts(tmp_path):
    # the earlier stock boot's disagreement is ignored
    res = run({"log_path": reused_boot(tmp_path, rank=0), "rank": 0,
                                    "cache_root": str(tmp_path)})
    assert res["disagreements"] == 0 and res["runs"] == [] and res["verdict"] == "reused"


def test_armed_without_outcome_is_none_and_version_from_disk(tmp_path):
    root = cache_tree(tmp_path, ranks=(0,))
    log = boot_log(tmp_path, "armed.log", 0, ["[autotune_keep] armed"])
    res = run({"log_path": log, "rank": 0, "cache_root": root})
    assert res["verdict"] == "none" and res["armed"] is True
    assert (res["flashinfer_version"], res["sm"]) == ("0.6.18", "sm121")
    assert res["cache_files"][0]["in_latest_boot"] is False


def test_log_naming_another_rank_is_a_problem(tmp_path):
    res = run({"log_path": reused_boot(tmp_path, rank=1), "rank": 2,
                                    "cache_root": str(tmp_path)})
    assert "the log names cache files of rank(s) rank_tp1, expected rank_tp2" in res["problems"]


def test_cache_root_default_expands_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    cache_tree(tmp_path / ".cache" / "sglang" / "flashinfer", ranks=(1,))
    res = run({"log_path": reused_boot(tmp_path), "rank": 1})
    assert res["cache_root"] == str(tmp_path / ".cache" / "sglang" / "flashinfer" / "autotune")
    assert len(res["cache_files"]) == 1 and res["cache_files"][0]["outcome"] == "reused"


def test_check_mode_is_read_only_and_same(tmp_path):
    root = cache_tree(tmp_path)
    before = sorted((p, os.stat(os.path.join(d, p)).st_mtime) for d, _, fs in os.walk(root) for p in fs)
    normal = run({"log_path": SEED_LOG, "rank": 0, "cache_root": root})
    checked = run({"log_path": SEED_LOG, "rank": 0, "cache_root": root,
                                        "_ansible_check_mode": True})
    assert checked["changed"] is False and not checked.get("skipped")
    for key in ("verdict", "disagreements", "runs", "cache_files", "flashinfer_version", "sm"):
        assert checked[key] == normal[key]
    after = sorted((p, os.stat(os.path.join(d, p)).st_mtime) for d, _, fs in os.walk(root) for p in fs)
    assert before == after


DOCKER_OUT = ("2026-09-25T10:00:00.000000000Z [2026-09-25 10:00:00] server_args=ServerArgs(tp_size=3)\n"
              "2026-09-25T10:05:00.000000000Z [2026-09-25 10:05:00] Ready: API on port 8888\n")
DOCKER_ERR = ("2026-09-25T10:01:00.000000000Z [2026-09-25 10:01:00 TP1 EP1] [autotune_keep] armed\n"
              "2026-09-25T10:02:00.000000000Z [2026-09-25 10:02:00 TP1 EP1] [autotune_keep] reused %s\n"
              "2026-09-25T10:03:00.000000000Z [2026-09-25 10:03:00 TP1 EP1] [autotune_keep] reused %s\n"
              % (cpath(1), cpath(1)))


def test_docker_path(tmp_path):
    res = run({"container": "dsv41-worker", "rank": 1, "cache_root": str(tmp_path),
                                    "expect": ["reused"], "_ansible_check_mode": True, "count_boots": True},
              run_command=lambda cmd: (0, DOCKER_OUT, DOCKER_ERR))
    assert not res.get("failed"), res.get("msg")
    assert res["_calls"] == [["docker", "inspect", "--format", "{{json .State}}", "dsv41-worker"],
                             ["docker", "logs", "--timestamps", "dsv41-worker"]]   # counting boots: the whole log
    assert res["source"] == "docker logs dsv41-worker" and res["verdict"] == "reused" and res["boots_seen"] == 1


def test_docker_failure():
    res = run({"container": "dsv41-worker", "rank": 1, "host_label": "spark2"},
              run_command=lambda cmd: (1, "", "Error response from daemon: No such container: dsv41-worker"))
    assert res["failed"] and res["msg"].startswith("spark2 rank 1: docker logs dsv41-worker")
    assert "No such container" in res["msg"]


@pytest.mark.parametrize("args, needle", [
    ({"log_path": SEED_LOG, "container": "x", "rank": 0}, "mutually exclusive"),
    ({"rank": 0}, "one of the following is required"),
    ({"log_path": SEED_LOG}, "rank"),
    ({"log_path": SEED_LOG, "rank": -1}, "rank must be >= 0"),
    ({"log_path": SEED_LOG, "rank": 0, "expect": ["great"]}, "expect"),
    ({"log_path": "/nonexistent/dsv41.log", "rank": 0}, "cannot open"),
])
def test_argument_validation(args, needle):
    res = run(args)
    assert res["failed"] and needle in res["msg"]


def test_documentation_blocks_parse():
    import yaml
    doc = yaml.safe_load(autotune_status.DOCUMENTATION)
    assert doc["module"] == "autotune_status"
    assert doc["extends_documentation_fragment"] == ["engine_log_source"]
    assert set(doc["options"]) == {"rank", "cache_root",
                                   "expect", "host_label"}
    yaml.safe_load(autotune_status.EXAMPLES)
    ret = yaml.safe_load(autotune_status.RETURN)
    assert {"armed", "reused", "tuned_saved", "reused_count", "tuned_count", "disagreements", "runs", "completed",
            "drift", "verdict", "cache_files", "flashinfer_version", "sm"} <= set(ret)
