"""LAB STAND-IN of the engine module sglang.srt.speculative.dspark_components.dspark_draft (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

def draft(batch, hidden_states, block_size):
    raise NotImplementedError
