"""The engine stand-in's adapters: their lines in the real wording, a switch honoured only when the image carries and
registers the adapter, the wo_a_w8 bridge and the small-row kernel, the SPS table.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from engine_standin import ADAPTERS, ROOT, boot_worker, load_engine_module, messages


def test_adapter_lines_in_the_real_wording(lab):
    env = {"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_MID": "1", "DSV41_WO_A_W8_DROP": "1", "DSV41_DRAFT_HEAD_FP8": "1",
           "DSV41_DRAFT_TAU": "0.8", "DSV41_BLOCK_VERIFY": "1", "DSV41_VERIFY_CAP": "conf:0.1",
           "DSV41_FOLDED_FENCE": "1", "DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "1"}
    proc = boot_worker(lab, env=env, rank=0)
    out = proc.stream("stdout").splitlines()
    for line in ("[wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16",
                 "[wo_a_w8] mid path armed: 9..192 rows from the fp8 twin",
                 "[wo_a_w8] released the bf16 copy of 41 wo_a weights (1312 MB); 2 kept (dequantized copy not "
                 "bit-identical)",
                 "[draft_head_fp8] armed", "[draft_head_fp8] fp8 twin of the draft LM head (43136, 5120)",
                 "[draft_tau] draft temperature x0.8", "[block_verify] armed: block verification for sampled DSpark rows",
                 "[verify_cap] armed (conf:0.1): dead verify rows route to the anchor's experts",
                 "[verify_cap] remap captured into the verify graph for M=4", "[verify_cap] confidence present",
                 "[folded_fence] folded DSpark results cloned off the persistent verify buffers"):
        assert line in out, line
    msgs = messages(proc.stream("stderr"))
    assert ("DSV41 Engram prefetch ARMED: rows fetched on a side stream after the hasher (CHECK mode: old path re-run "
            "and compared)") in msgs
    assert any(m.startswith("DSV41 Engram prefetch disabled after error: ") for m in msgs), "needs packed shards"
    # off: nothing, and DSV41_DRAFT_TAU=1 is off
    quiet = boot_worker(lab, env={"DSV41_DRAFT_TAU": "1"})
    assert quiet.stream("stdout") == "" and "Engram prefetch" not in quiet.text()


def test_sps_table_judged_by_its_effect(lab, tmp_path):
    """A DSPARK_SPS_TABLE naming no file leaves the verify-all schedule; a table at that container path is read."""
    state = tmp_path / "state"
    state.mkdir()
    mounts = {**lab["mounts"], "/state": str(state)}
    env = {"DSPARK_SPS_TABLE": "/state/dspark_sps.json", "LAB_MOUNTS": json.dumps(mounts)}
    missing = messages(boot_worker(lab, env=env, rank=0).stream("stderr"))
    assert "DSPARK_SPS_TABLE=/state/dspark_sps.json not found; staying on the verify-all schedule" in missing
    (state / "dspark_sps.json").write_text("{}")
    present = messages(boot_worker(lab, env=env, rank=0).stream("stderr"))
    assert "DSPARK_SPS_TABLE=/state/dspark_sps.json loaded: ragged verify schedule in use" in present
    assert not any("DSPARK_SPS_TABLE" in m for m in messages(boot_worker(lab, rank=0).stream("stderr")))


FENCE_LINE = "[folded_fence] folded DSpark results cloned off the persistent verify buffers"


def hook_image(lab, hook_text: str, files=("folded_fence", "wo_a_w8", "engram_prefetch")) -> Path:
    """An image rootfs whose import hook is ``hook_text`` and whose adapter dir holds ``files``."""
    root = lab["tmp"] / f"rootfs-hook-{time.monotonic_ns()}"
    adir = root / "sgl-workspace" / "adapter"
    adir.mkdir(parents=True)
    for name in files:
        shutil.copy(ADAPTERS / f"{name}.py", adir / f"{name}.py")
    (adir / "sitecustomize.py").write_text(hook_text)
    return root


FINDER_HOOK = '''
import os, sys
_OFF = ("0", "", "off", "false")
def install_wo_a_w8(module): pass
def install_folded_fence(module): pass
class _Loader:
    def exec_module(self, module):
        name = module.__name__
        if name == "sglang.srt.models.deepseek_v4":
            if os.environ.get("DSV41_WO_A_W8", "0") not in _OFF:
                install_wo_a_w8(module)
        elif name == "sglang.srt.speculative.dspark_components.dspark_verify":
            if os.environ.get("DSV41_FOLDED_FENCE", "0") not in ("0", "", "off", "false"):
                install_folded_fence(module)
sys.meta_path.insert(0, _Loader())
'''


def test_switch_honoured_only_when_adapter_file_and_registration_are_in_the_image(lab):
    env = {"DSV41_FOLDED_FENCE": "1", "DSV41_WO_A_W8": "1", "DSV41_ENGRAM_PREFETCH": "1"}
    # finder/loader shape: the loader installs wo_a_w8 and folded_fence; prefetch is installed nowhere
    root = hook_image(lab, FINDER_HOOK)
    out = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(root)}, rank=0).text()
    assert FENCE_LINE in out and "[wo_a_w8] fp8 twins for 43 wo_a weights" in out
    assert "Engram prefetch" not in out, "registered nowhere in the hook: the switch is ignored"
    # registered but the file missing from the image: ignored too
    root = hook_image(lab, FINDER_HOOK, files=("wo_a_w8",))
    out = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(root)}, rank=0).text()
    assert FENCE_LINE not in out and "[wo_a_w8] fp8 twins" in out


BRIDGE_LINE = "[wo_a_w8] einsum bridge armed: fp8 twin for verify/draft rows, gemv left at M=1"
DRAFT_KEPT_LINE = "[wo_a_w8] draft wo_a left on bf16 (this engine's draft does not use the shared dispatch)"


def test_wo_a_bridge_is_today_s_image_and_the_kernel_image_has_none(lab):
    """Today's fleet image has no small-row kernel: W8 arms its einsum bridge by default, and with DROP keeps
    the draft's wo_a on bf16 and says so (SPEC section 3); an engine with the kernel prints neither."""
    out = boot_worker(lab, env={"DSV41_WO_A_W8": "1"}).stream("stdout").splitlines()
    assert out[:2] == ["[wo_a_w8] fp8 twins for 43 wo_a weights, 0 left on bf16", BRIDGE_LINE]
    out = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"}).stream("stdout").splitlines()
    assert out[1] == BRIDGE_LINE and out[4] == DRAFT_KEPT_LINE and out[3].startswith("[wo_a_w8] released the bf16")
    kernel = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1",
                                   "LAB_ENGINE_SMALL_ROW_KERNEL": "1"}).stream("stdout")
    assert "[wo_a_w8] released the bf16" in kernel and BRIDGE_LINE not in kernel and DRAFT_KEPT_LINE not in kernel
    faulty = boot_worker(lab, env={"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1",
                                   "LAB_ENGINE_FAULT": "bridge_draft_dropped"}).stream("stdout")
    assert BRIDGE_LINE in faulty and DRAFT_KEPT_LINE not in faulty


def test_an_image_whose_w8_adapter_carries_the_g4_dispatch_has_the_small_row_kernel(tmp_path):
    """The canary's kernel module (the ported G=4 dispatch in its wo_a_w8.py) switches W8 to kernel
    replacement; the same adapter without it runs the bridge."""
    engine = load_engine_module("adapters")
    adapter = tmp_path / "sgl-workspace" / "adapter"
    adapter.mkdir(parents=True)
    port = (ROOT / "lab" / "seed" / "adapters" / "ported" / "wo_a_w8_g4_dispatch.py").read_text()
    for text, expected in (("def install():\n    pass\n", False), ("def install():\n    pass\n" + port, True)):
        (adapter / "wo_a_w8.py").write_text(text)
        engine._IMAGE_CACHE.clear()
        old = os.environ.get("LAB_IMAGE_ROOT")
        os.environ["LAB_IMAGE_ROOT"] = str(tmp_path)
        try:
            assert engine.small_row_kernel() is expected
        finally:
            engine._IMAGE_CACHE.clear()
            os.environ.pop("LAB_IMAGE_ROOT") if old is None else os.environ.__setitem__("LAB_IMAGE_ROOT", old)
