# -*- coding: utf-8 -*-
"""Draft temperature (DSV41_DRAFT_TAU). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). Divides the draft head's logits by tau before
the draft tokens are proposed; the target model's verification is unchanged, so outputs stay exact.
``DSV41_DRAFT_TAU`` is a float: 1 (or unset) is off.
"""
import os

_PATCHED = False


def _tau():
    raw = os.environ.get("DSV41_DRAFT_TAU", "1").strip() or "1"
    tau = float(raw)
    if tau <= 0:
        raise ValueError("DSV41_DRAFT_TAU must be > 0, got %r" % raw)
    return tau


def install():
    global _PATCHED
    if _PATCHED:
        return
    tau = _tau()
    if tau == 1.0:
        return
    from sglang.srt.speculative import dspark_worker  # noqa: WPS433

    original = dspark_worker.DSparkDraftHead.compute_logits

    def compute_logits(self, *args, **kwargs):
        return original(self, *args, **kwargs) / tau

    dspark_worker.DSparkDraftHead.compute_logits = compute_logits
    _PATCHED = True
