# -*- coding: utf-8 -*-
"""FP8 draft head (DSV41_DRAFT_HEAD_FP8). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). Quantises the DSpark draft head's LM-head
projection to FP8 (E4M3, per-row scales) at load time; the bf16 weight is kept for the target model.
Costs ~210.6 MiB of static memory per rank for the FP8 copy and its scales.
"""
_PATCHED = False


def _quantize_rows(weight):
    import torch  # noqa: WPS433

    amax = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    scale = amax / torch.finfo(torch.float8_e4m3fn).max
    return (weight / scale).to(torch.float8_e4m3fn), scale.squeeze(1).float()


def install():
    global _PATCHED
    if _PATCHED:
        return
    from sglang.srt.speculative import dspark_worker  # noqa: WPS433

    original = dspark_worker.DSparkDraftHead.load_weights

    def load_weights(self, weights, *args, **kwargs):
        result = original(self, weights, *args, **kwargs)
        self.lm_head_fp8, self.lm_head_scale = _quantize_rows(self.lm_head.weight.data)
        self.use_fp8_lm_head = True
        return result

    dspark_worker.DSparkDraftHead.load_weights = load_weights
    _PATCHED = True
