"""LAB STAND-IN of the engine module sglang.srt.layers.vocab_parallel_embedding (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

DEFAULT_VOCAB_PADDING_SIZE = 64


def pad_vocab_size(vocab_size, pad_to=DEFAULT_VOCAB_PADDING_SIZE):
    return ((vocab_size + pad_to - 1) // pad_to) * pad_to
