# -*- coding: utf-8 -*-
"""Per-layer Engram cache budgets (DSV41_CACHE_LAYER_GIB). LAB STAND-IN of a TP3 port that does not exist yet.

The downstream adapter derives every layer's row-cache budget from the global DSV41_CACHE_GIB, so raising it for
the DRM-backed layer also allocates an ordinary-RAM cache for the other layer. The report asks for independent
per-layer budgets so the non-DRM layer can stay at zero; stage I's `drm` experiment requires a port that takes
them (`engram_layer_budget`: "LAYER:GiB" pairs, comma-separated, e.g. "1:0,14:0.25"; a layer not named gets 0 and
DSV41_CACHE_GIB is not used). The lab builds this file into an image only where a test needs "an image with the
port" (tests/playbooks/test_stage_i_cache.py); the lab engine honours the budgets and prints the port's line (lab
wording) when the hook registers it and the switch is set.
"""
import os

_PATCHED = False
LAYERS = (1, 14)


def budgets(value):
    """"1:0,14:0.25" -> {1: 0.0, 14: 0.25}; a malformed value fails the boot (never a silent global budget)."""
    out = dict((layer, 0.0) for layer in LAYERS)
    for item in value.split(","):
        layer, sep, gib = item.strip().partition(":")
        if not sep or not layer.isdigit() or int(layer) not in LAYERS or float(gib) < 0:
            raise RuntimeError("DSV41_CACHE_LAYER_GIB=%s: %r is not LAYER:GiB for layer 1 or 14" % (value, item))
        out[int(layer)] = float(gib)
    return out


def install():
    global _PATCHED
    if _PATCHED:
        return
    value = os.environ.get("DSV41_CACHE_LAYER_GIB", "").strip()
    if not value:
        return
    budgets(value)
    _PATCHED = True
