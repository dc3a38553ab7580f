"""LAB STAND-IN of the engine module sglang.srt.model_executor.runner.flashinfer_autotune (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

def run_autotune(model_runner):
    raise NotImplementedError
