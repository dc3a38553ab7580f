#!/usr/bin/env python3
"""Benchmark: the project venv's interpreter (Debian's python3) against another build of the same Python.

    python bench/bench_interpreter.py [--baseline-python PATH] [--rounds 3] [--max-ratio 0.9]

The Makefile builds ``.venv`` on ``VENV_PYTHON`` (default ``/usr/bin/python3``, Debian's own build) instead of
whichever ``python3`` is first on ``PATH``. This measures why, side by side in one run: the same installed
packages (the venv's ``site-packages``), the same files, two interpreters:

- project: ``.venv/bin/python`` (Debian's python3.11);
- baseline: ``--baseline-python`` (default: the first ``python3`` on ``PATH`` that is neither the venv's nor
  ``/usr/bin``'s, e.g. a pyenv build), given the venv's ``site-packages`` on ``PYTHONPATH``. Both are
  CPython 3.11, so the compiled extensions (cp311) and the bytecode in ``__pycache__`` serve both.

Two workloads, the controller work the test suite is made of, none of which contacts a host:

- ``syntax``: ``ansible-playbook --syntax-check`` of every ``playbooks/*.yml`` (what ansible-lint runs for
  each playbook it reads);
- ``unit``: pytest over a fixed set of unit test files (module_utils and filters, no lab).

One warm-up of each (page cache, bytecode), then N rounds that alternate them. Measured per run: the CPU
seconds of the process tree (user + system, ``resource.getrusage(RUSAGE_CHILDREN)``) and the wall time.
Medians per workload, and the ratio project / baseline of the summed CPU, which must be at most
``--max-ratio`` (exit 1 when it is not, or when a run fails). JSON in bench/out/bench_interpreter.json.
"""
import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
VENV = os.environ.get("VENV", os.path.join(ROOT, ".venv"))
UNIT_FILES = ["tests/unit/module_utils/experiment/test_experiment_schema.py", "tests/unit/module_utils/envfile/test_envfile_merge.py",
              "tests/unit/module_utils/engine_log/test_engine_log.py"]


def default_baseline():
    """The first python3 on PATH that is not the venv's and not the distribution's."""
    venv_bin = os.path.realpath(os.path.join(VENV, "bin"))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        real = os.path.realpath(directory or os.curdir)
        if real in (venv_bin, "/usr/bin", "/bin"):
            continue
        candidate = shutil.which("python3", path=directory)
        if candidate:
            resolved = subprocess.run([candidate, "-c", "import sys; print(sys.executable)"],
                                      capture_output=True, text=True, check=False).stdout.strip()
            if resolved and os.path.realpath(resolved) not in (os.path.realpath("/usr/bin/python3"),):
                return resolved
    return None


def site_packages(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def workloads(python):
    playbook = os.path.join(VENV, "bin", "ansible-playbook")
    syntax = [[python, playbook, "--syntax-check", p] for p in sorted(glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))]
    unit = [[python, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + UNIT_FILES]
    return {"syntax": syntax, "unit": unit}


def run(argvs, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    for argv in argvs:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit("bench_interpreter: %s exited %d:\n%s" % (" ".join(argv), proc.returncode,
                                                                       proc.stdout[-2000:]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"cpu": round(cpu, 3), "wall": round(time.monotonic() - t0, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline-python", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-ratio", type=float, default=0.9)
    args = ap.parse_args()

    project = os.path.join(VENV, "bin", "python")
    baseline = args.baseline_python or default_baseline()
    if not baseline:
        # nothing to measure against on a machine with only the distribution's Python: not a failure
        print("bench_interpreter: no other python3 on PATH to compare with (give --baseline-python); not run")
        return 0
    env = dict(os.environ, ANSIBLE_DEPRECATION_WARNINGS="0", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    base_env = dict(env, PYTHONPATH=site_packages(project))
    versions, config_args = {}, {}
    for name, python, e in (("project", project, env), ("baseline", baseline, base_env)):
        out = subprocess.run([python, "-c", "import sys, sysconfig; print(sys.version.split()[0], sys.executable); "
                              "print(sysconfig.get_config_var('CONFIG_ARGS'))"],
                             env=e, capture_output=True, text=True, check=True).stdout.splitlines()
        versions[name], config_args[name] = out[0], "\n".join(out[1:])
    sides = {"project": (workloads(project), env), "baseline": (workloads(baseline), base_env)}
    for name, (work, e) in sides.items():       # warm-up
        for argvs in work.values():
            run(argvs, e)
    results = {name: {w: [] for w in work} for name, (work, _e) in sides.items()}
    for _ in range(args.rounds):
        for name, (work, e) in sides.items():
            for w, argvs in work.items():
                results[name][w].append(run(argvs, e))
    summary = {}
    for name in sides:
        summary[name] = {w: {"cpu_median": statistics.median(r["cpu"] for r in runs),
                             "wall_median": statistics.median(r["wall"] for r in runs)}
                         for w, runs in results[name].items()}
    cpu = {name: sum(v["cpu_median"] for v in summary[name].values()) for name in summary}
    ratio = cpu["project"] / cpu["baseline"] if cpu["baseline"] else float("inf")
    for name in ("project", "baseline"):
        print("%-8s %-45s %s" % (name, versions[name],
                                 ", ".join("%s %.2f CPU-s (%.2f s)" % (w, v["cpu_median"], v["wall_median"])
                                           for w, v in summary[name].items())))
    print("CPU ratio project / baseline: %.2f (at most %.2f)" % (ratio, args.max_ratio))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "bench_interpreter.json"), "w") as handle:
        json.dump({"versions": versions, "rounds": args.rounds, "runs": results, "summary": summary,
                   "cpu": cpu, "ratio": ratio, "max_ratio": args.max_ratio,
                   "config_args": config_args}, handle, indent=2)
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
