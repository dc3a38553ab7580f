"""LAB STAND-IN of the engine module sglang.srt.layers.engram.exact_nvme (common): only the definitions the local adapters touch, with the
shapes the lab models; the lab image check reads it out of the image, nothing imports it."""

class ExactNvmeEngramStore:
    def __init__(self, layer_id, shard_path, rows):
        self.layer_id, self.shard_path, self.rows = layer_id, shard_path, rows

    def lookup(self, hashes, out=None):
        raise NotImplementedError
