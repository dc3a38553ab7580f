# -*- coding: utf-8 -*-
"""The one reader of SGLang engine logs for this repository (standard library only).

Every module and role that needs a boot log goes through this file (``engram_packed``,
``kv_pool``, ``autotune_status``, ``engine_boot_facts``, ``engine_boot_log``); nothing else
interprets engine log lines.

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

How lines become messages (:func:`split_messages`)
--------------------------------------------------
A physical line that starts with a logging prefix is ONE record: the logging handler ends every
record with a newline, so nothing inside it (an echoed request quoting ``server_args=`` or an
``Exact ... packed=True`` line) starts another message.  Only raw output (no prefix) is split: at
carriage returns and cursor codes (tqdm redraws), and at a logging prefix glued after a progress
bar (``%|``).  Colour codes are removed; CRLF is accepted.  Every kind below is recognised only at
the START of a message, so text that merely contains the words elsewhere is ignored.

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
                    ..., gen throughput (token/s): 3.12, #queue-req: 0`` (rank 0)
``ready``           ``Ready: API on port 8888``
==================  ==========================================================================

Numbers and units
-----------------
``491,520`` is four hundred ninety-one thousand five hundred and twenty (thousands separators are
accepted where a comma is followed by exactly three digits).  The engine computes its memory
figures as ``bytes / 2**30`` and labels them ``GB``: a printed ``GB``/``GiB`` is 2**30 bytes,
``MB``/``MiB`` 2**20, ``KB``/``KiB`` 2**10; a bare number in a ``*_bytes`` field, or ``B``/``bytes``,
is bytes.  Each memory value is kept as printed (``available_bytes: "8.84 GB"``) and as an integer
byte count (``available_bytes_bytes``).  A value that is not a number (``available_bytes=1.0.4 GB``)
is recorded as malformed; asking for it raises :class:`MalformedLogLine` naming the source, the
line number and the line, never a traceback.

Latest boot, partial lines
--------------------------
Facts come from the LATEST boot only: from the last marker to the end.  For a file (or bytes
held in memory) the last marker is found by searching backwards from the end, so the cost is the
size of the latest boot, not of the log: a log that has grown for months is read as fast as a new
one.  Counting the earlier boots is optional (``count_boots=True``: one forward pass over the
marker needle); otherwise ``boots_seen`` is None.  A log without any marker is read whole and
flagged (``marker_found`` false): its lines cannot be tied to a boot.  A last line without its
newline is being written: it is ignored and reported (``partial_last_line``), so a half-written
``full=49`` never wins over the complete line before it.
"""
from __future__ import absolute_import, division, print_function

import ast
import heapq
import os
import re

__metaclass__ = type

GIB = 1 << 30
UNIT_BYTES = {
    "B": 1, "BYTES": 1,
    "KB": 1 << 10, "KIB": 1 << 10,
    "MB": 1 << 20, "MIB": 1 << 20,
    "GB": 1 << 30, "GIB": 1 << 30,
    "TB": 1 << 40, "TIB": 1 << 40,
}

CHUNK_SIZE = 4 << 20          # bytes per read; memory use is a small multiple of this
MAX_EVENTS = 256              # cap of every per-boot list (counts keep counting)
MAX_QUOTE = 240               # characters of a line quoted in a message
DOCKER_TIMEOUT = 120          # seconds `docker logs` may take (a daemon that stops answering)

# Kinds of facts a scan can be restricted to (``kinds=``). Boot boundaries are always tracked.
KIND_ENGRAM = "engram"        # Exact + periodic Engram lines
KIND_FATAL = "fatal"          # fatal Engram errors
KIND_MEMORY = "memory"        # memory calculation, pool sizes, max_total_num_tokens, start-up peaks
KIND_AUTOTUNE = "autotune"
KIND_READY = "ready"
KIND_SERVER_ARGS = "server_args"
KIND_GRAPH_SHAPES = "graph_shapes"  # CUDA-graph captures (target / draft)
KIND_DECODE = "decode"        # Decode batch lines (accept length, throughput)
ALL_KINDS = frozenset([KIND_ENGRAM, KIND_FATAL, KIND_MEMORY, KIND_AUTOTUNE, KIND_READY,
                       KIND_SERVER_ARGS, KIND_GRAPH_SHAPES, KIND_DECODE])
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


class MalformedLogLine(EngineLogError):
    """A needed line is present but one of its values is not what the engine prints."""

    def __init__(self, source, line_no, key, value, line, boots_seen=None):
        Exception.__init__(self, "%s line %s: malformed value %s=%r in %r"
                           % (source, line_no if line_no is not None else "?", key, value, _quote(line)))
        self.source = source
        self.kind = "well-formed " + key
        self.detail = None
        self.boots_seen = boots_seen
        self.line_no = line_no
        self.key = key
        self.value = value


def _quote(text):
    text = text or ""
    return text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE] + "..."


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

# Colour (SGR) codes are removed; every other escape sequence (cursor up ``ESC[A``, erase line
# ``ESC[2K``, ...) is a redraw boundary, like a carriage return.
SGR_RE = re.compile(r"\x1b\[[0-9;]*m")
ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_PREFIX = r"\[(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)((?:\s+[A-Z]{2}\d+)*)\]"
PREFIX_AT_START_RE = re.compile(r"^\s*" + _PREFIX + r" ?")
PREFIX_ANYWHERE_RE = re.compile(_PREFIX + r" ?")
TP_TAG_RE = re.compile(r"\bTP(\d+)\b")
DOCKER_TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")
PROGRESS_BAR = "%|"           # what a tqdm bar prints before a record can be glued after it


class Message(object):
    """One log message: its text without prefix, whether it had a logging prefix, its TP rank."""

    __slots__ = ("text", "prefixed", "tp_rank", "time")

    def __init__(self, text, prefixed=False, tp_rank=None, time=None):
        self.text = text
        self.prefixed = prefixed
        self.tp_rank = tp_rank
        self.time = time

    def __repr__(self):
        return "Message(%r, prefixed=%r, tp_rank=%r)" % (self.text, self.prefixed, self.tp_rank)


def _message(text, m):
    tags = m.group(2) or ""
    r = TP_TAG_RE.search(tags)
    return Message(text.strip(), True, int(r.group(1)) if r else None, m.group(1))


def split_messages(line):
    """The messages of one physical line (str or bytes), in order (rules: module doc)."""
    if isinstance(line, (bytes, bytearray, memoryview)):
        line = bytes(line).decode("utf-8", "replace")
    line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = SGR_RE.sub("", line)
    m = PREFIX_AT_START_RE.match(line)
    if m:
        # A logging record: atomic up to its newline.  Cursor codes inside are noise.
        rest = ESCAPE_RE.sub("", line[m.end():]) if "\x1b" in line else line[m.end():]
        return [_message(rest.replace("\r", ""), m)]
    if "\x1b" in line:
        line = ESCAPE_RE.sub("\r", line)
    out = []
    for seg in line.split("\r"):
        if not seg.strip():
            continue
        m = PREFIX_AT_START_RE.match(seg)
        if m:
            out.append(_message(seg[m.end():], m))
            continue
        if PROGRESS_BAR in seg:
            m = PREFIX_ANYWHERE_RE.search(seg)
            if m and PROGRESS_BAR in seg[:m.start()]:
                out.append(Message(seg[:m.start()].strip()))
                out.append(_message(seg[m.end():], m))
                continue
        out.append(Message(seg.strip()))
    return out


def strip_line(line):
    """The text of the last message of ``line`` (prefix, colour and cursor codes removed)."""
    msgs = split_messages(line)
    return msgs[-1].text if msgs else ""


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

NUMBER_RE = re.compile(r"^([+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*"
                       r"([KMGT]i?B|B|bytes|s|ms|%)?$", re.I)


class Malformed(object):
    """A value that looks like it should be a number and is not one (kept as printed)."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    def __eq__(self, other):
        return isinstance(other, Malformed) and other.raw == self.raw

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.raw)

    def __repr__(self):
        return "Malformed(%r)" % self.raw


def parse_number(raw):
    """``"491,520"`` -> (491520, None); ``"8.84 GB"`` -> (8.84, "GB"); not a number -> None."""
    m = NUMBER_RE.match(raw.strip())
    if not m:
        return None
    text = m.group(1).replace(",", "")
    try:
        value = int(text)
    except ValueError:
        value = float(text)
    return value, m.group(2)


def to_bytes(value, unit):
    """``to_bytes("1.04", "GB") -> 1116691497`` (GB = 2**30, see module doc); None if unknown."""
    if value is None:
        return None
    mult = UNIT_BYTES.get((unit or "B").upper())
    if mult is None:
        return None
    return int(round(float(str(value).replace(",", "")) * mult))


_EQ_SPLIT = re.compile(r",\s*(?=[A-Za-z_][\w ]*?=)")
_COLON_SPLIT = re.compile(r",\s*(?=#?[A-Za-z_][\w #()/-]*?:)")


def _norm_key(key):
    return re.sub(r"[^0-9a-z]+", "_", key.strip().lower()).strip("_")


def _value(key, raw, out):
    """Store ``key`` from ``raw`` into ``out`` (number, string or :class:`Malformed`)."""
    raw = raw.strip().rstrip(".") if re.search(r"\d\.$", raw.strip()) else raw.strip()
    num = parse_number(raw)
    if num is None:
        if raw[:1].isdigit() or (raw[:1] in "+-." and raw[1:2].isdigit()):
            out[key] = Malformed(raw)
        else:
            out[key] = raw
        return
    value, unit = num
    if unit and unit.upper() in UNIT_BYTES:
        out[key] = float(value)
        out[key + "_printed"] = raw
        out[key + "_bytes"] = to_bytes(value, unit)
    elif unit:
        out[key] = float(value)
        out[key + "_printed"] = raw
    else:
        out[key] = value
        if key.endswith("_bytes") or key == "bytes":
            out[key + "_printed"] = raw
            out[key + "_bytes"] = int(value)


def kv_fields(text, sep="="):
    """``a=1, b=491,520, c=8.84 GB`` -> {'a': 1, 'b': 491520, 'c': 8.84, 'c_printed': ..., 'c_bytes': ...}.

    ``sep=":"`` reads ``#running-req: 1, accept len: 3.08`` style lists.  Keys are normalised to
    lower-case identifiers (``avail mem`` -> ``avail_mem``).
    """
    out = {}
    splitter = _EQ_SPLIT if sep == "=" else _COLON_SPLIT
    for part in splitter.split(text.strip()):
        key, found, raw = part.partition(sep)
        if not found:
            continue
        key = _norm_key(key)
        if not key:
            continue
        if raw.strip().startswith("["):
            out[key] = [int(x) for x in re.findall(r"-?\d+", raw)]
            continue
        _value(key, raw, out)
    return out


def malformed_keys(fields):
    return sorted(k for k, v in fields.items() if isinstance(v, Malformed))


# ---------------------------------------------------------------------------------------------
# Classification of one message
# ---------------------------------------------------------------------------------------------

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
RE_DECODE = re.compile(r"^Decode\s+batch[,.]\s*(.*)$", _I)
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


def _periodic_record(m):
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
            return ("decode", kv_fields(m.group(1), sep=":"))
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


# ---------------------------------------------------------------------------------------------
# Facts of one boot
# ---------------------------------------------------------------------------------------------

class BootFacts(object):
    """Facts of the latest boot of one log.  ``to_dict()`` gives a JSON-safe view."""

    def __init__(self, source="<log>"):
        self.source = source
        self.boots_seen = None        # counted only on request (count_boots=True)
        self.marker_found = False
        self.marker_form = None       # 'dict' | 'ServerArgs'
        self.marker_complete = None
        self.server_args = {}
        self.tp_rank = None           # TP rank of the boot's prefixed lines (first seen)
        self.engram = {}              # layer -> fields of the Exact line (first of the boot)
        self.engram_order = []        # layers in the order they were attached
        self.periodic = {}            # layer -> {count, packed_true, packed_false, packed_other, last}
        self.memory = None            # last memory calculation
        self.memory_count = 0
        self.pool_sizes = []          # every pool line of the boot, in order (capped, latest kept)
        self.pool_count = 0
        self.max_total = None
        self.startup = {"load_weight": [], "load_weight_begin": None, "memory_pool_end": None}
        self.graphs = {}              # 'target'/'draft' -> {'begin': {...}, 'end': {...}}
        self.graph_shapes = {}        # 'target'/'draft' -> captured batch sizes
        self.autotune = {"disagree": 0, "runs": [], "run_count": 0, "completed": 0,
                         "armed": 0, "reused": [], "tuned_saved": [], "drift": []}
        self.decode = {"count": 0, "last": None, "accept_len": []}
        self.fatal = []
        self.ready = False
        self.ready_port = None
        self.partial_last_line = None
        self.malformed = []           # {line, key, value, text} of lines with a non-number value

    # -- convenience --------------------------------------------------------------------------
    @property
    def pool(self):
        """The pool that was allocated: the last ``pool sizes`` line of the boot."""
        return self.pool_sizes[-1] if self.pool_sizes else None

    @property
    def rank(self):
        """The boot's rank: ``node_rank`` of its marker, else the TP tag of its prefixes."""
        r = self.server_args.get("node_rank")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
        return self.tp_rank

    def engram_layer(self, layer):
        return self.engram.get(int(layer))

    def periodic_packed(self, layer):
        """Last periodic ``packed=`` value for a layer, or None when no periodic line."""
        p = self.periodic.get(int(layer))
        return p["last"]["packed"] if p and p["last"] else None

    def _missing(self, kind, detail=None):
        return EngineLogError(self.source, kind, detail, self.boots_seen)

    def _check(self, fields, keys):
        for key in keys:
            if isinstance(fields.get(key), Malformed):
                raise MalformedLogLine(self.source, fields.get("_line"), key, fields[key].raw,
                                       fields.get("_text"), self.boots_seen)
        return fields

    def require_marker(self):
        if not self.marker_found:
            raise self._missing("boot marker ('server_args=')",
                                "the lines read cannot be tied to a boot (log rotated, or not an engine log)")

    def fatal_attributed(self, layers, rank=None):
        """The fatal Engram errors, each with ``layer`` (the first of ``layers`` not attached before
        it: the one being attached) and ``rank`` (the boot's, else ``rank``); they name no file."""
        out = []
        for f in self.fatal:
            entry = dict(f)
            entry["layer"] = next((layer for layer in layers if layer not in f["attached_layers"]), None)
            if entry["rank"] is None:
                entry["rank"] = rank
            out.append(entry)
        return out

    @staticmethod
    def fatal_text(attributed):
        return ["fatal on rank %s while attaching layer %s: %s" % (x["rank"], x["layer"], x["line"])
                for x in attributed]

    def require_engram(self, layer, layers=None, rank=None):
        """The Exact line of ``layer``; when missing, the error names the layers attached, the fatal
        errors attributed among ``layers`` (default: this layer) and a line still being written."""
        f = self.engram.get(int(layer))
        if f is None:
            detail = "layers attached: %s" % (sorted(self.engram) or "none")
            fatal = self.fatal_text(self.fatal_attributed(layers or [int(layer)], rank))
            if fatal:
                detail += "; " + "; ".join(fatal)
            if self.partial_last_line:
                detail += "; last line still being written: %r" % _quote(self.partial_last_line)
            raise self._missing("'Exact ... Engram layer=%d'" % int(layer), detail)
        return f

    def require_memory(self):
        if self.memory is None:
            raise self._missing("'DSV4 memory calculation:'")
        return self._check(self.memory, ("available_bytes", "bytes_per_full_token"))

    def require_pool(self):
        if not self.pool_sizes:
            raise self._missing("'DSV4 pool sizes:'")
        return self._check(self.pool, ("full",))

    def require_max_total(self):
        if self.max_total is None:
            raise self._missing("'max_total_num_tokens='")
        return self._check(self.max_total, ("max_total_num_tokens",))

    def require_ready(self):
        if not self.ready:
            raise self._missing("'Ready: API on port'")
        return self.ready_port

    def require_graph_shapes(self, pass_name="target"):
        """Captured CUDA-graph batch sizes of one pass (``'target'`` or ``'draft'``)."""
        shapes = self.graph_shapes.get(pass_name)
        if shapes is None:
            raise self._missing("'Capture %s verify CUDA graph begin'" % pass_name)
        return shapes

    def require_autotune(self):
        a = self.autotune
        if not (a["disagree"] or a["run_count"] or a["completed"] or a["armed"] or a["drift"]):
            raise self._missing("FlashInfer autotune / [autotune_keep]")
        return a

    def to_dict(self):
        clean = public_fields
        return {
            "source": self.source,
            "boots_seen": self.boots_seen,
            "marker_found": self.marker_found,
            "marker_form": self.marker_form,
            "marker_complete": self.marker_complete,
            "rank": self.rank,
            "server_args": dict(self.server_args),
            "engram": [clean(self.engram[k]) for k in sorted(self.engram)],
            "periodic": [dict(self.periodic[k], layer=k) for k in sorted(self.periodic)],
            "memory": clean(self.memory),
            "memory_count": self.memory_count,
            "pool": clean(self.pool),
            "pool_sizes": [clean(p) for p in self.pool_sizes],
            "pool_count": self.pool_count,
            "max_total": clean(self.max_total),
            "startup": {"load_weight_begin": clean(self.startup["load_weight_begin"]),
                        "load_weight": [clean(x) for x in self.startup["load_weight"]],
                        "memory_pool_end": clean(self.startup["memory_pool_end"])},
            "graphs": dict((p, dict((ph, clean(v)) for ph, v in g.items())) for p, g in self.graphs.items()),
            "graph_shapes": dict((k, list(v)) for k, v in self.graph_shapes.items()),
            "autotune": dict((k, (list(v) if isinstance(v, list) else v)) for k, v in self.autotune.items()),
            "decode": {"count": self.decode["count"], "last": clean(self.decode["last"]),
                       "accept_len": list(self.decode["accept_len"])},
            "fatal": [dict(f) for f in self.fatal],
            "ready": self.ready,
            "ready_port": self.ready_port,
            "partial_last_line": self.partial_last_line,
            "malformed": [dict(m) for m in self.malformed],
        }


def public_fields(fields):
    """A fields dict as callers see it: without the reader's own ``_`` keys, malformed values as
    printed; None stays None."""
    if fields is None:
        return None
    return dict((k, (v.raw if isinstance(v, Malformed) else v)) for k, v in fields.items()
                if not k.startswith("_"))


def _capped_append(lst, item):
    if len(lst) < MAX_EVENTS:
        lst.append(item)


_EVENT_KIND = {
    "engram": KIND_ENGRAM, "engram_periodic": KIND_ENGRAM, "fatal_engram": KIND_FATAL,
    "memory": KIND_MEMORY, "pool": KIND_MEMORY, "max_total": KIND_MEMORY, "startup": KIND_MEMORY,
    "ready": KIND_READY, "graph": KIND_GRAPH_SHAPES, "decode": KIND_DECODE,
}


def _kind_of(kind):
    return KIND_AUTOTUNE if kind.startswith("autotune") else _EVENT_KIND.get(kind)


class _State(object):
    """Applies events in order; a boot marker starts a new boot (facts reset)."""

    def __init__(self, source, kinds):
        self.source = source
        self.kinds = kinds
        self.facts = BootFacts(source)
        self.markers = 0

    def apply(self, msg, kind, f, line_no):
        facts = self.facts
        if kind == "boot":
            self.markers += 1
            facts = self.facts = BootFacts(self.source)
            facts.marker_found = True
            facts.marker_form = f["form"]
            facts.marker_complete = f["complete"]
            facts.server_args = f["server_args"]     # always kept: rank and page size come from it
            return
        if msg.tp_rank is not None and facts.tp_rank is None:
            facts.tp_rank = msg.tp_rank
        if kind is None or _kind_of(kind) not in self.kinds:
            return
        for key in malformed_keys(f):
            _capped_append(facts.malformed, {"line": line_no, "key": key, "value": f[key].raw,
                                             "text": _quote(msg.text)})
        if isinstance(f, dict):
            f["_line"] = line_no
            f["_text"] = msg.text
        if kind == "engram":
            if f["layer"] not in facts.engram:
                facts.engram[f["layer"]] = f
                facts.engram_order.append(f["layer"])
        elif kind == "engram_periodic":
            p = facts.periodic.get(f["layer"])
            if p is None:
                p = facts.periodic[f["layer"]] = {"count": 0, "packed_true": 0, "packed_false": 0,
                                                  "packed_other": 0, "last": None}
            p["count"] += 1
            key = "packed_true" if f["packed"] is True else "packed_false" if f["packed"] is False else "packed_other"
            p[key] += 1
            p["last"] = dict((k, v) for k, v in f.items() if not k.startswith("_"))
        elif kind == "fatal_engram":
            fatal = {"reason": f["reason"], "line": f["line"], "errno": f["errno"], "line_no": line_no,
                     "rank": facts.rank if facts.rank is not None else msg.tp_rank,
                     "attached_layers": list(facts.engram_order)}
            _capped_append(facts.fatal, fatal)
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
        elif kind == "startup":
            step = f["step"]
            if step == "load_weight_end":
                _capped_append(facts.startup["load_weight"], f)
            else:
                facts.startup[step] = f
        elif kind == "graph":
            facts.graphs.setdefault(f["pass"], {})[f["phase"]] = f
            if f["phase"] == "begin" and isinstance(f.get("bs"), list):
                facts.graph_shapes[f["pass"]] = f["bs"]
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
        elif kind == "decode":
            facts.decode["count"] += 1
            facts.decode["last"] = f
            if isinstance(f.get("accept_len"), (int, float)):
                _capped_append(facts.decode["accept_len"], f["accept_len"])
        elif kind == "ready":
            facts.ready = True
            facts.ready_port = f["port"]


# Needles (lower-case) that select the candidate lines of each kind; everything else is skipped
# with C-level substring searches.  A candidate is then split into messages and classified.
_NEEDLES = {
    KIND_ENGRAM: [b"engram layer="],
    KIND_FATAL: [b"engram retrieval failed"],
    KIND_MEMORY: [b"memory calculation:", b"pool sizes:", b"max_total_num_tokens=", b"load weight ",
                  b"memory pool end"],
    KIND_AUTOTUNE: [b"autotune"],
    KIND_READY: [b"ready: api on port"],
    KIND_SERVER_ARGS: [],
    KIND_GRAPH_SHAPES: [b"cuda graph"],
    KIND_DECODE: [b"decode batch"],
}
_MARKER_NEEDLE = b"server_args"
_ATTACH_NEEDLE = b"engram layer="    # fatal errors are attributed to the layers attached before them


def _needles_for(kinds):
    out = [_MARKER_NEEDLE]
    if KIND_FATAL in kinds:
        out.append(_ATTACH_NEEDLE)
    for k in sorted(kinds):
        out.extend(_NEEDLES.get(k, []))
    return sorted(set(out))


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
        self.line_no = 1              # number of the next line to be processed

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

    def finish(self):
        carry, self._carry = self._carry, b""
        if carry.strip():
            # A last line without its newline is still being written: its values are not read.
            # If it is a boot marker, though, a new boot has begun and the previous one is over.
            for msg in split_messages(carry):
                ev = classify(msg.text)
                if ev is not None and ev[0] == "boot":
                    ev[1]["complete"] = False
                    self.state.apply(msg, "boot", ev[1], self.line_no)
            self.state.facts.partial_last_line = _quote(carry.decode("utf-8", "replace"))
        return self.state.facts

    def _process(self, chunk, start, end):
        """Handle the complete lines in ``chunk[start:end]`` (``end`` is just after a newline)."""
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
        counted = start
        line_no = self.line_no
        for ls in sorted(starts):
            line_no += chunk.count(b"\n", counted, ls)
            counted = ls
            le = find(b"\n", ls, end)
            if le == -1:
                le = end
            m = RE_PERIODIC_RECORD_B.match(chunk, ls, le)
            if m:
                msg, f = _periodic_record(m)
                state.apply(msg, "engram_periodic", f, line_no)
                continue
            for msg in split_messages(chunk[ls:le]):
                ev = classify(msg.text)
                if ev is not None:
                    state.apply(msg, ev[0], ev[1], line_no)
        self.line_no = line_no + chunk.count(b"\n", counted, end)


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

def _iter_chunks(source, chunk_size=CHUNK_SIZE):
    """Yield bytes chunks from a binary/text stream or an iterable of lines."""
    if hasattr(source, "read"):
        while True:
            c = source.read(chunk_size)
            if not c:
                return
            yield c.encode("utf-8", "surrogateescape") if isinstance(c, str) else c
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


def is_marker_line(line):
    """True when one of the messages of ``line`` is a boot marker."""
    return any(RE_BOOT.match(m.text) for m in split_messages(line))


def find_last_marker(read_at, size, chunk_size=CHUNK_SIZE):
    """Offset of the start of the line holding the last boot marker, or None.

    ``read_at(offset, length) -> bytes``.  Searches backwards from the end: the cost is the size of
    the latest boot.  A candidate (the needle ``server_args``) counts only when its line really
    holds a marker message, so an echoed request that quotes ``server_args=`` is passed over.
    """
    end = size
    overlap = len(_MARKER_NEEDLE) - 1
    while end > 0:
        start = max(0, end - chunk_size)
        buf = read_at(start, min(end + overlap, size) - start)
        pos = len(buf)
        while True:
            pos = buf.rfind(_MARKER_NEEDLE, 0, pos)
            if pos == -1:
                break
            ls = _line_start(read_at, start + pos)
            le = _line_end(read_at, start + pos, size)
            # A marker still being written (no newline yet) starts the boot all the same: the
            # previous boot is over, and its facts must not stand in for this one.
            if is_marker_line(read_at(ls, le - ls)):
                return ls
        end = start
    return None


def _line_start(read_at, pos):
    back = pos
    while back > 0:
        lo = max(0, back - 65536)
        piece = read_at(lo, back - lo)
        nl = piece.rfind(b"\n")
        if nl != -1:
            return lo + nl + 1
        back = lo
    return 0


def _line_end(read_at, pos, size):
    while pos < size:
        piece = read_at(pos, min(65536, size - pos))
        nl = piece.find(b"\n")
        if nl != -1:
            return pos + nl + 1
        pos += len(piece)
        if not piece:
            break
    return size


def _count_markers(read_at, limit, chunk_size):
    """Boots before ``limit``: marker lines, in one forward pass over the needle."""
    count = 0
    pos = 0
    overlap = len(_MARKER_NEEDLE) - 1
    while pos < limit:
        buf = read_at(pos, min(chunk_size + overlap, limit - pos))
        if not buf:
            break
        i = buf.find(_MARKER_NEEDLE)
        while i != -1 and i < chunk_size:
            ls = _line_start(read_at, pos + i)
            le = _line_end(read_at, pos + i, limit)
            if is_marker_line(read_at(ls, le - ls)):
                count += 1
            nxt = le - pos
            i = buf.find(_MARKER_NEEDLE, max(i + 1, nxt))
        pos += chunk_size
    return count


def _scan_random_access(read_at, size, name, kinds, chunk_size, count_boots):
    start = find_last_marker(read_at, size, chunk_size) if size else None
    sc = Scanner(name, kinds)
    pos = start or 0
    while pos < size:
        data = read_at(pos, min(chunk_size, size - pos))
        if not data:
            break
        sc.feed(data)
        pos += len(data)
    facts = sc.finish()
    if start and (facts.malformed or facts.fatal):
        # Line numbers were counted from the marker. Only a fact that names its line needs them
        # absolute, so the earlier text is counted then, not on every check.
        _shift_lines(facts, _count_newlines(read_at, start, chunk_size))
    if count_boots:
        facts.boots_seen = (_count_markers(read_at, start, chunk_size) if start else 0) + (
            1 if facts.marker_found else (1 if size else 0))
    return facts


def _shift_lines(facts, base):
    """Make the line numbers a fact names (malformed values, fatal errors) absolute."""
    for m in facts.malformed:
        m["line"] += base
    for f in facts.fatal:
        f["line_no"] += base
    for group in [facts.memory, facts.max_total] + facts.pool_sizes:
        if group and "_line" in group:
            group["_line"] += base


def _count_newlines(read_at, limit, chunk_size):
    n = 0
    pos = 0
    while pos < limit:
        buf = read_at(pos, min(chunk_size, limit - pos))
        if not buf:
            break
        n += buf.count(b"\n")
        pos += len(buf)
    return n


def scan_bytes(data, name="<log>", kinds=ALL_KINDS, chunk_size=CHUNK_SIZE, count_boots=False):
    """Latest-boot facts of a log held in memory (bytes or str)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    mv = memoryview(data)

    def read_at(offset, length):
        return mv[offset:offset + length].tobytes()

    return _scan_random_access(read_at, len(data), name, kinds, chunk_size, count_boots)


def scan(source, name=None, kinds=ALL_KINDS, chunk_size=CHUNK_SIZE, count_boots=False):
    """Latest-boot facts of any source: str/bytes, a file object (binary or text), or an iterable
    of lines.  For a path use :func:`scan_file`.  Streams are read forward once (each marker
    starts the facts afresh); text and bytes are searched from the end."""
    if name is None:
        name = getattr(source, "name", None) or "<log>"
    if isinstance(source, (str, bytes, bytearray, memoryview)):
        return scan_bytes(bytes(source) if not isinstance(source, str) else source, name, kinds,
                          chunk_size, count_boots)
    sc = Scanner(name, kinds)
    for chunk in _iter_chunks(source, chunk_size):
        sc.feed(chunk)
    facts = sc.finish()
    if count_boots:
        facts.boots_seen = sc.state.markers or (1 if sc.line_no > 1 else 0)
    return facts


def scan_text(text, name="<log>", kinds=ALL_KINDS, count_boots=False):
    return scan(text, name=name, kinds=kinds, count_boots=count_boots)


def scan_lines(lines, name="<log>", kinds=ALL_KINDS, count_boots=False):
    return scan(iter(lines), name=name, kinds=kinds, count_boots=count_boots)


def scan_file(path, kinds=ALL_KINDS, chunk_size=CHUNK_SIZE, name=None, count_boots=False):
    """Latest-boot facts of a log file, found from the end (cost: the latest boot's size)."""
    name = name or str(path)
    try:
        f = open(path, "rb")
    except (IOError, OSError) as exc:
        raise EngineLogError(name, "readable", "cannot open: %s" % exc)
    with f:
        size = os.fstat(f.fileno()).st_size

        def read_at(offset, length):
            f.seek(offset)
            return f.read(length)

        return _scan_random_access(read_at, size, name, kinds, chunk_size, count_boots)


def latest_boot(lines):
    """The lines (unchanged) of the latest boot of ``lines``: from the last marker line on.

    With no marker the whole input is returned.
    """
    current = []
    for line in lines:
        if is_marker_line(line):
            current = []
        current.append(line)
    return current


def _latest_boot_slice(read_at, size, max_bytes):
    """``(bytes, info)`` of the latest boot through ``read_at``, bounded to ``max_bytes``.

    When the boot is longer, its first and last halves are kept around a line saying how much
    was left out: the start-up lines and the most recent ones are what a reader needs.
    """
    start = find_last_marker(read_at, size) if size else None
    begin = start or 0
    length = size - begin
    # A last line without its newline is still being written: left out and reported.
    tail = read_at(max(begin, size - 65536), min(65536, length)) if length else b""
    partial = None
    if tail and not tail.endswith(b"\n"):
        nl = tail.rfind(b"\n")
        if nl != -1 or size - 65536 <= begin:
            partial = tail[nl + 1:]
            length -= len(partial)
    info = {"marker_found": start is not None, "boot_bytes": length, "omitted_bytes": 0,
            "partial_last_line": _quote(partial.decode("utf-8", "replace")) if partial and partial.strip() else None}
    if max_bytes and length > max_bytes:
        half = max_bytes // 2
        head = read_at(begin, half)
        head = head[:head.rfind(b"\n") + 1] or head
        tail = read_at(begin + length - half, half)
        tail = tail[tail.find(b"\n") + 1:] if b"\n" in tail[:-1] else tail
        omitted = length - len(head) - len(tail)
        info["omitted_bytes"] = omitted
        return head + ("[... %d bytes of this boot omitted ...]\n" % omitted).encode() + tail, info
    return read_at(begin, length), info


def latest_boot_bytes(data, max_bytes=None):
    """``(text_bytes, info)``: the latest boot of an in-memory log (see :func:`_latest_boot_slice`)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    mv = memoryview(data)
    return _latest_boot_slice(lambda o, n: mv[o:o + n].tobytes(), len(data), max_bytes)


def read_boot_text(run_command, log_path=None, container=None, docker="docker", timestamps=True,
                   max_bytes=None, timeout=DOCKER_TIMEOUT):
    """``(text, info)``: the latest boot of a log file or of a container's ``docker logs`` (both
    streams, in order), as the one way roles collect boot logs.  ``info`` adds ``source``."""
    if log_path:
        try:
            f = open(log_path, "rb")
        except (IOError, OSError) as exc:
            raise EngineLogError(log_path, "readable", "cannot open: %s" % exc)
        with f:
            size = os.fstat(f.fileno()).st_size

            def read_at(offset, length):
                f.seek(offset)
                return f.read(length)

            data, info = _latest_boot_slice(read_at, size, max_bytes)
        info["source"] = str(log_path)
    elif container:
        partial = []
        text = docker_logs_text(run_command, container, docker=docker, timestamps=timestamps, partial=partial,
                                timeout=timeout)
        data, info = latest_boot_bytes(text, max_bytes)
        if partial and not info["partial_last_line"]:
            info["partial_last_line"] = _quote(partial[-1])
        info["source"] = "docker logs %s" % container
    else:
        raise ValueError("read_boot_text needs log_path or container")
    return data.decode("utf-8", "replace"), info


# ---------------------------------------------------------------------------------------------
# docker logs
# ---------------------------------------------------------------------------------------------

def merge_docker_streams(stdout, stderr, partial=None):
    """Merge ``docker logs --timestamps`` stdout and stderr into one text in log order.

    ``docker logs`` writes the container's stdout to stdout and its stderr to stderr, so the
    interleaving is lost when the two are captured apart; each line's RFC 3339 timestamp puts
    it back (stable merge; a line without a timestamp keeps the previous line's).  The
    timestamps are removed.  A stream whose last line has no newline is still being written:
    that line is left out of the merge (it would glue onto a line of the other stream) and
    appended to ``partial`` (a list) when one is given.
    """
    def keyed(text, which):
        text = text or ""
        lines = text.split("\n")
        tail = lines.pop()            # "" when the stream ends with a newline
        if tail.strip() and partial is not None:
            m = DOCKER_TS_RE.match(tail)
            partial.append(tail[m.end():] if m else tail)
        last = ""
        for i, line in enumerate(lines):
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


def bounded(args, seconds):
    """``args`` run under coreutils ``timeout`` (TERM at the limit, KILL 10 s later) where it exists,
    so an external command that stops answering cannot hold a play forever."""
    import shutil
    tool = shutil.which("timeout") if seconds else None
    return ([tool, "--kill-after=10", "%ds" % int(seconds)] if tool else []) + list(args)


def docker_logs_text(run_command, container, docker="docker", timestamps=True, partial=None,
                     timeout=DOCKER_TIMEOUT):
    """Run ``docker logs [--timestamps] <container>`` through ``run_command`` and return text.

    ``run_command`` is ``AnsibleModule.run_command`` (args list -> (rc, stdout, stderr)); both
    streams are read, within ``timeout`` seconds.  Raises :class:`EngineLogError` when docker
    fails or does not finish in time.
    """
    args = [docker, "logs"]
    if timestamps:
        args.append("--timestamps")
    args.append(container)
    cmd = bounded(args, timeout)
    rc, out, err = run_command(cmd)
    if rc in (124, 137) and len(cmd) > len(args):
        raise EngineLogError("docker logs %s" % container, "readable",
                             "docker logs did not finish within %d s (docker_timeout)" % timeout)
    if rc != 0:
        raise EngineLogError("docker logs %s" % container, "readable",
                             "docker exited %s: %s" % (rc, (err or out or "").strip()[-500:]))
    if timestamps:
        return merge_docker_streams(out, err, partial)
    parts = []
    for text in (out, err):
        text = text or ""
        if text and not text.endswith("\n"):
            nl = text.rfind("\n")
            if partial is not None and text[nl + 1:].strip():
                partial.append(text[nl + 1:])
            text = text[:nl + 1]
        parts.append(text)
    return "".join(parts)


def scan_docker(run_command, container, kinds=ALL_KINDS, docker="docker", timestamps=True,
                count_boots=False, timeout=DOCKER_TIMEOUT):
    partial = []
    text = docker_logs_text(run_command, container, docker=docker, timestamps=timestamps, partial=partial,
                            timeout=timeout)
    facts = scan(text, name="docker logs %s" % container, kinds=kinds, count_boots=count_boots)
    if partial and not facts.partial_last_line:
        facts.partial_last_line = _quote(partial[-1])
    return facts


# The log source every engine-log module takes: a log file (streamed) or a container's docker logs.
SOURCE_ARGUMENT_SPEC = dict(
    log_path=dict(type="path"),
    container=dict(type="str"),
    docker_bin=dict(type="str", default="docker"),
    docker_timestamps=dict(type="bool", default=True),
    docker_timeout=dict(type="int", default=DOCKER_TIMEOUT),
    count_boots=dict(type="bool", default=False),
)
SOURCE_MUTUALLY_EXCLUSIVE = [("log_path", "container")]
SOURCE_REQUIRED_ONE_OF = [("log_path", "container")]


def read_boot_params(run_command, params, kinds=ALL_KINDS):
    """read_boot with a module's SOURCE_ARGUMENT_SPEC parameters."""
    return read_boot(run_command, log_path=params["log_path"], container=params["container"], kinds=kinds,
                     docker=params["docker_bin"], timestamps=params["docker_timestamps"],
                     count_boots=params.get("count_boots") or False,
                     timeout=params.get("docker_timeout", DOCKER_TIMEOUT))


def read_boot(run_command, log_path=None, container=None, kinds=ALL_KINDS, docker="docker", timestamps=True,
              count_boots=False, timeout=DOCKER_TIMEOUT):
    """Latest-boot facts from a log file or a container's ``docker logs`` (both streams).

    The one entry point modules use, so every module reads an engine log the same way.
    """
    if log_path:
        return scan_file(log_path, kinds=kinds, count_boots=count_boots)
    if container:
        return scan_docker(run_command, container, kinds=kinds, docker=docker, timestamps=timestamps,
                           count_boots=count_boots, timeout=timeout)
    raise ValueError("read_boot needs log_path or container")


def boots_label(boots_seen):
    """``"latest of 3 boot(s)"`` or ``"latest boot"`` when the boots were not counted."""
    return "latest boot" if boots_seen is None else "latest of %d boot(s)" % boots_seen
