"""LAB STAND-IN of the engine module sglang.srt.models.deepseek_v4 (0.5.4.post1-dsv41): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

class DeepseekV4Attention:
    def process_weights_after_loading(self):
        raise NotImplementedError

    def quantize_w8(self, weight):
        raise NotImplementedError

    def wo_a_forward(self, x):
        # the running image's dispatch: any group count whose twins were built (TP3 G=4, TP4 G=2)
        if self.wo_a_w8 is not None and x.shape[0] <= 8 and len(self.wo_a_w8) == len(self.wo_a_groups):
            return self.small_row(x)
        return self.einsum(x)
