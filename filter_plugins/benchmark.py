"""Filters of the benchmark role: decode_bench results as table rows (no Jinja program in the tasks)."""


def _r(value, digits=2):
    return "-" if value is None else str(round(float(value), digits))


def dsv41_bench_rows(results):
    """One row per workload x concurrency for dsv41_table: w, c, agg (median [min..max] sd), per, ttft, n,
    distinct."""
    rows = []
    for r in results or []:
        agg = r["aggregate_tok_s"]
        rows.append({
            "w": r["workload"], "c": "C%s" % r["concurrency"],
            "agg": "%s [%s..%s] sd %s" % (_r(agg["median"]), _r(agg["min"]), _r(agg["max"]), _r(agg["stdev"])),
            "per": _r(r["per_stream_tok_s"]["median"]), "ttft": _r(r.get("ttft_ms_median") or 0, 0),
            "n": r["requests"], "distinct": r["distinct_outputs"],
        })
    return rows


class FilterModule:
    """Benchmark filters."""

    def filters(self):
        return {"dsv41_bench_rows": dsv41_bench_rows}
