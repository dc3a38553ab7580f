#!/usr/bin/env python3
"""Benchmark: reading a rank's boot through ``docker logs`` on a head that has served for days.

    python bench/bench_uptime.py [--days 7,30] [--rounds 3] [--rebuild] [--code DIR]

A real head logs about 27 MB a day (periodic ``Decode batch`` and ``Engram layer=`` lines) into the same
container log as its boot. Every read of the boot must cost the same on day 30 as on day 0.

1. Sets up, locally and once (cached in bench/out/uptime/, rebuilt when the docker stand-in or the seed log
   change), a docker stand-in state (lab/standins/docker; no lab hosts) with one head container per case:
   ``head-fresh``, the lab's seeded head (the report's boot, lab/seed/dsv41.log, imported as its json-file
   log, State.StartedAt at the boot's start); ``head-7d`` and ``head-30d``, the same aged by 7 and 30 days
   of periodic lines (``docker __lab-age NAME --mb 27*D --days D``: about 190 and 810 MB after the boot).
2. Times, in interleaved rounds (the order rotates each round), each case with: the modules
   ``library/engram_packed.py``, ``library/kv_pool.py`` and ``library/autotune_status.py`` run as Ansible
   runs a module (a child ``python library/X.py args.json`` with ``{"ANSIBLE_MODULE_ARGS": {...}}``,
   ``container: NAME``, ``docker_bin`` the stand-in; ``ansible.module_utils.*`` resolving to the repo's
   module_utils through a sitecustomize on PYTHONPATH), and the operator's pipeline
   ``docker logs NAME 2>&1 | grep -c packed=True``.
3. Reports per case the median wall time; per module the ratio aged / fresh (goal <= 1.2) and the ratio
   grep / module on the longest uptime (goal >= 5); the module's own peak RSS (getrusage(RUSAGE_SELF) at its
   exit; goal: flat) and the peak of any process of the run (the docker stand-in included); CPU seconds of
   the run with its children. Each module's answer must be the same in every case.

``--code DIR`` takes library/ and module_utils/ from another tree (e.g. an earlier revision exported with
``git archive REV library module_utils | tar -x -C DIR``), to compare readers on the same logs.

JSON in bench/out/bench_uptime.json (bench_uptime-<label>.json with --label). Every figure is lab output
(the docker stand-in, not docker).
"""
from __future__ import print_function

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
WORK = os.path.join(OUT, "uptime")
STATE = os.path.join(WORK, "docker-state")
SHIM = os.path.join(WORK, "shim")
DOCKER = os.path.join(ROOT, "lab", "standins", "docker")
SEED = os.path.join(ROOT, "lab", "seed", "dsv41.log")
MB_PER_DAY = 27
MIB = 1 << 20
ROWS = {"1": 384006168, "14": 384016684}          # the real tables: rank 0 owns rows [0, N//3)

# What the seeded head record holds (lab/seed/host_seed.py, serving_record): exited after the report's boot.
STARTED_AT = "2026-09-24T02:38:40.118804221Z"
FINISHED_AT = "2026-09-24T03:12:44.902417550Z"

SITECUSTOMIZE = r'''
# bench/bench_uptime.py: the repo's module_utils as ansible.module_utils.* (as Ansible ships them to a host),
# and the module's own peak RSS written at exit when BENCH_RSS_FILE is set.
import atexit, os, resource
import ansible.module_utils
ansible.module_utils.__path__.append(os.environ["BENCH_MODULE_UTILS"])


def _rss():
    path = os.environ.get("BENCH_RSS_FILE")
    if path:
        with open(path, "w") as fh:
            fh.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


atexit.register(_rss)
'''

SETUP = r'''
import importlib.machinery, importlib.util, os, sys
loader = importlib.machinery.SourceFileLoader("lab_docker", sys.argv[1])
spec = importlib.util.spec_from_loader("lab_docker", loader)
dk = importlib.util.module_from_spec(spec)
loader.exec_module(dk)
state, seed, started, finished = sys.argv[2:6]
with dk.Store(state) as store:
    for name in sys.argv[6:]:
        c = dk.new_container(store, name, "dsv41-sglang:tp3", env=["NODE_RANK=0"], network="host",
                             created="2026-09-24T02:38:39.412093117Z")
        c["State"].update(Status="exited", Running=False, StartedAt=started, FinishedAt=finished)
        store.containers.append(c)
        dk.import_text_log(store.log_path(name), open(seed, "rb").read())
'''


def fingerprint():
    h = hashlib.sha256()
    package = os.path.join(ROOT, "lab", "standins", "lab_docker")    # the stand-in's code, beside its docker file
    sources = sorted(os.path.join(d, f) for d, _, files in os.walk(package) for f in files if f.endswith(".py"))
    for path in [DOCKER, SEED, os.path.join(ROOT, "lab", "standins", "labstate.py")] + sources:
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def docker_env():
    return dict(os.environ, LAB_DOCKER_STATE_DIR=STATE)


def setup(days, rebuild=False):
    """The state with head-fresh and head-<D>d for each D: made once, kept while the stand-in and the seed log
    are unchanged (a D not made yet is added)."""
    stamp_path = os.path.join(WORK, "stamp.json")
    try:
        with open(stamp_path) as fh:
            have = json.load(fh)
    except (OSError, ValueError):
        have = {}
    if rebuild or have.get("fingerprint") != fingerprint():
        shutil.rmtree(WORK, ignore_errors=True)
        have = {"fingerprint": fingerprint(), "made": []}
    os.makedirs(SHIM, exist_ok=True)
    names = ["head-fresh"] + ["head-%dd" % d for d in days]
    missing = [n for n in names if n not in have["made"]]
    if missing:
        subprocess.run([sys.executable, "-c", SETUP, DOCKER, STATE, SEED, STARTED_AT, FINISHED_AT] + missing,
                       check=True)
    for d in days:
        name = "head-%dd" % d
        if name in missing:
            t0 = time.perf_counter()
            out = subprocess.run([DOCKER, "__lab-age", name, "--mb", str(MB_PER_DAY * d), "--days", str(d)],
                                 env=docker_env(), check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
            print("setup: %s (%.1f s)" % (out.strip(), time.perf_counter() - t0))
    have["made"] = sorted(set(have["made"]) | set(missing))
    with open(stamp_path, "w") as fh:
        json.dump(have, fh)
    with open(os.path.join(SHIM, "sitecustomize.py"), "w") as fh:
        fh.write(SITECUSTOMIZE)
    sizes = {n: os.path.getsize(os.path.join(STATE, "logs", n + ".log")) for n in names}
    return names, sizes


MODULES = {
    "engram_packed": lambda name: {"container": name, "rank": 0, "tp_size": 3, "rows_total": ROWS},
    "kv_pool": lambda name: {"container": name, "rank": 0, "requested_tokens": 750000},
    "autotune_status": lambda name: {"container": name, "rank": 0,
                                     "cache_root": os.path.join(WORK, "no-autotune-cache")},
}
# Each module's answer, which must not change with the uptime (the counts of periodic lines do: the reader
# counts those it read).
LAYER_KEYS = ("layer", "packed", "lo", "hi", "rows_ok", "rank_ok", "periodic_packed")
ANSWER = {
    "engram_packed": lambda r: {"all_packed": r.get("all_packed"),
                                "layers": [{k: x.get(k) for k in LAYER_KEYS} for x in r.get("layers") or []]},
    "kv_pool": lambda r: {k: r.get(k) for k in ("allocated_tokens", "requested_tokens", "clamped", "page_size",
                                                "available_bytes", "pool")},
    "autotune_status": lambda r: {k: r.get(k) for k in ("verdict", "armed", "tuned_count", "disagreements",
                                                        "runs", "completed")},
}


def wait_child(proc):
    """(CPU seconds of the child and its children, peak RSS of any of them in bytes), reaped with wait4."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


CODE = ROOT     # where library/ and module_utils/ come from (--code)
DOCKER_TIMEOUT = None   # the modules' docker_timeout (--docker-timeout; default: theirs)


def run_module(module, name):
    args_path = os.path.join(WORK, "args-%s-%s.json" % (module, name))
    rss_path = os.path.join(WORK, "rss-%s-%s" % (module, name))
    args = dict(MODULES[module](name), docker_bin=DOCKER, host_label="spark1")
    if DOCKER_TIMEOUT:
        args["docker_timeout"] = DOCKER_TIMEOUT
    with open(args_path, "w") as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, fh)
    env = dict(docker_env(), PYTHONPATH=SHIM, BENCH_MODULE_UTILS=os.path.join(CODE, "module_utils"),
               BENCH_RSS_FILE=rss_path)
    with tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, os.path.join(CODE, "library", module + ".py"), args_path], env=env,
                                stdout=subprocess.PIPE, stderr=errf)
        out = proc.stdout.read()
        cpu, peak = wait_child(proc)
        wall = time.perf_counter() - t0
        proc.stdout.close()
        errf.seek(0)
        err = errf.read()
    try:
        result = json.loads(out.decode())
    except ValueError:
        result = {"failed": True, "msg": "no JSON (rc %s): %s" % (proc.returncode, (out + err).decode()[-2000:])}
    try:
        with open(rss_path) as fh:
            own = int(fh.read())
    except (OSError, ValueError):
        own = 0
    run = {"wall": wall, "cpu": cpu, "module_rss": own, "peak_rss": peak}
    if result.get("failed"):
        print("  %s on %s FAILED after %.1f s: %s" % (module, name, wall, str(result.get("msg"))[:300]))
        return dict(run, failed=str(result.get("msg")), answer={"failed": True})
    return dict(run, answer=ANSWER[module](result))


def run_grep(name):
    cmd = "%s logs %s 2>&1 | grep -c packed=True" % (DOCKER, name)
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-c", cmd], env=docker_env(), stdout=subprocess.PIPE)
    out = proc.stdout.read()
    cpu, peak = wait_child(proc)
    proc.stdout.close()
    return {"wall": time.perf_counter() - t0, "cpu": cpu, "peak_rss": peak, "count": int(out.strip() or 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", default="7,30", help="uptimes to compare with the fresh boot (days, comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true", help="make the containers' logs again")
    ap.add_argument("--code", default=ROOT, help="tree whose library/ and module_utils/ are run (default: this one)")
    ap.add_argument("--label", default="", help="suffix of the JSON file's name")
    ap.add_argument("--docker-timeout", type=int, help="the modules' docker_timeout (default: the module's own)")
    ap.add_argument("--modules", default=",".join(MODULES), help="modules to time (comma-separated)")
    a = ap.parse_args()
    global CODE, DOCKER_TIMEOUT
    CODE = os.path.abspath(a.code)
    DOCKER_TIMEOUT = a.docker_timeout
    for m in [m for m in list(MODULES) if m not in a.modules.split(",")]:
        del MODULES[m]
    days = sorted(int(d) for d in a.days.split(",") if d.strip())
    names, sizes = setup(days, a.rebuild)
    for n in names:
        print("%-11s log %8.1f MB" % (n, sizes[n] / 1e6))
    subprocess.run(["cat"] + [os.path.join(STATE, "logs", n + ".log") for n in names], stdout=subprocess.DEVNULL)
    tools = list(MODULES) + ["grep"]
    runs = {n: {t: [] for t in tools} for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            for t in tools:
                runs[n][t].append(run_grep(n) if t == "grep" else run_module(t, n))
        print("round %d/%d done" % (r + 1, a.rounds))

    def med(n, t, key="wall"):
        return statistics.median(x[key] for x in runs[n][t])

    fresh, longest = names[0], names[-1]
    report = {"cases": {}, "ratios": {}, "sizes_bytes": sizes, "rounds": a.rounds, "days": days, "code": CODE,
              "python": sys.version.split()[0], "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "note": "lab output: the docker stand-in (lab/standins/docker), not docker"}
    print()
    print("%-16s" % "" + "".join("%16s" % n for n in names))
    def cell(n, t):
        failed = sum(1 for x in runs[n][t] if x.get("failed"))
        return ("%15.3fs" % med(n, t)) if not failed else ("%8.1fs %dfail" % (med(n, t), failed)).rjust(16)

    for t in tools:
        print("%-16s" % t + "".join(cell(n, t) for n in names))
    print("%-16s" % "module RSS MiB")
    for t in MODULES:
        print("%-16s" % ("  " + t) + "".join("%16.1f" % (max(x["module_rss"] for x in runs[n][t]) / MIB) for n in names))
    print("%-16s" % "any process MiB")
    for t in tools:
        print("%-16s" % ("  " + t) + "".join("%16.1f" % (max(x["peak_rss"] for x in runs[n][t]) / MIB) for n in names))
    print()
    for n in names:
        report["cases"][n] = {t: {"wall_median": med(n, t), "cpu_median": med(n, t, "cpu"),
                                  "walls": [x["wall"] for x in runs[n][t]],
                                  "peak_rss_any_process": max(x["peak_rss"] for x in runs[n][t])}
                              for t in tools}
        for t in MODULES:
            report["cases"][n][t]["module_rss"] = max(x["module_rss"] for x in runs[n][t])
            report["cases"][n][t]["answer"] = runs[n][t][0]["answer"]
            report["cases"][n][t]["failed"] = [x["failed"] for x in runs[n][t] if x.get("failed")]
        report["cases"][n]["grep"]["count"] = runs[n]["grep"][0]["count"]
    same = True
    for t in MODULES:
        answers = {json.dumps(x["answer"], sort_keys=True) for n in names for x in runs[n][t] if not x.get("failed")}
        if len(answers) > 1:
            same = False
            print("DIFFERENT ANSWERS from %s: %s" % (t, sorted(answers)))
        failed = [n for n in names if any(x.get("failed") for x in runs[n][t])]
        if failed:
            same = False
            print("%-16s FAILED on %s (times: until it failed)" % (t, ", ".join(failed)))
        for n in names[1:]:
            ratio = med(n, t) / med(fresh, t)
            report["ratios"]["%s %s/fresh" % (t, n)] = ratio
            print("%-16s %s / fresh = %.2f  (goal <= 1.2)%s" % (t, n, ratio, "" if ratio <= 1.2 else "  MISSED"))
        g = med(longest, "grep") / med(longest, t)
        report["ratios"]["grep/%s %s" % (t, longest)] = g
        print("%-16s grep / module on %s = %.1f  (goal >= 5)%s" % (t, longest, g, "" if g >= 5 else "  MISSED"))
        rss = [report["cases"][n][t]["module_rss"] for n in names]
        report["ratios"]["%s module_rss max/min" % t] = max(rss) / min(rss)
        print("%-16s module RSS %s MiB (max/min %.2f; goal: flat)" % (t, " / ".join("%.1f" % (v / MIB) for v in rss),
                                                                       max(rss) / min(rss)))
    report["answers_identical"] = same
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, "bench_uptime%s.json" % ("-" + a.label if a.label else ""))
    with open(out, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
    print("\nJSON: %s" % out)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
