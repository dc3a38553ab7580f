"""Unit tests of module_utils/engram/shard_format.py, safetensors_index.py, shard_provenance.py and pack_plan.py: format facts, arithmetic, parsing, shard states."""
import json
import os
import struct

import pytest

import ckpt_factory
from ansible.module_utils.engram import plan as pack_plan, safetensors_index, shard_format, provenance as shard_provenance
from ansible.module_utils.engram.packer import pack_layer
from ansible.module_utils.engram.plan import plan
from ansible.module_utils.engram.safetensors_index import read_engram_tables, read_safetensors_header
from ansible.module_utils.engram.shard_format import (
    EngramFormatError, EngramPackError, encode_shard_header, partial_name, rank_row_range, shard_name,
)
from ansible.module_utils.engram.provenance import inspect_shard

FULL = ckpt_factory.FULL_SCALE_ROWS


# --------------------------------------------------------------------------- facts and arithmetic

def test_constants_match_spec():
    assert shard_format.ENGRAM_LAYERS == (1, 14)
    assert (shard_format.WEIGHT_BYTES, shard_format.SCALE_BYTES, shard_format.ROW_BYTES, shard_format.HEADER_BYTES) == (256, 8, 264, 4096)
    assert shard_format.MAGIC == 0x31344E4531565344
    # The SPEC calls these bytes "DSV41EN1"; little-endian they read "DSV1EN41". The number wins.
    assert struct.pack("<Q", shard_format.MAGIC) == b"DSV1EN41"
    assert safetensors_index.INDEX_NAME == "model.safetensors.index.json"


def test_names():
    assert shard_name(14, 1, 3) == "engram-l14-r1of3.bin"
    assert partial_name(1, 0, 3) == "engram-l1-r0of3.partial"


@pytest.mark.parametrize("n,tp", [(384006168, 3), (384016684, 3), (4099, 3), (3001, 3), (7, 7), (10, 4)])
def test_rank_ranges_partition_the_table(n, tp):
    ranges = [rank_row_range(n, r, tp) for r in range(tp)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(hi - lo in (n // tp, n // tp + 1) for lo, hi in ranges)


def test_rank_row_range_report_values():
    assert rank_row_range(FULL[1], 0, 3) == (0, 128002056)
    assert rank_row_range(FULL[1], 1, 3) == (128002056, 256004112)
    assert rank_row_range(FULL[14], 1, 3) == (128005561, 256011122)


@pytest.mark.parametrize("args,message", [
    ((2, 0, 3), "fewer than tp_size 3"),
    ((10, 3, 3), "rank 3 is outside 0..2"),
    ((10, -1, 3), "rank -1 is outside"),
    ((10, 0, 0), "tp_size must be an integer >= 1"),
    ((10, True, 3), "rank True"),
])
def test_rank_row_range_rejects(args, message):
    with pytest.raises(ValueError, match=message):
        rank_row_range(*args)


def test_full_scale_plan_matches_report(full_ckpt, dest):
    result = plan(full_ckpt, dest, 1, 3)
    assert result["required_bytes"] == 67586019080
    assert result["required_gib"] == 62.944
    assert result["to_write_bytes"] == 67586019080
    layer1, layer14 = result["shards"]
    assert (layer1["lo"], layer1["hi"], layer1["rows"]) == (128002056, 256004112, 128002056)
    assert layer1["bytes"] == 4096 + 128002056 * 264
    assert (layer14["lo"], layer14["hi"]) == (128005561, 256011122)
    assert layer1["path"] == os.path.join(dest, "engram-l1-r1of3.bin")
    assert {s["state"] for s in result["shards"]} == {"missing"}
    assert plan(full_ckpt, dest, 0, 3)["shards"][0]["hi"] == 128002056


def test_full_scale_tp2_rank1(full_ckpt, dest):
    assert plan(full_ckpt, dest, 1, 2)["required_bytes"] == 101379024656


def test_header_only_checkpoint_is_sparse(full_ckpt):
    """Planning never needs table data: the full-size checkpoint occupies almost nothing."""
    used = sum(os.stat(os.path.join(full_ckpt, n)).st_blocks * 512 for n in os.listdir(full_ckpt))
    assert used < 1 << 20


# --------------------------------------------------------------------------- reading the checkpoint

def test_read_safetensors_header_offsets(tmp_path):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 10, 14: 12})
    path = ckpt["shards"][14]
    header, start = read_safetensors_header(path)
    want_header, want_start = ckpt_factory.read_header(path)
    assert (header, start) == (want_header, want_start)
    assert start % 8 == 0  # the factory pads like safetensors does


def test_read_engram_tables_offsets(tmp_path):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 10, 14: 12})
    tables = read_engram_tables(ckpt["dir"])
    assert sorted(tables) == [1, 14]
    for layer, rows in ((1, 10), (14, 12)):
        table = tables[layer]
        header, start = ckpt_factory.read_header(ckpt["shards"][layer])
        assert table.rows == rows and table.layer == layer
        assert table.shard_path == ckpt["shards"][layer]
        assert table.weight_offset == start + header["layers.%d.engram.embed.weight" % layer]["data_offsets"][0]
        assert table.scale_offset == start + header["layers.%d.engram.embed.scale" % layer]["data_offsets"][0]
    # layer 14 stores scale before weight in the factory: order must not matter
    assert tables[14].scale_offset < tables[14].weight_offset


def test_read_engram_tables_single_file_and_metadata(tmp_path):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 5, 14: 6}, split=False)
    path = ckpt["shards"][1]
    ckpt_factory.rewrite_header(path, lambda h: h.update({"__metadata__": {"format": "pt"}}))
    tables = read_engram_tables(ckpt["dir"])
    assert tables[1].shard_path == tables[14].shard_path == path


def test_read_engram_tables_reads_no_table_data(tmp_path, monkeypatch):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 1000, 14: 1000})
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(n) or real(fd, n, off))
    read_engram_tables(ckpt["dir"])
    assert reads and max(reads) < 4096  # length prefixes and JSON headers only


@pytest.mark.parametrize("case", sorted(ckpt_factory.MALFORMED_CASES))
def test_malformed_input_names_file_and_writes_nothing(case, tmp_path, dest):
    bad = ckpt_factory.MALFORMED_CASES[case](str(tmp_path / "ckpt"))
    calls = (lambda: plan(bad["dir"], dest, bad["rank"], bad["tp_size"]),
             lambda: pack_layer(bad["dir"], dest, bad["layer"], bad["rank"], bad["tp_size"]))
    for call in calls:
        with pytest.raises(EngramFormatError) as info:
            call()
        assert bad["file"] in str(info.value), str(info.value)
        assert bad["message"] in str(info.value), str(info.value)
        assert os.listdir(dest) == []


def test_plan_missing_dest_names_host(full_ckpt, tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(EngramPackError) as info:
        plan(full_ckpt, missing, 1, 3)
    assert os.uname().nodename in str(info.value) and missing in str(info.value)
    assert not os.path.exists(missing)


def test_plan_rejects_duplicate_layers(full_ckpt, dest):
    with pytest.raises(EngramFormatError, match="without duplicates"):
        plan(full_ckpt, dest, 0, 3, layers=[1, 1])


# --------------------------------------------------------------------------- packed shard states

def _spec_header(layer, lo, hi, n, magic=0x31344E4531565344, row=264):
    return struct.pack("<6Q", magic, layer, lo, hi, n, row) + bytes(4096 - 48)


def test_encode_shard_header_is_spec_layout():
    raw = encode_shard_header(14, 1000, 2001, 3001)
    assert len(raw) == 4096
    assert raw == _spec_header(14, 1000, 2001, 3001)
    assert raw[:8] == bytes([0x44, 0x53, 0x56, 0x31, 0x45, 0x4E, 0x34, 0x31])  # MAGIC, little-endian


def _write_shard(dest, layer, rank, tp, header, body_len):
    path = os.path.join(dest, shard_name(layer, rank, tp))
    with open(path, "wb") as handle:
        handle.write(header + bytes(body_len))
    return path


N = 3001  # rank 1 of 3 owns [1000, 2000)


def test_inspect_states(dest):
    assert inspect_shard(dest, 14, 1, 3, N) == "missing"
    open(os.path.join(dest, partial_name(14, 1, 3)), "wb").write(b"x" * 100)
    assert inspect_shard(dest, 14, 1, 3, N) == "partial"
    path = _write_shard(dest, 14, 1, 3, _spec_header(14, 1000, 2000, N), 1000 * 264)
    assert inspect_shard(dest, 14, 1, 3, N) == "complete"
    assert inspect_shard(path, 14, 1, 3, N) == "complete"  # the final path is accepted too
    assert inspect_shard(dest, 14, 0, 3, N) == "missing"


@pytest.mark.parametrize("header,body,reason", [
    (_spec_header(14, 999, 2000, N), 1000 * 264, "header lo is 999, expected 1000"),
    (_spec_header(14, 1000, 2001, N), 1000 * 264, "header hi is 2001, expected 2000"),
    (_spec_header(1, 1000, 2000, N), 1000 * 264, "header layer is 1, expected 14"),
    (_spec_header(14, 1000, 2000, N + 1), 1000 * 264, "total rows N is 3002, expected 3001"),
    (_spec_header(14, 1000, 2000, N, row=256), 1000 * 264, "row bytes is 256, expected 264"),
    (_spec_header(14, 1000, 2000, N, magic=1), 1000 * 264, "bad magic"),
    (_spec_header(14, 1000, 2000, N)[:100] + b"\1" + bytes(3995), 1000 * 264, "padding"),
    (_spec_header(14, 1000, 2000, N), 999 * 264, "is truncated"),
    (_spec_header(14, 1000, 2000, N), 1000 * 264 + 1, "1 trailing bytes"),
    (struct.pack("<Q", 0x31344E4531565344), 0, "has no header"),
])
def test_stale_reasons(dest, header, body, reason):
    path = _write_shard(dest, 14, 1, 3, header, body)
    assert inspect_shard(dest, 14, 1, 3, N) == "stale"
    assert reason in shard_format.shard_stale_reason(path, 14, 1000, 2000, N)
    status = shard_provenance.describe_shard(dest, 14, 1, 3, N)
    assert status.state == "stale" and reason in status.reason


def test_plan_counts_partial_and_stale_as_reclaimable(tmp_path, dest):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 4099, 14: N})["dir"]
    pack_layer(ckpt, dest, 1, 0, 3)  # layer 1 complete
    with open(os.path.join(dest, partial_name(1, 0, 3)), "wb") as handle:
        handle.write(os.urandom(5000))  # a leftover beside a complete shard is not reclaimed
    stale = _write_shard(dest, 14, 0, 3, _spec_header(14, 0, 999, N), 999 * 264)
    result = plan(ckpt, dest, 0, 3)
    states = {s["layer"]: s for s in result["shards"]}
    assert states[1]["state"] == "complete" and states[14]["state"] == "stale"
    assert "hi is 999, expected 1000" in states[14]["stale_reason"]
    assert "stale_reason" not in states[1]
    assert result["to_write_bytes"] == 4096 + 1000 * 264
    assert result["reclaimable_bytes"] == os.path.getsize(stale)
    assert result["required_bytes"] == 4096 + 1366 * 264 + 4096 + 1000 * 264


def test_reclaimable_counts_allocated_space_only(tmp_path, dest):
    """A sparse leftover frees nothing when replaced, so it must not make a plan fit."""
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 4099, 14: N})["dir"]
    with open(os.path.join(dest, partial_name(1, 0, 3)), "wb") as handle:
        handle.truncate(1 << 30)
    assert plan(ckpt, dest, 0, 3)["reclaimable_bytes"] == 0


def test_plan_fit_verdict_and_gib(full_ckpt, dest):
    free = pack_plan.free_bytes(dest)
    result = plan(full_ckpt, dest, 1, 3, margin_bytes=3)
    assert result["free_bytes"] > 0 and abs(result["free_bytes"] - free) < 1 << 30
    deficit = max(0, 67586019080 + 3 - result["free_bytes"])
    assert result["deficit_bytes"] == deficit and result["fits"] is (deficit == 0)
    assert result["deficit_gib"] == round(deficit / 2 ** 30, 3)
    assert result["free_gib"] == round(result["free_bytes"] / 2 ** 30, 3)
    assert result["margin_bytes"] == 3 and result["reclaimable_gib"] == 0.0
    assert set(result) == {"required_bytes", "shards", "to_write_bytes", "reclaimable_bytes", "free_bytes",
                           "margin_bytes", "fits", "deficit_bytes", "required_gib", "to_write_gib",
                           "free_gib", "deficit_gib", "reclaimable_gib"}


def test_plan_shortfall_is_a_verdict(full_ckpt, dest, monkeypatch):
    monkeypatch.setattr(pack_plan, "free_bytes", lambda d: 64906600448)  # spark2's figure in the report
    result = plan(full_ckpt, dest, 1, 3)
    assert result["fits"] is False
    assert result["deficit_bytes"] == 67586019080 - 64906600448
    assert result["deficit_gib"] == 2.495
    json.dumps(result)  # module output must be serialisable


def _raw_safetensors(path, header, data_bytes):
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)


def test_overlapping_tensor_offsets_are_refused_naming_both(tmp_path):
    path = str(tmp_path / "x.safetensors")
    _raw_safetensors(path, {"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                            "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}, 16)
    with pytest.raises(EngramFormatError, match=r"tensors a \[0, 8\) and b \[4, 12\) overlap in the data section"):
        read_safetensors_header(path)
    _raw_safetensors(path, {"b": {"dtype": "U8", "shape": [8], "data_offsets": [8, 16]},        # order in the
                            "a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}, 16)    # JSON is free
    assert read_safetensors_header(path)[1] > 8


def test_a_deeply_nested_header_or_index_is_refused_not_a_traceback(tmp_path):
    path = str(tmp_path / "x.safetensors")
    raw = b'{"__metadata__": ' + b"[" * 200000 + b"]" * 200000 + b"}"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(EngramFormatError, match="safetensors header is nested too deeply"):
        read_safetensors_header(path)
    ckpt = tmp_path / "c"
    ckpt.mkdir()
    (ckpt / safetensors_index.INDEX_NAME).write_bytes(b'{"weight_map": ' + b"[" * 200000 + b"]" * 200000 + b"}")
    with pytest.raises(EngramFormatError, match="checkpoint index is nested too deeply"):
        read_engram_tables(str(ckpt))
