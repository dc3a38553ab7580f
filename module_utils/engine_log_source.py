# -*- coding: utf-8 -*-
"""The one reader of SGLang engine logs for this repository (standard library only).

Every module and role that needs a boot log goes through :func:`read_boot` here (``engram_packed``,
``kv_pool``, ``autotune_status``, ``engine_boot_facts``, ``engine_boot_log``); nothing else
interprets engine log lines.

The log source is a log file (streamed) or a container's ``docker logs`` (both streams, put back in
order by their ``--timestamps``); :data:`SOURCE_ARGUMENT_SPEC` is the shared module option set
(documented once, in doc_fragments/engine_log_source.py).
"""
from __future__ import absolute_import, division, print_function

import heapq
import re

from ansible.module_utils.engine_log_lines import ALL_KINDS, EngineLogError, quote_line
from ansible.module_utils.engine_log_scan import latest_boot_slice, latest_boot_bytes, random_access, scan, scan_file
from ansible.module_utils.probe_runner import TIMED_OUT, bounded

__metaclass__ = type
DOCKER_TIMEOUT = 120          # seconds `docker logs` may take (a daemon that stops answering)
DOCKER_TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")


def read_boot_text(run_command, log_path=None, container=None, docker="docker", timestamps=True,
                   max_bytes=None, timeout=DOCKER_TIMEOUT):
    """``(text, info)``: the latest boot of a log file or of a container's ``docker logs`` (both
    streams, in order), as the one way roles collect boot logs.  ``info`` adds ``source``."""
    if log_path:
        with random_access(log_path) as (read_at, size):
            data, info = latest_boot_slice(read_at, size, max_bytes)
        info["source"] = str(log_path)
    elif container:
        partial = []
        text = docker_logs_text(run_command, container, docker=docker, timestamps=timestamps, partial=partial,
                                timeout=timeout)
        data, info = latest_boot_bytes(text, max_bytes)
        if partial and not info["partial_last_line"]:
            info["partial_last_line"] = quote_line(partial[-1])
        info["source"] = "docker logs %s" % container
    else:
        raise ValueError("read_boot_text needs log_path or container")
    return data.decode("utf-8", "replace"), info


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
    if rc in TIMED_OUT and len(cmd) > len(args):
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
        facts.partial_last_line = quote_line(partial[-1])
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
