#!/usr/bin/env python3
"""Create the two synthetic LAB checkpoints (control machine, Python standard library only).

    make_checkpoint.py --out lab/.state/models [--only mini|full] [--force]

``DeepSeek-V4.1-Flash/`` (header-only, sparse, full-scale shapes: the report's arithmetic)
    model.safetensors.index.json  weight_map for the tensors below
    model-00001-of-00046.safetensors  unrelated tensors (embedding, layer-1 attention/expert weights)
    model-00002-of-00046.safetensors  layers.1.attn_norm.weight, then layer 1 Engram (N=384006168)
    model-00014-of-00046.safetensors  layers.14.attn_norm.weight, then layer 14 Engram (N=384016684)
    config.json
  Data regions are never written: each file is extended with truncate() to the size its header
  declares, so it costs no disk (reads give zeros).

``DeepSeek-V4.1-Flash-mini/`` (small, real bytes from a fixed seed: packing can be verified)
    model-00001-of-00003.safetensors  unrelated tensors
    model-00002-of-00003.safetensors  a small norm tensor, then layer 1 Engram (N=4099)
    model-00003-of-00003.safetensors  a small norm tensor, then layer 14 Engram (N=3001)
    model.safetensors.index.json, config.json

Engram tensors: ``layers.{L}.engram.embed.weight`` F8_E4M3 [N, 256] and
``layers.{L}.engram.embed.scale`` F8_E8M0 [N, 8], both in the same file.  A safetensors file is
an 8-byte little-endian header length, the JSON header (``__metadata__`` plus name -> dtype,
shape, data_offsets relative to the data start; padded with spaces to a multiple of 8), then data.

Idempotent: a checkpoint directory with a valid ``.complete`` marker (same VERSION, files of the
declared sizes) is left alone; anything else is rebuilt in a temporary directory and renamed in.
The mini checkpoint's bytes depend only on SEED, so any two builds are byte-identical.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import sys
from pathlib import Path

VERSION = 1
SEED = 20260924
FULL_NAME = "DeepSeek-V4.1-Flash"
MINI_NAME = "DeepSeek-V4.1-Flash-mini"
ENGRAM_LAYERS = (1, 14)
ROW_WEIGHT = 256  # F8_E4M3 bytes per row
ROW_SCALE = 8     # F8_E8M0 bytes per row
DTYPE_BYTES = {"F8_E4M3": 1, "F8_E8M0": 1, "BF16": 2, "F32": 4, "U8": 1}
FULL_ROWS = {1: 384006168, 14: 384016684}
MINI_ROWS = {1: 4099, 14: 3001}
HIDDEN = 4096


def nbytes(dtype, shape):
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def build_header(tensors):
    """tensors: list of (name, dtype, shape) in file order -> (header bytes, {name: (begin, end)}, data size)."""
    hdr = {"__metadata__": {"format": "pt"}}
    offsets, pos = {}, 0
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + size]}
        offsets[name] = (pos, pos + size)
        pos += size
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offsets, pos


def read_header(path):
    """Parse a safetensors header: returns (header dict, data start offset)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def engram_tensors(layer, rows):
    return [("layers.%d.engram.embed.weight" % layer, "F8_E4M3", (rows, ROW_WEIGHT)),
            ("layers.%d.engram.embed.scale" % layer, "F8_E8M0", (rows, ROW_SCALE))]


def layout(rows, shard_names):
    """The shard plan shared by both checkpoints: {file: [(name, dtype, shape), ...]}."""
    other, l1, l14 = shard_names
    small = rows[1] < 100000
    experts_inter = 768
    return {
        other: [
            ("embed.weight", "BF16", (129280 if not small else 64, HIDDEN if not small else 64)),
            ("layers.1.attn.wq_a.weight", "F8_E4M3", (1536 if not small else 32, HIDDEN if not small else 64)),
            ("layers.1.mlp.experts.0.w1.weight", "F8_E4M3", (experts_inter if not small else 16, HIDDEN if not small else 64)),
            ("layers.1.mlp.experts.0.w2.weight", "F8_E4M3", (HIDDEN if not small else 64, experts_inter if not small else 16)),
            ("layers.1.mlp.experts.0.w3.weight", "F8_E4M3", (experts_inter if not small else 16, HIDDEN if not small else 64)),
            ("layers.14.mlp.experts.0.w1.weight", "F8_E4M3", (experts_inter if not small else 16, HIDDEN if not small else 64)),
        ],
        l1: [("layers.1.attn_norm.weight", "BF16", (HIDDEN if not small else 64,))] + engram_tensors(1, rows[1]),
        l14: [("layers.14.attn_norm.weight", "BF16", (HIDDEN if not small else 64,))] + engram_tensors(14, rows[14]),
    }


def write_shard(path, tensors, fill):
    """Write one safetensors file; fill=None leaves the data region sparse (truncate)."""
    header, offsets, size = build_header(tensors)
    with open(path, "wb") as f:
        f.write(header)
        if fill is None:
            f.truncate(len(header) + size)
        else:
            for name, _dtype, _shape in tensors:
                begin, end = offsets[name]
                f.write(fill(name, end - begin))
        f.flush()
        os.fsync(f.fileno())
    return len(header) + size


def random_fill(seed):
    """Deterministic per-tensor bytes: each tensor has its own generator seeded by (seed, name)."""
    def fill(name, n):
        rng = random.Random("%d:%s" % (seed, name))
        return rng.randbytes(n)
    return fill


def config(name, rows, synthetic_kind):
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "_name_or_path": name,
        "hidden_size": HIDDEN,
        "num_hidden_layers": 43,
        "engram_layers": list(ENGRAM_LAYERS),
        "engram_rows": {str(k): v for k, v in rows.items()},
        "engram_embed_dim": ROW_WEIGHT,
        "engram_scale_dim": ROW_SCALE,
        "torch_dtype": "bfloat16",
        "lab_synthetic": synthetic_kind,
    }


def build(out_dir, name, rows, shard_names, fill, kind):
    """Build checkpoint `name` under out_dir atomically (temporary dir, then rename)."""
    final = out_dir / name
    tmp = out_dir / (".%s.tmp-%d" % (name, os.getpid()))
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weight_map, sizes, total = {}, {}, 0
    for fname, tensors in layout(rows, shard_names).items():
        sizes[fname] = write_shard(tmp / fname, tensors, fill)
        for tname, dtype, shape in tensors:
            weight_map[tname] = fname
            total += nbytes(dtype, shape)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (tmp / "config.json").write_text(json.dumps(config(name, rows, kind), indent=2) + "\n")
    marker = {"version": VERSION, "kind": kind, "seed": SEED if fill else None,
              "engram_rows": {str(k): v for k, v in rows.items()}, "files": sizes}
    if fill is not None:
        marker["sha256"] = {f: sha256_file(tmp / f) for f in sorted(sizes)}
    (tmp / ".complete").write_text(json.dumps(marker, indent=2) + "\n")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_valid(path, rows):
    """A checkpoint is current when its marker has our VERSION and rows and its files have the sizes."""
    try:
        marker = json.loads((path / ".complete").read_text())
    except (OSError, ValueError):
        return False
    if marker.get("version") != VERSION or marker.get("engram_rows") != {str(k): v for k, v in rows.items()}:
        return False
    for fname, size in marker.get("files", {}).items():
        p = path / fname
        if not p.is_file() or p.stat().st_size != size:
            return False
    return (path / "model.safetensors.index.json").is_file() and (path / "config.json").is_file()


CHECKPOINTS = {
    "full": (FULL_NAME, FULL_ROWS, ("model-00001-of-00046.safetensors", "model-00002-of-00046.safetensors",
                                    "model-00014-of-00046.safetensors"), None, "header-only-sparse"),
    "mini": (MINI_NAME, MINI_ROWS, ("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                    "model-00003-of-00003.safetensors"), random_fill(SEED), "small-real"),
}


def ensure(out_dir, which=("full", "mini"), force=False, log=print):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for key in which:
        name, rows, shards, fill, kind = CHECKPOINTS[key]
        path = out_dir / name
        if not force and is_valid(path, rows):
            log("ok       %s (already present, version %d)" % (path, VERSION))
            results[key] = "unchanged"
            continue
        build(out_dir, name, rows, shards, fill, kind)
        log("created  %s" % path)
        results[key] = "created"
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory that receives the checkpoint directories")
    ap.add_argument("--only", choices=["full", "mini"], help="build just one of them")
    ap.add_argument("--force", action="store_true", help="rebuild even if present and valid")
    args = ap.parse_args(argv)
    ensure(args.out, (args.only,) if args.only else ("full", "mini"), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
