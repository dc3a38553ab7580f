"""LAB STAND-IN of the engine module sglang.srt.model_executor.cuda_graph_runner (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

class CudaGraphRunner:
    def capture(self):
        raise NotImplementedError
