"""adapters_manifest.yml on the lab: the manifest the lab's adapter files prove equals the lab inventory's; a
pinned checkout whose copy differs is named; check mode writes nothing, a real run writes only the proposal on
the control node. No host changes either way."""
import shutil

import pytest

from experiment_lab import ROOT, fleet_state
from labhelpers import playbook, recap

SOURCE = ROOT / "lab" / "seed" / "adapters"
SIX = ("engram_prefetch", "draft_head_fp8", "draft_tau", "block_verify", "verify_cap", "folded_fence")


@pytest.mark.smoke
def test_the_lab_files_prove_the_inventory_s_manifest_and_a_differing_pinned_copy_is_named(tmp_path):
    before = fleet_state()
    proposal = tmp_path / "proposal" / "lab.yml"
    pinned = tmp_path / "pinned"
    (pinned / "adapter").mkdir(parents=True)
    for name in SIX:
        shutil.copy(SOURCE / (name + ".py"), pinned / "adapter" / (name + ".py"))
    (pinned / "adapter" / "verify_cap.py").write_text("# the downstream's file, edited\n")
    args = ("-e", "adapters_manifest_proposal_file=%s" % proposal, "-e", "adapters_pinned_dir=%s" % pinned)

    rc, out = playbook("adapters_manifest.yml", "--check", *args)
    assert rc != 0
    assert "the inventory's manifest (dsv41_adapters_manifest) already equals the files" in " ".join(out.split())
    assert ("byte-identical to the pinned revision: block_verify.py, draft_head_fp8.py, draft_tau.py, "
            "engram_prefetch.py, folded_fence.py") in " ".join(out.split())
    assert "verify_cap.py: sha256" in out and "not byte-identical to the pinned revision's %s/adapter/verify_cap.py" \
        % pinned in " ".join(out.split())
    assert not proposal.exists(), "check mode writes nothing"

    shutil.copy(SOURCE / "verify_cap.py", pinned / "adapter" / "verify_cap.py")
    rc, out = playbook("adapters_manifest.yml", *args)
    assert rc == 0, out[-3000:]
    text = proposal.read_text()
    assert "dsv41_adapters_manifest:\n  autotune_keep.py: " in text and "  wo_a_w8.py: " in text
    for host, counts in recap(out).items():
        assert counts["failed"] == 0 and (host == "spark1" or counts["changed"] == 0), (host, counts)
    assert fleet_state() == before, "no host changed"
