"""Container logs in docker's json-file format: the records (one per message, a line over 16 KiB cut into
partial messages as docker's log copier cuts it), the import of a plain engine log, and the readers ``docker
logs`` streams them with (forward with --since/--until, backwards for --tail)."""
import datetime as _dt
import json
import os
import re
import sys
import time

from .timefmt import parse_time_ns, rfc3339_ns, rfc3339_ns_trimmed


# ---------------------------------------------------------------------------------------------
# Container logs: docker's json-file format, one record per message
# ---------------------------------------------------------------------------------------------
LOG_MESSAGE_MAX = 16 * 1024   # docker's log copier cuts longer lines into partial messages


def json_log_record(stream, data, ns):
    """One json-file line: {"log": ..., "stream": ..., "time": ...}; Go's encoding (<, >, & escaped)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    line = json.dumps({"log": text, "stream": stream, "time": rfc3339_ns_trimmed(ns)}, ensure_ascii=False,
                      separators=(",", ":"))
    line = line.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    line = line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return (line + "\n").encode("utf-8")


class JsonLogWriter:
    """Appends records to a container log, each stamped when written (strictly increasing)."""

    def __init__(self, path):
        self.fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o664)
        self.last = 0

    def write(self, stream, data, ns=None):
        ns = time.time_ns() if ns is None else ns
        ns = max(ns, self.last + 1)
        self.last = ns
        rec = json_log_record(stream, data, ns)
        while rec:
            rec = rec[os.write(self.fd, rec):]

    def close(self):
        os.close(self.fd)


# A logging prefix as the engine prints it: [2026-09-24 02:38:41] or [2026-09-24 02:38:41 TP0 EP0]
_PREFIX_TIME_RE = re.compile(r"^\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?: [^\]]*)?\] ")
# What an engine prints with print() (stdout): adapter lines "[name] ..." and "Ready: ..."
_STDOUT_RE = re.compile(r"^(?:\[[a-z][a-z0-9_]*\] |Ready: )")


def log_messages(line):
    """The messages docker's log copier makes of one line (with its newline, if it has one): cut at 16 KiB,
    the parts before the last without a newline."""
    while line:
        nl = line.find(b"\n", 0, LOG_MESSAGE_MAX)
        cut = nl + 1 if nl >= 0 else min(len(line), LOG_MESSAGE_MAX)
        yield line[:cut]
        line = line[cut:]


def import_text_log(path, data, start_ns=None):
    """Write a plain engine log (a launcher's saved copy) as this container's json-file log.

    Streams are the engine's: adapter lines ``[name] ...`` and ``Ready: ...`` on stdout, everything else
    (logging records, tqdm bars, tracebacks, fatal errors) on stderr. Each record is stamped with the
    time of its logging prefix (lines without one: just after the previous record). A line longer than
    16 KiB becomes partial records as docker's log copier cuts it (the supervisor's rule), each part
    stamped just after the one before."""
    lines = [ln + b"\n" for ln in data.split(b"\n")]
    if data.endswith(b"\n") or not data:
        lines.pop()
    else:
        lines[-1] = lines[-1][:-1]         # a last line without its newline stays so

    def prefix_ns(text):
        m = _PREFIX_TIME_RE.match(text.lstrip("\r"))
        if not m:
            return None
        t = _dt.datetime.strptime(m.group(1) + " " + m.group(2), "%Y-%m-%d %H:%M:%S")
        return int(t.replace(tzinfo=_dt.timezone.utc).timestamp()) * 10 ** 9

    texts = [raw.decode("utf-8", "replace") for raw in lines]
    if start_ns is None:
        start_ns = next((t for t in map(prefix_ns, texts) if t is not None), time.time_ns())
    ns = start_ns - 1000
    with open(path, "wb") as out:
        for raw, text in zip(lines, texts):
            plain = text.lstrip("\r")
            base = prefix_ns(text)
            ns = max(base, ns + 1000) if base is not None else ns + 1000
            stream = "stdout" if _STDOUT_RE.match(plain) else "stderr"
            if len(raw) < LOG_MESSAGE_MAX:
                out.write(json_log_record(stream, text, ns))
                continue
            for i, part in enumerate(log_messages(raw)):
                ns += 1000 if i else 0
                out.write(json_log_record(stream, part, ns))
    try:
        os.chmod(path, 0o664)
    except PermissionError:
        pass


# ---------------------------------------------------------------------------------------------
# Container logs: reading (streamed; never the whole file in memory)
# ---------------------------------------------------------------------------------------------
# A json-file log is read as docker's json-file reader reads it: forward from the start, one record at a
# time (records before --since are decoded and dropped, the first record after --until ends the read), or,
# for --tail N, backwards from the end in blocks until N records are found, so its cost is the size of
# those records. A record still being written (no newline yet at the end of the file) is left for later.
READ_CHUNK = 1 << 20          # forward reads
TAIL_BLOCK = 64 * 1024        # backward reads (docker's tailer reads blocks from the end as well)
OUT_FLUSH = 64 * 1024         # output batched per stream up to this size; flushed when the stream changes

_DAYS = {}
# one json-file record as docker (and this stand-in) writes it, whose text needs no unescaping: read without json
_FAST_LINE = re.compile(rb'\{"log":"([^"\\\x00-\x1f\x80-\xff]*)(\\n)?","stream":"(stdout|stderr)","time":"'
                        rb'((\d{4}-\d\d-\d\d)T(\d\d):(\d\d):(\d\d))(?:\.(\d{1,9}))?Z"\}')
_FAST_RECORD = re.compile(_FAST_LINE.pattern + rb"\n")


def _zulu_secs(day, hh, mm, ss):
    """Seconds since the epoch of a UTC date and time (bytes fields), None when strptime would refuse it."""
    midnight = _DAYS.get(day)
    if midnight is None:
        if len(_DAYS) > 10000:
            _DAYS.clear()
        try:
            base = _dt.datetime.strptime(day.decode(), "%Y-%m-%d").replace(tzinfo=_dt.timezone.utc)
        except ValueError:
            return None
        midnight = _DAYS[day] = int(base.timestamp())
    h, mi, sec = int(hh), int(mm), int(ss)
    if h > 23 or mi > 59 or sec > 59:
        return None
    return midnight + h * 3600 + mi * 60 + sec


class LogRecords:
    """Decodes the lines of one container log into records (ns, stream, text bytes, -t stamp).

    A line that is not a json-file record (a log written before the json-file format) is a stdout record
    stamped with the file's mtime (when followed: when it is read), its text the line's; its stamp is None.
    Records as docker writes them ({"log": ..., "stream": ..., "time": ...}) whose text needs no unescaping
    are read with a regular expression (the same values json.loads gives); anything else goes through
    json.loads."""

    def __init__(self, path):
        self.path = path
        self.mtime = None
        self.plain_now = False      # -f: a plain line read while following is stamped when read

    def _plain(self, raw):
        if self.plain_now:
            ns = time.time_ns()
        else:
            if self.mtime is None:
                self.mtime = int(os.stat(self.path).st_mtime * 10 ** 9)
            ns = self.mtime
        return (ns, "stdout", raw.decode("utf-8", "replace").encode("utf-8") + b"\n", None)

    def decode(self, raw):
        """The records of one line (without its newline); a line holding a bare CR is split there, as
        bytes.splitlines() does."""
        if b"\r" in raw:
            return [self.one(piece) for piece in raw.splitlines()]
        return [self.one(raw)]

    def one(self, raw):
        m = _FAST_LINE.fullmatch(raw)
        if m is not None:
            text, newline, stream, head, day, hh, mm, ss, frac = m.groups()
            secs = _zulu_secs(day, hh, mm, ss)
            if secs is not None:
                frac = frac.ljust(9, b"0") if frac else b"000000000"
                return (secs * 1000000000 + int(frac), stream.decode(), text + b"\n" if newline else text,
                        head + b"." + frac + b"Z")
        try:
            rec = json.loads(raw)
            ns = parse_time_ns(rec["time"])
            stream = rec.get("stream", "stdout")
            text = rec.get("log", "")
            data = text.encode("utf-8", "replace") if isinstance(text, str) else str(text).encode()
            return (ns, stream, data, rfc3339_ns(ns).encode())
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._plain(raw)


def log_lines_tail(fh, end, n, decode):
    """The records of the last n record lines before offset end (a line boundary), oldest first: read
    backwards in TAIL_BLOCK blocks until n records are found (or the file's start)."""
    if n <= 0:
        return []
    found = []          # records, newest first
    data = b""          # bytes [pos, cut) not split yet; cut is a line boundary
    pos = end
    while pos > 0 and len(found) < n:
        step = min(TAIL_BLOCK, pos)
        pos -= step
        fh.seek(pos)
        data = fh.read(step) + data
        first = data.find(b"\n") + 1 if pos > 0 else 0
        if pos > 0 and (first == 0 or first == len(data)):
            continue                      # no whole line in the buffer yet: read further back
        lines = data[first:-1].split(b"\n") if len(data) > first else []
        data = data[:first]
        for line in reversed(lines):
            found.extend(reversed(decode(line)))
            if len(found) >= n:
                break
    found.reverse()
    return found[-n:]


class LogOutput:
    """docker logs' output: stdout records on stdout, stderr records on stderr. Consecutive records of one
    stream are written together (up to OUT_FLUSH bytes); a change of stream flushes first, so a reader of
    both (2>&1) gets them in log order."""

    def __init__(self, timestamps):
        self.files = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
        self.timestamps = timestamps
        self.cur = None
        self.parts = []
        self.size = 0

    def record(self, rec):
        ns, stream, text, stamp = rec
        out = self.files.get(stream, self.files["stdout"])
        if out is not self.cur:
            self.flush()
            self.cur = out
        if self.timestamps:
            self.parts.append((stamp or rfc3339_ns(ns).encode()) + b" ")
        self.parts.append(text)
        self.size += len(text)
        if self.size >= OUT_FLUSH:
            self.flush()

    def flush(self):
        if self.parts:
            self.cur.write(b"".join(self.parts))
            self.cur.flush()
            self.parts, self.size = [], 0


def log_complete_end(fh):
    """Offset just after the log's last newline (a record still being written is left for later)."""
    end = os.fstat(fh.fileno()).st_size
    while end > 0:
        step = min(TAIL_BLOCK, end)
        fh.seek(end - step)
        block = fh.read(step)
        nl = block.rfind(b"\n")
        if nl >= 0:
            return end - step + nl + 1
        end -= step
    return 0


def log_forward(fh, pos, decoder, since, until, out):
    """Write the records from offset pos on, reading chunk by chunk; (offset after the last whole line read,
    True when a json-file record after --until ended the read, as docker's reader ends there). Records
    docker wrote with plain text take a regular expression, the others LogRecords."""
    match = _FAST_RECORD.match
    files = {b"stdout": out.files["stdout"], b"stderr": out.files["stderr"]}
    stamps = out.timestamps
    seconds = {}
    fh.seek(pos)
    carry = b""
    while True:
        chunk = fh.read(READ_CHUNK)
        if not chunk:
            return pos, False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n") + 1
        if not cut:
            carry = data
            continue
        i = 0
        while i < cut:
            m = match(data, i)
            if m is not None:
                text, newline, stream, head, day, hh, mm, ss, frac = m.groups()
                secs = seconds.get(head)
                if secs is None:
                    secs = _zulu_secs(day, hh, mm, ss)
                    if len(seconds) > 4096:
                        seconds.clear()
                    seconds[head] = secs
                if secs is not None:
                    j = m.end()
                    frac = frac.ljust(9, b"0") if frac else b"000000000"
                    ns = secs * 1000000000 + int(frac)
                    if since is not None and ns < since:
                        i = j
                        continue
                    if until is not None and ns > until:
                        return pos + j, True
                    f = files[stream]
                    if f is not out.cur:
                        out.flush()
                        out.cur = f
                    if stamps:
                        out.parts.append(head + b"." + frac + b"Z ")
                    if newline:
                        text += b"\n"
                    out.parts.append(text)
                    out.size += len(text)
                    if out.size >= OUT_FLUSH:
                        out.flush()
                    i = j
                    continue
            j = data.index(b"\n", i) + 1
            for rec in decoder.decode(data[i:j - 1]):
                if since is not None and rec[0] < since:
                    continue
                if until is not None and rec[0] > until:
                    if rec[3] is not None:
                        return pos + j, True
                    continue
                out.record(rec)
            i = j
        pos += cut
        carry = data[cut:]
