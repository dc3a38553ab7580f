"""The memory model: every memory figure of one boot (bytes; see the package docstring), deterministic."""
from __future__ import annotations

import math
import os

from . import knobs
from .adapters import adapter_on
from .caches import drm_ordinary_bytes, layer_budgets
from .constants import (BYTES_PER_FULL_TOKEN, DRAFT_GRAPH_PER_BS, DRAFT_WEIGHTS, EP1_WEIGHTS_EXTRA,
                        EP1_WORKSPACE_EXTRA, GIB, KV_BASE, MIB, PAGE_SIZE, RANK_EXTRA, SWA_BYTES_PER_TOKEN,
                        SWA_TOKENS_PER_REQUEST, TARGET_GRAPH_PER_BS, TARGET_WEIGHTS, TOTAL_BYTES, WO_A_COPY_MIB,
                        WO_A_DROP_KEPT, WO_A_WEIGHTS, WORKSPACE)
from .knobs import flag


def rank_extra() -> tuple:
    """Each rank's extra free memory (bytes): RANK_EXTRA, or the knob LAB_ENGINE_RANK_EXTRA_GIB="0,0.38,-1.5"
    (GiB per rank, comma-separated) for a lab where another rank has the least free memory."""
    raw = knobs.text("LAB_ENGINE_RANK_EXTRA_GIB").strip()
    if raw:
        try:
            return tuple(float(v) * GIB for v in raw.split(","))
        except ValueError:
            pass
    return RANK_EXTRA


def memory_model(frac: float, pin: int | None, rank: int = 0, max_running: int = 4, tp: int = 3,
                 ep: int | None = None) -> dict:
    """Every memory figure of one boot (bytes; see the module docstring). The KV pool and the folded-sampling
    AUTO decision follow the rank with the least free memory (every rank agrees on both, as the engine does)."""
    extra = rank_extra()
    least = min(extra[r % len(extra)] for r in range(max(tp, 1)))
    # TARGET_WEIGHTS is a TP3 rank's share; a TP4 rank holds a quarter of the same weights instead of a third
    target = TARGET_WEIGHTS * 3 / max(tp, 1) + sum(layer_budgets().values()) * GIB + drm_ordinary_bytes()
    ep1 = ep == 1 and tp > 1
    if ep1:
        target += EP1_WEIGHTS_EXTRA
    w8 = adapter_on("wo_a_w8")
    if w8:
        target += 688 * MIB
        if flag("DSV41_WO_A_W8_DROP"):
            target -= (WO_A_WEIGHTS - WO_A_DROP_KEPT) * WO_A_COPY_MIB * MIB
    draft = DRAFT_WEIGHTS + (210.6 * MIB if adapter_on("draft_head_fp8") else 0.0)
    static = 96 * MIB if os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING", "").strip() == "2" else 0.0
    reserve_095 = TOTAL_BYTES * 0.05
    base_begin = KV_BASE + reserve_095 + TARGET_WEIGHTS + DRAFT_WEIGHTS

    def after_loads(r: int) -> float:
        return base_begin + extra[r % len(extra)] - target - draft - static

    # the rank with the least free memory (rank 0 by default) minus the reserve TOTAL * (1 - F); 0.01 of F is
    # 1.2e9 bytes
    available = (KV_BASE + least + round((frac - 0.95) * 100, 6) * 1.2e9
                 - (target - TARGET_WEIGHTS) - (draft - DRAFT_WEIGHTS) - static)
    swa = max_running * SWA_TOKENS_PER_REQUEST
    swa_fixed = swa * SWA_BYTES_PER_TOKEN
    full_token = math.floor((available - swa_fixed) / BYTES_PER_FULL_TOKEN / PAGE_SIZE) * PAGE_SIZE
    full_token = max(full_token, 0) if available > swa_fixed else 0
    requested = (pin // PAGE_SIZE) * PAGE_SIZE if pin else None
    allocated = min(full_token, requested) if requested is not None else full_token
    begin = base_begin + extra[rank % len(extra)]
    after_target = begin - target
    after = after_loads(rank)
    pool_bytes = allocated * BYTES_PER_FULL_TOKEN + swa_fixed
    pool_end = after - pool_bytes
    capture_begin = pool_end - WORKSPACE - (EP1_WORKSPACE_EXTRA if ep1 else 0.0)
    target_graphs = TARGET_GRAPH_PER_BS * max_running
    draft_graphs = DRAFT_GRAPH_PER_BS * max_running
    after_capture = capture_begin - target_graphs - draft_graphs
    return {
        "load_begin": begin, "target_usage": target, "after_target": after_target,
        "draft_usage": draft + static, "after_loads": after,
        "available_bytes": available, "swa": swa, "swa_fixed": swa_fixed, "full_token": full_token,
        "requested": pin, "allocated": allocated, "pool": allocated, "clamped": bool(pin) and pin > full_token,
        "pool_end": pool_end, "capture_target_begin": capture_begin, "target_graphs": target_graphs,
        "capture_target_end": capture_begin - target_graphs, "draft_graphs": draft_graphs,
        "capture_draft_end": after_capture,
        "after": after_capture,
        # what the rank with the least free memory keeps after its captures: the AUTO folded-sampling decision
        "after_min": after_capture + least - extra[rank % len(extra)],
    }


def pool_line(run, full: int, mem: dict) -> str:
    if run.build == "old":
        return f"DSv4 pool sizes: full={full}, swa={full // 8}, c128={full // 128}"
    return (f"DSV4 pool sizes: full={full}, swa={mem['swa']}, c4={full // 4}, c128={full // 128}, "
            f"c4_state={mem['swa'] // 4}, c128_state=0")
