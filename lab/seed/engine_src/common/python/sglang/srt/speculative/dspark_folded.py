"""LAB STAND-IN of the engine module sglang.srt.speculative.dspark_folded (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

def fold_sampling_results(batch, logits, buffers):
    raise NotImplementedError


def read_folded_results(buffers):
    raise NotImplementedError
