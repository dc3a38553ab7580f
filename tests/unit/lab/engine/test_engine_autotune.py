"""The engine stand-in's FlashInfer autotune cache: the stock passes, the tqdm bar they interrupt, the retention
adapter (in the image or not) and its drift.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from engine_standin import (ADAPTERS, DISAGREE, ROOT, TS, WORKER_DONE, boot_worker, engine_argv, messages, phys,
                            run_to_exit)


REPORT_HOOK = ROOT / "lab" / "seed" / "sitecustomize-report.py"  # the import hook as the report found it


def cache_files(lab):
    return sorted(p for p in lab["cache"].rglob("rank_tp*_pp0_dp0.json"))


CACHE_RE = r"/root/\.cache/sglang/flashinfer/autotune/0\.6\.18/sm121/([0-9a-f]{16})/rank_tp(\d)_pp0_dp0\.json"


def test_stock_autotune_disagrees_on_rank0_when_caches_exist(lab):
    first = boot_worker(lab, rank=0).stream("stderr")
    msgs = messages(first)
    assert DISAGREE not in first and msgs.count("FlashInfer autotune completed.") == 2
    runs = [m for m in msgs if m.startswith("Running FlashInfer autotune with cache: ")]
    assert len(runs) == 2 and all(re.fullmatch("Running FlashInfer autotune with cache: " + CACHE_RE, r) for r in runs)
    (f,) = cache_files(lab)
    second = boot_worker(lab, rank=0).stream("stderr")
    assert messages(second).count(DISAGREE) == 2
    assert second.count("Running FlashInfer autotune with cache: /root/.cache/") == 2
    # per-rank content differs
    boot_worker(lab, rank=2)
    contents = {p.name: json.loads(p.read_text())["rank"] for p in cache_files(lab)}
    assert contents == {"rank_tp0_pp0_dp0.json": 0, "rank_tp2_pp0_dp0.json": 2}
    assert f in cache_files(lab)


def test_glued_tqdm_lines_carry_cursor_codes(lab):
    boot_worker(lab, rank=0)
    err = boot_worker(lab, rank=0).stream("stderr")
    glued = [ln for ln in phys(err) if ln.startswith("Capturing batches (bs=4 ")]
    assert len(glued) == 2, "one bar per capture pass"
    for ln in glued:
        m = re.fullmatch(r"Capturing batches \(bs=4 avail_mem=\d+\.\d\d GB\):   0%\|          \| 0/4 "
                         r"\[00:00<\?, \?it/s\]\r(Capturing batches \(bs=4 [^\r\x1b]*)\x1b\[A"
                         rf"\[{TS} TP0 EP0\] (.*)", ln)
        assert m, repr(ln)
        assert m.group(2) == DISAGREE, "the logging record lands on the bar's physical line"
    redraws = [ln for ln in phys(err) if ln.startswith("\rCapturing batches")]
    assert len(redraws) == 2 and all("100%|██████████| 4/4 [" in ln and ln.count("\r") == 4 for ln in redraws)
    # a worker (no warning): the autotune run record is the one glued to the bar
    wk = boot_worker(lab, rank=1).stream("stderr")
    assert all(re.search(rf"\x1b\[A\[{TS} TP1 EP1\] Running FlashInfer autotune with cache: ", ln)
               for ln in phys(wk) if ln.startswith("Capturing batches (bs=4 "))


def test_retention_reuses_then_retunes_after_change(lab):
    keep = {"DSV41_AUTOTUNE_KEEP": "1"}
    first = boot_worker(lab, env=keep)
    out = first.stream("stdout").splitlines()
    assert out[0] == "[autotune_keep] armed"
    assert len(out) == 3 and all(re.fullmatch(r"\[autotune_keep\] tuned and saved [0-9a-f]{16}/rank_tp1_pp0_dp0\.json",
                                              ln) for ln in out[1:]), out
    assert "[autotune_keep]" not in first.stream("stderr")
    (cache,) = cache_files(lab)
    assert out[1].endswith(f"{cache.parent.name}/{cache.name}")
    assert Path(str(cache) + ".launch").exists()
    before = cache.read_bytes(), cache.stat().st_mtime_ns
    second = boot_worker(lab, env=keep)
    assert second.stream("stdout").splitlines() == ["[autotune_keep] armed"] + \
        [f"[autotune_keep] reused {cache.parent.name}/{cache.name}"] * 2
    assert "Running FlashInfer autotune" not in second.text() and DISAGREE not in second.text()
    assert (cache.read_bytes(), cache.stat().st_mtime_ns) == before
    # a shape-relevant change: new hash directory, tuned again
    third = boot_worker(lab, env={**keep, "DSPARK_BLOCK_SIZE": "5"}, block=5)
    assert third.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    # an env-only change (same cache dir): sidecar mismatch -> retune, then reused again
    fourth = boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"})
    assert fourth.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env={**keep, "DSV41_FOLDED_FENCE": "1"}).stream("stdout").count("[autotune_keep] reused") == 2


def test_retention_drift_fails(lab):
    rc, proc = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"})
    assert rc == 1
    assert "\nRuntimeError: DSV41_AUTOTUNE_KEEP: flashinfer_autotune_context is gone; engine drifted\n" in \
        proc.stream("stderr")
    assert "Load weight begin" not in proc.text()


def test_retention_drift_file(lab):
    drift = lab["tmp"] / "engine_drift"
    drift.write_text("_autotune_cache_digest\n")
    rc, proc = run_to_exit(lab, engine_argv("worker", 1),
                           env={"DSV41_AUTOTUNE_KEEP": "1", "LAB_ENGINE_DRIFT_FILE": str(drift)})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in proc.stream("stderr")
    # stock engine ignores it
    assert WORKER_DONE in boot_worker(lab, env={"LAB_ENGINE_DRIFT_FILE": str(drift)}).text()


def image_root(lab, *, keep_file: bool, registered: bool) -> Path:
    """An image rootfs as the docker stand-in builds it: sgl-workspace/adapter/ with the seven local
    adapters + sitecustomize.py, optionally autotune_keep.py and the hook that installs it (stage B's edit)."""
    root = lab["tmp"] / f"rootfs-{int(keep_file)}{int(registered)}"
    adir = root / "sgl-workspace" / "adapter"
    adir.mkdir(parents=True)
    for f in ADAPTERS.glob("*.py"):
        if f.name != "autotune_keep.py" or keep_file:
            shutil.copy(f, adir / f.name)
    # registered: the ported hook (stage B's edit: the autotune module wrapped, install_autotune_keep gated)
    text = (ADAPTERS / "sitecustomize.py").read_text() if registered else REPORT_HOOK.read_text()
    (adir / "sitecustomize.py").write_text(text)
    return root


@pytest.mark.parametrize("keep_file,registered", [(False, False), (True, False), (False, True)])
def test_retention_switch_ignored_when_adapter_not_in_image(lab, keep_file, registered):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "DSV41_SOURCE": "/sgl-workspace",
           "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=keep_file, registered=registered)),
           "LAB_ENGINE_DRIFT": "flashinfer_autotune_context"}  # drift is moot without the adapter
    first = boot_worker(lab, env=env, rank=0)
    second = boot_worker(lab, env=env, rank=0)
    for proc in (first, second):
        assert "[autotune_keep]" not in proc.text() and proc.stream("stdout") == ""
        assert messages(proc.stream("stderr")).count("FlashInfer autotune completed.") == 2
    assert messages(second.stream("stderr")).count(DISAGREE) == 2, "behaves like the stock engine"
    (cache,) = cache_files(lab)
    assert not Path(str(cache) + ".launch").exists()


def test_retention_armed_when_adapter_in_image(lab):
    env = {"DSV41_AUTOTUNE_KEEP": "1", "DSV41_SOURCE": "/sgl-workspace",
           "LAB_IMAGE_ROOT": str(image_root(lab, keep_file=True, registered=True))}
    # without DSV41_SOURCE the hook inserts no finder: nothing is installed, whatever the switch
    unsourced = boot_worker(lab, env={k: v for k, v in env.items() if k != "DSV41_SOURCE"}, rank=0)
    assert "[autotune_keep]" not in unsourced.text()
    first = boot_worker(lab, env=env, rank=0)
    assert first.stream("stdout").startswith("[autotune_keep] armed\n")
    assert first.stream("stdout").count("[autotune_keep] tuned and saved") == 2
    assert boot_worker(lab, env=env).stream("stdout").count("[autotune_keep] tuned and saved") == 2, "rank 1's file"
    assert boot_worker(lab, env=env, rank=0).stream("stdout").count("[autotune_keep] reused") == 2
    # switch off with the adapter in the image: stock
    off = boot_worker(lab, env={**env, "DSV41_AUTOTUNE_KEEP": "0"}, rank=0)
    assert "[autotune_keep]" not in off.text() and messages(off.stream("stderr")).count(DISAGREE) == 2
    # drift only matters when the adapter is armed
    rc, proc = run_to_exit(lab, engine_argv("worker", 1), env={**env, "LAB_ENGINE_DRIFT": "_autotune_cache_digest"})
    assert rc == 1 and "DSV41_AUTOTUNE_KEEP: _autotune_cache_digest is gone; engine drifted" in proc.stream("stderr")
    # an image root that does not exist (an engine image without a build): not armed
    gone = boot_worker(lab, env={**env, "LAB_IMAGE_ROOT": str(lab["tmp"] / "no-such-rootfs")})
    assert "[autotune_keep]" not in gone.text()
