#!/usr/bin/env python3
"""Benchmark: the full drift check (bin/fleet-drift) against ``ansible -m ping`` of the same hosts.

    python bench/bench_drift.py [--rounds 5] [-i INVENTORY ...] [--max-ratio 4]

Side by side in one run, on the same inventory (default: ansible.cfg's, the lab; the lab is brought
up with ``lab/labctl.py ensure`` first): one warm-up of each (ssh control masters, page cache), then
N rounds that alternate ``ansible dsv41_ranks -m ping`` and ``bin/fleet-drift`` (into a temporary
records directory, so nothing is written into the tree). Wall time of each command, medians, and the
ratio drift / ping, which must be at most ``--max-ratio`` (issue 14: 4x). Exit 1 when it is not, or
when a drift run could not check every host (exit 3). JSON in bench/out/bench_drift.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")


def env():
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.update({"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "DSV41_LAB_ONLY": "1", "ANSIBLE_NOCOLOR": "1",
              "ANSIBLE_LIBRARY": os.path.join(ROOT, "library"), "ANSIBLE_MODULE_UTILS": os.path.join(ROOT, "module_utils"),
              "ANSIBLE_ROLES_PATH": os.path.join(ROOT, "roles"),
              "ANSIBLE_FILTER_PLUGINS": os.path.join(ROOT, "filter_plugins")})
    return e


def timed(cmd):
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return time.perf_counter() - t0, res.returncode, res.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-i", "--inventory", action="append", default=[])
    ap.add_argument("--max-ratio", type=float, default=4.0)
    ap.add_argument("--no-lab", action="store_true", help="do not run lab/labctl.py ensure first")
    args = ap.parse_args()
    if not args.no_lab:
        subprocess.run([sys.executable, os.path.join(ROOT, "lab", "labctl.py"), "ensure"], cwd=ROOT, check=True)
    inv = []
    for i in args.inventory:
        inv += ["-i", os.path.abspath(i)]
    records = tempfile.mkdtemp(prefix="bench-drift-")
    ping = ["ansible", "dsv41_ranks", "-m", "ansible.builtin.ping"] + inv
    drift = [sys.executable, os.path.join(ROOT, "bin", "fleet-drift"), "--quiet", "--records", records] + inv
    times = {"ping": [], "drift": []}
    codes = []
    for rnd in range(args.rounds + 1):       # round 0 is the warm-up of both, discarded
        for name, cmd in (("ping", ping), ("drift", drift)):
            el, rc, out = timed(cmd)
            if name == "ping" and rc != 0:
                print(out[-2000:])
                sys.exit("bench_drift: ansible -m ping failed (rc %d): the lab is not reachable" % rc)
            if name == "drift":
                codes.append(rc)
                if rc not in (0, 2):
                    print(out[-2000:])
                    sys.exit("bench_drift: fleet-drift exit %d: not every host was checked" % rc)
            if rnd:
                times[name].append(el)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["drift"] / med["ping"]
    result = {"rounds": args.rounds, "hosts": "dsv41_ranks", "inventory": args.inventory or "ansible.cfg default",
              "ping_s": times["ping"], "drift_s": times["drift"], "median_ping_s": med["ping"],
              "median_drift_s": med["drift"], "ratio": ratio, "max_ratio": args.max_ratio,
              "drift_exit_codes": codes, "measured_on": "lab (local podman hosts); lab output, not a fleet result"}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "bench_drift.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    print("%-28s %8s %8s %8s" % ("command (3 hosts)", "median", "min", "max"))
    for name, label in (("ping", "ansible -m ping"), ("drift", "bin/fleet-drift (full check)")):
        print("%-28s %7.2fs %7.2fs %7.2fs" % (label, med[name], min(times[name]), max(times[name])))
    print("ratio drift / ping: %.2fx (limit %.1fx), %d rounds; lab output" % (ratio, args.max_ratio, args.rounds))
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
