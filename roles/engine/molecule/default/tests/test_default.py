"""After the restart every rank runs a fresh boot, workers before the head, and the head answers /health.

Boot logs are read with the project's one engine-log reader (module_utils/engine_log/source.py) on both
streams of `docker logs`, as the roles read them.
"""
import json
import shlex
from pathlib import Path

import ansible.module_utils
import pytest

# The project's reader, imported as Ansible ships module_utils to a host.
ansible.module_utils.__path__.append(str(Path(__file__).resolve().parents[5] / "module_utils"))
from ansible.module_utils.base import command_stream  # noqa: E402
from ansible.module_utils.engine_log import source


def container(host):
    return "dsv41-head" if host.ansible.get_variables()["dsv41_rank"] == 0 else "dsv41-worker"


def latest_boot(host):
    def run(args):
        res = host.run(shlex.join(args))
        return res.rc, res.stdout, res.stderr
    return source.scan_docker(run, container(host), open_stream=command_stream.opener_over(run))


def test_container_running_with_declared_engram_source(host):
    info = json.loads(host.check_output(f"docker inspect {container(host)}"))[0]
    assert info["State"]["Status"] == "running"
    sources = [m["Source"] for m in info["Mounts"] if m["Destination"] == "/engram"]
    assert sources == [host.ansible.get_variables()["dsv41_engram_dir"]]


def test_latest_boot_has_engram_and_memory_lines(host):
    facts = latest_boot(host)
    assert facts.marker_found and sorted(facts.engram) == [1, 14]
    assert facts.pool is not None and facts.memory is not None
    if host.ansible.get_variables()["dsv41_rank"] == 0:
        assert facts.max_total is not None          # rank 0 only
    else:
        assert facts.max_total is None


def test_head_is_ready_and_healthy(host):
    if host.ansible.get_variables()["dsv41_rank"] != 0:
        pytest.skip("only the head serves the API")
    assert latest_boot(host).ready
    assert host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8888/health") == "200"


def test_the_autotune_cache_records_the_image_and_kernel_it_was_used_under(host):
    """Beside each rank's autotune cache: the running container's image id and this rank's kernel (what the next
    restart compares before reusing the cache)."""
    info = json.loads(host.check_output(f"docker inspect {container(host)}"))[0]
    record = host.file(host.user().home + "/.cache/sglang/flashinfer/autotune/.dsv41-provenance.json")
    assert record.exists and record.mode == 0o644
    doc = json.loads(record.content_string)
    assert doc["image_id"] == info["Image"] and doc["kernel"] == host.check_output("uname -r")
    assert doc["entries"] and all(e.startswith("0.6.18/sm121/") for e in doc["entries"])
