"""LAB STAND-IN of the engine module sglang.srt.speculative.dspark_components.dspark_verify (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

def verify(batch, draft_tokens, target_logits):
    raise NotImplementedError
