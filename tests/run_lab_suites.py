#!/usr/bin/env python3
"""Run the lab-level suites (testinfra, every molecule scenario, every playbook test module) on several
lab instances at once, so `make test` waits for the slowest share instead of the sum.

Two tiers (see TIERS): `make test` runs the fast one (testinfra, molecule, and the playbook tests marked
``smoke``), `make test-slow` every other playbook test, `make test-all` (CI) both in one plan. A playbook
test module with tests in both tiers is two jobs: ``smoke/<module>`` and ``playbooks/<module>``.

Each share gets its own scratch checkout under ``$DSV41_TEST_WORK`` (default ``/tmp/dsv41-lab-suites``):
the files git knows (tracked and untracked-but-not-ignored, as they are in this working tree, so local
edits are tested), the project's ``.venv`` linked, and its own lab (``DSV41_LAB_INSTANCE`` = 1..N: the
connection files live in the checkout's inventory, which is why a share needs its own copy). Instance 0,
the lab `make demo` and `make lab-up` drive, is never touched.

Jobs are spread by their last measured duration, longest first onto the least loaded share. Durations
measured here are kept in ``lab/.state/suite-durations.json`` (untracked); until then, those of a recorded
run (``tests/lab_suite_seconds.json``). Every job runs even when one fails; the summary names each failed
job with the tail of its log, and the exit status is 1 when any failed. Logs: ``<work>/logs/<job>.log``.

    python3 tests/run_lab_suites.py                 # every job, DSV41_TEST_SHARES (default 3) shares
    python3 tests/run_lab_suites.py --tier fast     # what `make test` runs
    python3 tests/run_lab_suites.py --shares 2 --only playbooks/test_stage_a.py molecule/engine
    python3 tests/run_lab_suites.py --list          # the jobs, their shares and expected seconds
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "lab" / ".state" / "suite-durations.json"
# Seconds each job took in a recorded run (2 cores, 3 shares, lab engine at LAB_ENGINE_SPEED=10), used
# until this machine has measured its own (DURATIONS); a job missing from both gets DEFAULT_SECONDS.
RECORDED = ROOT / "tests" / "lab_suite_seconds.json"
DEFAULT_SECONDS = {"testinfra": 30, "molecule": 40, "smoke": 40, "playbooks": 300}
TAIL_LINES = 60


# The two tiers of the lab-level jobs. "fast" (`make test`, at most 10 minutes warm with lint and the unit
# tests): testinfra, every molecule scenario, and the playbook tests marked ``smoke`` (one check-mode or
# refusal run for a playbook, read-only; tests/playbooks/conftest.py). "slow" (`make test-slow`): every other
# playbook test: the stages, experiments, packs, converges and rollbacks run for real, and the sweeps of
# inputs. "all" (`make test-all`, CI): both in one plan. A test is in the slow tier unless marked, so a new
# stage's tests cannot stretch `make test`.
TIERS = ("fast", "slow", "all")
SMOKE = "smoke"


def playbook_tests(marker_expression=None):
    """{module file name: [test ids]} that pytest itself selects from tests/playbooks with ``-m`` (every
    test without one): the marks are read the way pytest reads them (module ``pytestmark``, decorators,
    ``pytest.param`` marks), and a mark nobody registered is an error (``--strict-markers``)."""
    select = ["-m", marker_expression] if marker_expression is not None else []
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--strict-markers"] + select + ["tests/playbooks"], cwd=ROOT, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True)
    if out.returncode not in (0, 5):  # 5: nothing selected
        raise SystemExit("collecting tests/playbooks with -m %r failed (rc %d):\n%s%s"
                         % (marker_expression, out.returncode, out.stdout[-3000:], out.stderr[-3000:]))
    selected = {}
    for line in out.stdout.splitlines():
        if line.startswith("tests/playbooks/") and "::" in line:
            path, test = line.split("::", 1)
            selected.setdefault(Path(path).name, []).append(test)
    return selected


def jobs(tier="all"):
    """[(name, argv relative to a checkout)] of one tier, in a stable order. A playbook test module is a
    ``smoke/<module>`` job in the fast tier and a ``playbooks/<module>`` job in the slow tier, each only
    when that tier selects one of its tests."""
    if tier not in TIERS:
        raise SystemExit("unknown tier %r (one of %s)" % (tier, ", ".join(TIERS)))
    fast, slow = tier in ("fast", "all"), tier in ("slow", "all")
    out = []
    if fast:
        out.append(("testinfra", ["pytest", "-q", "-p", "no:cacheprovider", "tests/testinfra",
                                  "--hosts=ansible://dsv41_ranks", "--ansible-inventory=inventory/lab",
                                  "--connection=ansible"]))
        for scenario in sorted(ROOT.glob("roles/*/molecule/*/molecule.yml")):
            role, name = scenario.parent.parent.parent.name, scenario.parent.name
            out.append(("molecule/%s" % role if name == "default" else "molecule/%s/%s" % (role, name),
                        # from a fresh molecule state: a run killed before its destroy leaves "prepared"
                        # behind, and the next `molecule test` would skip the scenario's prepare
                        ["bash", "-c", 'cd "roles/$0" && { molecule reset -s "$1" >/dev/null 2>&1 || true; } '
                                       '&& exec molecule test -s "$1"', role, name]))
    for prefix, expression, wanted in (("smoke", SMOKE, fast), ("playbooks", "not " + SMOKE, slow)):
        if wanted:
            for module in sorted(playbook_tests(expression)):
                out.append(("%s/%s" % (prefix, module),
                            ["pytest", "-q", "-p", "no:cacheprovider", "--durations=5", "-m", expression,
                             "tests/playbooks/%s" % module]))
    return out


def expected_seconds(name, measured):
    if name in measured:
        return float(measured[name])
    return float(DEFAULT_SECONDS[name.split("/")[0]])


def spread(selected, shares, measured):
    """Longest job first onto the share with the least expected time (LPT): [[job, ...], ...]."""
    plan = [[] for _ in range(shares)]
    load = [0.0] * shares
    for job in sorted(selected, key=lambda j: -expected_seconds(j[0], measured)):
        i = load.index(min(load))
        plan[i].append(job)
        load[i] += expected_seconds(job[0], measured)
    return plan, load


def checkout_copy(dest):
    """The working tree's files (as git lists them, local edits included) copied to ``dest``; .venv linked."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, stdout=subprocess.PIPE).stdout.decode().split("\0")
    if dest.exists():
        # Keep the copy's lab state (lab/.state: ssh keys, generated checkpoints) so a second run starts warm,
        # and nothing else: a stand-in file left from another revision would change the lab image under test.
        stale = [c for c in dest.iterdir() if c.name not in ("lab", ".git")]
        if (dest / "lab").is_dir():
            stale += [c for c in (dest / "lab").iterdir() if c.name != ".state"]
        for child in stale:
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet in the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink() or src.is_dir():
            if target.is_symlink() or target.exists():
                target.unlink()
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)
    venv = dest / ".venv"
    if venv.is_symlink() or venv.exists():
        venv.unlink()
    venv.symlink_to((ROOT / ".venv").resolve())
    # A repository of its own, committed as copied: what reads the checkout through git (drift_schedule
    # installs `git archive HEAD`) sees exactly the files under test.
    git = ["git", "-c", "user.name=lab suites", "-c", "user.email=lab-suites@localhost", "-c", "commit.gpgsign=false"]
    if not (dest / ".git").exists():
        subprocess.run(git + ["init", "-q"], cwd=dest, check=True)
    subprocess.run(git + ["add", "-A"], cwd=dest, check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "lab suites: copy of the working tree"], cwd=dest,
                   check=True, stdout=subprocess.DEVNULL)


def job_env(checkout, instance):
    env = dict(os.environ)
    env.update({
        "PATH": "%s:%s" % (checkout / ".venv" / "bin", env.get("PATH", "")),
        "DSV41_LAB_ONLY": "1", "DSV41_LAB_INSTANCE": str(instance), "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CONFIG": str(checkout / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(checkout / "roles"),
        "ANSIBLE_LIBRARY": str(checkout / "library"), "ANSIBLE_MODULE_UTILS": str(checkout / "module_utils"),
        "ANSIBLE_FILTER_PLUGINS": str(checkout / "filter_plugins"),
        "ANSIBLE_ACTION_PLUGINS": str(checkout / "action_plugins"),
    })
    # the suites check structure, never speed: the lab engine's request path runs 10x faster
    env.setdefault("DSV41_LAB_ENGINE_KNOBS", "LAB_ENGINE_SPEED=10")
    # (the result loop's poll interval is ansible.cfg's internal_poll_interval: Ansible reads no environment
    # variable for it)
    # the module runs on the control node itself keep their compiled bytecode, as the lab hosts' do
    # (lab/control_cache/sitecustomize.py): a quarter of each one's CPU, nothing else changed
    env["PYTHONPATH"] = os.pathsep.join([str(checkout / "lab" / "control_cache")]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("DSV41_LAB_ANSIBALLZ_CACHE", str(checkout.parent / "ansiballz-cache"))
    return env


# jobs that run one playbook test module (its fixture resets the lab at its start)
PYTEST_MODULE_JOBS = ("smoke/", "playbooks/")


def run_job(name, argv, cwd, env, logs, share, results, lock):
    """One job, its output in ``<logs>/<name>.log``; its result appended to ``results``. Returns its rc."""
    log = logs / (name.replace("/", "__") + ".log")
    t0 = time.monotonic()
    with open(log, "w") as handle:
        handle.write("# share %s, checkout %s\n# %s\n" % (share, cwd, argv))
        handle.flush()
        # stdin from /dev/null: ansible refuses to start on a non-blocking stdin, and a job may
        # leave the runner's inherited one non-blocking for every job that follows.
        hosts_before = lab_cpu_seconds(share)
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=handle,
                                stderr=subprocess.STDOUT)
        # wait4: the CPU of the job's whole process tree (each process's waited children included)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        hosts_after = lab_cpu_seconds(share)
    seconds = time.monotonic() - t0
    cpu = {"control": round(usage.ru_utime + usage.ru_stime, 1)}
    if hosts_before is not None and hosts_after is not None:
        cpu["lab_hosts"] = round(max(0.0, hosts_after - hosts_before), 1)
    with lock:
        results.append({"job": name, "share": share, "rc": rc, "seconds": round(seconds, 1), "cpu": cpu,
                        "log": str(log)})
        print("[suites] share %s: %-45s %s in %4.0f s (CPU: %s)"
              % (share, name, "ok" if rc == 0 else "FAILED (rc %d)" % rc, seconds,
                 ", ".join("%s %.0f s" % kv for kv in cpu.items())), flush=True)
    return rc


def machine_busy_seconds():
    """CPU seconds every CPU of this machine has been busy since boot (/proc/stat: all but idle and iowait)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def lab_cpu_seconds(share):
    """CPU seconds the lab hosts of one share (lab instance ``share``) have used so far, from their cgroups
    (cgroup v2 cpu.stat or v1 cpuacct.usage), or None where that cannot be read (a local job, no cgroup
    access). The lab hosts run the modules and the engine stand-ins a job drives: with the job's own
    process tree, that is what one job costs a 2-core machine."""
    if not isinstance(share, int):
        return None
    try:
        ids = subprocess.run(["podman", "ps", "-q", "--no-trunc", "--filter", "label=dsv41-lab-instance=%d" % share],
                             capture_output=True, text=True, timeout=30).stdout.split()
        total = 0.0
        for cid in ids:
            path = subprocess.run(["podman", "inspect", "--format", "{{.State.CgroupPath}}", cid],
                                  capture_output=True, text=True, timeout=30).stdout.strip().lstrip("/")
            v2 = Path("/sys/fs/cgroup") / path / "cpu.stat"
            v1 = Path("/sys/fs/cgroup/cpuacct") / path / "cpuacct.usage"
            if v2.is_file():
                usec = [int(line.split()[1]) for line in v2.read_text().splitlines() if line.startswith("usage_usec ")]
                total += usec[0] / 1e6
            elif v1.is_file():
                total += int(v1.read_text()) / 1e9
            else:
                return None
        return total if ids else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


# Jobs that need no lab (--with): the Makefile's own `lint` and `unit` targets, run from the working tree
# beside the shares, so their CPU fills the shares' waits (lab boots, engine stand-in rounds). `-o setup`:
# whoever started the runner has set up the venv, and two jobs must not both re-install it.
LOCAL_JOBS = {name: ["make", "--no-print-directory", "-o", "setup", name]
              for name in ("lint", "unit", "unit-launch", "unit-rest")}


def run_local(name, work, results, lock):
    run_job(name, LOCAL_JOBS[name], ROOT, dict(os.environ), work / "logs", name, results, lock)


def run_share(index, share, work, results, lock, first=1):
    instance = index + first
    checkout = work / ("checkout-%d" % instance)
    logs = work / "logs"
    env = job_env(checkout, instance)

    def run(name, argv):
        return run_job(name, argv, checkout, env, logs, instance, results, lock)

    checkout_copy(checkout)
    if run("lab-up-%d" % instance, ["python3", "lab/labctl.py", "up"]) != 0:
        with lock:
            for name, _argv in share:
                results.append({"job": name, "share": instance, "rc": None, "seconds": 0, "log": None})
        return
    previous = None
    for name, argv in share:
        # Molecule scenarios and testinfra start from the report's state (a scenario's destroy resets what
        # it changed); a playbook test module resets at its start and leaves its last state: reset after one.
        if not name.startswith(PYTEST_MODULE_JOBS) and previous is not None and previous.startswith(PYTEST_MODULE_JOBS):
            run("lab-reset-%d-before-%s" % (instance, name.replace("/", "-")), ["python3", "lab/labctl.py", "reset"])
        run(name, argv)
        previous = name


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shares", type=int, default=int(os.environ.get("DSV41_TEST_SHARES", "3")),
                        help="lab instances run at once (1..9; default DSV41_TEST_SHARES or 3)")
    parser.add_argument("--tier", choices=TIERS, default="all",
                        help="fast: testinfra, molecule and the playbook tests marked smoke (`make test`); "
                             "slow: every other playbook test; all (default): both")
    parser.add_argument("--only", nargs="*", metavar="JOB", help="only these jobs (names as --list prints them)")
    parser.add_argument("--with", dest="local", nargs="+", default=[], choices=sorted(LOCAL_JOBS),
                        help="also run these Makefile targets, which need no lab, beside the shares: lint "
                             "(yamllint, ansible-lint), unit (pytest tests/unit), or unit's two halves "
                             "side by side: unit-launch (the launcher evaluations) and unit-rest")
    parser.add_argument("--build-image", action="store_true",
                        help="build the lab image (lab/labctl.py build) here, while the --with jobs already run, "
                             "instead of before the runner starts: on a fresh machine the base image's "
                             "debootstrap waits on the network and the jobs that need no lab fill that time")
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    parser.add_argument("--keep-labs", action="store_true", help="leave the share labs up afterwards")
    # two plans at once on one machine (each with its own DSV41_TEST_WORK) need labs apart
    parser.add_argument("--first-instance", type=int, default=1,
                        help="the lab instance of share 1; the others follow (default 1)")
    args = parser.parse_args()
    if not 1 <= args.shares <= 9:
        raise SystemExit("--shares must be 1..9 (lab instances 1..9; 0 is the demo lab)")
    if not 1 <= args.first_instance or args.first_instance + args.shares - 1 > 9:
        raise SystemExit("--first-instance %d with %d share(s) leaves lab instances 1..9 (0 is the demo lab)"
                         % (args.first_instance, args.shares))
    measured = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    measured.update(json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {})
    selected = jobs("all" if args.only else args.tier)  # --only names jobs of either tier
    if args.only:
        unknown = sorted(set(args.only) - {name for name, _ in selected})
        if unknown:
            raise SystemExit("unknown job(s): %s (see --list)" % ", ".join(unknown))
        selected = [j for j in selected if j[0] in args.only]
    shares = min(args.shares, len(selected)) or 1
    plan, load = spread(selected, shares, measured)
    for i, share in enumerate(plan):
        print("[suites] share %d (lab instance %d), about %.0f s: %s"
              % (i + 1, i + args.first_instance, load[i], ", ".join(name for name, _ in share)), flush=True)
    if args.list:
        return 0
    work = Path(os.environ.get("DSV41_TEST_WORK", "/tmp/dsv41-lab-suites"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    for old in (work / "logs").glob("*.log"):
        old.unlink()
    results, lock = [], threading.Lock()
    t0, machine0 = time.monotonic(), machine_busy_seconds()
    local = [threading.Thread(target=run_local, args=(name, work, results, lock)) for name in args.local]
    for t in local:
        t.start()
    shares_threads = [threading.Thread(target=run_share,
                                       args=(i, share, work, results, lock, args.first_instance))
                      for i, share in enumerate(plan)]
    # the shares' labs need the image; a failed build fails the plan, named in the summary like any job
    built = not args.build_image or run_job("lab-image", ["python3", "lab/labctl.py", "build"], ROOT,
                                            dict(os.environ), work / "logs", "image", results, lock) == 0
    if built:
        for t in shares_threads:
            t.start()
    for t in local + (shares_threads if built else []):
        t.join()
    wall, machine = time.monotonic() - t0, machine_busy_seconds() - machine0
    if not args.keep_labs:  # every share's lab at once
        t_down = time.monotonic()
        checkouts = [(work / ("checkout-%d" % instance), instance)
                     for instance in range(args.first_instance, args.first_instance + shares)]
        downs = [subprocess.Popen(["python3", "lab/labctl.py", "down"], cwd=checkout, env=job_env(checkout, instance),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
                 for checkout, instance in checkouts]
        for down in downs:
            down.wait()
        print("[suites] share labs down in %.0f s" % (time.monotonic() - t_down), flush=True)
    for r in results:
        if r["rc"] == 0 and not r["job"].startswith(("lab-up-", "lab-reset-", "lab-image")):
            measured[r["job"]] = r["seconds"]
    DURATIONS.parent.mkdir(parents=True, exist_ok=True)
    DURATIONS.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    failed = [r for r in results if r["rc"] != 0]
    for r in failed:
        print("\n[suites] FAILED %s (share %s, rc %s); last lines of %s:" % (r["job"], r["share"], r["rc"], r["log"]))
        if r["log"]:
            print("".join(open(r["log"], errors="replace").readlines()[-TAIL_LINES:]))
    busy = sum(r["seconds"] for r in results)
    control = sum(r.get("cpu", {}).get("control", 0) for r in results)
    hosts = sum(r.get("cpu", {}).get("lab_hosts", 0) for r in results)
    print("[suites] CPU by job (control node + lab hosts), most first:")
    for r in sorted(results, key=lambda r: -sum(r.get("cpu", {}).values()))[:25]:
        print("[suites]   %6.0f s  %s" % (sum(r.get("cpu", {}).values()), r["job"]))
    print("[suites] %d jobs on %d lab instances: %.0f s wall, %.0f s of jobs, CPU %.0f s on the control node + "
          "%.0f s on the lab hosts (the machine's CPUs were busy %.0f s of %.0f); %d failed"
          % (len(results), shares, wall, busy, control, hosts, machine, wall * (os.cpu_count() or 1), len(failed)),
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
