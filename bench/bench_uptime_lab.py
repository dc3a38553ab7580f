#!/usr/bin/env python3
"""Days of uptime on the lab fleet: fleet status, stage A's verify tags and the drift check, fresh and aged.

    python bench/bench_uptime_lab.py [--rounds 2] [--head-mb 190] [--worker-mb 60]

Needs the lab (``make lab-up``); puts it back in the report's state (``labctl.py reset``) first and last.
Each of the three operations runs ``--rounds`` times on the fresh boots, then every engine container's log
is aged (``docker __lab-age``: periodic lines in the real formats, 190 MB on the head is about seven days
of a real head), and they run ``--rounds`` times again. Prints the median seconds of each, the ratio
aged / fresh (target: at most 1.5, plus 10 s) and whether the verdicts are the same; JSON in
``bench/out/bench_uptime_lab.json``. Lab figures, not fleet results.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from labhelpers import HOSTS, LAB_INVENTORY, env, lab, lab_container, playbook  # noqa: E402

# The lines that carry a verdict: the status table's rows, a check's failure message, its all_* keys.
VERDICT_RE = re.compile(r"^\s*(?:spark\d\s+\d\s+\w+\s+dsv41-.*|.*Module failed: .*|all_(?:packed|ok): \w+)$")


def verdicts(text):
    return sorted(set(line.strip() for line in text.splitlines() if VERDICT_RE.match(line)))


def drift(records):
    cmd = [sys.executable, str(ROOT / "bin" / "fleet-drift"), "-i", str(LAB_INVENTORY), "--records", str(records)]
    res = subprocess.run(cmd, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run_dir = sorted(p for p in (records / "lab" / "drift").iterdir() if p.is_dir())[-1]
    report = json.loads((run_dir / "drift.json").read_text())
    return res.returncode, json.dumps(sorted((f["host"], f["area"], f["item"], f["class"]) for f in report["findings"]))


def operations(tmp):
    return {
        "fleet_status.yml": lambda: playbook("fleet_status.yml"),
        "stage_a_pack.yml --tags verify": lambda: playbook("stage_a_pack.yml", "--tags", "verify", "-e",
                                                           "run_record_root=%s" % (tmp / "records")),
        "bin/fleet-drift": lambda: drift(tmp / "records"),
    }


def measure(ops, rounds):
    times = {name: [] for name in ops}
    seen = {}
    for _ in range(rounds):
        for name, fn in ops.items():
            t0 = time.monotonic()
            rc, out = fn()
            times[name].append(time.monotonic() - t0)
            seen[name] = (rc, verdicts(out) if name != "bin/fleet-drift" else out)
    return {n: statistics.median(t) for n, t in times.items()}, seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--head-mb", type=float, default=190)
    ap.add_argument("--worker-mb", type=float, default=60)
    a = ap.parse_args()
    lab("reset")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ops = operations(Path(tmp))
            fresh, fresh_seen = measure(ops, a.rounds)
            for host in HOSTS:
                name = "dsv41-head" if host == HOSTS[0] else "dsv41-worker"
                mb = a.head_mb if host == HOSTS[0] else a.worker_mb
                subprocess.run(["podman", "exec", lab_container(host), "docker", "__lab-age", name, "--mb", str(mb)],
                               check=True, stdout=subprocess.DEVNULL)
            aged, aged_seen = measure(ops, a.rounds)
    finally:
        lab("reset")
    rows = []
    print("| operation | fresh s | aged s (head %g MB) | aged / fresh | within 1.5x + 10 s | same verdicts |"
          % a.head_mb)
    print("|---|---|---|---|---|---|")
    for name in ops:
        ok = aged[name] <= 1.5 * fresh[name] + 10
        same = aged_seen[name] == fresh_seen[name]
        rows.append({"operation": name, "fresh_s": fresh[name], "aged_s": aged[name], "ratio": aged[name] / fresh[name],
                     "within_target": ok, "same_verdicts": same})
        print("| %s | %.1f | %.1f | %.2f | %s | %s |" % (name, fresh[name], aged[name], aged[name] / fresh[name],
                                                      "yes" if ok else "NO", "yes" if same else "NO"))
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_uptime_lab.json").write_text(json.dumps({"rounds": a.rounds, "head_mb": a.head_mb,
                                                            "worker_mb": a.worker_mb, "rows": rows}, indent=2))
    return 0 if all(r["within_target"] and r["same_verdicts"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
