"""The checkpoint's Engram tables (rows per layer from the index and safetensors headers) and the packed
shards the engine reads them from."""
from __future__ import annotations

import json
import os
import struct

from .constants import ENGRAM_LAYERS, HEADER_BYTES, MAGIC, MIB, ROW_BYTES
from .errors import EngramFatal, Fatal
from .paths import host_path


def read_safetensors_header(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise Fatal(f"{path} is not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 * MIB:
            raise Fatal(f"{path} has an implausible safetensors header length {length}")
        data = fh.read(length)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise Fatal(f"{path}: bad safetensors header ({exc})") from None


def engram_rows(model_path_container: str, mounts: dict) -> dict:
    """Return {layer: N} from the checkpoint (index + safetensors headers)."""
    model_dir = host_path(model_path_container, mounts)
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    weight_map = {}
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as fh:
            weight_map = json.load(fh).get("weight_map", {})
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        weight_map = None
    else:
        raise Fatal(f"no checkpoint index at {model_path_container}/model.safetensors.index.json")
    headers: dict = {}
    result = {}
    for layer in ENGRAM_LAYERS:
        wname = f"layers.{layer}.engram.embed.weight"
        sname = f"layers.{layer}.engram.embed.scale"
        fname = "model.safetensors" if weight_map is None else weight_map.get(wname)
        if not fname:
            raise Fatal(f"Engram tensor {wname} not found in checkpoint index")
        if fname not in headers:
            headers[fname] = read_safetensors_header(os.path.join(model_dir, fname))
        hdr = headers[fname]
        w = hdr.get(wname)
        s = hdr.get(sname)
        if not w or not s:
            raise Fatal(f"Engram tensors for layer {layer} missing in {fname}")
        if (w.get("dtype") != "F8_E4M3" or len(w.get("shape", [])) != 2 or w["shape"][1] != 256
                or s.get("dtype") != "F8_E8M0" or list(s.get("shape", [])) != [w["shape"][0], 8]):
            raise Fatal(f"Engram tensors for layer {layer} have unexpected dtype/shape "
                        f"({w.get('dtype')} {w.get('shape')}, {s.get('dtype')} {s.get('shape')})")
        result[layer] = int(w["shape"][0])
    return result


def check_shard(host_file: str, layer: int, lo: int, hi: int, n: int) -> bool:
    """False if missing; True if the engine would use it; EngramFatal as the engine's reader words it."""
    if not os.path.exists(host_file):
        return False
    size = os.path.getsize(host_file)
    with open(host_file, "rb") as fh:
        head = fh.read(48)
    if len(head) < 48:
        raise EngramFatal("packed Engram shard has no header", errno=61)  # ENODATA: short read
    fields = struct.unpack_from("<6Q", head, 0)
    if fields[0] != MAGIC:
        raise EngramFatal("packed Engram shard has no header")
    if fields != (MAGIC, layer, lo, hi, n, ROW_BYTES):
        raise EngramFatal("packed Engram shard does not match this rank's range; re-run the pack step")
    if size < HEADER_BYTES + (hi - lo) * ROW_BYTES:
        raise EngramFatal("packed Engram shard is truncated")
    return True
