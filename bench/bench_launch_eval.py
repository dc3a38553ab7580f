#!/usr/bin/env python3
"""One launcher evaluation on the lab head: the launch sandbox (bubblewrap, stand-ins, broker) against the
launcher's own shell work.

    python bench/bench_launch_eval.py [--rounds 7]

Needs the lab (``make lab-up``). The repository's module_utils are copied to a scratch directory on the lab
head (spark1) and a driver runs there as the login user, alternating, ``--rounds`` times each:

* ``evaluation``: ``launch_record.effective_launch`` of the head's ``start.sh serve`` with ``expected_ranks``
  3 (what ``launcher_effective`` does per evaluation: the sandbox, every stand-in call, the broker's
  docker questions, the parse);
* ``baseline``: the same ``start.sh serve`` run by bash with a ``PATH`` of one-line shell stand-ins that
  record nothing (``docker logs`` prints the Ready line, ``ssh`` runs nothing): the launcher's own work,
  which no evaluation can avoid.

Prints the medians, the ratio evaluation / baseline and whether the evaluation is within the 2 s the
fleet's operators were promised; JSON in ``bench/out/bench_launch_eval.json``. Lab figures, not fleet results.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from labhelpers import lab_container  # noqa: E402

DRIVER = r'''
import json, os, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, "/tmp/dsv41-bench")
import ansible.module_utils
ansible.module_utils.__path__.append("/tmp/dsv41-bench/module_utils")
from ansible.module_utils.launcher import effective as R
launcher = os.path.expanduser("~/dsv41-3x-spark/start.sh")
stubs = tempfile.mkdtemp()
for name in ("docker", "ssh", "curl", "sleep", "nvidia-smi"):
    with open(os.path.join(stubs, name), "w") as fh:
        fh.write("#!/bin/sh\n[ \"$1\" = logs ] && echo 'Ready: API on port 8888'\nexit 0\n")
    os.chmod(os.path.join(stubs, name), 0o755)
env = dict(os.environ, PATH=stubs + ":/usr/bin:/bin")
times = {"evaluation": [], "baseline": []}
ranks = None
for _ in range(int(sys.argv[1])):
    t0 = time.monotonic()
    got = R.effective_launch(launcher, head="spark1", head_hostname="spark1", expected_ranks=3)
    times["evaluation"].append(time.monotonic() - t0)
    ranks = [(c["host"], c["rank"]) for c in got["containers"]]
    t0 = time.monotonic()
    subprocess.run(["bash", launcher, "serve"], env=env, cwd=os.path.dirname(launcher),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    times["baseline"].append(time.monotonic() - t0)
print(json.dumps({"times": times, "ranks": ranks}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    box = lab_container("spark1")
    subprocess.run(["podman", "exec", box, "rm", "-rf", "/tmp/dsv41-bench"], check=True)
    subprocess.run(["podman", "exec", box, "mkdir", "-p", "/tmp/dsv41-bench"], check=True)
    subprocess.run(["podman", "cp", str(ROOT / "module_utils"), box + ":/tmp/dsv41-bench/module_utils"], check=True)
    subprocess.run(["podman", "exec", box, "chmod", "-R", "a+rX", "/tmp/dsv41-bench"], check=True)
    # the lab hosts have no ansible: a package stub that holds only module_utils
    subprocess.run(["podman", "exec", box, "sh", "-c", "mkdir -p /tmp/dsv41-bench/ansible/module_utils && "
                    "touch /tmp/dsv41-bench/ansible/__init__.py /tmp/dsv41-bench/ansible/module_utils/__init__.py"],
                   check=True)
    res = subprocess.run(["podman", "exec", "--user", "mia", "--workdir", "/home/mia", box, "python3", "-c", DRIVER,
                          str(args.rounds)], check=True, text=True, stdout=subprocess.PIPE)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    med = dict((k, sorted(v)[len(v) // 2]) for k, v in data["times"].items())
    ratio = med["evaluation"] / med["baseline"]
    out = {"rounds": args.rounds, "median_seconds": med, "ratio": ratio, "within_2s": med["evaluation"] <= 2.0,
           "ranks": data["ranks"], "times": data["times"]}
    print("evaluation %.3f s  baseline (the launcher's own shell work) %.3f s  ratio %.2f  within 2 s: %s  ranks %s"
          % (med["evaluation"], med["baseline"], ratio, out["within_2s"], data["ranks"]))
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "bench_launch_eval.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
