"""The stage ledger a passing stage proposes (module_utils/fleet/stage_ledger.py, filter dsv41_stage_ledger_proposal)."""
import pytest

import run_record_filters as rf
from ansible.module_utils.fleet import stage_ledger as sl

OLD, NEW = "sha256:" + "a" * 64, "localhost/dsv41-sglang@sha256:" + "b" * 64


def test_a_passing_stage_a_proposes_its_entry_for_the_running_image():
    out = sl.proposal([], "stage_a", NEW, "records/20261203T080000Z-stage_a")
    assert out["entries"] == out["new"] == [{"name": "stage_a", "image_digest": NEW,
                                            "record": "records/20261203T080000Z-stage_a"}]
    assert out["carried"] == []


def test_stage_b_carries_stage_a_from_the_image_it_started_on_to_the_rebuilt_one():
    ledger = [{"name": "stage_a", "image_digest": OLD, "record": "records/a"}]
    out = rf.dsv41_stage_ledger_proposal(ledger, "stage_b", NEW, "records/b", ["stage_a"], OLD)
    assert out["new"] == [{"name": "stage_b", "image_digest": NEW, "record": "records/b"},
                          {"name": "stage_a", "image_digest": NEW, "record": "records/b", "carried_from": OLD}]


def test_nothing_is_carried_that_the_start_image_did_not_have():
    # stage_a committed for another image only: stage B does not invent it for the new one
    ledger = [{"name": "stage_a", "image_digest": "sha256:" + "c" * 64}]
    out = sl.proposal(ledger, "stage_b", NEW, "records/b", ["stage_a"], OLD)
    assert [e["name"] for e in out["entries"]] == ["stage_b"] and out["carried"] == []
    # an image B did not rebuild (the adapter was already in it): the entry is there already, nothing new
    ledger = [{"name": "stage_a", "image_digest": NEW}, {"name": "stage_b", "image_digest": NEW}]
    out = sl.proposal(ledger, "stage_b", NEW, "records/b", ["stage_a"], NEW)
    assert [e["name"] for e in out["entries"]] == ["stage_b", "stage_a"] and out["new"] == []
    assert "carried_from" not in out["entries"][1]


def test_entries_of_another_shape_are_ignored_not_trusted():
    ledger = ["stage_a", {"name": ["stage_a"], "image_digest": NEW}, {"name": "stage_a"}, None]
    assert sl.entries_for(ledger, NEW) == []
    assert [e["name"] for e in sl.proposal(ledger, "stage_a", NEW, "r")["new"]] == ["stage_a"]


@pytest.mark.parametrize("stage, digest, text", [
    ("stage_ab", NEW, "'stage_ab' is not a stage name"),
    ("wo_a_w8", NEW, "'wo_a_w8' is not a stage name"),
    ("stage_a", "", "no image digest to key stage_a to"),
])
def test_a_bad_stage_or_a_missing_image_is_refused_naming_it(stage, digest, text):
    with pytest.raises(sl.LedgerError, match=text.replace("(", r"\(")):
        sl.proposal([], stage, digest, "r")
