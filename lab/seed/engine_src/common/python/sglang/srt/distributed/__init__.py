"""LAB STAND-IN of the engine module sglang.srt.distributed (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""
from .parallel_state import *  # noqa: F401,F403
