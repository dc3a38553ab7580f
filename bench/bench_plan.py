#!/usr/bin/env python3
"""Benchmark: plan() on a full-scale header-only checkpoint, per rank, against one 100x smaller.

The full-scale checkpoint has the real Engram shapes (layer 1 N=384006168, layer 14 N=384016684)
in two sparse shard files with unrelated tensors beside them. ``plan()`` reads only the index and
the safetensors headers, so its time must not depend on the table size: the ratio full/small is ~1.
Target: median < 0.2 s per call. Writes JSON to bench/out/.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
import ansible.module_utils  # noqa: E402

ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))
import ckpt_factory  # noqa: E402
from ansible.module_utils.engram.plan import plan  # noqa: E402

TARGET_SECONDS = 0.2
TP = 3


def time_plan(ckpt, dest, rank, repeats):
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        plan(ckpt, dest, rank, TP)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), max(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--dir", help="work directory (default: a temporary directory)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-plan-", dir=args.dir)
    try:
        full_rows = dict(ckpt_factory.FULL_SCALE_ROWS)
        small_rows = {layer: rows // 100 for layer, rows in full_rows.items()}
        ckpts = {name: ckpt_factory.make_checkpoint(os.path.join(work, name), rows=table_rows, sparse=True)["dir"]
                 for name, table_rows in (("full", full_rows), ("small", small_rows))}
        dest = os.path.join(work, "engram")
        os.mkdir(dest)
        rows = []
        for rank in range(TP):
            medians = {}
            for name, ckpt in ckpts.items():
                median, worst = time_plan(ckpt, dest, rank, args.repeats)
                medians[name] = median
                rows.append({"checkpoint": name, "rank": rank, "median_s": median, "max_s": worst})
            rows[-1]["ratio_full_over_small"] = medians["full"] / medians["small"]
        full_required = plan(ckpts["full"], dest, 1, TP)["required_bytes"]

        print("| checkpoint | rank | median ms | max ms | full/small |")
        print("|---|---|---|---|---|")
        for row in rows:
            ratio = row.get("ratio_full_over_small")
            print("| %s | %d | %.3f | %.3f | %s |" % (row["checkpoint"], row["rank"], row["median_s"] * 1e3,
                                                     row["max_s"] * 1e3, "%.2f" % ratio if ratio else ""))
        worst_median = max(row["median_s"] for row in rows)
        ratio = statistics.median(row["ratio_full_over_small"] for row in rows if "ratio_full_over_small" in row)
        met = worst_median < TARGET_SECONDS
        print("\nworst median %.3f ms (target < %.0f ms: %s); median full/small ratio %.2f; "
              "rank 1 required_bytes %d" % (worst_median * 1e3, TARGET_SECONDS * 1e3,
                                            "met" if met else "MISSED", ratio, full_required))
        report = {"benchmark": "bench_plan", "repeats": args.repeats, "tp_size": TP, "rows": rows,
                  "worst_median_s": worst_median, "target_s": TARGET_SECONDS, "ratio_full_over_small": ratio,
                  "rank1_required_bytes": full_required, "host": os.uname().nodename,
                  "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        out_dir = os.path.join(HERE, "out")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, "bench_plan-%s.json" % time.strftime("%Y%m%dT%H%M%S"))
        with open(out, "w") as handle:
            json.dump(report, handle, indent=1)
        print("wrote", out)
        return 0 if met else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
