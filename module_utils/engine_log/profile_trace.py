# -*- coding: utf-8 -*-
"""Kernel names from the engine's profiler traces (SGLang ``/start_profile`` .. ``/stop_profile``).

One subject: which kernels ran on a rank during a profiled window. SGLang's torch profiler writes, on
every TP rank, ``<SGLANG_TORCH_PROFILER_DIR or /tmp>/<ts>-TP-<rank>.trace.json`` (``.json.gz`` when
compressed) inside that rank's container; its ``traceEvents`` hold one complete event (``"ph": "X"``)
per kernel launch, the GPU kernels with ``"cat": "kernel"``. The W8 adapters print no per-call counter,
so this trace is the evidence that the FP8 wo_a path actually ran (stage D).

The listing runs inside the container (``docker exec <container> python3 -c SCRIPT``) because the trace
is written to the container's own filesystem; the script prints one JSON document, parsed here.
"""
from __future__ import absolute_import, division, print_function

import json
import re
import time

from ansible.module_utils.bench.progress import clock_text
from ansible.module_utils.engram.progress import eta_text

__metaclass__ = type

# <ts>-TP-<rank>[-DP-<n>][-PP-<n>][-EP-<n>].trace.json[.gz]: builds add the other parallel ranks after TP
TRACE_NAME = re.compile(r"^(?P<ts>[^/]*?)-TP-(?P<rank>\d+)(?:-[A-Z]{2}-\d+)*\.trace\.json(\.gz)?$")

# Run by the container's python3: argv = [dir, since_epoch]. Prints {"files": [{path, mtime, size,
# names|error}]} for the trace files modified at or after since. Kernel events only when the trace
# marks any; otherwise every complete event's name (older profiler builds carry no category).
LIST_SCRIPT = r"""
import gzip, json, os, re, sys
d, since = sys.argv[1], float(sys.argv[2])
pat = re.compile(r"-TP-\d+(-[A-Z][A-Z]-\d+)*\.trace\.json(\.gz)?$")
out = []
try:
    names = sorted(os.listdir(d))
except OSError as exc:
    print(json.dumps({"error": "%s: %s" % (d, exc.strerror)}))
    sys.exit(0)
for n in names:
    p = os.path.join(d, n)
    if not pat.search(n) or not os.path.isfile(p) or os.path.islink(p):
        continue
    st = os.stat(p)
    if st.st_mtime < since:
        continue
    item = {"path": p, "mtime": st.st_mtime, "size": st.st_size}
    try:
        opener = gzip.open if n.endswith(".gz") else open
        with opener(p, "rt") as fh:
            doc = json.load(fh)
        ev = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
        kern = [e for e in ev if e.get("cat") == "kernel"]
        item["names"] = sorted(set(str(e.get("name", "")) for e in (kern or ev)))
        streams = {}
        for e in kern:
            try:
                dur = float(e.get("dur") or 0)
            except (TypeError, ValueError):
                continue
            per = streams.setdefault(str(e.get("tid")), {})
            per[str(e.get("name", ""))] = per.get(str(e.get("name", "")), 0.0) + dur
        item["streams"] = streams
    except Exception as exc:
        item["error"] = "%s: %s" % (type(exc).__name__, exc)
    out.append(item)
print(json.dumps({"files": out}))
"""


class TraceError(Exception):
    """A listing that cannot be read (names the source)."""


def rank_of(path):
    """The TP rank in a trace file name, or None."""
    m = TRACE_NAME.match(path.rsplit("/", 1)[-1])
    return int(m.group("rank")) if m else None


def parse_listing(text, source):
    """The script's JSON output -> {"traces": [{path, rank, kernels}], "unreadable": [path: why]}."""
    try:
        doc = json.loads(text or "")
    except ValueError:
        raise TraceError("%s: the trace listing is not JSON: %r" % (source, (text or "")[:200]))
    if not isinstance(doc, dict):
        raise TraceError("%s: the trace listing is not an object" % source)
    if doc.get("error"):
        raise TraceError("%s: %s" % (source, doc["error"]))
    traces, unreadable = [], []
    for item in doc.get("files") or []:
        if item.get("error"):
            unreadable.append("%s: %s" % (item.get("path"), item["error"]))   # e.g. still being written
            continue
        traces.append({"path": item.get("path"), "rank": rank_of(item.get("path") or ""),
                       "mtime": item.get("mtime"), "kernels": list(item.get("names") or []),
                       "streams": dict(item.get("streams") or {})})
    traces.sort(key=lambda t: (t["mtime"] or 0, t["path"] or ""))
    return {"traces": traces, "unreadable": unreadable}


def rank_kernels(listing, rank=None):
    """Kernel names of the traces of ``rank`` (every trace when None), unique and sorted."""
    names = set()
    for t in listing["traces"]:
        if rank is None or t["rank"] == rank:
            names.update(t["kernels"])
    return sorted(names)


def exposed_us(listing, pattern):
    """Microseconds of kernels whose name matches ``pattern`` on each trace's compute stream (the stream
    with the most kernel time), averaged over the traces; None without a trace that has durations.
    Work moved to a side stream (the Engram prefetch) stops counting: that is the exposed time."""
    rx = re.compile(pattern)
    values = []
    for t in listing["traces"]:
        streams = t.get("streams") or {}
        if not streams:
            continue
        main = max(streams, key=lambda tid: sum(streams[tid].values()))
        values.append(sum(us for name, us in streams[main].items() if rx.search(name)))
    return round(sum(values) / len(values), 1) if values else None


def step_profile(listing, patterns=None, top=5):
    """A rank's step profile from its traces of one profiled window (stage A's all-rank profile): kernel time
    on the compute stream (the stream with the most kernel time) and on the side streams, microseconds averaged
    over the traces; for each ``patterns`` name -> regex, the matching kernels' time on the compute stream
    (exposed) and its share of that stream, in percent; the ``top`` kernels of the compute stream by time.
    The window's length differs from run to run, so the share is what compares a rank with another, and a run
    with the one before it. None without a trace that has durations."""
    rx = dict((name, re.compile(pattern)) for name, pattern in (patterns or {}).items())
    per = []
    for t in listing["traces"]:
        streams = t.get("streams") or {}
        if not streams:
            continue
        main = max(streams, key=lambda tid: sum(streams[tid].values()))
        per.append((streams[main], sum(sum(v.values()) for tid, v in streams.items() if tid != main)))
    if not per:
        return None
    n = float(len(per))
    kernels = {}
    for main, _side in per:
        for name, us in main.items():
            kernels[name] = kernels.get(name, 0.0) + us / n
    compute = sum(kernels.values())
    exposed = dict((name, round(sum(us for k, us in kernels.items() if r.search(k)), 1)) for name, r in rx.items())
    return {
        "traces": len(per),
        "compute_us": round(compute, 1),
        "side_us": round(sum(side for _main, side in per) / n, 1),
        "exposed_us": exposed,
        "exposed_share_pct": dict((name, round(100.0 * us / compute, 2) if compute else None)
                                  for name, us in exposed.items()),
        "top": [[name, round(us, 1)] for name, us in sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))[:top]],
    }


def wait_report(listing, label, rank, container, directory, since, now=None):
    """``msg`` (and ``lines`` while nothing is found) of one round of waiting for the trace."""
    now = time.time() if now is None else now
    who = "%s %s %s" % (clock_text(now), label, "(every rank)" if rank is None else "rank %s" % rank)
    if listing["traces"]:
        return {"msg": "%s: %d trace(s), %d kernel names" % (who, len(listing["traces"]), len(listing["kernels"]))}
    busy = "; %d still being written" % len(listing["unreadable"]) if listing["unreadable"] else ""
    return {"lines": [], "msg": "%s: no trace in %s:%s since the profiled window began %s ago (written "
                                   "asynchronously after /stop_profile)%s" % (who, container, directory,
                                                                            eta_text(now - since), busy)}
