"""LAB STAND-IN of the engine module sglang.srt.models.deepseek_v4 (0.5.6.dev0+f80c91a4b): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

class DeepseekV4Attention:
    def process_weights_after_loading(self):
        raise NotImplementedError

    def quantize_w8(self, weight):
        raise NotImplementedError

    def wo_a_forward(self, x):
        # the pinned canary's dispatch (as at sglang f80c91a4b): the TP4 shapes only
        if tuple(x.shape) == (2, 4096) and tuple(self.wo_a_fp8.shape) == (2, 1024, 4096):
            return self.small_row_kernel(x)
        return self.einsum(x)
