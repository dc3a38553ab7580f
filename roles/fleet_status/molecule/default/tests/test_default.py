"""fleet_status is read-only: after converge the hosts are still in the report's state."""
import json


def test_no_shard_was_written(host):
    engram_dir = host.ansible.get_variables()["dsv41_engram_dir"]
    assert not [f for f in host.file(engram_dir).listdir() if f.endswith((".bin", ".partial"))]


def test_serving_container_still_running(host):
    name = "dsv41-head" if host.ansible.get_variables()["dsv41_rank"] == 0 else "dsv41-worker"
    info = json.loads(host.check_output(f"docker inspect {name}"))[0]
    assert info["State"]["Status"] == "running"
