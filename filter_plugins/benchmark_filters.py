"""Filters of the benchmark role: decode_bench results as table rows (no Jinja program in the tasks)."""


def _r(value, digits=2):
    return "-" if value is None else str(round(float(value), digits))


def _failed(r):
    n = r.get("failed_repetitions") or 0
    codes = r.get("error_codes") or {}
    if not codes:
        return str(n)
    return "%d (%s)" % (n, ", ".join("%s x%d" % kv for kv in sorted(codes.items())))


def dsv41_bench_rows(results):
    """One row per workload x concurrency for dsv41_table: w, c, agg (median [min..max] sd), per, ttft, itl, n,
    distinct, failed (failed repetitions and their error codes)."""
    rows = []
    for r in results or []:
        agg = r["aggregate_tok_s"]
        rows.append({
            "w": r["workload"], "c": "C%s" % r["concurrency"],
            "agg": "%s [%s..%s] sd %s" % (_r(agg["median"]), _r(agg["min"]), _r(agg["max"]), _r(agg["stdev"])),
            "per": _r(r["per_stream_tok_s"]["median"]), "ttft": _r(r.get("ttft_ms_median") or 0, 0),
            "itl": _r(r.get("itl_ms_median"), 1), "n": r["requests"], "distinct": r["distinct_outputs"],
            "failed": _failed(r),
        })
    return rows


def dsv41_step_profiles(results, hostvars):
    """The looped engine_profile_trace results of every rank -> {host: {rank, profile, traces, missing}}: the
    rank's step profile, or None with ``missing`` saying why (no trace written in the window, or the read failed)."""
    out = {}
    for res in results or []:
        host = (res.get("item") or {}).get("item")
        prof = res.get("step_profile")
        missing = None
        if res.get("failed"):
            missing = res.get("msg") or "the trace could not be read"
        elif not prof:
            missing = res.get("msg") or "no trace with kernel durations in the window"
        out[host] = {"rank": (hostvars.get(host) or {}).get("dsv41_rank"), "profile": prof,
                     "traces": [t.get("path") for t in res.get("traces") or []], "missing": missing}
    return out


def dsv41_step_profile_rows(profiles):
    """One line per rank, in rank order: compute-stream time, each named share, the longest kernels."""
    lines = []
    for host, entry in sorted((profiles or {}).items(), key=lambda kv: (kv[1].get("rank") is None, kv[1].get("rank"))):
        prof = entry.get("profile")
        who = "%s rank %s" % (host, entry.get("rank"))
        if not prof:
            lines.append("%s: no step profile (%s)" % (who, entry.get("missing")))
            continue
        shares = ", ".join("%s %s us (%s%%)" % (name, _r(us, 1), _r(prof["exposed_share_pct"].get(name)))
                           for name, us in sorted(prof["exposed_us"].items()))
        top = ", ".join("%s %d" % (name, round(us)) for name, us in prof["top"])
        lines.append("%s: compute stream %s us, side streams %s us; %s; longest: %s"
                     % (who, _r(prof["compute_us"], 1), _r(prof["side_us"], 1), shares or "no named kernels", top))
    return lines


class FilterModule:
    """Benchmark filters."""

    def filters(self):
        return {"dsv41_bench_rows": dsv41_bench_rows, "dsv41_step_profiles": dsv41_step_profiles,
                "dsv41_step_profile_rows": dsv41_step_profile_rows}
