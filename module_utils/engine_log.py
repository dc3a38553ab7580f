# -*- coding: utf-8 -*-
"""The one parser of SGLang engine logs for this repository (standard library only).

Every module that reads an engine log (``engram_packed``, ``kv_pool``, ``autotune_status``)
is a thin wrapper over this file; nothing else in the project interprets log lines.

Line grammar (SPEC section 3). Each line may carry a prefix such as
``[2026-09-24 02:55:01 TP1 EP1] ``, may contain ANSI colour codes, and keywords are
matched case-insensitively (``DSV4``/``DSv4``, ``Engram``/``ENGRAM`` ...).

==================  ==========================================================================
kind                line (after :func:`strip_line`)
==================  ==========================================================================
``boot``            ``server_args=ServerArgs(model_path='...', tp_size=3, ...)``
``engram``          ``Exact nvme Engram layer=1 rank=0 rows=[0,128002056) cache=0.0GiB (0 slots,
                    4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 packed=True``
``engram_periodic`` ``Engram layer=1 lookups=.. hit_rate=..% reads=.. cache=..GiB(4-way)
                    scales=..GiB threads=96 packed=False``
``memory``          ``DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB,
                    c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=0.74 GB``
``pool``            ``DSV4 pool sizes: full=491520, swa=61440, c128=3840`` (printed twice; last wins)
``max_total``       ``max_total_num_tokens=491520, chunked_prefill_size=1024, ...,
                    available_gpu_mem=2.81 GB``
``autotune_*``      ``FlashInfer autotune: per-rank caches disagree, ...`` (``autotune_disagree``),
                    ``Running FlashInfer autotune with cache: <path>`` (``autotune_run``),
                    ``FlashInfer autotune completed.`` (``autotune_completed``),
                    ``[autotune_keep] armed`` / ``reused <path>`` / ``tuned and saved <path>``,
                    ``DSV41_AUTOTUNE_KEEP: <name> is gone; engine drifted`` (``autotune_drift``)
``fatal_engram``    ``... packed Engram shard <path> does not match this rank's range ...`` /
                    ``... is truncated`` / ``... has no header``
``ready``           ``Ready: API on port 8888``
``graph_shapes``    ``Capture cuda graph bs [1, 2, 3, 4]`` (target pass) /
                    ``Capture draft cuda graph bs [1, 2, 3, 4]`` (speculative draft pass);
                    the last line of each pass in the boot wins
==================  ==========================================================================

Units: SGLang computes its memory figures as ``bytes / (1 << 30)`` and labels them ``GB``.
This parser follows the engine: a printed ``GB`` (and ``GiB``) is 2**30 bytes, ``MB`` 2**20,
``KB`` 2**10.  Every memory value is kept twice: the string exactly as printed
(``available_bytes: "1.04 GB"``) and an integer byte count (``available_bytes_bytes:
1116691497`` = round(1.04 * 2**30)); with two decimals the integer is only good to
+-0.005 GiB (about 5 MiB).

Boots. A log (``docker logs`` of a restarted container, or a saved file) may hold several
boots; facts come from the LATEST boot only. A boot starts at each ``server_args=ServerArgs(``
marker and, defensively, at an ``Exact nvme Engram layer=L rank=R`` line for a (layer, rank)
already seen in the current boot (one log may hold the start-up lines of several ranks, e.g. the
lab's saved head log; ``engram`` then keeps the first line of each layer in the boot).
Text before the first boundary counts as a boot when it holds an Exact
Engram line (its marker was lost, e.g. by log rotation) or when the log has no marker at all
(then the whole log is one boot). ``boots_seen`` is the number of boots counted that way.

Speed and memory. Logs can be gigabytes: scanning works on bounded binary chunks and keeps
only the facts of the current boot (reset at every boundary), so memory does not grow with the
log. Cheap C-level substring searches find the rare candidate lines; only those go through the
regular expressions, and the frequent periodic Engram lines are aggregated per chunk with one
``findall``. For a seekable file :func:`scan_file` first finds the last boot marker from the end
of the file, counts the earlier boots with a boundary-only pass, and fully parses only the
latest boot.  Limitation of the boundary-only pass over superseded boots: it finds the marker
and the repeated-Exact boundary only in the engine's own spelling (``server_args=ServerArgs(``,
``Exact nvme Engram layer=``, not split by colour codes); this can only affect ``boots_seen``, never
the facts of the latest boot, which are parsed with the full tolerant grammar.  Likewise the cheap candidate
searches of the full parse are case-insensitive but need each keyword phrase (``nvme engram
layer=``, ``engram layer=N lookups=``, ``engram shard``, ``memory calculation:``, ``pool sizes:``,
``max_total_num_tokens=``, ``autotune``, ``ready: api on port``, ``cuda graph bs``,
``server_args=serverargs(``) not to
be split by a colour code; colour codes elsewhere in a line (around the prefix, the whole message,
or a value) are fine.
"""
from __future__ import absolute_import, division, print_function

import heapq
import mmap
import os
import re

__metaclass__ = type

GIB = 1 << 30
UNIT_BYTES = {
    "B": 1,
    "KB": 1 << 10, "KIB": 1 << 10,
    "MB": 1 << 20, "MIB": 1 << 20,
    "GB": 1 << 30, "GIB": 1 << 30,
    "TB": 1 << 40, "TIB": 1 << 40,
}

CHUNK_SIZE = 4 << 20          # bytes per read; memory use is a small multiple of this
WINDOW_SIZE = 16 << 20        # mmap window of the boundary-only pass (resident while searched)
MAX_EVENTS = 256              # cap of every per-boot list (counts keep counting)

# Kinds of facts a scan can be restricted to (``kinds=``). Boot boundaries are always tracked.
KIND_ENGRAM = "engram"        # Exact + periodic Engram lines
KIND_FATAL = "fatal"          # fatal packed-shard errors
KIND_MEMORY = "memory"        # memory calculation, pool sizes, max_total_num_tokens
KIND_AUTOTUNE = "autotune"
KIND_READY = "ready"
KIND_SERVER_ARGS = "server_args"
KIND_GRAPH_SHAPES = "graph_shapes"  # CUDA-graph capture batch sizes (target / draft pass)
ALL_KINDS = frozenset([KIND_ENGRAM, KIND_FATAL, KIND_MEMORY, KIND_AUTOTUNE, KIND_READY,
                       KIND_SERVER_ARGS, KIND_GRAPH_SHAPES])
ENGRAM_KINDS = frozenset([KIND_ENGRAM, KIND_FATAL])


class EngineLogError(Exception):
    """A line the caller needs is missing from the latest boot (or the log is unreadable)."""

    def __init__(self, source, kind, detail=None, boots_seen=None):
        self.source = source
        self.kind = kind
        self.detail = detail
        self.boots_seen = boots_seen
        msg = "%s: no %s line in the latest boot" % (source, kind)
        if boots_seen is not None:
            msg += " (boots seen: %d)" % boots_seen
        if detail:
            msg += "; %s" % detail
        super(EngineLogError, self).__init__(msg)


# ---------------------------------------------------------------------------------------------
# Line level
# ---------------------------------------------------------------------------------------------

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# One or more leading bracketed prefixes: "[2026-09-24 02:55:01 TP1 EP1] ".  Only brackets that
# open at the start of the line and close before a space are removed, so "[autotune_keep] armed"
# (the message itself) is kept: prefixes are recognised by carrying a date/time or a rank tag.
PREFIX_RE = re.compile(
    r"^(?:\s*\[(?=[^\]]*(?:\d{2}:\d{2}|\bTP\d|\bEP\d|\bDP\d|\bPP\d|\d{4}-\d{2}-\d{2}))[^\]]*\]\s?)+")
DOCKER_TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")


def strip_line(line):
    """Return ``line`` without ANSI colour codes, the ``[...]`` prefix(es) and the line end.

    Accepts str or bytes (bytes are decoded as UTF-8 with replacement).
    """
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("utf-8", "replace")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    line = line.rstrip("\r\n")
    if line.startswith("[") or line[:1].isspace():
        line = PREFIX_RE.sub("", line, count=1)
    return line.strip()


def to_bytes(value, unit):
    """``to_bytes("1.04", "GB") -> 1116691497`` (GB = 2**30, see module doc)."""
    if value is None:
        return None
    mult = UNIT_BYTES.get((unit or "B").upper())
    if mult is None:
        return None
    return int(round(float(value) * mult))


_I = re.IGNORECASE
RE_BOOT = re.compile(r"server_args\s*=\s*ServerArgs\((.*)", _I)
RE_EXACT = re.compile(r"Exact\s+nvme\s+Engram\s+layer=(\d+)", _I)
RE_PERIODIC = re.compile(r"Engram layer=(\d+) lookups=.*packed=(\w+)", _I)   # on stripped lines
# Bulk form of RE_PERIODIC for lowered bytes; tolerates colour codes before the value.
RE_PERIODIC_B = re.compile(rb"engram layer=(\d+) lookups=[^\n]*packed=(?:\x1b\[[0-9;]*m)*(\w+)")
RE_FATAL = re.compile(r"packed\s+Engram\s+shard\s+(\S+?)[:,;]?\s+(does not match[^;]*|is truncated|has no header|.*)", _I)
RE_MEMORY = re.compile(r"\bDSV4\s+memory\s+calculation:\s*(.*)", _I)
RE_POOL = re.compile(r"\bDSV4\s+pool\s+sizes:\s*(.*)", _I)
RE_MAX_TOTAL = re.compile(r"\bmax_total_num_tokens=(\d+)(.*)", _I)
RE_AT_DISAGREE = re.compile(r"FlashInfer\s+autotune:\s*per-rank\s+caches\s+disagree", _I)
RE_AT_RUN = re.compile(r"Running\s+FlashInfer\s+autotune\s+with\s+cache:\s*(\S+)", _I)
RE_AT_DONE = re.compile(r"FlashInfer\s+autotune\s+completed", _I)
RE_AT_KEEP = re.compile(r"\[autotune_keep\]\s*(armed|reused|tuned\s+and\s+saved)\s*(\S*)", _I)
RE_AT_DRIFT = re.compile(r"DSV41_AUTOTUNE_KEEP:\s*(\S+)\s+is\s+gone", _I)
RE_READY = re.compile(r"Ready:\s*API\s+on\s+port\s+(\d+)", _I)
RE_GRAPH = re.compile(r"\bCapture\s+(draft\s+)?cuda\s+graph\s+bs\s*\[([\d,\s]*)\]", _I)
RE_KV_NUM = re.compile(r"(\w+)=(-?[\d.]+(?:e[+-]?\d+)?)(?:\s*([KMGT]i?B)\b)?", _I)
RE_ROWS = re.compile(r"rows=\[\s*(\d+)\s*,\s*(\d+)\s*\)", _I)
RE_RANK = re.compile(r"\brank=(\d+)", _I)
RE_PACKED = re.compile(r"\bpacked=(\w+)", _I)
RE_CACHE = re.compile(r"\bcache=([\d.]+)\s*(GiB|GB|MiB|MB)?", _I)
RE_SCALES = re.compile(r"\bscales=([\d.]+)\s*(GiB|GB|MiB|MB)?", _I)
RE_SLOTS = re.compile(r"\((\d+)\s+slots", _I)
RE_WAYS = re.compile(r"(\d+)-way", _I)
RE_OWNED = re.compile(r"([\d.]+)%\s+of\s+owned", _I)
RE_THREADS = re.compile(r"\b(?:io_)?threads=(\d+)", _I)
RE_IO_THREADS = re.compile(r"\bio_threads=(\d+)", _I)
RE_SHARD_NAME = re.compile(r"engram-l(\d+)-r(\d+)of(\d+)\.bin", _I)
RE_SARG = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?[\d.]+(?:e[+-]?\d+)?|None|True|False)(?=[,)])")


def _bool(word):
    if word is None:
        return None
    w = word.lower()
    if w == "true":
        return True
    if w == "false":
        return False
    return None


def _num(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _kv_numbers(text):
    """``a=1, b=1.04 GB`` -> {'a': 1, 'b': 1.04, 'b_printed': '1.04 GB', 'b_bytes': ...}."""
    out = {}
    for key, val, unit in RE_KV_NUM.findall(text):
        key = key.lower()
        out[key] = _num(val)
        if unit:
            out[key] = float(val)
            out[key + "_printed"] = "%s %s" % (val, unit)
            out[key + "_bytes"] = to_bytes(val, unit)
    return out


def _server_args(text):
    out = {}
    for key, val in RE_SARG.findall(text):
        if val[:1] in ("'", '"'):
            out[key] = val[1:-1]
        elif val == "None":
            out[key] = None
        elif val in ("True", "False"):
            out[key] = val == "True"
        else:
            out[key] = _num(val)
    return out


def _gib(m):
    if not m:
        return None
    return float(m.group(1))


def parse_line(line):
    """Classify one log line.

    Returns ``(kind, fields)`` or ``None`` for lines this parser does not need.  ``line`` may be
    raw (prefix, colour codes, str or bytes).  Kinds: see module doc.
    """
    s = strip_line(line)
    if not s:
        return None
    low = s.lower()
    if "ngram" in low:
        m = RE_EXACT.search(s)
        if m:
            f = {"layer": int(m.group(1)), "line": s}
            r = RE_RANK.search(s)
            f["rank"] = int(r.group(1)) if r else None
            r = RE_ROWS.search(s)
            f["lo"], f["hi"] = (int(r.group(1)), int(r.group(2))) if r else (None, None)
            r = RE_PACKED.search(s)
            f["packed"] = _bool(r.group(1)) if r else None
            f["cache_gib"] = _gib(RE_CACHE.search(s))
            r = RE_SLOTS.search(s)
            f["cache_slots"] = int(r.group(1)) if r else None
            r = RE_WAYS.search(s)
            f["cache_ways"] = int(r.group(1)) if r else None
            r = RE_OWNED.search(s)
            f["cache_owned_pct"] = float(r.group(1)) if r else None
            f["scales_gib"] = _gib(RE_SCALES.search(s))
            r = RE_IO_THREADS.search(s)
            f["io_threads"] = int(r.group(1)) if r else None
            return ("engram", f)
        m = RE_PERIODIC.search(s)
        if m:
            return ("engram_periodic", _periodic_fields(s, int(m.group(1)), m.group(2)))
        m = RE_FATAL.search(s)
        if m:
            return ("fatal_engram", _fatal_fields(s, m))
    if "server_args" in low:
        m = RE_BOOT.search(s)
        if m:
            return ("boot", {"server_args": _server_args(m.group(1))})
    if "dsv4" in low:
        m = RE_MEMORY.search(s)
        if m:
            return ("memory", _memory_fields(m.group(1)))
        m = RE_POOL.search(s)
        if m:
            return ("pool", _kv_numbers(m.group(1)))
    if "max_total_num_tokens=" in low:
        m = RE_MAX_TOTAL.search(s)
        if m:
            f = _kv_numbers(m.group(0))
            return ("max_total", f)
    if "autotune" in low:
        if RE_AT_DISAGREE.search(s):
            return ("autotune_disagree", {"line": s})
        m = RE_AT_RUN.search(s)
        if m:
            return ("autotune_run", {"cache": m.group(1)})
        if RE_AT_DONE.search(s):
            return ("autotune_completed", {})
        m = RE_AT_KEEP.search(s)
        if m:
            what = " ".join(m.group(1).lower().split())
            if what == "armed":
                return ("autotune_armed", {})
            if what == "reused":
                return ("autotune_reused", {"path": m.group(2)})
            return ("autotune_tuned_saved", {"path": m.group(2)})
        m = RE_AT_DRIFT.search(s)
        if m:
            return ("autotune_drift", {"name": m.group(1), "line": s})
    if "ready" in low:
        m = RE_READY.search(s)
        if m:
            return ("ready", {"port": int(m.group(1))})
    if "graph" in low:
        m = RE_GRAPH.search(s)
        if m:
            return ("graph_shapes", {"pass": "draft" if m.group(1) else "target",
                                     "bs": [int(x) for x in re.findall(r"\d+", m.group(2))]})
    return None


def _periodic_fields(s, layer, packed_word):
    f = {"layer": layer, "packed": _bool(packed_word)}
    for key in ("lookups", "reads", "threads"):
        m = re.search(r"\b%s=(\d+)" % key, s, _I)
        f[key] = int(m.group(1)) if m else None
    m = re.search(r"hit_rate=([\d.]+)%", s, _I)
    f["hit_rate_pct"] = float(m.group(1)) if m else None
    f["cache_gib"] = _gib(RE_CACHE.search(s))
    m = RE_WAYS.search(s)
    f["cache_ways"] = int(m.group(1)) if m else None
    f["scales_gib"] = _gib(RE_SCALES.search(s))
    return f


def _fatal_fields(s, m):
    path = m.group(1)
    tail = m.group(2).lower()
    if tail.startswith("does not match"):
        reason = "range_mismatch"
    elif tail.startswith("is truncated"):
        reason = "truncated"
    elif tail.startswith("has no header"):
        reason = "no_header"
    else:
        reason = "other"
    f = {"path": path, "shard": path.rsplit("/", 1)[-1], "reason": reason, "line": s,
         "layer": None, "rank": None, "tp_size": None}
    n = RE_SHARD_NAME.search(path)
    if n:
        f["layer"], f["rank"], f["tp_size"] = int(n.group(1)), int(n.group(2)), int(n.group(3))
    return f


def _memory_fields(text):
    f = _kv_numbers(text)
    # Names used by callers: bytes_per_full_token (float), available_bytes (printed string),
    # available_bytes_bytes (int bytes), available_gib (float as printed).
    if "available_bytes" in f:
        f["available_gib"] = f["available_bytes"]
        f["available_bytes"] = f.pop("available_bytes_printed", None)
    if "bytes_per_full_token" in f:
        f["bytes_per_full_token"] = float(f["bytes_per_full_token"])
    return f


# ---------------------------------------------------------------------------------------------
# Facts of one boot
# ---------------------------------------------------------------------------------------------

class BootFacts(object):
    """Facts of the latest boot of one log.  ``to_dict()`` gives a JSON-safe view."""

    def __init__(self, source="<log>"):
        self.source = source
        self.boots_seen = 0
        self.boundary = None          # 'server_args' | 'engram_repeat' | 'start' | None (empty)
        self.server_args = {}
        self.engram = {}              # layer -> fields of the Exact line (first of the boot)
        self.periodic = {}            # layer -> {count, packed_true, packed_false, packed_other, last}
        self.memory = None            # last memory calculation
        self.memory_count = 0
        self.pool_sizes = []          # every pool line of the boot, in order (capped)
        self.pool_count = 0
        self.max_total = None
        self.autotune = {"disagree": 0, "runs": [], "run_count": 0, "completed": 0,
                         "armed": 0, "reused": [], "tuned_saved": [], "drift": []}
        self.fatal = []
        self.ready = False
        self.ready_port = None
        self.graph_shapes = {}        # 'target' / 'draft' -> captured batch sizes (last line wins)

    # -- convenience --------------------------------------------------------------------------
    @property
    def pool(self):
        """The pool that was allocated: the last ``pool sizes`` line of the boot."""
        return self.pool_sizes[-1] if self.pool_sizes else None

    def engram_layer(self, layer):
        return self.engram.get(int(layer))

    def periodic_packed(self, layer):
        """Last periodic ``packed=`` value for a layer, or None when no periodic line."""
        p = self.periodic.get(int(layer))
        return p["last"]["packed"] if p else None

    def _missing(self, kind, detail=None):
        return EngineLogError(self.source, kind, detail, self.boots_seen)

    def require_engram(self, layer):
        f = self.engram.get(int(layer))
        if f is None:
            raise self._missing("'Exact nvme Engram layer=%d'" % int(layer),
                                "layers found: %s" % (sorted(self.engram) or "none")
                                + ("; fatal: %s" % "; ".join(x["line"] for x in self.fatal)
                                   if self.fatal else ""))
        return f

    def require_memory(self):
        if self.memory is None:
            raise self._missing("'DSV4 memory calculation:'")
        return self.memory

    def require_pool(self):
        if not self.pool_sizes:
            raise self._missing("'DSV4 pool sizes:'")
        return self.pool

    def require_max_total(self):
        if self.max_total is None:
            raise self._missing("'max_total_num_tokens='")
        return self.max_total

    def require_ready(self):
        if not self.ready:
            raise self._missing("'Ready: API on port'")
        return self.ready_port

    def require_graph_shapes(self, pass_name="target"):
        """Captured CUDA-graph batch sizes of one pass (``'target'`` or ``'draft'``)."""
        shapes = self.graph_shapes.get(pass_name)
        if shapes is None:
            raise self._missing("'Capture %scuda graph bs'" % ("draft " if pass_name == "draft" else ""))
        return shapes

    def require_autotune(self):
        a = self.autotune
        if not (a["disagree"] or a["run_count"] or a["completed"] or a["armed"] or a["drift"]):
            raise self._missing("FlashInfer autotune / [autotune_keep]")
        return a

    def to_dict(self):
        return {
            "source": self.source,
            "boots_seen": self.boots_seen,
            "boundary": self.boundary,
            "server_args": dict(self.server_args),
            "engram": [dict(self.engram[k]) for k in sorted(self.engram)],
            "periodic": [dict(self.periodic[k], layer=k) for k in sorted(self.periodic)],
            "memory": dict(self.memory) if self.memory else None,
            "memory_count": self.memory_count,
            "pool": dict(self.pool) if self.pool else None,
            "pool_sizes": [dict(p) for p in self.pool_sizes],
            "pool_count": self.pool_count,
            "max_total": dict(self.max_total) if self.max_total else None,
            "autotune": {k: (list(v) if isinstance(v, list) else v) for k, v in self.autotune.items()},
            "fatal": [dict(f) for f in self.fatal],
            "ready": self.ready,
            "ready_port": self.ready_port,
            "graph_shapes": {k: list(v) for k, v in self.graph_shapes.items()},
        }


def _capped_append(lst, item):
    if len(lst) < MAX_EVENTS:
        lst.append(item)


class _State(object):
    """Streaming state machine: applies events, resets on boot boundaries."""

    def __init__(self, source, kinds):
        self.source = source
        self.kinds = kinds
        self.facts = BootFacts(source)
        self.markers = 0
        self.boots = 0
        self.leading = True           # before the first boundary
        self.leading_has_engram = False
        self.saw_text = False
        self.seen_exact = set()       # (layer, rank) of the Exact lines of the current boot

    def new_boot(self, boundary):
        if self.leading:
            # Text before the first boundary is a boot only if it showed an Exact Engram line
            # (a boot whose marker was lost); otherwise it is launcher noise.
            if self.leading_has_engram:
                self.boots += 1
            self.leading = False
        self.boots += 1
        if boundary == "server_args":
            self.markers += 1
        self.facts = BootFacts(self.source)
        self.facts.boundary = boundary
        self.seen_exact = set()

    def is_exact_repeat(self, f):
        """An Exact line whose (layer, rank) was already seen in the current boot (a boundary)."""
        return (f["layer"], f.get("rank")) in self.seen_exact

    def apply(self, kind, f):
        facts = self.facts
        if kind == "boot":
            self.new_boot("server_args")
            if KIND_SERVER_ARGS in self.kinds:
                self.facts.server_args = f["server_args"]
            return
        if kind == "engram":
            if self.is_exact_repeat(f):
                self.new_boot("engram_repeat")
                facts = self.facts
            if self.leading:
                self.leading_has_engram = True
            self.seen_exact.add((f["layer"], f.get("rank")))
            if f["layer"] not in facts.engram:      # first line of the layer in this boot
                facts.engram[f["layer"]] = f
            return
        if kind == "engram_periodic":
            self.add_periodic(f["layer"], 1, 1 if f["packed"] is True else 0,
                              1 if f["packed"] is False else 0, f)
            return
        if kind == "fatal_engram":
            _capped_append(facts.fatal, f)
        elif kind == "memory":
            facts.memory = f
            facts.memory_count += 1
        elif kind == "pool":
            facts.pool_count += 1
            if len(facts.pool_sizes) >= MAX_EVENTS:
                facts.pool_sizes.pop(0)          # keep the latest ones: the last one wins
            facts.pool_sizes.append(f)
        elif kind == "max_total":
            facts.max_total = f
        elif kind == "autotune_disagree":
            facts.autotune["disagree"] += 1
        elif kind == "autotune_run":
            facts.autotune["run_count"] += 1
            _capped_append(facts.autotune["runs"], f["cache"])
        elif kind == "autotune_completed":
            facts.autotune["completed"] += 1
        elif kind == "autotune_armed":
            facts.autotune["armed"] += 1
        elif kind == "autotune_reused":
            _capped_append(facts.autotune["reused"], f["path"])
        elif kind == "autotune_tuned_saved":
            _capped_append(facts.autotune["tuned_saved"], f["path"])
        elif kind == "autotune_drift":
            _capped_append(facts.autotune["drift"], f["name"])
        elif kind == "ready":
            facts.ready = True
            facts.ready_port = f["port"]
        elif kind == "graph_shapes":
            facts.graph_shapes[f["pass"]] = f["bs"]

    def add_periodic(self, layer, count, n_true, n_false, last):
        p = self.facts.periodic.get(layer)
        if p is None:
            p = self.facts.periodic[layer] = {"count": 0, "packed_true": 0, "packed_false": 0,
                                              "packed_other": 0, "last": None}
        p["count"] += count
        p["packed_true"] += n_true
        p["packed_false"] += n_false
        p["packed_other"] += count - n_true - n_false
        if last is not None:
            p["last"] = last

    def finish(self, boots_before=0):
        facts = self.facts
        boots = self.boots
        if self.leading and (self.leading_has_engram or (boots_before == 0 and self.saw_text)):
            # No boundary at all in the scanned text: the whole text is one boot
            # (if it holds anything, or if it is all we have).
            boots += 1
            facts.boundary = facts.boundary or "start"
        facts.boots_seen = boots + boots_before
        return facts


# Which needles (searched in the lowered chunk) select candidate lines, per kind.
_NEEDLES = {
    KIND_ENGRAM: [],
    KIND_FATAL: [b"engram shard"],
    KIND_MEMORY: [b"memory calculation:", b"pool sizes:", b"max_total_num_tokens="],
    KIND_AUTOTUNE: [b"autotune"],
    KIND_READY: [b"ready: api on port"],
    KIND_SERVER_ARGS: [],
    KIND_GRAPH_SHAPES: [b"cuda graph bs"],      # only scanned when this kind is asked for
}
_BOOT_NEEDLE = b"server_args=serverargs("
_EXACT_NEEDLE = b"nvme engram layer="            # Exact lines are boundaries: always tracked
_EVENT_KIND = {
    "engram": KIND_ENGRAM, "engram_periodic": KIND_ENGRAM, "fatal_engram": KIND_FATAL,
    "memory": KIND_MEMORY, "pool": KIND_MEMORY, "max_total": KIND_MEMORY, "ready": KIND_READY,
    "graph_shapes": KIND_GRAPH_SHAPES,
}


def _needles_for(kinds):
    out = [_BOOT_NEEDLE, _EXACT_NEEDLE]
    for k in sorted(kinds):
        out.extend(_NEEDLES.get(k, []))
    return out


class Scanner(object):
    """Incremental scanner: ``feed()`` bytes (any split), then ``finish()`` -> :class:`BootFacts`.

    Memory is bounded by the chunk size plus the longest line, whatever the log size.
    """

    def __init__(self, source="<log>", kinds=ALL_KINDS):
        self.kinds = frozenset(kinds)
        unknown = self.kinds - ALL_KINDS
        if unknown:
            raise ValueError("unknown kinds: %s" % sorted(unknown))
        self.state = _State(source, self.kinds)
        self.needles = _needles_for(self.kinds)
        self._carry = b""

    def feed(self, data):
        if not data:
            return
        data = bytes(data)
        first = data.find(b"\n")
        if first == -1:
            self._carry += data           # a line longer than a chunk: keep collecting it
            return
        start = 0
        if self._carry:
            head = self._carry + data[:first + 1]
            self._carry = b""
            self._process(head, 0, len(head))
            start = first + 1
        last = data.rfind(b"\n")
        if last + 1 < len(data):
            self._carry = data[last + 1:]
        if start < last + 1:
            self._process(data, start, last + 1)

    def finish(self, boots_before=0):
        if self._carry:
            data, self._carry = self._carry + b"\n", b""
            self._process(data, 0, len(data))
        return self.state.finish(boots_before)

    # The hot path ------------------------------------------------------------------------------
    def _process(self, chunk, start, end):
        """Handle the complete lines in ``chunk[start:end]`` (``end`` is just after a newline)."""
        if end > start:
            self.state.saw_text = True
        low = chunk.lower()               # ASCII-only lowering keeps every offset
        starts = set()
        find = low.find
        for needle in self.needles:
            pos = find(needle, start, end)
            while pos != -1:
                nl = low.rfind(b"\n", start, pos)
                starts.add(nl + 1 if nl != -1 else start)
                le = find(b"\n", pos, end)
                if le == -1:
                    break
                pos = find(needle, le, end)
        state = self.state
        want_periodic = KIND_ENGRAM in self.kinds
        seg = start
        for ls in sorted(starts):
            le = find(b"\n", ls, end)
            if le == -1:
                le = end
            ev = parse_line(chunk[ls:le])
            if ev is None:
                continue
            kind, f = ev
            if kind == "engram_periodic":
                continue                      # counted in bulk below
            is_boundary = kind == "boot" or (kind == "engram" and state.is_exact_repeat(f))
            if is_boundary and want_periodic:
                self._periodic(low, chunk, seg, ls)
                seg = le
            want = _EVENT_KIND.get(kind)
            if kind.startswith("autotune"):
                want = KIND_AUTOTUNE
            if kind in ("boot", "engram") or want in self.kinds:
                state.apply(kind, f)
        if want_periodic:
            self._periodic(low, chunk, seg, end)

    def _periodic(self, low, chunk, start, end):
        if start >= end or low.find(b"engram layer=", start, end) == -1:
            return
        counts = {}
        for layer, packed in RE_PERIODIC_B.findall(low, start, end):
            key = (layer, packed)
            counts[key] = counts.get(key, 0) + 1
        per_layer = {}
        for (layer, packed), n in counts.items():
            t = per_layer.setdefault(layer, [0, 0, 0])
            t[0] += n
            if packed == b"true":
                t[1] += n
            elif packed == b"false":
                t[2] += n
        for layer, (n, n_true, n_false) in per_layer.items():
            last = None
            pos = low.rfind(b"engram layer=" + layer + b" lookups=", start, end)
            if pos != -1:
                ls = low.rfind(b"\n", 0, pos) + 1
                le = low.find(b"\n", pos)
                ev = parse_line(chunk[ls:le if le != -1 else len(chunk)])
                if ev and ev[0] == "engram_periodic":
                    last = ev[1]
            self.state.add_periodic(int(layer), n, n_true, n_false, last)


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

def _iter_chunks(source, chunk_size=CHUNK_SIZE):
    """Yield bytes chunks from a path, a binary/text stream, str/bytes, or an iterable of lines."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        mv = memoryview(source)
        for i in range(0, len(mv), chunk_size):
            yield bytes(mv[i:i + chunk_size])
        return
    if isinstance(source, str):
        data = source.encode("utf-8", "surrogateescape")
        for c in _iter_chunks(data, chunk_size):
            yield c
        return
    if hasattr(source, "read"):
        while True:
            c = source.read(chunk_size)
            if not c:
                return
            yield c.encode("utf-8", "surrogateescape") if isinstance(c, str) else c
    # iterable of lines (str or bytes), batched
    buf, size = [], 0
    for line in source:
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogateescape")
        if not line.endswith(b"\n"):
            line += b"\n"
        buf.append(line)
        size += len(line)
        if size >= chunk_size:
            yield b"".join(buf)
            buf, size = [], 0
    if buf:
        yield b"".join(buf)


def scan(source, name=None, kinds=ALL_KINDS, chunk_size=CHUNK_SIZE):
    """Forward streaming scan of any source -> :class:`BootFacts` of the latest boot.

    ``source``: str (log text), bytes, a file object (binary or text), or an iterable of lines.
    For a path use :func:`scan_file` (faster: it skips superseded boots).
    """
    if name is None:
        name = getattr(source, "name", None) or "<log>"
    sc = Scanner(name, kinds)
    for chunk in _iter_chunks(source, chunk_size):
        sc.feed(chunk)
    return sc.finish()


def scan_text(text, name="<log>", kinds=ALL_KINDS):
    return scan(text, name=name, kinds=kinds)


def scan_lines(lines, name="<log>", kinds=ALL_KINDS):
    return scan(iter(lines), name=name, kinds=kinds)


_MARKER_B = b"server_args=ServerArgs("
_EXACT_B = b"Exact nvme Engram layer="          # long needles search fastest
_RE_EXACT_LAYER_B = re.compile(rb"Exact nvme Engram layer=(\d+)(?: rank=(\d+))?")


def _find_last_marker(f, size, chunk_size):
    """Offset of the start of the line holding the last boot marker, or None."""
    overlap = len(_MARKER_B) - 1
    end = size
    while end > 0:
        start = max(0, end - chunk_size)
        f.seek(start)
        buf = f.read(min(end + overlap, size) - start)
        pos = buf.rfind(_MARKER_B)
        if pos != -1:
            hit = start + pos
            # walk back to the line start
            back = hit
            while back > 0:
                lo = max(0, back - 65536)
                f.seek(lo)
                piece = f.read(back - lo)
                nl = piece.rfind(b"\n")
                if nl != -1:
                    return lo + nl + 1
                back = lo
            return 0
        end = start
    return None


class _BoundaryCounter(object):
    """Boot counting over superseded text from boundary events only (see module doc)."""

    def __init__(self):
        self.boots = 0
        self.leading = True
        self.leading_has_engram = False
        self.seen = set()

    def events(self, data, owned, end):
        """Boundary events ``(pos, kind, (layer, rank))`` starting in ``data[0:owned]``, sorted.

        ``end`` (> owned) lets a needle that starts in the owned part finish in the overlap.
        """
        out = []
        find = data.find
        pos = find(_MARKER_B, 0, end)
        while pos != -1 and pos < owned:
            out.append((pos, 0, None))
            pos = find(_MARKER_B, pos + 1, end)
        pos = find(_EXACT_B, 0, end)
        while pos != -1 and pos < owned:
            m = _RE_EXACT_LAYER_B.match(data, pos, end)
            if m:
                out.append((pos, 1, (int(m.group(1)), int(m.group(2)) if m.group(2) else None)))
            pos = find(_EXACT_B, pos + 1, end)
        out.sort()
        return out

    def apply(self, events):
        for _pos, kind, layer in events:
            if kind == 0 or layer in self.seen:
                if self.leading:
                    if self.leading_has_engram:
                        self.boots += 1
                    self.leading = False
                self.boots += 1
                self.seen = set()
            if kind == 1:
                if self.leading:
                    self.leading_has_engram = True
                self.seen.add(layer)

    def total(self):
        return self.boots + (1 if self.leading and self.leading_has_engram else 0)


def _count_boots_before(f, limit, chunk_size, window_size=WINDOW_SIZE):
    """Boundary-only pass over ``[0, limit)`` (the superseded boots). Returns the boot count.

    Searches read-only memory-mapped windows of the file in place (no copies; resident memory
    bounded by the window), falling back to reads into one reusable buffer.
    """
    counter = _BoundaryCounter()
    overlap = max(len(_MARKER_B), len(_EXACT_B)) + 32
    window = max(mmap.ALLOCATIONGRANULARITY, (window_size // mmap.ALLOCATIONGRANULARITY)
                 * mmap.ALLOCATIONGRANULARITY)
    try:
        off = 0
        while off < limit:
            length = min(window + overlap, limit - off)
            mm = mmap.mmap(f.fileno(), length, offset=off, access=mmap.ACCESS_READ)
            try:
                # a needle starting in [0, window) belongs to this window
                counter.apply(counter.events(mm, window, length))
            finally:
                mm.close()
            off += window
        return counter.total()
    except (ValueError, OSError, mmap.error):
        counter = _BoundaryCounter()
    f.seek(0)
    buf = bytearray(chunk_size + overlap)
    view = memoryview(buf)
    off = 0
    while off < limit:
        f.seek(off)
        n = f.readinto(view[:min(chunk_size + overlap, limit - off)])
        if not n:
            break
        counter.apply(counter.events(buf, chunk_size, n))
        off += chunk_size
    return counter.total()


def scan_file(path, kinds=ALL_KINDS, chunk_size=CHUNK_SIZE, name=None):
    """Scan a log file -> :class:`BootFacts` of its latest boot, in bounded memory.

    Finds the last ``server_args=ServerArgs(`` marker from the end of the file, fully parses
    from there to the end, and counts earlier boots with a cheap boundary-only pass.
    """
    name = name or str(path)
    try:
        f = open(path, "rb")
    except (IOError, OSError) as exc:
        raise EngineLogError(name, "readable", "cannot open: %s" % exc)
    with f:
        size = os.fstat(f.fileno()).st_size
        start = _find_last_marker(f, size, chunk_size) if size else None
        boots_before = 0
        if start:
            boots_before = _count_boots_before(f, start, chunk_size, min(chunk_size * 4, WINDOW_SIZE))
        sc = Scanner(name, kinds)
        f.seek(start or 0)
        while True:
            data = f.read(chunk_size)
            if not data:
                break
            sc.feed(data)
        return sc.finish(boots_before)


def latest_boot(lines):
    """Return the lines (unchanged) of the latest boot of ``lines`` (boot rules: module doc).

    Keeps only the current boot in memory; with no boundary the whole input is returned.
    """
    current = []
    seen = set()
    for line in lines:
        s = strip_line(line)
        low = s.lower()
        layer = None
        boundary = False
        if "server_args" in low and RE_BOOT.search(s):
            boundary = True
        elif "ngram" in low:
            m = RE_EXACT.search(s)
            if m:
                r = RE_RANK.search(s)
                layer = (int(m.group(1)), int(r.group(1)) if r else None)
                boundary = layer in seen
        if boundary:
            current = []
            seen = set()
        if layer is not None:
            seen.add(layer)
        current.append(line)
    return current


# ---------------------------------------------------------------------------------------------
# docker logs
# ---------------------------------------------------------------------------------------------

def merge_docker_streams(stdout, stderr):
    """Merge ``docker logs --timestamps`` stdout and stderr into one text in log order.

    ``docker logs`` writes the container's stdout to stdout and its stderr to stderr, so the
    interleaving is lost when the two are captured apart; each line's RFC 3339 timestamp puts
    it back (stable merge; a line without a timestamp keeps the previous line's).  The
    timestamps are removed.  Without timestamps the result is stdout followed by stderr.
    """
    def keyed(text, which):
        last = ""
        for i, line in enumerate((text or "").splitlines()):
            m = DOCKER_TS_RE.match(line)
            if m:
                last = m.group(1)
                line = line[m.end():]
            yield (_ts_key(last), which, i, line)

    merged = heapq.merge(keyed(stdout, 0), keyed(stderr, 1))
    return "".join(item[3] + "\n" for item in merged)


def _ts_key(ts):
    # "2026-09-24T02:55:01.123456789Z": pad the fraction so strings sort as times.
    if not ts:
        return ""
    head, _, frac = ts.partition(".")
    if frac:
        digits = re.match(r"\d*", frac).group(0)
        zone = frac[len(digits):]
        return head + "." + digits.ljust(9, "0") + zone
    return head + ".000000000" + ts[len(head):]


def docker_logs_text(run_command, container, docker="docker", timestamps=True):
    """Run ``docker logs [--timestamps] <container>`` through ``run_command`` and return text.

    ``run_command`` is ``AnsibleModule.run_command`` (args list -> (rc, stdout, stderr)).
    Raises :class:`EngineLogError` when docker fails.
    """
    args = [docker, "logs"]
    if timestamps:
        args.append("--timestamps")
    args.append(container)
    rc, out, err = run_command(args)
    if rc != 0:
        raise EngineLogError("docker logs %s" % container, "readable",
                             "docker exited %s: %s" % (rc, (err or out or "").strip()[-500:]))
    if timestamps:
        return merge_docker_streams(out, err)
    return (out or "") + ("" if not out or out.endswith("\n") else "\n") + (err or "")


def scan_docker(run_command, container, kinds=ALL_KINDS, docker="docker", timestamps=True):
    text = docker_logs_text(run_command, container, docker=docker, timestamps=timestamps)
    return scan(text, name="docker logs %s" % container, kinds=kinds)


# The log source every engine-log module takes: a log file (streamed) or a container's docker logs.
SOURCE_ARGUMENT_SPEC = dict(
    log_path=dict(type="path"),
    container=dict(type="str"),
    docker_bin=dict(type="str", default="docker"),
    docker_timestamps=dict(type="bool", default=True),
)
SOURCE_MUTUALLY_EXCLUSIVE = [("log_path", "container")]
SOURCE_REQUIRED_ONE_OF = [("log_path", "container")]


def read_boot_params(run_command, params, kinds=ALL_KINDS):
    """read_boot with a module's SOURCE_ARGUMENT_SPEC parameters."""
    return read_boot(run_command, log_path=params["log_path"], container=params["container"], kinds=kinds,
                     docker=params["docker_bin"], timestamps=params["docker_timestamps"])


def read_boot(run_command, log_path=None, container=None, kinds=ALL_KINDS, docker="docker", timestamps=True):
    """Latest-boot facts from a log file (streamed) or a container's ``docker logs``.

    The one entry point modules use, so every module reads an engine log the same way.
    """
    if log_path:
        return scan_file(log_path, kinds=kinds)
    if container:
        return scan_docker(run_command, container, kinds=kinds, docker=docker, timestamps=timestamps)
    raise ValueError("read_boot needs log_path or container")
