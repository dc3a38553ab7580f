"""After the restart every rank runs a fresh boot, workers before the head, and the head answers /health."""
import json


def container(host):
    return "dsv41-head" if host.ansible.get_variables()["dsv41_rank"] == 0 else "dsv41-worker"


def test_container_running_with_declared_engram_source(host):
    info = json.loads(host.check_output(f"docker inspect {container(host)}"))[0]
    assert info["State"]["Status"] == "running"
    sources = [m["Source"] for m in info["Mounts"] if m["Destination"] == "/engram"]
    assert sources == [host.ansible.get_variables()["dsv41_engram_dir"]]


def test_latest_boot_has_engram_and_memory_lines(host):
    log = host.check_output(f"docker logs {container(host)}")
    latest = log[log.rfind("server_args=ServerArgs("):]
    assert latest.count("Exact nvme Engram layer=") == 2
    assert "max_total_num_tokens=" in latest


def test_head_is_ready_and_healthy(host):
    if host.ansible.get_variables()["dsv41_rank"] != 0:
        return
    log = host.check_output("docker logs dsv41-head")
    assert "Ready: API on port 8888" in log[log.rfind("server_args=ServerArgs("):]
    assert host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8888/health") == "200"
