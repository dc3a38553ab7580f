# -*- coding: utf-8 -*-
"""Engram cache on the DRM node (DSV41_ENGRAM_DRM_NODE). LAB STAND-IN of a TP3 port that does not exist yet.

No TP3 port of the downstream DRM cache adapter exists; stage I's `drm` experiment requires one that carries
an explicit fail policy (a failed DRM allocation fails the boot; it never falls back to anonymous ordinary
memory, which would change a constrained node's budget without a word). The lab builds this file into an
image only where a test needs "an image with the port" (tests/playbooks/test_stage_i_cache.py); the lab
engine prints the port's lines (lab wording) when the hook registers it and the node is set.
"""
import os

_PATCHED = False


def install():
    global _PATCHED
    if _PATCHED:
        return
    node = os.environ.get("DSV41_ENGRAM_DRM_NODE", "").strip()
    if not node:
        return
    if not os.path.exists(node):
        # the fail policy: no DRM node, no boot (never a silent fallback to ordinary memory)
        raise RuntimeError("DSV41_ENGRAM_DRM_NODE=%s does not exist; refusing to fall back" % node)
    _PATCHED = True
