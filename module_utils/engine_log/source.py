# -*- coding: utf-8 -*-
"""The one reader of SGLang engine logs for this repository (standard library only).

Every module and role that needs a boot log goes through :func:`read_boot` here (``engram_packed``,
``kv_pool``, ``autotune_status``, ``engine_boot_facts``, ``engine_boot_log``); nothing else
interprets engine log lines.

The log source is a log file (its latest boot found from the end) or a container's ``docker logs``
(both streams, put back in order by their ``--timestamps``: module_utils/engine_log/docker_stream.py);
:data:`SOURCE_ARGUMENT_SPEC` is the shared module option set (documented once, in
doc_fragments/engine_log_source.py).

A container's boot, in bounded time
-----------------------------------
A head serves for days, and its container log grows with every periodic ``Decode batch`` and Engram
line (about 27 MB a day), so the whole ``docker logs`` is never read.  The boot is the container's
latest start (``docker inspect``: ``State.StartedAt``), and two bounded reads cover it:

- **the head**: ``docker logs --timestamps --since <StartedAt>``, streamed and stopped once the boot
  is over and :data:`HEAD_AFTER_READY` more bytes were read (the marker, the Exact Engram lines,
  memory, autotune, graph captures and the first periodic lines all come before that).  The boot is
  over at the head's ``Ready`` line, or on any rank at its first periodic Engram line (workers print
  no Ready), or at the latest :data:`BOOT_SPAN` after the container started;
- **the tail**: ``docker logs --timestamps --since <where the head stopped> --tail``
  :data:`TAIL_RECORDS`: the latest periodic and decode lines, and whatever ended the boot (a fatal
  error aborts the engine, so it is the last thing logged; a marker there is a restart).

When the head reaches the end of the log first (a fresh boot, or one that never became Ready) the
whole boot has been read and there is no tail.  Otherwise the lines between the two reads (days of
periodic lines) are not read: ``facts.read["gap"]`` says so, counts of periodic and decode lines
cover the head and the tail only, and line numbers after the gap count from it.

A caller that judges a window of time (an experiment condition's measured benchmark: rank 0's
``Decode batch`` lines while each workload ran) passes ``keep_since``: every record logged from then
on is read, with no record limit, so the gap can only lie before it.  A condition's benchmark on the
fleet logs a decode line about every two seconds per running batch plus the Engram lines, a few MB an
hour, which the reads' time bound and the caller's ``max_bytes`` still cap.  ``count_boots``
needs every earlier boot, so it reads the whole log (streamed, memory still flat).
"""
from __future__ import absolute_import, division, print_function

import calendar
import json
import re
import time

from ansible.module_utils.base import command_stream
from ansible.module_utils.engine_log.docker_stream import StreamMerger, merge_texts
from ansible.module_utils.engine_log.lines import ALL_KINDS, KIND_ENGRAM, KIND_READY, EngineLogError, quote_line
from ansible.module_utils.engine_log.scan import Scanner, latest_boot_slice, latest_boot_bytes, random_access, scan_file
from ansible.module_utils.base.probe import TIMED_OUT, bounded

__metaclass__ = type
DOCKER_TIMEOUT = 120          # seconds the reads of one container's boot may take together
HEAD_AFTER_READY = 256 << 10  # bytes read past the boot's end (a quarter of an hour of a real head's periodic lines)
TAIL_RECORDS = 2000           # latest log records read after the head (about half an hour, 0.5 MB, of periodic lines)
ZERO_TIME = "0001-01-01T00:00:00Z"
BOOT_SPAN = 2 * 3600          # seconds after the start by which any boot is over (a real one takes about 13 minutes)


def read_boot_text(run_command, log_path=None, container=None, docker="docker", timestamps=True,
                   max_bytes=None, timeout=DOCKER_TIMEOUT, open_stream=None, keep_since=None):
    """``(text, info)``: the latest boot of a log file or of a container (both streams, in order), as
    the one way roles collect boot logs.  ``info`` adds ``source`` (and ``read`` for a container).
    ``keep_since`` (epoch seconds, containers only): every line logged from then on is read (module doc)."""
    if log_path:
        with random_access(log_path) as (read_at, size):
            data, info = latest_boot_slice(read_at, size, max_bytes)
        info["source"] = str(log_path)
    elif container:
        boot = ContainerBoot(run_command, container, docker=docker, timestamps=timestamps, timeout=timeout,
                             keep_text=True, open_stream=open_stream, keep_since=keep_since)
        boot.run()
        data, info = latest_boot_bytes(boot.text(), max_bytes)
        if boot.partial and not info["partial_last_line"]:
            info["partial_last_line"] = quote_line(boot.partial[-1].decode("utf-8", "replace"))
        info["source"] = boot.source
        info["read"] = boot.info
    else:
        raise ValueError("read_boot_text needs log_path or container")
    return data.decode("utf-8", "replace"), info


def merge_docker_streams(stdout, stderr, partial=None):
    """Both streams of a finished ``docker logs --timestamps`` as one text in log order (timestamps and
    docker's split-times removed; a stream's last line without newline goes to ``partial``)."""
    return merge_texts(stdout, stderr, partial)


def scan_docker(run_command, container, kinds=ALL_KINDS, docker="docker", timestamps=True,
                count_boots=False, timeout=DOCKER_TIMEOUT, open_stream=None):
    """Latest-boot facts of a container (:class:`ContainerBoot`)."""
    return ContainerBoot(run_command, container, kinds=kinds, docker=docker, timestamps=timestamps,
                         timeout=timeout, count_boots=count_boots, open_stream=open_stream).run()


def container_started_at(run_command, container, docker="docker", timeout=DOCKER_TIMEOUT):
    """``State.StartedAt`` of ``container`` (RFC 3339), or None when docker gives none (never started,
    or an answer that is not docker's JSON). EngineLogError naming the container when docker fails."""
    args = [docker, "inspect", "--format", "{{json .State}}", container]
    cmd = bounded(args, timeout)
    rc, out, err = run_command(cmd)
    source = "docker logs %s" % container
    if rc in TIMED_OUT and len(cmd) > len(args):
        raise EngineLogError(source, "readable",
                             "docker inspect did not finish within %d s (docker_timeout)" % timeout)
    if rc != 0:
        raise EngineLogError(source, "readable", "docker exited %s: %s" % (rc, (err or out or "").strip()[-500:]))
    try:
        state = json.loads((out or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    started = state.get("StartedAt") if isinstance(state, dict) else None
    if not isinstance(started, str) or epoch_of(started.encode()) is None or started.startswith("0001-"):
        return None
    return started


_RFC3339_RE = re.compile(rb"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|([+-])(\d\d):?(\d\d))$")


def epoch_of(ts):
    """Seconds since the epoch of an RFC 3339 time (bytes), or None when it is not one."""
    m = _RFC3339_RE.match(ts.strip())
    if not m:
        return None
    secs = calendar.timegm(tuple(int(x) for x in m.group(1, 2, 3, 4, 5, 6)) + (0, 0, 0))
    if m.group(9):
        offset = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        secs -= offset if m.group(9) == b"+" else -offset
    return secs + float(b"0." + (m.group(7) or b"0"))


def rfc3339_of(epoch):
    """The RFC 3339 time (bytes, UTC, nanoseconds as docker prints them) of epoch seconds."""
    whole = int(epoch // 1)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)).encode() + b".%09dZ" % min(999999999, int((epoch - whole) * 1e9))


class ContainerBoot(object):
    """The latest boot of a container's log, read in bounded time (module doc); ``run()`` -> facts,
    with ``facts.read``: ``since`` (the start read from), ``head_bytes``, ``tail_bytes``,
    ``stopped_at`` (where the head read stopped, or None when it read to the end) and ``gap``.

    ``run_command`` runs ``docker inspect``; ``docker logs`` is streamed through ``open_stream``
    (default :func:`command_stream.open_stream`; :func:`command_stream.opener_over` for a runner that
    only returns whole outputs).  ``keep_since`` (epoch seconds): the tail read covers every record
    from then on (or from where the head stopped, when later) instead of the latest TAIL_RECORDS."""

    def __init__(self, run_command, container, kinds=ALL_KINDS, docker="docker", timestamps=True,
                 timeout=DOCKER_TIMEOUT, count_boots=False, keep_text=False, open_stream=None, keep_since=None):
        self.run_command = run_command
        self.open_stream = open_stream
        self.container = container
        self.source = "docker logs %s" % container
        self.docker = docker
        self.timestamps = timestamps
        self.timeout = timeout
        self.count_boots = count_boots
        self.keep_text = keep_text
        self.keep_since = keep_since
        # Ready and the periodic Engram lines tell the head read where the boot ends (HeadStop).
        self.scanner = Scanner(self.source, frozenset(kinds) | frozenset([KIND_READY, KIND_ENGRAM]))
        self.chunks = []
        self.partial = []
        self.info = {"since": None, "head_bytes": 0, "tail_bytes": 0, "stopped_at": None, "gap": None}
        self._deadline = None

    def run(self):
        self._deadline = time.monotonic() + self.timeout
        started = container_started_at(self.run_command, self.container, self.docker, self._left())
        args = [self.docker, "logs"] + (["--timestamps"] if self.timestamps else [])
        if started and not self.count_boots:
            args += ["--since", started]
            self.info["since"] = started
        merger = StreamMerger(self.timestamps)
        stop = HeadStop(started, merger) if self.timestamps and not self.count_boots else None
        stopped = self._stream(args + [self.container], merger, lambda batch: self._head(batch, stop))
        self.partial.extend(merger.partial)
        if stopped:
            self.info["stopped_at"] = merger.emitted_key.decode()
            self._tail(merger.emitted_key)
        facts = self.scanner.finish()
        if self.partial and not facts.partial_last_line:
            facts.partial_last_line = quote_line(self.partial[-1].decode("utf-8", "replace"))
        if self.count_boots:
            facts.boots_seen = self.scanner.state.markers
        facts.read = self.info
        return facts

    def text(self):
        return b"".join(self.chunks)

    def _head(self, batch, stop):
        self._feed(batch)
        self.info["head_bytes"] += len(batch)
        facts = self.scanner.state.facts
        return stop is not None and stop.enough(facts.ready or bool(facts.periodic), self.info["head_bytes"])

    def _tail(self, cut_key):
        """The records after where the head stopped (``--since`` keeps equal times, which the merger
        drops as already read): the latest TAIL_RECORDS of them, or, with ``keep_since``, every one
        from the later of the two times on."""
        since, limit = cut_key, ["--tail", str(TAIL_RECORDS)]
        if self.keep_since is not None:
            limit = []
            keep = rfc3339_of(self.keep_since)
            if self.keep_since > epoch_of(cut_key):
                since = keep
        args = [self.docker, "logs", "--timestamps", "--since", since.decode()] + limit + [self.container]
        merger = StreamMerger(True, after=cut_key)
        parts = []
        self._stream(args, merger, lambda batch: parts.append(batch))
        data = b"".join(parts)
        if since != cut_key:
            before = keep
        elif limit and merger.records >= TAIL_RECORDS and merger.first_key:
            before = merger.first_key
        else:
            before = None
        if before is not None:
            self.info["gap"] = {"after": cut_key.decode(), "before": before.decode()}
            if self.keep_text:
                self.chunks.append(b"[... lines logged between %s and %s not read: the container has served "
                                   b"since %s ...]\n" % (cut_key, before, (self.info["since"] or "its start").encode()))
        self.info["tail_bytes"] = len(data)
        self._feed(data)
        self.partial.extend(merger.partial)

    def _feed(self, data):
        if data:
            self.scanner.feed(data)
            if self.keep_text:
                self.chunks.append(data)

    def _left(self):
        return max(1, int(self._deadline - time.monotonic() + 0.999))

    def _stream(self, args, merger, on_batch):
        """Run ``args``, handing each batch of lines now in order to ``on_batch`` until it returns True
        (then the command is killed and True returned) or the output ends (False)."""
        try:
            stream = (self.open_stream or command_stream.open_stream)(args, self._left())
        except (IOError, OSError) as exc:
            raise EngineLogError(self.source, "readable", "cannot run %s: %s" % (args[0], exc))
        try:
            while not stream.finished:
                chunks = stream.read()
                more, drained = stream.drain()
                for which, data in chunks + more:
                    merger.feed(which, data)
                batch = merger.take(drained and self.timestamps)
                if batch and on_batch(batch):
                    return True
        except command_stream.StreamTimeout:
            raise EngineLogError(self.source, "readable",
                                 "docker logs did not finish within %d s (docker_timeout)" % self.timeout)
        finally:
            rc = stream.close()
        if rc != 0:
            raise EngineLogError(self.source, "readable", "docker exited %s: %s" % (rc, stream.error_text()))
        batch = merger.take(True)
        if batch:
            on_batch(batch)
        return False


class HeadStop(object):
    """When the head read has enough: HEAD_AFTER_READY bytes past the boot's end (its Ready line or
    first periodic Engram line, seen by the caller, else the first line BOOT_SPAN after the start)."""

    def __init__(self, started, merger):
        self.merger = merger
        self.started = epoch_of(started.encode()) if started else None
        self.boot_end = None

    def enough(self, serving, fed):
        if self.boot_end is None:
            if serving or self._past_span():
                self.boot_end = fed
            return False
        if not serving and not self._past_span():
            self.boot_end = None          # a new boot began after the Ready seen (a restart in the log)
            return False
        return fed - self.boot_end >= HEAD_AFTER_READY

    def _past_span(self):
        now = epoch_of(self.merger.emitted_key) if self.merger.emitted_key else None
        if now is None:
            return False
        if self.started is None:
            self.started = now
        return now >= self.started + BOOT_SPAN


# The log source every engine-log module takes: a log file or a container's docker logs.
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
