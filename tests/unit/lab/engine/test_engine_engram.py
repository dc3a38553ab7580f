"""The engine stand-in's Engram shards: packed or not, the reader's fatal errors, the row cache's slots.
"""
from __future__ import annotations

import re

import pytest

from engine_standin import boot_worker, engine_argv, phys, run_to_exit, write_shard


def test_packed_true_with_valid_shards(lab):
    write_shard(lab["engram"], 1, 1)
    write_shard(lab["engram"], 14, 1)
    write_shard(lab["engram"], 1, 0)  # other ranks' files are ignored
    err = boot_worker(lab).stream("stderr")
    assert err.count("packed=True") == 2 and "packed=False" not in err


def test_one_layer_packed(lab):
    write_shard(lab["engram"], 14, 1)
    err = boot_worker(lab).stream("stderr")
    assert re.search(r"layer=1 rank=1 .* packed=False", err)
    assert re.search(r"layer=14 rank=1 .* packed=True", err)


def test_engine_accepts_longer_file_and_header_padding(lab):
    """SPEC: the engine checks magic/layer/lo/hi/N/row bytes only (the project is stricter)."""
    write_shard(lab["engram"], 1, 1, extra=264)
    write_shard(lab["engram"], 14, 1, padding=b"project-metadata")
    assert boot_worker(lab).stream("stderr").count("packed=True") == 2


@pytest.mark.parametrize("kind,line", [
    ("range", "Engram retrieval failed: packed Engram shard does not match this rank's range; re-run the pack "
              "step (errno=0)"),
    ("truncated", "Engram retrieval failed: packed Engram shard is truncated (errno=0)"),
    ("noheader", "Engram retrieval failed: packed Engram shard has no header (errno=0)"),
    ("short", "Engram retrieval failed: packed Engram shard has no header (errno=61)"),
])
def test_invalid_shard_is_fatal(lab, kind, line):
    if kind == "range":
        write_shard(lab["engram"], 14, 1, lo=0, hi=11)  # a rank-0 range under the rank-1 name
    elif kind == "truncated":
        write_shard(lab["engram"], 14, 1, truncate=264)
    elif kind == "noheader":
        write_shard(lab["engram"], 14, 1, magic=0x1234)
    else:
        (lab["engram"] / "engram-l14-r1of3.bin").write_bytes(b"\0" * 40)
    rc, proc = run_to_exit(lab, engine_argv("worker", 1))
    assert rc == 134, "the engine aborts"
    err = proc.stream("stderr")
    assert line in phys(err), "its own line, no prefix"
    assert "/engram" not in line and line not in proc.stream("stdout")
    # the layer attached before it is in the log: the error belongs to layer 14 of rank 1
    lines = phys(err)
    assert "Exact nvme Engram layer=1 rank=1" in lines[lines.index(line) - 1]
    assert "layer=14" not in err and "Uvicorn" not in err and "Ready:" not in proc.text()


def test_tp2_files_are_not_tp3_shards(lab):
    write_shard(lab["engram"], 1, 1, tp=2)
    assert boot_worker(lab).stream("stderr").count("packed=False") == 2


def test_cache_slots(lab):
    err = boot_worker(lab, env={"DSV41_CACHE_GIB": "0.000001", "DSV41_CACHE_WAYS": "2"}, frac="0.96").stream("stderr")
    # 0.0000005 GiB per layer = 536 bytes -> 2 rows -> 2 slots (2-way)
    assert "(2 slots, 2-way, 20.0% of owned rows)" in err
