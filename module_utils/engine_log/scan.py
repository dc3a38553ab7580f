# -*- coding: utf-8 -*-
"""Scanning an engine log for its latest boot (standard library only).

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

import contextlib
import os

from ansible.module_utils.engine_log.boot_facts import BootState
from ansible.module_utils.engine_log.messages import RE_BOOT, RE_PERIODIC_RECORD_B, periodic_record, classify
from ansible.module_utils.engine_log.lines import (
    ALL_KINDS, EngineLogError, KIND_AUTOTUNE, KIND_DECODE, KIND_ENGRAM, KIND_FATAL, KIND_GRAPH_SHAPES,
    KIND_MEMORY, KIND_READY, KIND_SERVER_ARGS, quote_line, split_messages,
)

__metaclass__ = type
CHUNK_SIZE = 4 << 20          # bytes per read; memory use is a small multiple of this


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
        self.state = BootState(source, self.kinds)
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
            self.state.facts.partial_last_line = quote_line(carry.decode("utf-8", "replace"))
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
                msg, f = periodic_record(m)
                state.apply(msg, "engram_periodic", f, line_no)
                continue
            for msg in split_messages(chunk[ls:le]):
                ev = classify(msg.text)
                if ev is not None:
                    state.apply(msg, ev[0], ev[1], line_no)
        self.line_no = line_no + chunk.count(b"\n", counted, end)


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
        # A log without any marker holds no boot that can be counted (its lines belong to none).
        facts.boots_seen = (_count_markers(read_at, start, chunk_size) if start else 0) + (
            1 if facts.marker_found else 0)
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
        facts.boots_seen = sc.state.markers
    return facts


def scan_text(text, name="<log>", kinds=ALL_KINDS, count_boots=False):
    return scan(text, name=name, kinds=kinds, count_boots=count_boots)


def scan_lines(lines, name="<log>", kinds=ALL_KINDS, count_boots=False):
    return scan(iter(lines), name=name, kinds=kinds, count_boots=count_boots)


@contextlib.contextmanager
def random_access(path, name=None):
    """``(read_at(offset, length), size)`` of a log file for the block; EngineLogError naming it
    when it cannot be opened."""
    try:
        f = open(path, "rb")
    except (IOError, OSError) as exc:
        raise EngineLogError(name or str(path), "readable", "cannot open: %s" % exc)
    with f:
        def read_at(offset, length):
            f.seek(offset)
            return f.read(length)

        yield read_at, os.fstat(f.fileno()).st_size


def scan_file(path, kinds=ALL_KINDS, chunk_size=CHUNK_SIZE, name=None, count_boots=False):
    """Latest-boot facts of a log file, found from the end (cost: the latest boot's size)."""
    name = name or str(path)
    with random_access(path, name) as (read_at, size):
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


def latest_boot_slice(read_at, size, max_bytes):
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
            "partial_last_line": quote_line(partial.decode("utf-8", "replace")) if partial and partial.strip() else None}
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
    """``(text_bytes, info)``: the latest boot of an in-memory log (see :func:`latest_boot_slice`)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    mv = memoryview(data)
    return latest_boot_slice(lambda o, n: mv[o:o + n].tobytes(), len(data), max_bytes)
