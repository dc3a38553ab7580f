"""After converge every rank has both packed shards, complete and published, and the engine reads them."""
import json
import struct

import pytest

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
    log = host.check_output(f"docker logs {name}")
    latest = log[log.rfind("server_args=ServerArgs("):]
    lines = [line for line in latest.splitlines() if "Exact nvme Engram" in line]
    assert len(lines) == 2 and all(line.endswith("packed=True") for line in lines)
    assert json.loads(host.check_output(f"docker inspect {name}"))[0]["State"]["Status"] == "running"
