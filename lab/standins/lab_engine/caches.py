"""The Engram row caches: each layer's budget, its slots, and what a DRM-backed cache still takes in ordinary
memory."""
from __future__ import annotations

import os

from .adapters import adapter_on
from .constants import DRM_SLOT_META_BYTES, DRM_STAGING, ENGRAM_LAYERS, GIB, ROW_BYTES
from .knobs import env_float, fault


def layer_budgets() -> dict:
    """Each Engram layer's row-cache budget (GiB). Stock, and with the downstream DRM adapter: DSV41_CACHE_GIB
    split evenly over the two layers (raising it gives the other layer an ordinary cache too). With the ported
    per-layer adapter (``engram_layer_budget`` in the image, DSV41_CACHE_LAYER_GIB set, e.g. ``1:0,14:0.25``):
    each named layer its own budget, a layer not named 0, DSV41_CACHE_GIB not used."""
    if adapter_on("engram_layer_budget"):
        out = {layer: 0.0 for layer in ENGRAM_LAYERS}
        for item in os.environ.get("DSV41_CACHE_LAYER_GIB", "").replace(" ", "").split(","):
            layer, _, value = item.partition(":")
            try:
                if int(layer) in out:
                    out[int(layer)] = max(0.0, float(value))
            except ValueError:
                continue
        return out
    share = env_float("DSV41_CACHE_GIB", 0.0) / len(ENGRAM_LAYERS)
    return {layer: share for layer in ENGRAM_LAYERS}


def cache_slots(gib_budget: float, ways: int) -> int:
    return int(gib_budget * GIB // ROW_BYTES // ways * ways) if gib_budget > 0 else 0


def drm_ordinary_bytes() -> float:
    """Ordinary memory the DRM-backed layer still takes (the report: keys/metadata and staging stay in ordinary
    memory): 16 B a slot plus a 32 MiB staging buffer; 0 without a DRM-backed cache (a fallback's rows are in the
    budget already)."""
    share = layer_budgets()[ENGRAM_LAYERS[-1]]
    if not adapter_on("engram_drm") or share <= 0 or fault("drm_fallback"):
        return 0.0
    ways = int(env_float("DSV41_CACHE_WAYS", 4)) or 4
    return cache_slots(share, ways) * DRM_SLOT_META_BYTES + DRM_STAGING


def layer_budget_line() -> str | None:
    """The ported per-layer budget adapter's line (lab wording: no port exists yet)."""
    if not adapter_on("engram_layer_budget"):
        return None
    b = layer_budgets()
    return ("[engram_layer_budget] per-layer Engram cache budgets: "
            + ", ".join(f"layer {layer} {b[layer]:.2f} GiB" for layer in ENGRAM_LAYERS)
            + " (DSV41_CACHE_GIB not used)")
