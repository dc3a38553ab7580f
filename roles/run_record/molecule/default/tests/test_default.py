"""run_record reads only: the hosts are unchanged (the record itself is checked in converge.yml)."""
import json


def test_engine_still_running(host):
    name = "dsv41-head" if host.ansible.get_variables()["dsv41_rank"] == 0 else "dsv41-worker"
    assert json.loads(host.check_output(f"docker inspect {name}"))[0]["State"]["Status"] == "running"
