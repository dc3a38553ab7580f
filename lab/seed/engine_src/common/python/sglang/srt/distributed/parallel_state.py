"""LAB STAND-IN of the engine module sglang.srt.distributed.parallel_state (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

__all__ = ["get_tensor_model_parallel_world_size", "get_tensor_model_parallel_rank"]


def get_tensor_model_parallel_world_size():
    raise NotImplementedError


def get_tensor_model_parallel_rank():
    raise NotImplementedError
