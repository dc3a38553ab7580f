# -*- coding: utf-8 -*-
"""Engram tables in a safetensors checkpoint, read from the index and the headers only (standard library only).

``model.safetensors.index.json`` maps ``layers.{L}.engram.embed.weight`` (``F8_E4M3``, ``[N, 256]``) and
``layers.{L}.engram.embed.scale`` (``F8_E8M0``, ``[N, 8]``) to one safetensors file (8-byte little-endian
header length, JSON header, data). Table bytes are read only by the packer.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections import namedtuple

from ansible.module_utils.engram.shard_format import (
    ENGRAM_LAYERS, EngramFormatError, SCALE_BYTES, WEIGHT_BYTES, file_kind, is_int, rank_row_range,
)


INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20      # a large model's index is a few MB
WEIGHT_DTYPE = "F8_E4M3"
SCALE_DTYPE = "F8_E8M0"


# The safetensors reference reader refuses headers above 100 MB; so do we, before allocating.
MAX_SAFETENSORS_HEADER = 100 * 1000 * 1000
EngramTable = namedtuple("EngramTable", "layer rows shard_path weight_offset scale_offset source",
                         defaults=(None,))

EngramTable.__doc__ = """One layer's Engram table: row count and absolute byte offsets of the
weight and scale data inside ``shard_path``. ``source`` is the checkpoint identity the table was
read under (index digest, shard file name, size and mtime_ns, both tensors' dtype, shape and
data_offsets), or None when built by hand."""


def weight_tensor_name(layer):
    return "layers.%d.engram.embed.weight" % layer


def scale_tensor_name(layer):
    return "layers.%d.engram.embed.scale" % layer


def pread_exact(fd, length, offset, path):
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise EngramFormatError("%s: is truncated: wanted %d bytes at offset %d, got %d"
                                % (path, length, offset, len(data)))
    return data


def read_safetensors_header(path):
    """Return ``(header_dict, data_start)`` of a safetensors file, validated against its size.

    Checks the 8-byte length prefix, that the JSON header fits in the file and parses to an
    object, and that every tensor's ``data_offsets`` lie inside the file (by ``os.stat`` size:
    files may be sparse). Never reads tensor data.
    """
    try:
        # O_NONBLOCK: a FIFO at the name must not block the reader (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise EngramFormatError("%s: cannot open safetensors file: %s" % (path, exc.strerror))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EngramFormatError("%s: safetensors file is a %s, not a regular file" % (path, file_kind(st)))
        size = st.st_size
        if size < 8:
            raise EngramFormatError("%s: truncated safetensors header: file is %d bytes, shorter than "
                                    "the 8-byte header length" % (path, size))
        (length,) = struct.unpack("<Q", pread_exact(fd, 8, 0, path))
        if length > size - 8:
            raise EngramFormatError("%s: safetensors header length %d runs past the end of the file "
                                    "(%d bytes)" % (path, length, size))
        if length > MAX_SAFETENSORS_HEADER:
            raise EngramFormatError("%s: safetensors header length %d exceeds the %d-byte limit"
                                    % (path, length, MAX_SAFETENSORS_HEADER))
        raw = pread_exact(fd, length, 8, path)
    finally:
        os.close(fd)
    header = _json(raw, path, "safetensors header")
    if not isinstance(header, dict):
        raise EngramFormatError("%s: safetensors header is a JSON %s, not an object"
                                % (path, type(header).__name__))
    data_start = 8 + length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise EngramFormatError("%s: tensor %s has invalid data_offsets %r"
                                    % (path, name, offsets))
        if data_start + offsets[1] > size:
            raise EngramFormatError("%s: tensor %s data_offsets %r end at byte %d, past the end of "
                                    "the file (%d bytes)" % (path, name, offsets,
                                                            data_start + offsets[1], size))
    _refuse_overlaps(path, header)
    return header, data_start


def _refuse_overlaps(path, header):
    """Two tensors may not share bytes: a header whose data_offsets overlap would pack one tensor's bytes as
    another's rows. Refused naming both (empty tensors take no bytes)."""
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], name) for name, info in header.items()
                   if name != "__metadata__" and info["data_offsets"][1] > info["data_offsets"][0])
    for (b1, e1, n1), (b2, e2, n2) in zip(spans, spans[1:]):
        if b2 < e1:
            raise EngramFormatError("%s: tensors %s [%d, %d) and %s [%d, %d) overlap in the data section: "
                                    "not a valid safetensors file" % (path, n1, b1, e1, n2, b2, e2))


def _json(raw, path, what):
    """JSON of a checkpoint file, refusing what is not an honest header: bad UTF-8 or JSON, or nesting deep
    enough to exhaust the parser (a header is two levels deep)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
        raise EngramFormatError("%s: %s is not valid JSON: %s" % (path, what, exc))
    except RecursionError:
        raise EngramFormatError("%s: %s is nested too deeply to be a checkpoint's JSON" % (path, what))


def _table_rows(path, header, name, dtype, width):
    """Validate one Engram tensor entry and return its row count."""
    info = header.get(name)
    if not isinstance(info, dict):
        raise EngramFormatError("%s: tensor %s is missing from the safetensors header" % (path, name))
    if info.get("dtype") != dtype:
        raise EngramFormatError("%s: tensor %s has dtype %r, expected %s"
                                % (path, name, info.get("dtype"), dtype))
    shape = info.get("shape")
    if (not isinstance(shape, list) or len(shape) != 2 or not all(is_int(d) for d in shape)
            or shape[0] < 1 or shape[1] != width):
        raise EngramFormatError("%s: tensor %s has shape %r, expected [N, %d] with N >= 1"
                                % (path, name, shape, width))
    begin, end = info["data_offsets"]
    if end - begin != shape[0] * width:
        raise EngramFormatError("%s: tensor %s holds %d data bytes but shape %r needs %d"
                                % (path, name, end - begin, shape, shape[0] * width))
    return shape[0]


def _load_index(checkpoint_dir):
    index_path = os.path.join(checkpoint_dir, INDEX_NAME)
    try:
        fd = os.open(index_path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EngramFormatError("%s: checkpoint index is a %s, not a regular file"
                                        % (index_path, file_kind(st)))
            if st.st_size > MAX_INDEX_BYTES:
                raise EngramFormatError("%s: checkpoint index is %d bytes, more than the %d an index holds"
                                        % (index_path, st.st_size, MAX_INDEX_BYTES))
            with os.fdopen(os.dup(fd), "rb") as handle:
                raw = handle.read(MAX_INDEX_BYTES + 1)
        finally:
            os.close(fd)
        index = _json(raw, index_path, "checkpoint index")
    except FileNotFoundError:
        raise EngramFormatError("%s: checkpoint index not found" % index_path)
    except OSError as exc:
        raise EngramFormatError("%s: cannot read checkpoint index: %s" % (index_path, exc.strerror))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise EngramFormatError("%s: checkpoint index has no weight_map object" % index_path)
    return index_path, weight_map, hashlib.sha256(raw).hexdigest()


def _confined_file(checkpoint_dir, index_path, tensor, value):
    """Path of the checkpoint file ``value`` the index names for ``tensor``, refused unless it stays
    inside the checkpoint directory (no absolute path, no "..", no symlink resolving outside)."""
    parts = value.replace("\\", "/").split("/")
    if os.path.isabs(value) or ".." in parts or "\0" in value:
        raise EngramFormatError("%s: weight_map entry for %s is %r, which names a file outside the checkpoint "
                                "directory %s (absolute path or '..'); refusing to read it"
                                % (index_path, tensor, value, checkpoint_dir))
    path = os.path.join(checkpoint_dir, value)
    root, real = os.path.realpath(checkpoint_dir), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise EngramFormatError("%s: weight_map entry for %s is %r, which resolves to %s, outside the checkpoint "
                                "directory %s (a symlink leading out); refusing to read it"
                                % (index_path, tensor, value, real, root))
    return path


def read_engram_tables(checkpoint_dir, layers=ENGRAM_LAYERS):
    """Return ``{layer: EngramTable}`` read from the index and the safetensors headers only."""
    index_path, weight_map, index_sha256 = _load_index(checkpoint_dir)
    headers = {}  # one header read per shard file, however many layers live in it
    tables = {}
    for layer in layers:
        if not is_int(layer):
            raise EngramFormatError("%s: Engram layer %r is not an integer" % (index_path, layer))
        wname, sname = weight_tensor_name(layer), scale_tensor_name(layer)
        for name in (wname, sname):
            if not isinstance(weight_map.get(name), str) or not weight_map[name]:
                raise EngramFormatError("%s: tensor %s is missing from weight_map" % (index_path, name))
        if weight_map[wname] != weight_map[sname]:
            raise EngramFormatError("%s: %s is in %s but %s is in %s; both must be in the same file"
                                    % (index_path, wname, weight_map[wname], sname, weight_map[sname]))
        shard_path = _confined_file(checkpoint_dir, index_path, wname, weight_map[wname])
        if shard_path not in headers:
            header = read_safetensors_header(shard_path)
            try:
                st = os.stat(shard_path)
            except OSError as exc:
                raise EngramFormatError("%s: cannot stat safetensors file: %s" % (shard_path, exc.strerror))
            headers[shard_path] = header + ((st.st_size, st.st_mtime_ns),)
        header, data_start, (size, mtime_ns) = headers[shard_path]
        rows = _table_rows(shard_path, header, wname, WEIGHT_DTYPE, WEIGHT_BYTES)
        scale_rows = _table_rows(shard_path, header, sname, SCALE_DTYPE, SCALE_BYTES)
        if scale_rows != rows:
            raise EngramFormatError("%s: %s has %d rows but %s has %d"
                                    % (shard_path, sname, scale_rows, wname, rows))
        source = {"index_sha256": index_sha256, "file": weight_map[wname], "size": size, "mtime_ns": mtime_ns,
                  "tensors": {name: {key: header[name][key] for key in ("dtype", "shape", "data_offsets")}
                              for name in (wname, sname)}}
        tables[layer] = EngramTable(layer, rows, shard_path,
                                    data_start + header[wname]["data_offsets"][0],
                                    data_start + header[sname]["data_offsets"][0], source)
    return tables


def table_rank_range(table, rank, tp_size):
    """rank_row_range for a table, with errors naming the checkpoint file."""
    try:
        return rank_row_range(table.rows, rank, tp_size)
    except ValueError as exc:
        raise EngramFormatError("%s: layer %d: %s" % (table.shard_path, table.layer, exc))
