"""After converge every rank has both packed shards, complete and published, and the engine reads them."""
import json
import shlex
import struct
from pathlib import Path

import ansible.module_utils
import pytest

# The project's one engine-log reader, imported as Ansible ships module_utils to a host.
ansible.module_utils.__path__.append(str(Path(__file__).resolve().parents[5] / "module_utils"))
from ansible.module_utils.base import command_stream  # noqa: E402
from ansible.module_utils.engine_log import source

MAGIC = 0x31344E4531565344


def dest(host):
    hv = host.ansible.get_variables()
    return "/data/dsv41-engram" if hv["inventory_hostname"] == "spark2" else hv["dsv41_engram_dir"]


@pytest.mark.parametrize("layer", [1, 14])
def test_shard_is_published_with_this_ranks_header(host, layer):
    hv = host.ansible.get_variables()
    rank = hv["dsv41_rank"]
    shard = host.file(f"{dest(host)}/engram-l{layer}-r{rank}of3.bin")
    assert shard.exists and shard.user == hv["dsv41_login_user"]
    header = host.check_output(f"head -c 48 {shard.path} | od -An -v -tx1 | tr -d ' \\n'")
    magic, hdr_layer, lo, hi, n, row = struct.unpack("<6Q", bytes.fromhex(header))
    assert (magic, hdr_layer, row) == (MAGIC, layer, 264)
    assert (lo, hi) == (n * rank // 3, n * (rank + 1) // 3)
    assert shard.size == 4096 + (hi - lo) * 264


def test_no_partial_left(host):
    assert not [f for f in host.file(dest(host)).listdir() if f.endswith(".partial")]


def test_engine_latest_boot_is_packed(host):
    hv = host.ansible.get_variables()
    name = "dsv41-head" if hv["dsv41_rank"] == 0 else "dsv41-worker"

    def run(args):
        res = host.run(shlex.join(args))
        return res.rc, res.stdout, res.stderr

    facts = source.scan_docker(run, name, open_stream=command_stream.opener_over(run))     # both streams, the project's one reader
    assert facts.marker_found and sorted(facts.engram) == [1, 14]
    assert all(facts.engram[layer]["packed"] is True for layer in (1, 14))
    assert json.loads(host.check_output(f"docker inspect {name}"))[0]["State"]["Status"] == "running"
