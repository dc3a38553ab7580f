"""LAB STAND-IN of the engine module sglang.srt.speculative.dspark_worker (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

class DSparkDraftHead:
    def load_weights(self, weights):
        raise NotImplementedError

    def compute_logits(self, hidden_states, sampling_info=None):
        raise NotImplementedError


class DSparkWorker:
    def propose(self, batch):
        raise NotImplementedError
