"""The profiler's trace: the kernels each rank ran in the profiled window (SGLang writes one per TP rank)."""
from __future__ import annotations

import json
import os
import time

from .adapters import adapter_on, prefetch_check_on, wo_a_bridge
from .autotune import write_atomic
from .knobs import fault, flag
from .paths import host_path, load_mounts


def profile_trace(rank: int, packed: bool = False) -> str:
    """Write this rank's trace of the profiled window; returns its path. Kernel events carry a stream
    (``tid``) and a duration (us per step, real scale): the MoE and attention dominate the compute stream
    (7); the Engram gather runs there (1,000 us packed, 2,500 us from the unpacked files) unless the
    prefetch is in effect on packed shards, which moves it to a side stream (8) and leaves a 150 us wait
    on the compute stream; CHECK mode re-runs the synchronous gather on the compute stream too."""
    if adapter_on("wo_a_w8") and not fault("g4_not_taken"):
        mid = flag("DSV41_WO_A_W8_MID") or flag("DSV41_WO_A_W8_DROP")
        # in bridge mode with DROP the draft keeps its bf16 wo_a (it does not use the shared dispatch)
        draft_bf16 = wo_a_bridge() and flag("DSV41_WO_A_W8_DROP")
        kernels = [("wo_a_fp8_gemv_g4 (target)", 7, 400),
                   ("wo_a_bf16_gemv (draft)", 7, 180) if draft_bf16 else ("wo_a_fp8_gemv_g4 (draft)", 7, 120)]
        kernels += [("wo_a_fp8_mid (target)", 7, 300)] if mid else []
    else:
        kernels = [("wo_a_bf16_gemv (target)", 7, 600), ("wo_a_bf16_gemv (draft)", 7, 180)]
    kernels += [("flash_attn_verify", 7, 8000), ("moe_b12x_dense", 7, 30000)]
    gather = 1000 if packed else 2500
    if packed and adapter_on("engram_prefetch"):
        kernels += [("engram_gather", 8, gather), ("engram_prefetch_wait", 7, 150)]
        if prefetch_check_on():
            kernels += [("engram_gather", 7, gather)]
    else:
        kernels += [("engram_gather", 7, gather)]
    events = [{"name": k, "ph": "X", "cat": "kernel", "ts": i * 10, "dur": dur, "pid": 0, "tid": tid}
              for i, (k, tid, dur) in enumerate(kernels)]
    out_dir = os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
    path = os.path.join(out_dir, f"{int(time.time())}-TP-{rank}.trace.json")
    write_atomic(host_path(path, load_mounts()) if path.startswith("/") else path,
                 json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path
