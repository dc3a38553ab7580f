# -*- coding: utf-8 -*-
"""The memory ledger of one boot per rank, and the differences between conditions (stage F and later).

One subject: where each rank's GPU memory went during a boot, from the engine's own lines as the one
engine-log reader gathers them (``engine_log_scan`` -> ``BootFacts``): free memory before any weight
(the first ``Load weight begin. avail mem=``), after the target and the draft weights (``Load weight
end``), after the KV pool (``Memory pool end``), the lowest point of the graph captures (``Capture ...
begin/end ... avail mem=``, the start-up peak), what is left for serving (``available_gpu_mem`` of
rank 0's ``max_total_num_tokens=`` line, else the last capture's), the KV pool (allocated, requested,
clamped) and the start-up time (``Engine startup timings (s): ... scheduler_e2e=``; older builds do
not print it). Every figure is GiB as the engine prints "GB" (2**30 bytes) unless named ``_mib``.

Differences are in MiB, arm minus reference, per rank: negative ``used_mib`` is memory saved.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.engine_log.kv_pool import clamp_of, page_size_of
from ansible.module_utils.engine_log.scan import scan_text

__metaclass__ = type

_STARTUP = re.compile(r"Engine startup timings \(s\):.*?\bscheduler_e2e=(?P<s>[0-9.]+)")
MIB_PER_GIB = 1024.0


def _avail(fields):
    return None if not fields else fields.get("avail_mem")


def rank_ledger(text, source="<log>"):
    """The ledger of the latest boot in ``text`` (one rank's log). Missing lines give None figures,
    named in ``missing``."""
    d = scan_text(text or "", name=source).to_dict()
    st = d["startup"]
    loads = st["load_weight"]
    captures = [_avail(ph) for g in d["graphs"].values() for ph in g.values()]
    captures = [c for c in captures if c is not None]
    pool = d["pool"] or {}
    requested = (d["server_args"] or {}).get("max_total_tokens")
    allocated = pool.get("full")
    if allocated is None and d["max_total"]:
        allocated = d["max_total"].get("max_total_num_tokens")
    _rounded, clamped = clamp_of(allocated, requested, page_size_of(d["server_args"])[0])
    # every graph pass captured to its end, nothing fatal: the boot got past its memory phases (workers
    # print no max_total_num_tokens line and no Ready line of their own)
    captured = bool(d["graphs"]) and all(g.get("end") for g in d["graphs"].values()) and not d["fatal"]
    serving = (d["max_total"] or {}).get("available_gpu_mem")
    if serving is None and captures and (d["ready"] or captured):
        serving = captures[-1]          # a boot that died in a capture never had memory left for serving
    startup = None
    for m in _STARTUP.finditer(text or ""):
        startup = float(m.group("s"))        # the latest boot's line is the last one
    out = {
        "rank": d["rank"],
        "free_before_load_gib": _avail(st["first_load_weight_begin"]),
        "after_target_load_gib": _avail(loads[0]) if loads else None,
        "after_draft_load_gib": _avail(loads[1]) if len(loads) > 1 else None,
        "weights_gib": round(sum(x.get("mem_usage") or 0 for x in loads), 2) if loads else None,
        "after_kv_pool_gib": _avail(st["memory_pool_end"]),
        "capture_low_gib": min(captures) if captures else None,
        "serving_free_gib": serving,
        "kv_pool_tokens": allocated,
        "kv_requested_tokens": requested,
        "kv_clamped": clamped,
        "startup_s": startup,
        "fatal": [f.get("line") or f.get("message") or str(f) for f in d["fatal"]][:3],
    }
    out["booted"] = bool(d["ready"]) or d["max_total"] is not None or captured
    out["missing"] = sorted(k for k in ("free_before_load_gib", "after_target_load_gib", "after_kv_pool_gib",
                                        "capture_low_gib", "serving_free_gib", "kv_pool_tokens") if out[k] is None)
    return out


def fleet_ledger(logs, ranks):
    """{host: ledger} for every host in ``ranks`` whose log was read."""
    return dict((h, rank_ledger(logs[h], h)) for h in sorted(ranks, key=lambda h: ranks[h]) if h in (logs or {}))


def used_mib(ledger):
    """GPU memory the boot took before serving (free before load minus free for serving), MiB."""
    if ledger.get("free_before_load_gib") is None or ledger.get("serving_free_gib") is None:
        return None
    return round((ledger["free_before_load_gib"] - ledger["serving_free_gib"]) * MIB_PER_GIB, 1)


def weights_mib(ledger):
    return None if ledger.get("weights_gib") is None else round(ledger["weights_gib"] * MIB_PER_GIB, 1)


def difference(arm, reference):
    """Per host: arm minus reference, MiB, for the weights, what the boot took, the capture low point and
    what is left for serving; KV pool tokens as a count."""
    out = {}
    for host in sorted(set(arm) & set(reference)):
        a, r = arm[host], reference[host]

        def mib(key):
            if a.get(key) is None or r.get(key) is None:
                return None
            return round((a[key] - r[key]) * MIB_PER_GIB, 1)
        kv = None if a.get("kv_pool_tokens") is None or r.get("kv_pool_tokens") is None else \
            a["kv_pool_tokens"] - r["kv_pool_tokens"]
        wa, wr = weights_mib(a), weights_mib(r)
        out[host] = {"weights_mib": None if wa is None or wr is None else round(wa - wr, 1),
                     "capture_low_mib": mib("capture_low_gib"), "serving_free_mib": mib("serving_free_gib"),
                     "kv_pool_tokens": kv, "mem_available_after_mib": mib("mem_available_after_gib")}
    return out


def cost_mib(diff):
    """An arm's memory cost against a reference on one rank, MiB: the extra weights it loaded plus what it leaves
    less for serving after the captures (with the fraction held, the rest of the extra comes out of the KV pool,
    shown apart). None when either figure is missing."""
    w, s = diff.get("weights_mib"), diff.get("serving_free_mib")
    if w is None or s is None:
        return None
    return round(w - min(s, 0.0), 1)


def cost_failures(arm, reference, headroom_gib, name="the arm", vs="the baseline"):
    """Ranks where ``name`` costs more memory than its stated headroom against ``vs``: the GPU cost
    (:func:`cost_mib`) or the drop of MemAvailable after the boot, each over ``headroom_gib``; a rank without
    the figures fails, saying which. Empty = pass (or no headroom stated)."""
    if not headroom_gib:
        return []
    out = []
    limit = headroom_gib * MIB_PER_GIB
    diffs = difference(arm or {}, reference or {})
    for host in sorted(set(arm or {}) | set(reference or {}),
                       key=lambda h: ((arm or {}).get(h) or (reference or {}).get(h) or {}).get("rank") or 0):
        led = (arm or {}).get(host) or (reference or {}).get(host) or {}
        who = "%s rank %s" % (host, led.get("rank"))
        d = diffs.get(host)
        cost = cost_mib(d) if d else None
        if cost is None:
            out.append("memory: %s has no weights or serving figure in %s or %s; its cost against the stated headroom "
                       "%.2f GiB cannot be shown" % (who, name, vs, headroom_gib))
            continue
        kv = "" if d["kv_pool_tokens"] is None else ", KV pool {:+,} tokens".format(d["kv_pool_tokens"])
        if cost > limit:
            out.append("memory: %s: %s costs %.2f GiB more than %s (weights %+.1f MiB, left for serving %+.1f MiB%s), "
                       "over its stated headroom %.2f GiB per rank" % (who, name, cost / MIB_PER_GIB, vs,
                                                                       d["weights_mib"], d["serving_free_mib"], kv,
                                                                       headroom_gib))
        drop = d.get("mem_available_after_mib")
        if drop is not None and -drop > limit:
            out.append("memory: %s: MemAvailable after the boot of %s is %.2f GiB below %s's (%.2f -> %.2f GiB), over "
                       "its stated headroom %.2f GiB per rank" % (
                           who, name, -drop / MIB_PER_GIB, vs, reference[host]["mem_available_after_gib"],
                           arm[host]["mem_available_after_gib"], headroom_gib))
    return out


def floor_failures(ledger, floor_gib):
    """Ranks whose memory left after capture is below ``floor_gib`` (or unknown): failure messages."""
    out = []
    if not floor_gib:
        return out
    for host, led in sorted(ledger.items(), key=lambda kv: (kv[1].get("rank") is None, kv[1].get("rank"))):
        low = led.get("serving_free_gib")
        who = "%s rank %s" % (host, led.get("rank"))
        if low is None:
            out.append("memory: %s has no free-memory figure after capture; the floor %.2f GiB cannot be shown"
                       % (who, floor_gib))
        elif low < floor_gib:
            out.append("memory: %s keeps %.2f GiB for serving, below the floor %.2f GiB" % (who, low, floor_gib))
    return out
