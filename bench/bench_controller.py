#!/usr/bin/env python3
"""Benchmark: the controller's CPU for one playbook run with the project's settings against Ansible's defaults.

    python bench/bench_controller.py [--rounds 3] [--playbook playbooks/fleet_status.yml] [--max-ratio 0.9]

Side by side in one run, on the lab (``lab/labctl.py ensure`` first), the same read-only playbook runs with
two configurations that differ only in the two controller settings this benchmark is about:

- project: ``ansible.cfg`` as shipped: ``internal_poll_interval = 0.01`` and the ``dsv41_guarded`` strategy,
  which loads every filter and test plugin once in the controller process before the first worker forks;
- baseline: a copy of ``ansible.cfg`` (written next to it, removed after) with Ansible's defaults for both:
  ``internal_poll_interval = 0.001`` and ``strategy = linear`` (no preload, no fleet guard).

One warm-up of each (ssh control masters, page cache), then N rounds that alternate them. Measured per run:
the CPU seconds of the ansible-playbook process tree on the control node (user + system of the children,
``resource.getrusage(RUSAGE_CHILDREN)``; modules that run on the lab hosts are not in it) and the wall time.
Medians, and the ratio project / baseline of the CPU, which must be at most ``--max-ratio`` (exit 1 when it
is not, or when a run fails). JSON in bench/out/bench_controller.json.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
BASELINE_CFG = os.path.join(ROOT, ".bench-controller-baseline.cfg")


def baseline_config():
    """ansible.cfg with Ansible's defaults for the poll interval and the strategy (same directory, so every
    relative path in it means the same)."""
    text = open(os.path.join(ROOT, "ansible.cfg")).read()
    text, polls = re.subn(r"(?m)^internal_poll_interval\s*=.*$", "internal_poll_interval = 0.001", text)
    text, strategies = re.subn(r"(?m)^strategy\s*=.*$", "strategy = linear", text)
    if (polls, strategies) != (1, 1):
        raise SystemExit("ansible.cfg: expected one internal_poll_interval and one strategy line, found %d and %d"
                         % (polls, strategies))
    with open(BASELINE_CFG, "w") as handle:
        handle.write(text)
    return BASELINE_CFG


def env(config):
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.update({"ANSIBLE_CONFIG": config, "DSV41_LAB_ONLY": "1", "ANSIBLE_NOCOLOR": "1"})
    return e


def measured(cmd, config):
    """(controller CPU seconds, wall seconds, returncode, output) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env(config), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, res.returncode, res.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--playbook", default="playbooks/fleet_status.yml")
    ap.add_argument("--max-ratio", type=float, default=0.9)
    ap.add_argument("--no-lab", action="store_true", help="do not run lab/labctl.py ensure first")
    args = ap.parse_args()
    if not args.no_lab:
        subprocess.run([sys.executable, os.path.join(ROOT, "lab", "labctl.py"), "ensure"], cwd=ROOT, check=True)
    configs = {"project": os.path.join(ROOT, "ansible.cfg"), "baseline": baseline_config()}
    cmd = ["ansible-playbook", os.path.join(ROOT, args.playbook)]
    runs = {name: [] for name in configs}
    try:
        for rnd in range(args.rounds + 1):         # round 0 is the warm-up of both, discarded
            for name, config in configs.items():
                cpu, wall, rc, out = measured(cmd, config)
                if rc != 0:
                    print(out[-3000:])
                    raise SystemExit("%s run of %s failed (rc %d)" % (name, args.playbook, rc))
                if rnd:
                    runs[name].append({"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)})
    finally:
        os.unlink(BASELINE_CFG)
    med = {name: {key: statistics.median(r[key] for r in rows) for key in ("cpu_s", "wall_s")}
           for name, rows in runs.items()}
    ratio = med["project"]["cpu_s"] / med["baseline"]["cpu_s"]
    result = {"playbook": args.playbook, "rounds": args.rounds, "runs": runs, "medians": med,
              "cpu_ratio_project_to_baseline": round(ratio, 3), "max_ratio": args.max_ratio}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "bench_controller.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    for name in configs:
        print("%-8s controller CPU %6.2f s   wall %6.2f s   (median of %d)"
              % (name, med[name]["cpu_s"], med[name]["wall_s"], args.rounds))
    print("CPU ratio project / baseline: %.2f (at most %.2f)" % (ratio, args.max_ratio))
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
