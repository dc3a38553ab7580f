"""The engram_plan module through its Ansible entry point."""
import os

import pytest
import yaml

import ckpt_factory
from modrun import run_module
import engram_plan
from ansible.module_utils.engram import plan as pack_plan
from ansible.module_utils.engram.packer import pack_layer
from ansible.module_utils.engram.shard_format import partial_name

HOST = os.uname().nodename
REPORT_FREE = 64906600448  # spark2's free bytes in the report


def _run(args, check_mode=False):
    return run_module(engram_plan.main, args, check_mode=check_mode)


@pytest.mark.parametrize("check_mode", [False, True])
def test_report_arithmetic_through_module(full_ckpt, dest, check_mode):
    result = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 1, "tp_size": 3}, check_mode=check_mode)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["required_bytes"] == 67586019080 and result["required_gib"] == 62.944
    assert [s["layer"] for s in result["shards"]] == [1, 14]
    assert [s["state"] for s in result["shards"]] == ["missing", "missing"]
    assert result["shards"][0]["path"] == os.path.join(dest, "engram-l1-r1of3.bin")
    assert os.listdir(dest) == []


def test_rank0_rows_and_tp2(full_ckpt, dest):
    rank0 = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 0, "tp_size": 3})
    assert (rank0["shards"][0]["lo"], rank0["shards"][0]["hi"]) == (0, 128002056)
    tp2 = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 1, "tp_size": 2})
    assert tp2["required_bytes"] == 101379024656


def test_shortfall_is_a_verdict_not_a_failure(full_ckpt, dest, monkeypatch):
    monkeypatch.setattr(pack_plan, "free_bytes", lambda d: REPORT_FREE)
    result = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 1, "tp_size": 3,
                   "margin_bytes": 2 * 2 ** 30})
    assert result.get("failed") is not True
    assert result["fits"] is False and result["free_bytes"] == REPORT_FREE
    assert result["deficit_bytes"] == 67586019080 + 2 * 2 ** 30 - REPORT_FREE
    assert result["deficit_gib"] == 4.495 and result["free_gib"] == 60.449
    assert result["margin_bytes"] == 2 * 2 ** 30


def test_fits_with_room(full_ckpt, dest, monkeypatch):
    monkeypatch.setattr(pack_plan, "free_bytes", lambda d: 67586019080)
    result = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 1, "tp_size": 3})
    assert result["fits"] is True and result["deficit_bytes"] == 0 and result["deficit_gib"] == 0.0


def test_layers_option(full_ckpt, dest):
    result = _run({"checkpoint": full_ckpt, "dest": dest, "rank": 2, "tp_size": 3, "layers": [14]})
    assert [s["layer"] for s in result["shards"]] == [14]
    assert result["required_bytes"] == 4096 + (384016684 - 384016684 * 2 // 3) * 264


def test_states_reported(tmp_path, dest):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 4099, 14: 3001})["dir"]
    pack_layer(ckpt, dest, 1, 1, 3)
    with open(os.path.join(dest, partial_name(14, 1, 3)), "wb") as handle:
        handle.write(os.urandom(10000))
    result = _run({"checkpoint": ckpt, "dest": dest, "rank": 1, "tp_size": 3})
    assert [s["state"] for s in result["shards"]] == ["complete", "partial"]
    assert result["to_write_bytes"] == 4096 + 1000 * 264
    assert result["reclaimable_bytes"] == 10000
    with open(os.path.join(dest, "engram-l1-r1of3.bin"), "r+b") as handle:
        handle.write(b"XXXXXXXX")
    stale = _run({"checkpoint": ckpt, "dest": dest, "rank": 1, "tp_size": 3})["shards"][0]
    assert stale["state"] == "stale" and "bad magic" in stale["stale_reason"]


def test_missing_dest_fails_naming_host(full_ckpt, tmp_path):
    missing = str(tmp_path / "engram-absent")
    result = _run({"checkpoint": full_ckpt, "dest": missing, "rank": 1, "tp_size": 3}, check_mode=True)
    assert result["failed"] is True
    assert HOST in result["msg"] and missing in result["msg"] and "does not exist" in result["msg"]


@pytest.mark.parametrize("case", sorted(ckpt_factory.MALFORMED_CASES))
@pytest.mark.parametrize("check_mode", [False, True])
def test_malformed_fails_naming_file(case, check_mode, tmp_path, dest):
    bad = ckpt_factory.MALFORMED_CASES[case](str(tmp_path / "bad"))
    result = _run({"checkpoint": bad["dir"], "dest": dest, "rank": bad["rank"], "tp_size": bad["tp_size"]},
                  check_mode=check_mode)
    assert result["failed"] is True
    assert bad["file"] in result["msg"] and bad["message"] in result["msg"], result["msg"]
    assert os.listdir(dest) == []


def test_required_options(dest):
    result = _run({"dest": dest, "rank": 0})
    assert result["failed"] is True and "checkpoint" in result["msg"] and "tp_size" in result["msg"]


def test_documentation_matches_interface():
    doc = yaml.safe_load(engram_plan.DOCUMENTATION)
    assert set(doc["options"]) == {"checkpoint", "dest", "rank", "tp_size", "layers", "margin_bytes",
                                   "foreign_search", "foreign_depth", "rooms", "content_check"}
    assert doc["options"]["content_check"]["choices"] == ["identity", "full"]
    assert doc["options"]["layers"]["default"] == [1, 14]
    yaml.safe_load(engram_plan.EXAMPLES)
    assert set(yaml.safe_load(engram_plan.RETURN)) == {
        "required_bytes", "shards", "to_write_bytes", "reclaimable_bytes", "free_bytes", "margin_bytes",
        "fits", "deficit_bytes", "required_gib", "to_write_gib", "free_gib", "deficit_gib", "reclaimable_gib",
        "foreign", "foreign_search", "rooms"}
