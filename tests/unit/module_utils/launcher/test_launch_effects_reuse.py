"""launch_record: the effects of launcher-read keys kept between evaluations (launcher_settings' known_effects):
reused only for the same launcher files and the same declared value; anything else is evaluated again."""
from ansible.module_utils.launcher import effective as lr

EFFECT = {"effect": True, "ranks": ["0", "1", "2"], "engram_ranks": [], "error": None}


def checkout(tmp_path):
    top = tmp_path / "dsv41-3x-spark"
    (top / "scripts").mkdir(parents=True)
    (top / "logs").mkdir()
    (top / "start.sh").write_text("#!/bin/bash\necho serve\n")
    (top / "scripts" / "remote.py").write_text("print('worker')\n")
    (top / ".env").write_text("MAX_RUNNING_REQUESTS=4\n")
    (top / "logs" / "dsv41.log").write_text("boot\n")
    return top


def test_the_fingerprint_follows_the_launcher_files_and_not_the_env_or_the_logs(tmp_path):
    top = checkout(tmp_path)
    launcher = str(top / "start.sh")
    first = lr.launcher_fingerprint(launcher, {"spark2": {"files": []}}, "spark1")
    (top / ".env").write_text("MAX_RUNNING_REQUESTS=6\n")
    (top / ".env.bak-1").write_text("x\n")
    (top / "logs" / "dsv41.log").write_text("boot\nboot\n")
    assert lr.launcher_fingerprint(launcher, {"spark2": {"files": []}}, "spark1") == first
    (top / "scripts" / "remote.py").write_text("print('worker, changed')\n")
    assert lr.launcher_fingerprint(launcher, {"spark2": {"files": []}}, "spark1") != first
    changed = lr.launcher_fingerprint(launcher, {"spark2": {"files": []}}, "spark1")
    assert lr.launcher_fingerprint(launcher, {"spark2": {"files": ["nccl.conf"]}}, "spark1") != changed
    assert lr.launcher_fingerprint(launcher, {"spark2": {"files": []}}, "spark9") != changed


def test_an_effect_is_reused_only_for_the_same_files_and_the_same_value():
    known = lr.effects_record("fp1", {"MAX_RUNNING_REQUESTS": "4", "CHUNKED_PREFILL_SIZE": "1024"},
                              {"MAX_RUNNING_REQUESTS": EFFECT, "CHUNKED_PREFILL_SIZE": EFFECT})
    declared = {"MAX_RUNNING_REQUESTS": "6", "CHUNKED_PREFILL_SIZE": "1024"}
    keys = ["MAX_RUNNING_REQUESTS", "CHUNKED_PREFILL_SIZE", "DSPARK_SPS_TABLE"]
    assert lr.reusable_effects(known, "fp1", declared, keys) == {"CHUNKED_PREFILL_SIZE": EFFECT}
    assert lr.reusable_effects(known, "fp2", declared, keys) == {}, "other launcher files: nothing reused"
    assert lr.reusable_effects(None, "fp1", declared, keys) == {}
    # a later record keeps what it did not evaluate again, under the same fingerprint only
    later = lr.effects_record("fp1", declared, {"MAX_RUNNING_REQUESTS": dict(EFFECT, ranks=["0"])}, known)
    assert later["keys"]["MAX_RUNNING_REQUESTS"]["value"] == "6"
    assert later["keys"]["CHUNKED_PREFILL_SIZE"] == known["keys"]["CHUNKED_PREFILL_SIZE"]
    assert lr.effects_record("fp2", declared, {}, known)["keys"] == {}


def test_a_prediction_is_reused_only_for_the_same_files_the_same_env_text_and_every_rank():
    def ctn(host, name, rank, env):
        return {"host": host, "name": name, "rank": rank, "role": "head" if rank == 0 else "worker", "env": env,
                "argv": ["docker", "run", "--name", name], "command": ["python3", "-m", "sglang.launch_server"],
                "engram_source": "/home/x/engram", "image": "dsv41-sglang:tp3", "order": rank}
    launch = {"containers": [ctn("spark1", "dsv41-head", 0, {"API_KEY": "s3cret-value-1234"}),
                             ctn("spark2", "dsv41-worker", 1, {}), ctn("spark3", "dsv41-worker", 2, {})],
              "secrets": ["s3cret-value-1234"], "auxiliary": [], "assumed": [], "unstubbed": [], "not_run": [],
              "calls": [], "skipped": [], "warnings": [], "stdout": "", "stderr": ""}
    record = lr.launch_record("fp1", "A=1\n", "/x/start.sh", launch)
    assert record["ranks_started"] == [0, 1, 2]
    assert "s3cret-value-1234" not in repr(record), "the prediction is masked"
    assert lr.reusable_launch(record, "fp1", "A=1\n", 3) == record["prediction"]
    assert lr.reusable_launch(record, "fp1", "A=2\n", 3) is None, "another .env: evaluate"
    assert lr.reusable_launch(record, "fp2", "A=1\n", 3) is None, "other launcher files: evaluate"
    assert lr.reusable_launch(record, "fp1", "A=1\n", 4) is None, "a rank it does not start: evaluate"
    assert lr.reusable_launch({}, "fp1", "A=1\n", 3) is None
