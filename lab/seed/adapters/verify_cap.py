# -*- coding: utf-8 -*-
"""Confidence cap on verification (DSV41_VERIFY_CAP). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). ``DSV41_VERIFY_CAP=conf:<float>`` stops the
draft block early once the draft head's confidence falls below the threshold, so a long block
(k=5) does not pay for tokens that will be rejected. Unset or 0 is off.
"""
import os

_PATCHED = False


def _threshold():
    raw = os.environ.get("DSV41_VERIFY_CAP", "0").strip()
    kind, _, value = raw.partition(":")
    if kind != "conf" or not value:
        raise ValueError("DSV41_VERIFY_CAP must look like conf:0.1, got %r" % raw)
    threshold = float(value)
    if not 0.0 < threshold < 1.0:
        raise ValueError("DSV41_VERIFY_CAP threshold must be in (0, 1), got %r" % raw)
    return threshold


def install():
    global _PATCHED
    if _PATCHED:
        return
    threshold = _threshold()
    from sglang.srt.speculative import dspark_worker  # noqa: WPS433

    original = dspark_worker.DSparkWorker.propose

    def propose(self, *args, **kwargs):
        kwargs.setdefault("stop_confidence", threshold)
        return original(self, *args, **kwargs)

    dspark_worker.DSparkWorker.propose = propose
    _PATCHED = True
