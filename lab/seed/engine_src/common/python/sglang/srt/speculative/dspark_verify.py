"""LAB STAND-IN of the engine module sglang.srt.speculative.dspark_verify (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

VERIFY_IMPLS = {"greedy": None, "tree": None, "block": None}
DEFAULT_VERIFY = "greedy"
