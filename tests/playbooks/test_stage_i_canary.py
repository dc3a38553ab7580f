"""Stage I, the pinned canary image (`stage_i_experiments.yml -e experiment=canary`), on the lab.

The arm changes the engine image only, named through the inventory's pin (experiment_image_pins.canary). A
tag is refused on the control node; an image not on every rank, a canary whose small-row dispatch admits
only G=2 with no adapter replacing it (the lab canary, as sglang f80c91a4b), a hooked engine symbol whose
signature changed and a changed vocab padding are each refused before anything changes, named. The G=4
dispatch a canary carries lives in the W8 adapter, so it installs only where W8 is on: on the report's fleet
(W8 off) the canary is refused naming the switch; after stage D's promotion (W8 validated and on, an inventory
layer) it runs end to end against its own baseline and the fleet ends on its snapshot.
The canary's engine source is the lab's source layer of its version (lab/seed/engine_src); the fault tests
overwrite a file of that layer on the head (where the checks read it) and put it back.
"""
import json
import re

import pytest

from experiment_lab import (CANARY_TAG, CANARY_VERSION, build_canary_image, engine_healthy, flat, fleet_state,
                            inventory_layer, lab_definition, record, running_image_digest, verdicts)
from labhelpers import LAB_INVENTORY, playbook, sh

# stages C to I require stage_a and stage_b in the stage ledger for the running image (the report's order):
# these tests run as an operator does after committing both (tests/playbooks/conftest.py)
STAGES_PASSED = True

RUN = ("-e", "maintenance_window=true")
LAYER = "/usr/local/lib/dsv41-lab/seed/engine_src/%s/python/sglang/srt" % CANARY_VERSION


@pytest.fixture(scope="module")
def w8_on(tmp_path_factory):
    """The fleet after stage D's promotion: W8 validated for the running image and on in the baseline (an
    inventory layer). The canary's G=4 dispatch lives in the W8 adapter, so only then does it install."""
    digest = running_image_digest("stage_d_wo_a.yml", tmp_path_factory.mktemp("digest"))
    return inventory_layer(tmp_path_factory.mktemp("w8"), (
        "dsv41_validations:\n  - {name: wo_a_w8, image_digest: '%s', record: records/lab/experiments/wo_a_w8/record.json}\n"
        "dsv41_launcher_overrides: {DSV41_WO_A_W8: '1'}\n") % digest)


def canary(tmp_path, ref, *extra, inventories=(LAB_INVENTORY,)):
    return playbook("stage_i_experiments.yml", "-e", "experiment=canary",
                    "-e", json.dumps({"experiment_image_pins": {"canary": ref}}),
                    "-e", "experiment_record_root=%s" % (tmp_path / "rec"), *extra, inventories=inventories)


def refused(out):
    """The refusal's message (the run stopped before its snapshot: no host changed)."""
    out = flat(out)
    assert "stage_i_canary refused, nothing changed:" in out, out[-3000:]
    assert "TASK [experiment : Take the snapshot" not in out
    return out.split("stage_i_canary refused, nothing changed:")[-1].split("PLAY RECAP")[0]


def test_a_tag_or_no_pin_is_refused_on_the_control_node(tmp_path):
    before = fleet_state()
    rc, out = canary(tmp_path, CANARY_TAG, *RUN)
    assert rc != 0
    out = refused(out)
    assert ("arm canary: experiment_image_pins.canary is dsv41-sglang:canary-f80c91a4b, not pinned by digest "
            "(repo@sha256:<64 hex> or an image id sha256:<64 hex>; a tag can move under the comparison)") in out
    assert "TASK [experiment : Read MemAvailable]" not in out, "refused before any host is read"
    rc, out = playbook("stage_i_experiments.yml", "-e", "experiment=canary", *RUN)
    assert rc != 0
    assert ("arm canary: no image pinned as canary (set experiment_image_pins.canary to repo@sha256:<digest> "
            "in the inventory)") in refused(out)
    assert fleet_state() == before


def test_the_canary_without_a_g4_dispatch_or_missing_on_a_rank_is_refused_before_any_change(tmp_path):
    image = build_canary_image(g4_dispatch=False)
    before = fleet_state()
    rc, out = canary(tmp_path, image, *RUN)
    assert rc != 0
    out = refused(out)
    assert ("image %s g4_guard: the candidate sglang/srt/models/deepseek_v4.py:13: DeepseekV4Attention.wo_a_forward "
            "enters its small-row path only for weights (2, 1024, 4096); TP3 has G=4 local groups and no adapter in "
            "the image replaces sglang.srt.models.deepseek_v4.DeepseekV4Attention.wo_a_forward (carry a G=4 "
            "dispatch)" % image) in out
    assert "hook_signatures:" not in out and "vocab_padding:" not in out, "the other two checks pass"
    absent = "sha256:" + "0" * 64
    rc, out = canary(tmp_path, absent, "--check")
    assert rc != 0
    out = refused(out)
    assert "image %s is not on spark1, spark2, spark3 (pull it by digest on every rank first)" % absent in out
    assert "image %s is not on spark1 (docker image inspect: " % absent in out, "the head's check says what docker said"
    assert fleet_state() == before


def test_a_changed_hook_signature_and_vocab_padding_are_refused_naming_each(tmp_path, w8_on):
    image = build_canary_image(g4_dispatch=True)
    worker = sh("spark1", "cat %s/../../../../common/python/sglang/srt/speculative/dspark_worker.py" % LAYER)
    vocab = sh("spark1", "cat %s/../../../../common/python/sglang/srt/layers/vocab_parallel_embedding.py" % LAYER)
    drifted = {
        # the canary's worker takes one more argument in propose (the cap wraps it) and renamed load_weights
        "speculative/dspark_worker.py": worker.replace("def propose(self, batch)", "def propose(self, batch, state)")
                                              .replace("def load_weights(", "def load_weights_v2("),
        "layers/vocab_parallel_embedding.py": vocab.replace("DEFAULT_VOCAB_PADDING_SIZE = 64",
                                                            "DEFAULT_VOCAB_PADDING_SIZE = 256"),
    }
    assert all(drifted[k] not in (worker, vocab) for k in drifted), "the lab sources changed shape"
    before = fleet_state()
    try:
        for rel, text in drifted.items():
            sh("spark1", "mkdir -p %s/%s && cat > %s/%s <<'SRC'\n%sSRC\n"
               % (LAYER, rel.rsplit("/", 1)[0], LAYER, rel, text))
        rc, out = canary(tmp_path, image, "--check", inventories=w8_on)
    finally:
        sh("spark1", "rm -f %s" % " ".join("%s/%s" % (LAYER, rel) for rel in drifted))
    assert rc != 0
    out = refused(out)
    assert ("image %s hook_signatures: verify_cap: sglang.srt.speculative.dspark_worker.DSparkWorker.propose "
            "changed: def (self, batch) in the running image dsv41-sglang:tp3, def (self, batch, state) in the "
            "candidate" % image) in out
    assert ("image %s hook_signatures: draft_head_fp8: sglang.srt.speculative.dspark_worker.DSparkDraftHead."
            "load_weights is gone in the candidate (sglang/srt/speculative/dspark_worker.py has no "
            "DSparkDraftHead.load_weights)" % image) in out
    assert ("image %s vocab_padding: the candidate pads the vocabulary of 129280 to 43264 rows a rank "
            "(DEFAULT_VOCAB_PADDING_SIZE 256), the running image dsv41-sglang:tp3 to 43136 (DEFAULT_VOCAB_PADDING_SIZE "
            "64): the TP3 vocab split changes" % image) in out
    assert "g4_guard:" not in out, "the port's dispatch replaces the guarded function"
    assert fleet_state() == before


def test_check_mode_prints_the_plan_and_every_check_and_changes_nothing(tmp_path, w8_on):
    image = build_canary_image(g4_dispatch=True)
    before = fleet_state()
    # the G=4 dispatch is carried by the W8 adapter: with W8 off (the report's fleet) it never installs
    rc, out = canary(tmp_path, image, "--check")
    assert rc != 0
    out = refused(out)
    assert ("image %s g4_guard: the candidate sglang/srt/models/deepseek_v4.py:13: DeepseekV4Attention.wo_a_forward "
            "enters its small-row path only for weights (2, 1024, 4096); TP3 has G=4 local groups, and the adapter "
            "replacing sglang.srt.models.deepseek_v4.DeepseekV4Attention.wo_a_forward is not armed by the settings it "
            "boots with (wo_a_w8: install_wo_a_w8 is gated by DSV41_WO_A_W8, not armed by DSV41_WO_A_W8=0): the run "
            "would time the G=2 dispatch" % image) in out
    rc, out = canary(tmp_path, image, "--check", inventories=w8_on)
    assert rc == 0, flat(out)[-3000:]
    out = flat(out)
    assert "arm canary: the image pinned as canary (experiment_image_pins)" in out
    assert "msg: arms: canary: [] facts:" in out, "every precondition of the arm passes"
    # the verdicts are printed with the tables they were judged on
    assert ("%s: checks: g4_guard: problems: [] rows: - function: DeepseekV4Attention.wo_a_forward verdict: ok "
            "weights: (2, 1024, 4096) where: sglang/srt/models/deepseek_v4.py:13 why: replaced by an adapter "
            "(wo_a_w8, armed by DSV41_WO_A_W8=1) hook_signatures: problems: []" % image) in out
    assert "vocab_padding: problems: [] rows: - image: the running image dsv41-sglang:tp3 padding: 64 rows_per_rank: 43136" in out
    assert fleet_state() == before
    assert not (tmp_path / "rec").exists() or not any((tmp_path / "rec").iterdir())


def test_the_canary_with_a_g4_dispatch_runs_against_its_own_baseline_and_restores(tmp_path, fast_engine, w8_on):
    image = build_canary_image(g4_dispatch=True)
    before = fleet_state()
    rc, out = canary(tmp_path, image, *RUN, "-e", lab_definition(tmp_path, "stage_i_canary"), inventories=w8_on)
    run, rec = record(tmp_path / "rec")
    assert rc == 0, (rec["verdicts"], rec["arm_checks"])
    assert verdicts(rec)["canary"]["verdict"] == "pass"
    assert rec["conditions"]["canary"]["settings"]["IMAGE"] == image
    assert rec["conditions"]["canary"]["settings"].get("DSV41_WO_A_W8") is None, "the arm changes the image only"
    # every rank's engine ran the pinned image in the arm, and the running one in the baseline
    assert rec["conditions"]["canary"]["image_ids"] == {"spark1": image, "spark2": image, "spark3": image}
    running = set(re.findall(r"^sha256:[0-9a-f]{64}$", "\n".join(before.values()), re.M))
    assert len(running) == 1 and set(rec["conditions"]["baseline"]["image_ids"].values()) == running
    assert "IMAGE" not in rec["conditions"]["baseline"]["settings"] or \
        rec["conditions"]["baseline"]["settings"]["IMAGE"] != image
    md = (run / "record.md").read_text()
    print(md)
    assert "## Image %s" % image in md and "Verdict before any change: **may run**" in md
    assert "| wo_a_w8 | sglang.srt.models.deepseek_v4.DeepseekV4Attention.process_weights_after_loading | patched | " \
           "def (self) | def (self) | ok |" in md
    assert "| sglang/srt/models/deepseek_v4.py:13 | DeepseekV4Attention.wo_a_forward | (2, 1024, 4096) | " \
           "replaced by an adapter (wo_a_w8, armed by DSV41_WO_A_W8=1) | ok |" in md
    assert rec["restore"] == {"equal": True, "differences": {}}
    assert fleet_state() == before and engine_healthy()
