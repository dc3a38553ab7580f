"""An independent reader of the formats in SPEC section 3, written for the tests only.

It shares no code with module_utils: the expected packed shard is rebuilt here from the checkpoint
bytes, so a packer bug cannot hide behind a matching reader.
"""
import json
import struct
from pathlib import Path


def safetensors_tensor(path, name):
    raw = Path(path).read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    begin, end = header[name]["data_offsets"]
    return header[name], raw[8 + hlen + begin:8 + hlen + end]


def expected_shard(checkpoint, layer, rank, tp):
    index = json.loads((Path(checkpoint) / "model.safetensors.index.json").read_text())["weight_map"]
    wname, sname = f"layers.{layer}.engram.embed.weight", f"layers.{layer}.engram.embed.scale"
    wmeta, weights = safetensors_tensor(Path(checkpoint) / index[wname], wname)
    smeta, scales = safetensors_tensor(Path(checkpoint) / index[sname], sname)
    n = wmeta["shape"][0]
    assert wmeta["shape"] == [n, 256] and smeta["shape"] == [n, 8]
    lo, hi = n * rank // tp, n * (rank + 1) // tp
    header = struct.pack("<6Q", 0x31344E4531565344, layer, lo, hi, n, 264).ljust(4096, b"\0")
    rows = b"".join(weights[r * 256:(r + 1) * 256] + scales[r * 8:(r + 1) * 8] for r in range(lo, hi))
    return header + rows, lo, hi, n
