# -*- coding: utf-8 -*-
"""Engram row prefetch (DSV41_ENGRAM_PREFETCH). LAB STAND-IN of the real adapter.

Byte-identical to the pinned downstream revision 4d8f4c0868ed3b394688b65d88cd99a82c237642 (in the
lab: this file is the lab's picture of that revision). While the target model runs layer L-1, the
adapter issues the reads of the packed Engram rows layer L will need for the tokens already known,
so the nvme lookup overlaps compute. It needs the packed shards (``engram-l{L}-r{r}of{tp}.bin`` in
``DSV41_PACKED_DIR``); with unpacked rows it disables itself. ``DSV41_ENGRAM_PREFETCH_CHECK=1`` compares
every prefetched row with a synchronous read (validation only: slow, never while timing).
"""
import os

_QUEUE_DEPTH = 64
_PATCHED = False


def _packed_dir():
    return os.environ.get("DSV41_PACKED_DIR", "/engram").rstrip("/") or "/engram"


def install():
    global _PATCHED
    if _PATCHED:
        return
    from sglang.srt.layers.engram import exact_nvme  # noqa: WPS433 - engine import at install time

    store_cls = exact_nvme.ExactNvmeEngramStore
    original_lookup = store_cls.lookup
    check = os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0") not in ("", "0")

    def lookup(self, layer, row_ids, *args, **kwargs):
        if getattr(self, "packed", False):
            nxt = self.next_layer(layer)
            if nxt is not None:
                self.io_pool.submit_rows(nxt, row_ids, depth=_QUEUE_DEPTH)
        out = original_lookup(self, layer, row_ids, *args, **kwargs)
        if check and getattr(self, "packed", False):
            ref = original_lookup(self, layer, row_ids, *args, prefetch=False, **kwargs)
            if not (out == ref).all():
                raise RuntimeError("engram_prefetch: row mismatch on layer %d (%s)" % (layer, _packed_dir()))
        return out

    store_cls.lookup = lookup
    _PATCHED = True
