# -*- coding: utf-8 -*-
"""``docker logs --timestamps`` output put back into one log, as it streams (standard library only).

Both streams, one order
-----------------------
``docker logs`` writes the container's stdout records to its stdout and its stderr records to its
stderr, one record at a time, in log order; each line starts with the record's RFC 3339 time.  The
two pipes are read apart, so their interleaving is rebuilt from those times (a stable merge; a line
without a time keeps the previous line's).  A line may go out as soon as nothing can still come
before it: the other stream has ended, has already shown a later time, or was read empty after the
line arrived (docker writes one record after the other, so every record written before one in hand
is in hand too).  Memory is what the pipes held at one time, never the whole log.

Records docker split
--------------------
Docker's log copier cuts a message longer than 16 KiB into partial records of exactly 16,384 bytes
(the last part ends with the newline), and ``docker logs --timestamps`` stamps each part, so the time
of every later part lands inside the line (a known docker CLI behaviour).  A real boot marker is about
17 KB: :func:`join_partials` removes a timestamp found exactly at each 16,384-byte boundary of a
line, making the message whole again.

A stream whose last line has no newline is still being written: that line is kept apart
(``partial``), never glued onto a line of the other stream.
"""
from __future__ import absolute_import, division, print_function

import re
from collections import deque

__metaclass__ = type

PARTIAL_SIZE = 16 * 1024
_TS = rb"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))[ \t]"
TS_AT_START_RE = re.compile(b"^" + _TS)
TS_HERE_RE = re.compile(_TS)
STDOUT, STDERR = 0, 1


def ts_key(ts):
    """A sortable key of an RFC 3339 time (bytes): the fraction padded to nine digits."""
    head, dot, frac = ts.partition(b".")
    if dot:
        digits = re.match(rb"\d*", frac).group(0)
        return head + b"." + digits.ljust(9, b"0") + frac[len(digits):]
    return head + b".000000000" + ts[len(head):]


def split_stamp(line):
    """``(key, content, parts)`` of one ``docker logs -t`` line: the record's time key (None without
    one), its text with every split-time removed, and how many records it was written as."""
    m = TS_AT_START_RE.match(line)
    if not m:
        return None, line, 1
    content, parts = join_partials(line[m.end():])
    return ts_key(m.group(1)), content, parts


def join_partials(content):
    """``(content, parts)``: ``content`` with the timestamp docker put at each 16 KiB split removed."""
    parts = 1
    pos = PARTIAL_SIZE
    while len(content) > pos:
        m = TS_HERE_RE.match(content, pos)
        if not m:
            break
        content = content[:pos] + content[m.end():]
        parts += 1
        pos += PARTIAL_SIZE
    return content, parts


class StreamMerger(object):
    """Feed each stream's bytes as they come; :meth:`take` returns the lines now in log order."""

    def __init__(self, timestamps=True, after=None):
        self.timestamps = timestamps
        self.after = after               # lines at or before this time key were read already: dropped
        self.carry = [b"", b""]
        self.queues = [deque(), deque()]
        self.last_key = [b"", b""]      # key of the last complete line read, per stream
        self.ended = [False, False]
        self.seq = 0
        self.records = 0                 # docker records seen (a split message counts each part)
        self.partial = []                # last lines left without newline, as read
        self.emitted_key = b""           # key of the last line handed out
        self.first_key = None            # key of the first line kept

    def feed(self, which, data):
        if not data:
            self.end(which)
            return
        buf = self.carry[which] + data
        lines = buf.split(b"\n")
        self.carry[which] = lines.pop()
        queue = self.queues[which]
        for line in lines:
            key, content, parts = split_stamp(line) if self.timestamps else (None, line, 1)
            if key is None:
                key = self.last_key[which]
            self.last_key[which] = key
            self.records += parts
            if self.after is not None and key <= self.after:
                continue
            if self.first_key is None or key < self.first_key:
                self.first_key = key
            queue.append((key, which, self.seq, content))
            self.seq += 1

    def end(self, which):
        if self.ended[which]:
            return
        self.ended[which] = True
        tail, self.carry[which] = self.carry[which], b""
        if tail.strip():
            key, content, parts = split_stamp(tail) if self.timestamps else (None, tail, 1)
            self.records += parts
            self.partial.append(content)

    def take(self, drained=False):
        """Bytes of the complete lines that may go out now, each ending in a newline.

        ``drained``: both pipes were just read empty, so every line written before the last one read
        is in hand and all of them may go out.
        """
        out = []
        q = self.queues
        while q[0] or q[1]:
            if q[0] and q[1]:
                which = 0 if q[0][0][:3] <= q[1][0][:3] else 1
            else:
                which = 0 if q[0] else 1
                other = 1 - which
                if not (drained or self.ended[other] or q[which][0][0] <= self.last_key[other]):
                    break
            key, _w, _s, content = q[which].popleft()
            self.emitted_key = key
            out.append(content)
            out.append(b"\n")
        return b"".join(out)


def merge_texts(stdout, stderr, partial=None, timestamps=True):
    """Both streams of a finished ``docker logs`` (str or bytes) as one text in log order (str); a
    last line without newline is left out and appended to ``partial`` (str) when one is given."""
    m = StreamMerger(timestamps)
    for which, text in ((STDOUT, stdout), (STDERR, stderr)):
        text = text or b""
        if not isinstance(text, bytes):
            text = text.encode("utf-8", "surrogateescape")
        m.feed(which, text)
        m.end(which)
    data = m.take()
    if partial is not None:
        partial.extend(p.decode("utf-8", "replace") for p in m.partial)
    return data.decode("utf-8", "surrogateescape")
