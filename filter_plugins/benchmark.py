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


class FilterModule:
    """Benchmark filters."""

    def filters(self):
        return {"dsv41_bench_rows": dsv41_bench_rows}
