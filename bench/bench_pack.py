#!/usr/bin/env python3
"""Benchmark: pack_layer against a plain fsynced copy of the same number of bytes.

Builds a synthetic checkpoint whose single Engram table (weights + scales) is at least
``--size-gib`` GiB, then alternates, for ``--rounds`` rounds: (a) a plain copy of the shard's byte
count from the same source file into the same directory with the same chunk size, fsynced; (b)
``pack_layer`` of rank 0 of tp 1 (the whole table). The page cache is dropped before every run
(``/proc/sys/vm/drop_caches`` if writable, else ``posix_fadvise(DONTNEED)`` on the source).
Prints MiB/s per run and the median pack/copy ratio (target >= 0.8); writes JSON to bench/out/.
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
import ansible.module_utils   # noqa: E402

ansible.module_utils.__path__.append(os.path.join(ROOT, "module_utils"))
import ckpt_factory   # noqa: E402
from ansible.module_utils.engram.packer import DEFAULT_CHUNK_BYTES, pack_layer  # noqa: E402
from ansible.module_utils.engram.safetensors_index import read_engram_tables  # noqa: E402
from ansible.module_utils.engram.shard_format import HEADER_BYTES, MIB, ROW_BYTES, shard_name  # noqa: E402

TARGET_RATIO = 0.8


def drop_caches(source):
    """Drop the page cache; return how. Falls back to DONTNEED on the source in containers."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return "drop_caches"
    except OSError:
        fd = os.open(source, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        return "fadvise"


def cached_mib():
    """Page cache size (Cached in /proc/meminfo), MiB."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("Cached:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def plain_copy(source, offset, length, target, chunk_bytes):
    """pread/write ``length`` bytes from ``source`` at ``offset`` to ``target``, then fsync."""
    in_fd = os.open(source, os.O_RDONLY)
    out_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < length:
            data = os.pread(in_fd, min(chunk_bytes, length - done), offset + done)
            if not data:
                raise SystemExit("%s is shorter than %d bytes from offset %d" % (source, length, offset))
            view = memoryview(data)
            while view:
                view = view[os.write(out_fd, view):]
            done += len(data)
        os.fsync(out_fd)
    finally:
        os.close(in_fd)
        os.close(out_fd)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--dir", help="work directory (default: a temporary directory in /var/tmp)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-pack-", dir=args.dir or "/var/tmp")
    try:
        rows = -(-int(args.size_gib * 2 ** 30) // ROW_BYTES)
        print("building checkpoint: layer 1, N=%d rows (%.2f GiB) in %s" % (rows, rows * ROW_BYTES / 2 ** 30, work))
        ckpt = ckpt_factory.make_checkpoint(os.path.join(work, "ckpt"), rows={1: rows})["dir"]
        table = read_engram_tables(ckpt, (1,))[1]
        dest = os.path.join(work, "engram")
        os.mkdir(dest)
        total = HEADER_BYTES + rows * ROW_BYTES
        copy_target = os.path.join(dest, "plain-copy.bin")
        shard = os.path.join(dest, shard_name(1, 0, 1))

        runs = []
        for rnd in range(1, args.rounds + 1):
            for kind in ("copy", "pack"):
                for leftover in (copy_target, shard):
                    if os.path.exists(leftover):
                        os.unlink(leftover)
                how = drop_caches(table.shard_path)
                cache_before = cached_mib()
                started = time.monotonic()
                if kind == "copy":
                    # Same byte count from the same source file, same chunk size. The file holds the
                    # table plus its safetensors header and a filler tensor, so it is long enough.
                    plain_copy(table.shard_path, 0, total, copy_target, args.chunk_bytes)
                else:
                    result = pack_layer(ckpt, dest, 1, 0, 1, chunk_bytes=args.chunk_bytes)
                    assert result["changed"] and result["bytes"] == total, result
                seconds = time.monotonic() - started
                # Page cache still held after the run: the packer drops what it wrote and read.
                retained = cached_mib() - cache_before
                runs.append({"round": rnd, "kind": kind, "seconds": round(seconds, 3),
                             "mib_s": round(total / MIB / seconds, 1), "cache_drop": how,
                             "cache_retained_mib": round(retained, 1)})
                print("round %d %-4s %8.3f s %9.1f MiB/s  page cache retained %8.1f MiB  (drop: %s)"
                      % (rnd, kind, seconds, total / MIB / seconds, retained, how))

        ratios = [p["mib_s"] / c["mib_s"] for c, p in zip(runs[0::2], runs[1::2])]
        copy_med = statistics.median(r["mib_s"] for r in runs if r["kind"] == "copy")
        pack_med = statistics.median(r["mib_s"] for r in runs if r["kind"] == "pack")
        ratio = statistics.median(ratios)
        print()
        print("| bytes | copy MiB/s (median) | pack MiB/s (median) | pack/copy (median of rounds) | target |")
        print("|---|---|---|---|---|")
        print("| %d | %.1f | %.1f | %.3f | >= %.1f %s |"
              % (total, copy_med, pack_med, ratio, TARGET_RATIO, "met" if ratio >= TARGET_RATIO else "MISSED"))
        report = {"benchmark": "bench_pack", "bytes": total, "rows": rows, "chunk_bytes": args.chunk_bytes,
                  "work_dir": work, "runs": runs, "ratios": [round(r, 3) for r in ratios],
                  "copy_mib_s_median": copy_med, "pack_mib_s_median": pack_med,
                  "ratio_median": round(ratio, 3), "target_ratio": TARGET_RATIO,
                  "host": os.uname().nodename, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        out_dir = os.path.join(HERE, "out")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, "bench_pack-%s.json" % time.strftime("%Y%m%dT%H%M%S"))
        with open(out, "w") as handle:
            json.dump(report, handle, indent=1)
        print("wrote", out)
        return 0 if ratio >= TARGET_RATIO else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
