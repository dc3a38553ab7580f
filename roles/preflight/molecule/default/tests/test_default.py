"""preflight never touches a host: the lab hosts are still in the report's state."""
import json


def test_serving_container_untouched(host):
    name = "dsv41-head" if host.ansible.get_variables()["dsv41_rank"] == 0 else "dsv41-worker"
    assert json.loads(host.check_output(f"docker inspect {name}"))[0]["State"]["Status"] == "running"


def test_no_project_state_written(host):
    user = host.ansible.get_variables()["dsv41_login_user"]
    assert not host.file(f"/home/{user}/.local/state/dsv41-fleet").exists
