"""LAB STAND-IN of the engine module sglang.srt.layers.flashinfer_utils (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

def flashinfer_autotune_cache_path(flashinfer_version, sm):
    raise NotImplementedError


def _autotune_cache_digest(argv, env):
    raise NotImplementedError


def load_autotune_cache(path):
    raise NotImplementedError


def flashinfer_autotune_context(cache_path=None, enabled=True):
    raise NotImplementedError
