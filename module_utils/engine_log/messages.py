# -*- coding: utf-8 -*-
"""What each SGLang engine log message says: its kind and fields (standard library only).

What a real log looks like (SPEC section 3)
-------------------------------------------
* One container log holds one boot after another.  Python logging lines carry a prefix
  ``[2026-09-11 23:34:14 TP1 EP1] `` (before the scheduler starts ``[2026-09-11 23:34:03] ``) and go
  to the container's stderr; ``print()`` lines (adapters, ``Ready: ...``, fatal Engram errors) carry
  none and go to stdout.  ``docker logs`` returns the two on its own stdout and stderr, so a reader
  takes both (:func:`merge_docker_streams` puts them back in order by their ``--timestamps``).
* tqdm progress bars glue messages: ``Capturing batches (...):   0%|...| 0/4 [...][2026-09-11
  23:46:45 TP0 EP0] FlashInfer autotune: ...`` and redraw with ``\\r`` and cursor codes (``ESC[A``).
* A boot begins at its marker, a message that IS ``server_args={...}`` (a Python dict literal,
  current builds) or ``server_args=ServerArgs(...)`` (older builds).

Kinds (recognised only at the START of a message)
-------------------------------------------------
==================  ==========================================================================
kind                message (after the prefix)
==================  ==========================================================================
``boot``            ``server_args={'model_path': ..., 'page_size': 256, ...}`` /
                    ``server_args=ServerArgs(model_path='...', tp_size=3, ...)``
``engram``          ``Exact nvme Engram layer=1 rank=0 rows=[0,128002056) cache=0.0GiB (0 slots,
                    4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 packed=True``
                    (``ssd`` also occurs; older builds print ``cache_budget=`` and no ``packed=``:
                    packed is then unknown, never true)
``engram_periodic`` ``Engram layer=1 lookups=6040 hit_rate=0.0% reads=6040 cache=0.0GiB(4-way)
                    scales=0.0GiB threads=96 packed=True``
``fatal_engram``    ``Engram retrieval failed: packed Engram shard does not match this rank's range;
                    re-run the pack step (errno=0)`` / ``... is truncated ...`` / ``... has no
                    header ...``.  They name no file: the fact records the rank (boot's
                    ``node_rank``, else the prefixes' ``TP`` rank) and the layers attached before it.
``memory``          ``DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=8.84 GB,
                    c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=5491200`` (``DSv4`` too)
``pool``            ``DSV4 pool sizes: full=5491200, swa=13312, c4=..., c128=..., ...`` (printed
                    twice; the last one is what was allocated)
``max_total``       ``max_total_num_tokens=2999808, chunked_prefill_size=1024, ...,
                    available_gpu_mem=7.68 GB`` (rank 0 only)
``startup``         ``Load weight begin. avail mem=111.47 GB``, ``Load weight end. elapsed=541.76 s,
                    ..., avail mem=17.47 GB, mem usage=94.00 GB.`` (target, then draft),
                    ``Memory pool end. avail mem=9.90 GB``
``graph``           ``Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=6,
                    bs=[1, 2, 3, 4], avail mem=8.20 GB`` / ``... end. elapsed=13.48 s, mem
                    usage=0.58 GB, avail mem=7.62 GB.`` (and ``draft verify``); older builds
                    ``Capture cuda graph bs [1, 2, 3, 4]`` / ``Capture draft cuda graph bs [...]``
``autotune_*``      ``FlashInfer autotune: per-rank caches disagree, ...`` (rank 0, stock engine),
                    ``Running FlashInfer autotune with cache: <container path>``, ``FlashInfer
                    autotune completed.``, ``[autotune_keep] armed`` / ``reused <hash>/<file>`` /
                    ``tuned and saved <hash>/<file>``, ``DSV41_AUTOTUNE_KEEP: <name> is gone;
                    engine drifted``
``decode``          ``Decode batch, #running-req: 1, ..., accept len: 3.08, accept rate: 0.41,
                    ..., gen throughput (token/s): 3.12, #queue-req: 0`` (rank 0); also
                    ``Decode batch. #running-req: ...`` and the upstream ``Decode batch [N],
                    #running-req: ...`` (a forward counter, kept as ``forward_ct``)
``ready``           ``Ready: API on port 8888``
==================  ==========================================================================
"""
from __future__ import absolute_import, division, print_function

import ast
import re

from ansible.module_utils.engine_log.lines import GIB, Malformed, Message, kv_fields, split_messages, to_bytes

__metaclass__ = type
_I = re.IGNORECASE
RE_BOOT = re.compile(r"^server_args\s*=\s*(\{|ServerArgs\()(.*)$", _I | re.S)
RE_EXACT = re.compile(r"^Exact\s+(\w+)\s+Engram\s+layer=(\d+)\b(.*)$", _I)
RE_PERIODIC = re.compile(r"^Engram\s+layer=(\d+)\s+lookups=(.*)$", _I)


# Raised errors may reach the log as "RuntimeError: <message>" (the traceback's last line).
_EXC = r"(?:[A-Za-z_]\w*(?:Error|Exception):\s*)?"
RE_EXC_HEAD = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception):\s*")
RE_FATAL = re.compile(r"^" + _EXC + r"Engram\s+retrieval\s+failed:\s*(.*)$", _I)
RE_MEMORY = re.compile(r"^DSV4\s+memory\s+calculation:\s*(.*)$", _I)
RE_POOL = re.compile(r"^DSV4\s+pool\s+sizes:\s*(.*)$", _I)
RE_MAX_TOTAL = re.compile(r"^max_total_num_tokens\s*=", _I)
RE_LOAD = re.compile(r"^Load\s+weight\s+(begin|end)\.\s*(.*)$", _I)
RE_POOL_END = re.compile(r"^Memory\s+pool\s+end\.\s*(.*)$", _I)
RE_GRAPH = re.compile(r"^Capture\s+(target|draft)\s+verify\s+CUDA\s+graph\s+(begin|end)\.\s*(.*)$", _I)
RE_GRAPH_OLD = re.compile(r"^Capture\s+(draft\s+)?cuda\s+graph\s+bs\s*\[([\d,\s]*)\]", _I)
RE_AT_DISAGREE = re.compile(r"^FlashInfer\s+autotune:\s*per-rank\s+caches\s+disagree", _I)
RE_AT_RUN = re.compile(r"^Running\s+FlashInfer\s+autotune\s+with\s+cache:\s*(\S+)", _I)
RE_AT_DONE = re.compile(r"^FlashInfer\s+autotune\s+completed", _I)
RE_AT_KEEP = re.compile(r"^\[autotune_keep\]\s*(armed|reused|tuned\s+and\s+saved)\s*(\S*)", _I)
RE_AT_DRIFT = re.compile(r"^" + _EXC + r"DSV41_AUTOTUNE_KEEP:\s*(\S+)\s+is\s+gone", _I)
RE_DECODE = re.compile(r"^Decode\s+batch(?:\s*\[(\d+)\])?\s*[,.]\s*(.*)$", _I)
RE_READY = re.compile(r"^Ready:\s*API\s+on\s+port\s+(\d+)", _I)
RE_ROWS = re.compile(r"rows=\[\s*(\d+)\s*,\s*(\d+)\s*\)", _I)
RE_SLOTS = re.compile(r"\((\d+)\s+slots", _I)
RE_WAYS = re.compile(r"(\d+)-way", _I)
RE_OWNED = re.compile(r"([\d.]+)%\s+of\s+owned", _I)
RE_UNIT_VAL = re.compile(r"^([\d.]+)\s*(GiB|GB|MiB|MB)", _I)
RE_SARG = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?[\d.]+(?:e[+-]?\d+)?|None|True|False)(?=[,)])")
RE_DICT_ITEM = re.compile(r"'(\w+)':\s*('(?:[^'\\]|\\.)*'|-?[\d.]+(?:e[+-]?\d+)?|None|True|False)(?=[,}])")
_FATAL_REASONS = (("does not match", "range_mismatch"), ("is truncated", "truncated"),
                  ("has no header", "no_header"))


def _bool(word):
    if word is None:
        return None
    w = word.lower()
    return True if w == "true" else False if w == "false" else None


def _scalar(text):
    if text[:1] in ("'", '"'):
        return text[1:-1]
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def parse_server_args(opening, body):
    """Fields of a boot marker.  Returns (dict, complete, form)."""
    if opening == "{":
        try:
            value = ast.literal_eval("{" + body)
            if isinstance(value, dict):
                return dict((str(k), v) for k, v in value.items()), True, "dict"
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        return dict((k, _scalar(v)) for k, v in RE_DICT_ITEM.findall(body)), False, "dict"
    fields = dict((k, _scalar(v)) for k, v in RE_SARG.findall(body))
    return fields, body.rstrip().endswith(")"), "ServerArgs"


def _unit_gib(raw):
    m = RE_UNIT_VAL.match(raw or "")
    if not m:
        return None
    return to_bytes(m.group(1), m.group(2)) / float(GIB)


def _engram_fields(mode, layer, rest, text):
    f = {"layer": int(layer), "mode": mode.lower(), "line": text}
    r = RE_ROWS.search(rest)
    f["lo"], f["hi"] = (int(r.group(1)), int(r.group(2))) if r else (None, None)
    m = re.search(r"\brank=(\d+)", rest, _I)
    f["rank"] = int(m.group(1)) if m else None
    m = re.search(r"\bpacked=(\w+)", rest, _I)
    f["packed"] = _bool(m.group(1)) if m else None      # older builds: unknown, never true
    f["packed_printed"] = m is not None
    m = re.search(r"\bcache(?:_budget)?=(\S+?)(?=[\s(,]|$)", rest, _I)
    f["cache_gib"] = _unit_gib(m.group(1)) if m else None
    m = re.search(r"\bscales=(\S+?)(?=[\s(,]|$)", rest, _I)
    f["scales_gib"] = _unit_gib(m.group(1)) if m else None
    r = RE_SLOTS.search(rest)
    f["cache_slots"] = int(r.group(1)) if r else None
    r = RE_WAYS.search(rest)
    f["cache_ways"] = int(r.group(1)) if r else None
    r = RE_OWNED.search(rest)
    f["cache_owned_pct"] = float(r.group(1)) if r else None
    m = re.search(r"\bio_threads=(\d+)", rest, _I)
    f["io_threads"] = int(m.group(1)) if m else None
    return f


# The periodic line exactly as the engine prints it (the common case, read with one match).
RE_PERIODIC_FAST = re.compile(
    r"^(\d+) hit_rate=([\d.]+)% reads=(\d+) cache=([\d.]+)(GiB|GB|MiB|MB)\((\d+)-way\) "
    r"scales=[\d.]+(?:GiB|GB|MiB|MB) threads=(\d+)(?: packed=(\w+))?\s*$")


# The same periodic line as a whole logging record, matched on raw bytes: the hot path of a long
# boot, where these lines are most of what the reader sees.
RE_PERIODIC_RECORD_B = re.compile(
    rb"\s*\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?((?:\s+[A-Z]{2}\d+)*)\] ?Engram layer=(\d+) lookups="
    rb"(\d+) hit_rate=([\d.]+)% reads=(\d+) cache=([\d.]+)(GiB|GB|MiB|MB)\((\d+)-way\) "
    rb"scales=[\d.]+(?:GiB|GB|MiB|MB) threads=(\d+)(?: packed=(\w+))?[ \t\r]*$")

_TP_TAG_B = re.compile(rb"\bTP(\d+)\b")


def periodic_record(m):
    """``(Message, fields)`` of a :data:`RE_PERIODIC_RECORD_B` match."""
    r = _TP_TAG_B.search(m.group(1))
    msg = Message("", True, int(r.group(1)) if r else None)
    packed = m.group(10)
    f = {"layer": int(m.group(2)), "packed": _bool(packed.decode()) if packed else None,
         "lookups": int(m.group(3)), "hit_rate_pct": float(m.group(4)), "reads": int(m.group(5)),
         "cache_gib": to_bytes(m.group(6).decode(), m.group(7).decode()) / float(GIB),
         "cache_ways": int(m.group(8)), "threads": int(m.group(9))}
    return msg, f


def _periodic_fields(layer, rest):
    m = RE_PERIODIC_FAST.match(rest)
    if m:
        return {"layer": int(layer), "packed": _bool(m.group(8)), "lookups": int(m.group(1)),
                "hit_rate_pct": float(m.group(2)), "reads": int(m.group(3)),
                "cache_gib": to_bytes(m.group(4), m.group(5)) / float(GIB), "cache_ways": int(m.group(6)),
                "threads": int(m.group(7))}
    f = {"layer": int(layer), "packed": None}
    m = re.search(r"\bpacked=(\w+)", rest, _I)
    f["packed"] = _bool(m.group(1)) if m else None
    m = re.match(r"(\d+)", rest)
    f["lookups"] = int(m.group(1)) if m else None
    for key in ("reads", "threads"):
        m = re.search(r"\b%s=(\d+)" % key, rest, _I)
        f[key] = int(m.group(1)) if m else None
    m = re.search(r"hit_rate=([\d.]+)%", rest, _I)
    f["hit_rate_pct"] = float(m.group(1)) if m else None
    m = re.search(r"\bcache=(\S+?)(?=[\s(,]|$)", rest, _I)
    f["cache_gib"] = _unit_gib(m.group(1)) if m else None
    return f


def classify(text):
    """Classify one message (prefix already removed).  Returns ``(kind, fields)`` or None."""
    if not text:
        return None
    m = RE_EXC_HEAD.match(text)
    if m:
        # "RuntimeError: <message>": only the fatal kinds are raised as exceptions.
        ev = classify(text[m.end():])
        return ev if ev is not None and ev[0] in ("fatal_engram", "autotune_drift") else None
    c = text[0]
    if c in "sS":
        m = RE_BOOT.match(text)
        if m:
            fields, complete, form = parse_server_args(m.group(1), m.group(2))
            return ("boot", {"server_args": fields, "complete": complete, "form": form})
        return None
    if c in "eE":
        m = RE_EXACT.match(text)
        if m:
            return ("engram", _engram_fields(m.group(1), m.group(2), m.group(3), text))
        m = RE_PERIODIC.match(text)
        if m:
            return ("engram_periodic", _periodic_fields(m.group(1), m.group(2)))
        m = RE_FATAL.match(text)
        if m:
            tail = m.group(1).lower()
            reason = next((r for needle, r in _FATAL_REASONS if needle in tail), "other")
            errno = re.search(r"\(errno=(-?\d+)\)", tail)
            return ("fatal_engram", {"reason": reason, "line": text,
                                     "errno": int(errno.group(1)) if errno else None})
        return None
    if c in "dD":
        m = RE_MEMORY.match(text)
        if m:
            return ("memory", _memory_fields(kv_fields(m.group(1))))
        m = RE_POOL.match(text)
        if m:
            return ("pool", kv_fields(m.group(1)))
        m = RE_AT_DRIFT.match(text)
        if m:
            return ("autotune_drift", {"name": m.group(1), "line": text})
        m = RE_DECODE.match(text)
        if m:
            f = kv_fields(m.group(2), sep=":")
            if m.group(1) is not None:
                f["forward_ct"] = int(m.group(1))
            return ("decode", f)
        return None
    if c in "mM":
        if RE_MAX_TOTAL.match(text):
            return ("max_total", kv_fields(text))
        m = RE_POOL_END.match(text)
        if m:
            return ("startup", dict(kv_fields(m.group(1)), step="memory_pool_end"))
        return None
    if c in "lL":
        m = RE_LOAD.match(text)
        if m:
            return ("startup", dict(kv_fields(m.group(2).rstrip(".")), step="load_weight_" + m.group(1).lower()))
        return None
    if c in "cC":
        m = RE_GRAPH.match(text)
        if m:
            f = kv_fields(m.group(3).rstrip("."))
            f.update({"pass": m.group(1).lower(), "phase": m.group(2).lower()})
            return ("graph", f)
        m = RE_GRAPH_OLD.match(text)
        if m:
            return ("graph", {"pass": "draft" if m.group(1) else "target", "phase": "begin",
                              "bs": [int(x) for x in re.findall(r"\d+", m.group(2))]})
        return None
    if c in "fF":
        if RE_AT_DISAGREE.match(text):
            return ("autotune_disagree", {"line": text})
        if RE_AT_DONE.match(text):
            return ("autotune_completed", {})
        return None
    if c in "rR":
        m = RE_AT_RUN.match(text)
        if m:
            return ("autotune_run", {"cache": m.group(1)})
        m = RE_READY.match(text)
        if m:
            return ("ready", {"port": int(m.group(1))})
        return None
    if c == "[":
        m = RE_AT_KEEP.match(text)
        if m:
            what = " ".join(m.group(1).lower().split())
            if what == "armed":
                return ("autotune_armed", {})
            return ("autotune_reused" if what == "reused" else "autotune_tuned_saved", {"path": m.group(2)})
    return None


def parse_line(line):
    """Classify one physical line: the first message of it that this reader knows, or None."""
    for msg in split_messages(line):
        ev = classify(msg.text)
        if ev is not None:
            return ev
    return None


def _memory_fields(f):
    # Names callers use: available_bytes (as printed), available_bytes_bytes (int bytes),
    # available_gib (float, computed from the bytes whatever the printed unit).
    if "available_bytes" in f and not isinstance(f["available_bytes"], Malformed):
        f["available_bytes"] = f.pop("available_bytes_printed", None)
        b = f.get("available_bytes_bytes")
        f["available_gib"] = None if b is None else b / float(GIB)
    if isinstance(f.get("bytes_per_full_token"), (int, float)):
        f["bytes_per_full_token"] = float(f["bytes_per_full_token"])
    return f
