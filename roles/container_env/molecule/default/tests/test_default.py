"""container_env: the head's .env carries the override, stays private, and the previous file is backed up."""
import json

import pytest


def is_head(host):
    return host.ansible.get_variables()["dsv41_rank"] == 0


@pytest.fixture
def head(host):
    """The head holds the launcher .env; on a worker the test is skipped, never passed."""
    if not is_head(host):
        pytest.skip("the launcher .env lives on the head only")
    return host


@pytest.fixture
def worker(host):
    if is_head(host):
        pytest.skip("checks a worker")
    return host


def test_env_has_the_override_and_keeps_the_baseline(head):
    host = head
    env = host.file("/home/mia/dsv41-3x-spark/.env")
    assert env.mode == 0o600 and env.user == "mia"
    lines = env.content_string.splitlines()
    assert lines[0] == "# Ansible managed"
    assert "DSPARK_BLOCK_SIZE=5" in lines and "MAX_TOTAL_TOKENS=750000" in lines
    assert "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0" in lines


def test_previous_env_kept_as_a_private_recorded_backup(head):
    host = head
    names = host.check_output("ls -a /home/mia/dsv41-3x-spark").split()  # File.listdir hides dotfiles
    backups = [f for f in names if f.startswith(".env.dsv41-backup-")]
    assert len(backups) == 1                      # the idempotence run made none
    backup = host.file(f"/home/mia/dsv41-3x-spark/{backups[0]}")
    assert backup.mode == 0o600 and "DSPARK_BLOCK_SIZE=3" in backup.content_string
    record = json.loads(host.file("/home/mia/dsv41-3x-spark/.env.dsv41-backups.json").content_string)
    assert [r["backup"] for r in record["runs"]] == backups


def test_workers_have_no_env_written(worker):
    host = worker
    assert not host.file(f"{host.ansible.get_variables()['dsv41_launcher_dir']}/.env").exists
