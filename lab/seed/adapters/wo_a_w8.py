# -*- coding: utf-8 -*-
"""W8 twins of the attention output projection wo_a (DSV41_WO_A_W8). LAB STAND-IN of the real adapter.

LOCAL TP3 GENERALISATION: this is not the downstream file. Downstream ``wo_a_w8.py`` (the TP4 build)
hard-codes two output groups per rank; on TP3 the 43 local heads do not split that way, so this
version derives the grouping from the tensor-parallel size and uses G=4 local groups per rank. It
must never be replaced by the TP4 file.

Switches: ``DSV41_WO_A_W8`` builds FP8 (W8) twins of wo_a per group (~688 MiB per rank);
``DSV41_WO_A_W8_MID`` also covers the middle layers (needs W8); ``DSV41_WO_A_W8_DROP`` drops the bf16
originals once W8 is validated (frees ~1376 MiB; needs W8, only after validation).
"""
import os

LOCAL_GROUPS = 4          # G=4 local groups per rank on TP3 (downstream TP4: 2)
_PATCHED = False


def _on(var):
    return os.environ.get(var, "0").strip() not in ("", "0")


def local_groups(num_local_heads, tp_size):
    """Split this rank's heads into LOCAL_GROUPS contiguous groups (the last may be shorter)."""
    if tp_size < 1:
        raise ValueError("tp_size must be >= 1")
    per = -(-num_local_heads // LOCAL_GROUPS)
    return [(lo, min(lo + per, num_local_heads)) for lo in range(0, num_local_heads, per)]


def install():
    global _PATCHED
    if _PATCHED:
        return
    mid, drop = _on("DSV41_WO_A_W8_MID"), _on("DSV41_WO_A_W8_DROP")
    from sglang.srt.distributed import get_tensor_model_parallel_world_size  # noqa: WPS433
    from sglang.srt.models import deepseek_v4  # noqa: WPS433

    tp = get_tensor_model_parallel_world_size()
    attn = deepseek_v4.DeepseekV4Attention
    original = attn.process_weights_after_loading

    def process_weights_after_loading(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self.is_middle_layer and not mid:
            return
        self.wo_a_groups = local_groups(self.num_local_heads, tp)
        self.wo_a_w8 = [self.quantize_w8(self.wo_a.weight[:, lo:hi]) for lo, hi in self.wo_a_groups]
        if drop:
            self.wo_a.weight = None

    attn.process_weights_after_loading = process_weights_after_loading
    _PATCHED = True
