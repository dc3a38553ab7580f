#!/usr/bin/env python3
"""Benchmark: the engram_packed latest-boot check against ``grep -c packed=`` on the same big log.

    python bench/bench_engram_packed.py [--size-gib 1] [--small-gib 0.1] [--rounds 3] [--worst-case]

1. Generates (once, cached by size and seed) a realistic engine log in bench/out/: many boots
   (boot markers in both builds' forms, ``server_args={...}`` and ``server_args=ServerArgs(...)``,
   Exact Engram lines, DSV4/DSv4 memory and pool lines, autotune events, echoed requests that quote
   ``server_args=``),
   bodies of decode/prefill/HTTP noise, periodic Engram lines (~15 % of lines), ``[date TPr EPr]``
   prefixes and some ANSI colour. The last boot has layer 14 packed=False.
2. Warms the page cache, then alternates ``grep -c packed= FILE`` and the engram_packed scan
   (``scan_file(kinds=ENGRAM_KINDS)`` of module_utils/engine_log/scan.py + ``evaluate`` of
   module_utils/engine_log/packed.py, in a child process)
   for N rounds; reports medians, MiB/s and the ratio grep time / check time (target >= 5: the
   check reads the latest boot, found from the end, not every earlier boot).  The optional exact
   boot count (``count_boots=True``, a pass over every marker) is timed once beside it.
3. Peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss`` inside the child) for the big and the
   small file, and for an empty log (interpreter + imports baseline): it must not grow with the log.
4. ``--worst-case`` adds a single-boot log of the same size (the latest boot is the whole file,
   so every byte goes through the full parser).

Writes a table to stdout and JSON to bench/out/bench_engram_packed.json.
"""
from __future__ import print_function

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
MIB = 1 << 20
GIB = 1 << 30
ROWS = {1: 384006168, 14: 384016684}   # the real DeepSeek-V4.1-Flash tables

CHILD = r"""
import json, os, resource, sys, time
root = sys.argv[1]
import ansible.module_utils
ansible.module_utils.__path__.append(os.path.join(root, "module_utils"))
from ansible.module_utils.engine_log import lines as engine_log_lines, scan
from ansible.module_utils.engine_log.packed import evaluate
path = sys.argv[2]
t0 = time.perf_counter()
count = len(sys.argv) > 3
facts = scan.scan_file(path, kinds=engine_log_lines.ENGRAM_KINDS, count_boots=count)
try:
    res = evaluate(facts, 1, 3, [1, 14], {1: %d, 14: %d})
except engine_log_lines.EngineLogError as exc:
    res = {"error": str(exc), "boots_seen": facts.boots_seen}
el = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"elapsed": el, "maxrss_kib": rss, "all_packed": res.get("all_packed"),
                  "boots_seen": res.get("boots_seen"),
                  "packed": [l["packed"] for l in res.get("layers", [])],
                  "rows_ok": [l["rows_ok"] for l in res.get("layers", [])],
                  "error": res.get("error")}))
""" % (ROWS[1], ROWS[14])


def prefix(ts, rank):
    return "[2026-09-24 %02d:%02d:%02d TP%d EP%d] " % (ts // 3600 % 24, ts // 60 % 60, ts % 60, rank, rank)


def body_pool(rng, rank, packed14, n=60000):
    """A pool of realistic body lines (bytes), joined."""
    lines = []
    lookups = 0
    for i in range(n):
        ts = 10000 + i
        p = prefix(ts, rank)
        r = rng.random()
        if r < 0.15:
            layer = 1 if i % 2 else 14
            lookups += rng.randint(1000, 90000)
            packed = "True" if (layer == 1 or packed14) else "False"
            lines.append("%sEngram layer=%d lookups=%d hit_rate=0.0%% reads=%d cache=0.0GiB(4-way) "
                         "scales=0.0GiB threads=96 packed=%s" % (p, layer, lookups, lookups * 4 // 5, packed))
        elif r < 0.70:
            lines.append("%sDecode batch. #running-req: %d, #token: %d, token usage: %.2f, cuda graph: True, "
                         "gen throughput (token/s): %.2f, #queue-req: %d"
                         % (p, rng.randint(1, 4), rng.randint(100, 400000), rng.random(),
                            rng.uniform(20, 45), rng.randint(0, 3)))
        elif r < 0.80:
            lines.append("%sPrefill batch. #new-seq: 1, #new-token: %d, #cached-token: %d, token usage: %.2f, "
                         "#running-req: %d, #queue-req: 0"
                         % (p, rng.randint(1, 1024), rng.randint(0, 8000), rng.random(), rng.randint(0, 3)))
        elif r < 0.95:
            lines.append('[2026-09-24 %02d:%02d:%02d] INFO:     10.0.0.%d:%d - "POST /v1/chat/completions '
                         'HTTP/1.1" 200 OK' % (ts // 3600 % 24, ts // 60 % 60, ts % 60, rng.randint(2, 3),
                                               rng.randint(30000, 60000)))
        elif r < 0.9501:
            lines.append("%sReceive: obj=GenerateReqInput(text='why does the log print server_args={...} and "
                         "Exact nvme Engram layer=14 packed=True?', rid='%d')" % (p, i))
        else:
            lines.append("%s\x1b[33mWARNING\x1b[0m scheduler: KV cache usage %.1f%%, retracting %d request(s)"
                         % (p, rng.uniform(90, 99), rng.randint(1, 2)))
    return ("\n".join(lines) + "\n").encode()


def boot_header(rng, rank, boot, packed14):
    rng_ = {l: (n * rank // 3, n * (rank + 1) // 3) for l, n in ROWS.items()}
    p = prefix(boot * 7, rank)
    dsv = "DSV4" if boot % 2 else "DSv4"
    opts = [(k, rng.randint(0, 9999)) for k in range(120)]
    sargs = ", ".join("opt_%d=%d" % kv for kv in opts)
    sdict = ", ".join("'opt_%d': %d" % kv for kv in opts)
    out = [
        "+ exec python3 -m sglang.launch_server --model-path /srv/models/DeepSeek-V4.1-Flash --tp-size 3",
        ("[2026-09-24 02:51:10] server_args=ServerArgs(model_path='/srv/models/DeepSeek-V4.1-Flash', "
         "tp_size=3, ep_size=3, max_total_tokens=750000, node_rank=%d, %s)" % (rank, sargs)) if boot % 3 == 2 else
        ("[2026-09-24 02:51:10] server_args={'model_path': '/srv/models/DeepSeek-V4.1-Flash', 'tp_size': 3, "
         "'ep_size': 3, 'max_total_tokens': 750000, 'page_size': 256, 'node_rank': %d, %s}"
         % (rank, sdict)),
        p + "Load weight begin. avail mem=100.08 GB",
        p + "Exact nvme Engram layer=1 rank=%d rows=[%d,%d) cache=0.0GiB (0 slots, 4-way, 0.0%% of owned rows) "
            "scales=0.0GiB io_threads=96 packed=True" % ((rank,) + rng_[1]),
        p + "Exact nvme Engram layer=14 rank=%d rows=[%d,%d) cache=0.0GiB (0 slots, 4-way, 0.0%% of owned rows) "
            "scales=0.0GiB io_threads=96 packed=%s" % ((rank,) + rng_[14] + (packed14,)),
        p + "%s memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, "
            "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=0.74 GB" % dsv,
        p + "%s pool sizes: full=491520, swa=61440, c128=3840" % dsv,
        p + "%s pool sizes: full=491520, swa=61440, c128=3840" % dsv,
        p + "max_total_num_tokens=491520, chunked_prefill_size=1024, max_prefill_tokens=16384, "
            "max_running_requests=4, context_len=1048576, available_gpu_mem=2.81 GB",
    ]
    for _ in range(2):
        out += [p + "\x1b[33mFlashInfer autotune: per-rank caches disagree, discarding them and tuning from "
                    "scratch so all ranks agree on the tactics.\x1b[0m",
                p + "Running FlashInfer autotune with cache: /root/.cache/sglang/flashinfer/autotune/0.6.18/"
                    "sm121/3f9a0c1d/rank_tp%d_pp0_dp0.json" % rank,
                p + "FlashInfer autotune completed."]
    return ("\n".join(out) + "\n").encode()


def generate(path, size, seed=41, single_boot=False):
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as fh:
            meta = json.load(fh)
        if meta.get("size_target") == size and meta.get("seed") == seed and meta.get("format") == 4 and os.path.getsize(path) >= size:
            return meta
    rng = random.Random(seed)
    rank = 1
    pools = {True: body_pool(rng, rank, True), False: body_pool(rng, rank, False)}
    t0 = time.time()
    written = 0
    boots = 0
    with open(path + ".tmp", "wb") as out:
        while written < size:
            remaining = size - written
            boot_size = remaining if single_boot else min(remaining, rng.randint(2 * MIB, 8 * MIB))   # hundreds of boots
            last = boot_size >= remaining
            packed14 = not last
            hdr = boot_header(rng, rank, boots, packed14)
            out.write(hdr)
            written += len(hdr)
            boots += 1
            pool = pools[packed14]
            goal = written + boot_size - len(hdr)
            while written < goal:
                span = min(goal - written, rng.randint(256 * 1024, 2 * MIB))
                start = pool.find(b"\n", rng.randrange(0, len(pool) - span - 1)) + 1
                end = pool.find(b"\n", start + span) + 1 or len(pool)
                piece = pool[start:end]
                out.write(piece)
                written += len(piece)
    os.rename(path + ".tmp", path)
    meta = {"size_target": size, "seed": seed, "format": 4, "bytes": os.path.getsize(path), "boots": boots,
            "single_boot": single_boot, "gen_seconds": round(time.time() - t0, 1),
            "expect": {"boots_seen": boots, "all_packed": False, "packed": [True, False]}}
    with open(meta_path, "w") as fh:
        json.dump(meta, fh)
    return meta


def run_grep(path):
    t0 = time.perf_counter()
    out = subprocess.run(["grep", "-c", "packed=", path], stdout=subprocess.PIPE, check=True).stdout
    return time.perf_counter() - t0, int(out)


def run_scan(path, count_boots=False):
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, ROOT, path] + (["count"] if count_boots else []),
                         stdout=subprocess.PIPE, check=True).stdout
    wall = time.perf_counter() - t0
    res = json.loads(out)
    res["wall"] = wall
    return res


def warm(path):
    with open(path, "rb") as fh:
        while fh.read(16 * MIB):
            pass


def compare(path, rounds, meta):
    warm(path)
    size = os.path.getsize(path)
    g_times, s_times, s_walls, rss = [], [], [], []
    grep_count = None
    res = None
    for _ in range(rounds):
        t, grep_count = run_grep(path)
        g_times.append(t)
        res = run_scan(path)
        s_times.append(res["elapsed"])
        s_walls.append(res["wall"])
        rss.append(res["maxrss_kib"])
    g, s, sw = statistics.median(g_times), statistics.median(s_times), statistics.median(s_walls)
    counted = run_scan(path, count_boots=True)
    ok = (res["boots_seen"] is None and res["all_packed"] is False
          and res["packed"] == meta["expect"]["packed"] and res["rows_ok"] == [True, True]
          and counted["boots_seen"] == meta["expect"]["boots_seen"])
    return {
        "file": os.path.relpath(path, ROOT), "bytes": size, "boots": meta["boots"],
        "grep_median_s": round(g, 4), "grep_mib_s": round(size / MIB / g, 1), "grep_count": grep_count,
        "scan_median_s": round(s, 4), "scan_mib_s": round(size / MIB / s, 1),
        "scan_wall_median_s": round(sw, 4), "scan_wall_mib_s": round(size / MIB / sw, 1),
        "ratio_scan_over_grep": round(g / s, 3), "ratio_wall": round(g / sw, 3),
        "scan_maxrss_mib": round(max(rss) / 1024.0, 1),
        "count_boots_s": round(counted["elapsed"], 4), "count_boots_ratio": round(g / counted["elapsed"], 3),
        "count_boots_seen": counted["boots_seen"],
        "grep_s": [round(x, 4) for x in g_times], "scan_s": [round(x, 4) for x in s_times],
        "result": {k: res[k] for k in ("boots_seen", "all_packed", "packed", "rows_ok", "error")}, "result_ok": ok,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gib", type=float, default=1.0)
    # a fresh seed when the generator changes, so a cached log of an older layout is never reused
    ap.add_argument("--small-gib", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worst-case", action="store_true", help="also a single-boot log of --size-gib")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)

    cases = [("many boots", args.size_gib, False), ("many boots", args.small_gib, False)]
    if args.worst_case:
        cases.append(("single boot", args.size_gib, True))
    rows = []
    for label, gib, single in cases:
        path = os.path.join(OUT, "engine-%s-%gGiB.log" % ("single" if single else "boots", gib))
        meta = generate(path, int(gib * GIB), single_boot=single)
        row = compare(path, args.rounds, meta)
        row["case"] = label
        rows.append(row)

    empty = os.path.join(OUT, "empty.log")
    open(empty, "w").close()
    base = run_scan(empty)
    baseline_mib = round(base["maxrss_kib"] / 1024.0, 1)

    hdr = "%-11s %8s %5s %9s %9s %9s %9s %7s %9s %9s %6s" % (
        "case", "MiB", "boots", "grep s", "grep MB/s", "check s", "check MB/s", "ratio", "RSS MiB", "count s", "ok")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print("%-11s %8.0f %5d %9.3f %9.0f %9.4f %9.0f %7.1f %9.1f %9.3f %6s" % (
            r["case"], r["bytes"] / MIB, r["boots"], r["grep_median_s"], r["grep_mib_s"],
            r["scan_median_s"], r["scan_mib_s"], r["ratio_scan_over_grep"], r["scan_maxrss_mib"],
            r["count_boots_s"], r["result_ok"]))
    print("baseline RSS (interpreter + ansible imports, empty log): %.1f MiB" % baseline_mib)
    print("(MB/s columns are MiB/s; ratio = grep time / latest-boot check time, target >= 5; check time is "
          "measured inside the child, its wall time incl. interpreter start is in the JSON; 'count s' is the "
          "optional exact boot count, count_boots=True)")
    report = {"rounds": args.rounds, "cases": rows, "baseline_rss_mib": baseline_mib,
              "python": sys.version.split()[0], "cpus": os.cpu_count()}
    with open(os.path.join(OUT, "bench_engram_packed.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    return 0 if all(r["result_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
