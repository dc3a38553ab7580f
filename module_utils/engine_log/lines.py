# -*- coding: utf-8 -*-
"""Engine log lines into messages, and the numbers and key=value fields in them (standard library only).

How lines become messages (:func:`split_messages`)
--------------------------------------------------
A physical line that starts with a logging prefix is ONE record: the logging handler ends every
record with a newline, so nothing inside it (an echoed request quoting ``server_args=`` or an
``Exact ... packed=True`` line) starts another message.  Only raw output (no prefix) is split: at
carriage returns and cursor codes (tqdm redraws), and at a logging prefix glued after a progress
bar (``%|``).  Colour codes are removed; CRLF is accepted.  Every kind below is recognised only at
the START of a message, so text that merely contains the words elsewhere is ignored.

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
"""
from __future__ import absolute_import, division, print_function

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

MAX_QUOTE = 240               # characters of a line quoted in a message


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
                           % (source, line_no if line_no is not None else "?", key, value, quote_line(line)))
        self.source = source
        self.kind = "well-formed " + key
        self.detail = None
        self.boots_seen = boots_seen
        self.line_no = line_no
        self.key = key
        self.value = value


def quote_line(text):
    text = text or ""
    return text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE] + "..."


# Colour (SGR) codes are removed; every other escape sequence (cursor up ``ESC[A``, erase line
# ``ESC[2K``, ...) is a redraw boundary, like a carriage return.
SGR_RE = re.compile(r"\x1b\[[0-9;]*m")
ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_PREFIX = r"\[(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)((?:\s+[A-Z]{2}\d+)*)\]"
PREFIX_AT_START_RE = re.compile(r"^\s*" + _PREFIX + r" ?")
PREFIX_ANYWHERE_RE = re.compile(_PREFIX + r" ?")
TP_TAG_RE = re.compile(r"\bTP(\d+)\b")
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
