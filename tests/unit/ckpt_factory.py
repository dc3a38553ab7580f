"""Build synthetic safetensors checkpoints for tests and benchmarks.

Written straight from the format description (8-byte LE header length, JSON header, data), not
from module_utils (safetensors_index.py, shard_format.py), so tests that use it check that code independently.

Two flavours:
- data checkpoints: small real Engram tables filled with random bytes, for packing;
- header-only checkpoints (``sparse=True``): full-size shapes, the data area is a hole made with
  ``truncate``, so a 98 GB table costs no disk. Used for the space arithmetic.
"""
import io
import json
import os
import struct
import sys

FULL_SCALE_ROWS = {1: 384006168, 14: 384016684}  # the real DeepSeek-V4.1-Flash tables
INDEX_NAME = "model.safetensors.index.json"

# Unrelated tensors so the Engram data never starts at data offset 0.
FILLER_TENSORS = (
    ("embed.weight", "BF16", [64, 32]),
    ("layers.0.attn.wq.weight", "BF16", [32, 32]),
)
_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "F8_E8M0": 1, "U8": 1}


def tensor_bytes(dtype, shape):
    count = 1
    for dim in shape:
        count *= dim
    return count * _DTYPE_BYTES[dtype]


def write_safetensors(path, tensors, sparse=False, chunk=64 << 20):
    """Write a safetensors file. ``tensors``: list of (name, dtype, shape[, data]).

    ``data`` (bytes) is optional; without it the tensor is filled with random bytes, or left as
    a hole when ``sparse``. Returns the header dict written.
    """
    header, offset = {}, 0
    for entry in tensors:
        name, dtype, shape = entry[:3]
        size = tensor_bytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    write_raw_safetensors(path, header)
    with open(path, "r+b") as handle:
        base = handle.seek(0, os.SEEK_END)
        if sparse:
            handle.truncate(base + offset)
            return header
        for entry in tensors:
            size = tensor_bytes(entry[1], entry[2])
            if len(entry) > 3 and entry[3] is not None:
                assert len(entry[3]) == size, entry[0]
                handle.write(entry[3])
                continue
            while size:
                step = min(size, chunk)
                handle.write(os.urandom(step))
                size -= step
    return header


def write_raw_safetensors(path, header, pad_to=8):
    """Write only the length prefix and the JSON header (space-padded like safetensors does)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % pad_to)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)


def read_header(path):
    """Return (header, data_start) of a safetensors file, written independently of module_utils."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length)), 8 + length


def rewrite_header(path, mutate):
    """Apply ``mutate(header)`` to a safetensors file's header in place, keeping its data bytes."""
    header, start = read_header(path)
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read()
    mutate(header)
    write_raw_safetensors(path, header)
    with open(path, "ab") as handle:
        handle.write(data)


def engram_tensors(layer, rows):
    return [("layers.%d.engram.embed.weight" % layer, "F8_E4M3", [rows, 256]),
            ("layers.%d.engram.embed.scale" % layer, "F8_E8M0", [rows, 8])]


def make_checkpoint(root, rows=None, sparse=False, split=True, scale_first=(14,)):
    """Create a checkpoint directory ``root`` with Engram tables for ``rows`` ({layer: N}).

    With ``split`` layer 1 goes in shard 1 and every other layer in shard 2 (each with filler
    tensors around it); otherwise all live in one file. Layers in ``scale_first`` store the scale
    tensor before the weight tensor, so readers cannot assume an order. Returns a dict with
    ``dir``, ``index`` and ``shards`` ({layer: shard path}).
    """
    rows = dict(FULL_SCALE_ROWS if rows is None else rows)
    os.makedirs(root, exist_ok=True)
    names = (["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"] if split
             else ["model.safetensors"])
    contents = {name: [] for name in names}
    contents[names[0]].append(FILLER_TENSORS[0])
    for layer, count in sorted(rows.items()):
        name = names[0] if (layer == 1 or not split) else names[-1]
        pair = engram_tensors(layer, count)
        contents[name].extend(reversed(pair) if layer in scale_first else pair)
    contents[names[-1]].append(FILLER_TENSORS[1])
    weight_map, shards = {}, {}
    for name, tensors in contents.items():
        write_safetensors(os.path.join(root, name), tensors, sparse=sparse)
        for tensor in tensors:
            weight_map[tensor[0]] = name
    for layer in rows:
        shards[layer] = os.path.join(root, weight_map["layers.%d.engram.embed.weight" % layer])
    index = os.path.join(root, INDEX_NAME)
    with open(index, "w") as handle:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, handle, indent=1)
    return {"dir": root, "index": index, "shards": shards}


def edit_index(checkpoint_dir, mutate):
    """Apply ``mutate(index_dict)`` to the checkpoint's index file."""
    path = os.path.join(checkpoint_dir, INDEX_NAME)
    with open(path) as handle:
        index = json.load(handle)
    mutate(index)
    with open(path, "w") as handle:
        json.dump(index, handle)


def _layer_tables(checkpoint_dir, layer):
    """``(safetensors path, header, data start, weight tensor name, scale tensor name)`` of ``layer``."""
    with open(os.path.join(checkpoint_dir, INDEX_NAME)) as handle:
        weight_map = json.load(handle)["weight_map"]
    wname = "layers.%d.engram.embed.weight" % layer
    sname = "layers.%d.engram.embed.scale" % layer
    path = os.path.join(checkpoint_dir, weight_map[wname])
    header, start = read_header(path)
    return path, header, start, wname, sname


def update_table_rows(checkpoint_dir, layer, rows, keep_mtime=False):
    """Rewrite the weight and scale bytes of ``rows`` of ``layer`` in place with new random bytes:
    the checkpoint keeps its shapes, offsets and size. The file's mtime moves forward by a second
    (a touch the filesystem's clock granularity cannot hide) unless ``keep_mtime``, which puts it
    back exactly. Returns the shard file's path."""
    path, header, start, wname, sname = _layer_tables(checkpoint_dir, layer)
    before = os.stat(path)
    with open(path, "r+b") as handle:
        for row in rows:
            for name, width in ((wname, 256), (sname, 8)):
                handle.seek(start + header[name]["data_offsets"][0] + row * width)
                old = handle.read(width)
                new = os.urandom(width)
                while new == old:
                    new = os.urandom(width)
                handle.seek(-width, os.SEEK_CUR)
                handle.write(new)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10 ** 9))
    return path


def expected_shard(checkpoint_dir, layer, rank, tp_size):
    """Bytes of a packed shard built straight from the SPEC format (independent reader)."""
    path, header, start, wname, sname = _layer_tables(checkpoint_dir, layer)
    n_rows = header[wname]["shape"][0]
    lo, hi = n_rows * rank // tp_size, n_rows * (rank + 1) // tp_size
    out = io.BytesIO()
    out.write(struct.pack("<6Q", 0x31344E4531565344, layer, lo, hi, n_rows, 264).ljust(4096, b"\0"))
    with open(path, "rb") as handle:
        handle.seek(start + header[wname]["data_offsets"][0] + lo * 256)
        weights = handle.read((hi - lo) * 256)
        handle.seek(start + header[sname]["data_offsets"][0] + lo * 8)
        scales = handle.read((hi - lo) * 8)
    for i in range(hi - lo):
        out.write(weights[i * 256:(i + 1) * 256])
        out.write(scales[i * 8:(i + 1) * 8])
    return out.getvalue()


def snapshot(directory):
    """{name: (size, mtime_ns, sha256)} of the regular files in ``directory``."""
    import hashlib
    state = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            st = os.stat(path)
            state[name] = (st.st_size, st.st_mtime_ns, digest)
    return state


def python_with_module_utils():
    """sys.executable plus a PYTHONPATH-free bootstrap snippet that makes
    ``ansible.module_utils.<name>`` importable in a subprocess."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bootstrap = ("import ansible.module_utils as _m; _m.__path__.append(%r)\n"
                 % os.path.join(root, "module_utils"))
    return sys.executable, bootstrap


# --------------------------------------------------------------------------- malformed inputs
# Each builder makes a broken checkpoint under ``root`` and returns what a reader must report:
# {"dir", "rank", "tp_size", "layer" (a layer whose reading fails), "file" (the path the message
# must name), "message" (a substring of it)}.
SMALL_ROWS = {1: 40, 14: 30}


def _broken(root, mutate, rows=None, rank=1, tp_size=3, layer=14):
    ckpt = make_checkpoint(root, rows=rows or SMALL_ROWS)
    file, message = mutate(ckpt)
    return {"dir": ckpt["dir"], "rank": rank, "tp_size": tp_size, "layer": layer, "file": file,
            "message": message}


def _set(path, data):
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _edit_tensor(path, name, **fields):
    rewrite_header(path, lambda header: header[name].update(fields))


def _m_truncated_header(c):
    return _set(c["shards"][14], b"\x10\x00\x00"), "truncated safetensors header"


def _m_header_past_eof(c):
    return _set(c["shards"][14], struct.pack("<Q", 10 ** 6) + b"{}"), "runs past the end of the file"


def _m_invalid_json(c):
    return _set(c["shards"][14], struct.pack("<Q", 9) + b"{not json"), "not valid JSON"


def _m_header_not_object(c):
    return _set(c["shards"][14], struct.pack("<Q", 2) + b"[]"), "not an object"


def _m_missing_in_index(c):
    edit_index(c["dir"], lambda index: index["weight_map"].pop("layers.14.engram.embed.scale"))
    return c["index"], "layers.14.engram.embed.scale is missing from weight_map"


def _m_missing_in_header(c):
    rewrite_header(c["shards"][14], lambda header: header.pop("layers.14.engram.embed.weight"))
    return c["shards"][14], "missing from the safetensors header"


def _m_wrong_dtype(c):
    _edit_tensor(c["shards"][1], "layers.1.engram.embed.weight", dtype="BF16")
    return c["shards"][1], "dtype 'BF16', expected F8_E4M3"


def _m_wrong_scale_dtype(c):
    _edit_tensor(c["shards"][14], "layers.14.engram.embed.scale", dtype="U8")
    return c["shards"][14], "expected F8_E8M0"


def _m_wrong_shape(c):
    _edit_tensor(c["shards"][1], "layers.1.engram.embed.weight", shape=[80, 128])
    return c["shards"][1], "shape [80, 128], expected [N, 256]"


def _m_scale_rows_differ(c):
    path = os.path.join(c["dir"], "model-00001-of-00002.safetensors")
    write_safetensors(path, [FILLER_TENSORS[0], *engram_tensors(1, 40)[:1],
                             ("layers.1.engram.embed.scale", "F8_E8M0", [39, 8])])
    return path, "layers.1.engram.embed.scale has 39 rows but layers.1.engram.embed.weight has 40"


def _m_different_files(c):
    edit_index(c["dir"], lambda index: index["weight_map"].update(
        {"layers.14.engram.embed.scale": "model-00001-of-00002.safetensors"}))
    return c["index"], "both must be in the same file"


def _m_missing_index(c):
    os.unlink(c["index"])
    return c["index"], "checkpoint index not found"


def _m_index_invalid_json(c):
    return _set(c["index"], b"{\"weight_map\": "), "checkpoint index is not valid JSON"


def _m_no_weight_map(c):
    edit_index(c["dir"], lambda index: index.pop("weight_map"))
    return c["index"], "has no weight_map"


def _m_offsets_outside(c):
    _edit_tensor(c["shards"][14], "layers.0.attn.wq.weight", data_offsets=[0, 10 ** 9])
    return c["shards"][14], "past the end of the file"


def _m_length_mismatch(c):
    _edit_tensor(c["shards"][1], "layers.1.engram.embed.weight", shape=[39, 256])
    return c["shards"][1], "holds 10240 data bytes but shape [39, 256] needs 9984"


def _m_fewer_rows_than_ranks(c):
    return c["shards"][14], "fewer than tp_size 3"


def _m_rank_out_of_range(c):
    return c["dir"], "rank 3 is outside 0..2 for tp_size 3"


MALFORMED_CASES = {
    "truncated_header": lambda root: _broken(root, _m_truncated_header),
    "header_length_past_eof": lambda root: _broken(root, _m_header_past_eof),
    "invalid_json_header": lambda root: _broken(root, _m_invalid_json),
    "header_not_object": lambda root: _broken(root, _m_header_not_object),
    "missing_tensor_in_index": lambda root: _broken(root, _m_missing_in_index),
    "missing_tensor_in_shard": lambda root: _broken(root, _m_missing_in_header),
    "wrong_weight_dtype": lambda root: _broken(root, _m_wrong_dtype, layer=1),
    "wrong_scale_dtype": lambda root: _broken(root, _m_wrong_scale_dtype),
    "wrong_shape": lambda root: _broken(root, _m_wrong_shape, layer=1),
    "scale_rows_differ": lambda root: _broken(root, _m_scale_rows_differ, layer=1),
    "weight_scale_different_files": lambda root: _broken(root, _m_different_files),
    "missing_index": lambda root: _broken(root, _m_missing_index),
    "index_invalid_json": lambda root: _broken(root, _m_index_invalid_json),
    "index_without_weight_map": lambda root: _broken(root, _m_no_weight_map),
    "data_offsets_outside_file": lambda root: _broken(root, _m_offsets_outside),
    "data_length_not_shape": lambda root: _broken(root, _m_length_mismatch, layer=1),
    "fewer_rows_than_ranks": lambda root: _broken(root, _m_fewer_rows_than_ranks, rows={1: 40, 14: 2}),
    "rank_out_of_range": lambda root: _broken(root, _m_rank_out_of_range, rank=3),
}
