"""LAB STAND-IN of the engine module sglang.srt.layers.engram (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""
from .exact_nvme import ExactNvmeEngramStore  # noqa: F401
