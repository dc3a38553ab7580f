# -*- coding: utf-8 -*-
"""Folded-result fence (DSV41_FOLDED_FENCE). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). With folded DSpark sampling, the sampled
tokens of a step are read back by the scheduler while the next step's graph may already overwrite
the folded buffer; the adapter records a CUDA event after the fold and waits on it before the read.
"""
_PATCHED = False


def install():
    global _PATCHED
    if _PATCHED:
        return
    import torch  # noqa: WPS433
    from sglang.srt.speculative import dspark_folded  # noqa: WPS433

    original_fold = dspark_folded.fold_sampling_results
    original_read = dspark_folded.read_folded_results

    def fold_sampling_results(*args, **kwargs):
        out = original_fold(*args, **kwargs)
        event = torch.cuda.Event()
        event.record()
        dspark_folded._DSV41_FENCE = event
        return out

    def read_folded_results(*args, **kwargs):
        event = getattr(dspark_folded, "_DSV41_FENCE", None)
        if event is not None:
            event.synchronize()
        return original_read(*args, **kwargs)

    dspark_folded.fold_sampling_results = fold_sampling_results
    dspark_folded.read_folded_results = read_folded_results
    _PATCHED = True
