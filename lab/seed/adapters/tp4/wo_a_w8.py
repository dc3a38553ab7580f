# -*- coding: utf-8 -*-
"""W8 twins of the attention output projection wo_a (DSV41_WO_A_W8). LAB STAND-IN of the real adapter.

DOWNSTREAM TP4 FILE (pinned revision 4d8f4c0868ed3b394688b65d88cd99a82c237642): written for the TP4
fleet, two output groups per rank, and it asserts a tensor-parallel size of 4. Kept in the lab only
as the file that must NEVER replace the local TP3 ``wo_a_w8.py`` (which uses G=4 local groups).
"""
import os

GROUPS = 2                # TP4: two groups per rank
_PATCHED = False


def _on(var):
    return os.environ.get(var, "0").strip() not in ("", "0")


def install():
    global _PATCHED
    if _PATCHED:
        return
    drop = _on("DSV41_WO_A_W8_DROP")
    from sglang.srt.distributed import get_tensor_model_parallel_world_size  # noqa: WPS433
    from sglang.srt.models import deepseek_v4  # noqa: WPS433

    assert get_tensor_model_parallel_world_size() == 4, "wo_a_w8: TP4 layout only"
    attn = deepseek_v4.DeepseekV4Attention
    original = attn.process_weights_after_loading

    def process_weights_after_loading(self, *args, **kwargs):
        original(self, *args, **kwargs)
        half = self.num_local_heads // GROUPS
        self.wo_a_groups = [(0, half), (half, self.num_local_heads)]
        self.wo_a_w8 = [self.quantize_w8(self.wo_a.weight[:, lo:hi]) for lo, hi in self.wo_a_groups]
        if drop:
            self.wo_a.weight = None

    attn.process_weights_after_loading = process_weights_after_loading
    _PATCHED = True
