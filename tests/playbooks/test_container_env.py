"""container_env on the lab: the declared baseline is what the fleet runs; overrides, refusals, forwards."""
import json

import pytest

from labhelpers import changed_tasks, lab, playbook, sh

WRITE = "container_env : Write the launcher settings (previous file kept as a timestamped backup)"
ENV = "/home/mia/dsv41-3x-spark/.env"


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("up")
    yield


def env_text():
    return sh("spark1", f"cat {ENV}")


def flat(out):
    return " ".join(out.split())


def overrides(**keys):
    return ["-e", json.dumps({"dsv41_launcher_overrides": keys})]


def test_baseline_converge_reports_no_change():
    before = env_text()
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    assert WRITE not in changed_tasks(out)
    assert "no change: the fleet runs exactly the declared settings" in out
    assert env_text() == before


def test_check_diff_of_one_key_shows_only_that_key():
    before = env_text()
    rc, out = playbook("site.yml", "--check", "--diff", *overrides(DSPARK_BLOCK_SIZE=5))
    assert rc == 0, out[-3000:]
    diff = out.split("Show what changed, key by key (secrets redacted)", 1)[1].split("TASK [", 1)[0]
    assert "DSPARK_BLOCK_SIZE: 3 -> 5" in diff
    assert diff.count(" -> ") == 1
    assert "sk-lab" not in out  # the API key never appears, not even in --diff
    assert env_text() == before


FORBIDDEN = [
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "PYTORCH_CUDA_ALLOC_CONF"),
    ({"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": 1}, "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"),
    ({"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": None}, "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"),
    ({"DSV41_SHARED_PAD_K": 576}, "DSV41_SHARED_PAD_K"),
    ({"DSPARK_SPS_TABLE": "/adapter/sps.json"}, "DSPARK_SPS_TABLE"),
    ({"OFFLOAD_MODE": "ram"}, "OFFLOAD_MODE"),
    ({"MAX_RUNNING_REQUESTS": 16}, "MAX_RUNNING_REQUESTS"),
    ({"MAX_TOTAL_TOKENS": 8000000}, "MAX_TOTAL_TOKENS"),
    ({"MEM_FRACTION_STATIC": "0.80"}, "MEM_FRACTION_STATIC"),
    ({"DSV41_CACHE_GIB": 4}, "DSV41_CACHE_GIB"),
    ({"MEM_FRACTION_STATIC": "0.93"}, "MEM_FRACTION_STATIC"),
    ({"DSV41_WO_A_W8_MID": 1}, "DSV41_WO_A_W8_MID"),
    ({"DSV41_WO_A_W8": 1, "DSV41_WO_A_W8_DROP": 1}, "DSV41_WO_A_W8_DROP"),
    ({"DSV41_ENGRAM_PREFETCH": 1}, "DSV41_ENGRAM_PREFETCH"),
    ({"DSV41_VERIFY_CAP": "conf:0.1"}, "DSV41_VERIFY_CAP"),
    ({"DSPARK_BLOCK_SIZE": 7}, "DSPARK_BLOCK_SIZE"),
]


@pytest.mark.parametrize("settings,key", FORBIDDEN, ids=[k for _, k in FORBIDDEN])
def test_forbidden_settings_are_refused_and_nothing_is_written(settings, key):
    before = env_text()
    rc, out = playbook("site.yml", *overrides(**settings))
    assert rc != 0
    assert key in flat(out.split("Validate the settings and the launch paths", 1)[1])
    assert WRITE not in out.split("PLAY RECAP")[0].split("Validate the settings", 1)[1]
    assert env_text() == before


def test_forwarding_gaps_are_reported_by_path_then_fixed_by_the_opt_in_block():
    settings = overrides(SGLANG_DSPARK_FOLDED_SAMPLING=1, DSV41_ENGRAM_PREFETCH=1, DSV41_ENGRAM_PREFETCH_CHECK=1)
    before = env_text()
    rc, out = playbook("site.yml", *settings, "-e", "container_env_packed=true")
    assert rc != 0
    text = flat(out)
    for var in ("SGLANG_DSPARK_FOLDED_SAMPLING", "DSV41_ENGRAM_PREFETCH_CHECK"):
        assert f"{var} is set but the head launch path does not forward it" in text
        assert f"{var} is set but the worker launch path does not forward it" in text
    assert env_text() == before
    script_before = sh("spark1", "cat /home/mia/dsv41-3x-spark/start.sh")
    rc, out = playbook("site.yml", *settings, "-e", "container_env_packed=true", "-e", "container_env_add_forwards=true")
    assert rc == 0, out[-3000:]
    script = sh("spark1", "cat /home/mia/dsv41-3x-spark/start.sh")
    assert "# BEGIN dsv41-fleet managed forwards" in script and "# BEGIN" not in script_before
    assert "SGLANG_DSPARK_FOLDED_SAMPLING" in script.split("# BEGIN dsv41-fleet managed forwards")[1]
    assert sh("spark1", "ls -a /home/mia/dsv41-3x-spark | grep -c '^start.sh\\..*~$'").strip() == "1"  # backed up
    assert "SGLANG_DSPARK_FOLDED_SAMPLING=1" in env_text()
    # rollback restores the previous .env
    rc, out = playbook("rollback.yml", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert env_text() == before
