"""The adapter manifest proposed from the control-node files (filter adapters_manifest_proposal, entry point
`manifest` of the adapters role): what the files prove, what committing it changes, the pinned comparison, and
which wo_a_w8.py the fleet's TP size takes."""
import re

import pytest
from ansible.errors import AnsibleFilterError

from adapters_filters import adapters_manifest_proposal

SRC = "/srv/dsv41-fleet/adapters"
A, B, C = "a" * 64, "b" * 64, "c" * 64


def stat(name, checksum=None, path=None):
    res = {"item": name, "stat": {"exists": checksum is not None, "isreg": True}}
    if checksum:
        res["stat"].update(checksum=checksum, path=path or "%s/%s" % (SRC, name))
    else:
        res["invocation"] = {"module_args": {"path": path or "%s/%s" % (SRC, name)}}
    return res


def test_an_empty_inventory_manifest_gets_every_file_as_added_and_the_lines_to_commit():
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A), stat("sitecustomize.py", B)], {}, SRC, 3)
    assert out["manifest"] == {"wo_a_w8.py": A, "sitecustomize.py": B} and out["problems"] == []
    assert out["changes"] == ["sitecustomize.py: added (%s)" % B, "wo_a_w8.py: added (%s)" % A]
    assert out["yaml"] == "dsv41_adapters_manifest:\n  sitecustomize.py: %s\n  wo_a_w8.py: %s\n" % (B, A)
    assert out["lines"][0] == "2 file(s) hashed in %s" % SRC


def test_a_changed_wo_a_w8_is_named_with_the_tp4_warning_and_an_unknown_entry_is_kept():
    out = adapters_manifest_proposal([stat("wo_a_w8.py", C)], {"wo_a_w8.py": A, "old.py": B}, SRC, 3)
    assert out["changes"] == [
        "wo_a_w8.py: %s -> %s (the local TP3 generalisation; never replace it with the TP4 file)" % (A, C),
        "old.py: in the inventory's manifest but not deployed (kept; remove it by hand if unused)"]


def test_an_equal_manifest_says_so_and_a_missing_file_is_a_problem_not_a_removal():
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A), stat("verify_cap.py")],
                                     {"wo_a_w8.py": A, "verify_cap.py": B}, SRC, 3)
    assert out["problems"] == ["%s/verify_cap.py: missing (or not a regular file)" % SRC]
    assert out["changes"] == [] and "already equals the files" in out["lines"][-1]
    assert out["manifest"] == {"wo_a_w8.py": A}


def test_the_pinned_revision_proves_byte_identity_or_names_each_difference():
    pinned = [stat("draft_tau.py", A, "/pin/adapter/draft_tau.py"), stat("verify_cap.py", C, "/pin/adapter/verify_cap.py"),
              stat("block_verify.py", None, "/pin/adapter/block_verify.py")]
    out = adapters_manifest_proposal([stat("draft_tau.py", A), stat("verify_cap.py", B), stat("block_verify.py", A)],
                                     {}, SRC, 3, pinned, "/pin")
    assert out["identical"] == ["draft_tau.py"]
    assert out["problems"] == [
        "%s/verify_cap.py: sha256 %s, not byte-identical to the pinned revision's /pin/adapter/verify_cap.py (%s)"
        % (SRC, B, C),
        "block_verify.py: the pinned revision's copy /pin/adapter/block_verify.py is missing"]
    # without a pinned checkout the loop's results are skipped: nothing is compared, nothing is a problem
    skipped = adapters_manifest_proposal([stat("draft_tau.py", A)], {}, SRC, 3,
                                         [{"item": "draft_tau.py", "skipped": True}])
    assert skipped["problems"] == [] and not any("pinned" in line for line in skipped["lines"])


def test_the_pinned_tp4_wo_a_w8_is_refused_on_tp3_and_required_on_tp4():
    tp4_file = stat("wo_a_w8.py", C, "/pin/adapter/wo_a_w8.py")
    # TP3: the source holding the downstream TP4 file is named; the TP3 generalisation (another hash) passes
    out = adapters_manifest_proposal([stat("wo_a_w8.py", C)], {}, SRC, 3, [tp4_file], "/pin")
    assert out["problems"] == [
        "%s/wo_a_w8.py: sha256 %s is the pinned revision's TP4 file /pin/adapter/wo_a_w8.py: a TP3 fleet runs the "
        "local TP3 generalisation (four local groups), never the TP4 file" % (SRC, C)]
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A)], {}, SRC, 3, [tp4_file], "/pin")
    assert out["problems"] == [] and out["identical"] == []
    assert "wo_a_w8.py: not the pinned revision's TP4 file (the local TP3 generalisation)" in out["lines"]
    # a checkout without the TP4 file proves nothing either way on TP3
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A)], {}, SRC, 3,
                                     [stat("wo_a_w8.py", None, "/pin/adapter/wo_a_w8.py")], "/pin")
    assert out["problems"] == []
    # TP4: the TP4 file is the right one, byte-identical like the six; the TP3 generalisation is named
    out = adapters_manifest_proposal([stat("wo_a_w8.py", C)], {}, SRC, 4, [tp4_file], "/pin")
    assert out["problems"] == [] and out["identical"] == ["wo_a_w8.py"]
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A)], {"wo_a_w8.py": C}, SRC, 4, [tp4_file], "/pin")
    assert out["problems"] == [
        "%s/wo_a_w8.py: sha256 %s, not byte-identical to the pinned revision's /pin/adapter/wo_a_w8.py (%s)"
        % (SRC, A, C)]
    assert out["changes"] == ["wo_a_w8.py: %s -> %s (on TP4 the downstream TP4 file of the pinned revision, never "
                              "the TP3 generalisation)" % (C, A)]


@pytest.mark.parametrize("tp_size", [2, 5, None, "x", True])
def test_a_tp_size_the_adapters_do_not_know_is_an_error_naming_it(tp_size):
    want = "tp_size %r: the adapters know which wo_a_w8.py a fleet runs on TP3 and TP4 only" % (tp_size,)
    with pytest.raises(AnsibleFilterError, match=re.escape(want)):
        adapters_manifest_proposal([stat("wo_a_w8.py", A)], {}, SRC, tp_size)
