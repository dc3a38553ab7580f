"""The adapter manifest proposed from the control-node files (filter adapters_manifest_proposal, entry point
`manifest` of the adapters role): what the files prove, what committing it changes, the pinned comparison."""
from adapters import adapters_manifest_proposal

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
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A), stat("sitecustomize.py", B)], {}, SRC)
    assert out["manifest"] == {"wo_a_w8.py": A, "sitecustomize.py": B} and out["problems"] == []
    assert out["changes"] == ["sitecustomize.py: added (%s)" % B, "wo_a_w8.py: added (%s)" % A]
    assert out["yaml"] == "dsv41_adapters_manifest:\n  sitecustomize.py: %s\n  wo_a_w8.py: %s\n" % (B, A)
    assert out["lines"][0] == "2 file(s) hashed in %s" % SRC


def test_a_changed_wo_a_w8_is_named_with_the_tp4_warning_and_an_unknown_entry_is_kept():
    out = adapters_manifest_proposal([stat("wo_a_w8.py", C)], {"wo_a_w8.py": A, "old.py": B}, SRC)
    assert out["changes"] == [
        "wo_a_w8.py: %s -> %s (the local TP3 generalisation; never replace it with the TP4 file)" % (A, C),
        "old.py: in the inventory's manifest but not deployed (kept; remove it by hand if unused)"]


def test_an_equal_manifest_says_so_and_a_missing_file_is_a_problem_not_a_removal():
    out = adapters_manifest_proposal([stat("wo_a_w8.py", A), stat("verify_cap.py")],
                                     {"wo_a_w8.py": A, "verify_cap.py": B}, SRC)
    assert out["problems"] == ["%s/verify_cap.py: missing (or not a regular file)" % SRC]
    assert out["changes"] == [] and "already equals the files" in out["lines"][-1]
    assert out["manifest"] == {"wo_a_w8.py": A}


def test_the_pinned_revision_proves_byte_identity_or_names_each_difference():
    pinned = [stat("draft_tau.py", A, "/pin/adapter/draft_tau.py"), stat("verify_cap.py", C, "/pin/adapter/verify_cap.py"),
              stat("block_verify.py", None, "/pin/adapter/block_verify.py")]
    out = adapters_manifest_proposal([stat("draft_tau.py", A), stat("verify_cap.py", B), stat("block_verify.py", A)],
                                     {}, SRC, pinned, "/pin")
    assert out["identical"] == ["draft_tau.py"]
    assert out["problems"] == [
        "%s/verify_cap.py: sha256 %s, not byte-identical to the pinned revision's /pin/adapter/verify_cap.py (%s)"
        % (SRC, B, C),
        "block_verify.py: the pinned revision's copy /pin/adapter/block_verify.py is missing"]
    # without a pinned checkout the loop's results are skipped: nothing is compared, nothing is a problem
    skipped = adapters_manifest_proposal([stat("draft_tau.py", A)], {}, SRC, [{"item": "draft_tau.py", "skipped": True}])
    assert skipped["problems"] == [] and not any("pinned" in line for line in skipped["lines"])
