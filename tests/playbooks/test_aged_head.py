"""A fleet that has served for days: every read of a rank's boot gives the verdicts of a fresh boot.

The lab ages each engine container's log with periodic lines in the real formats (``docker __lab-age``,
lab/standins/lab_docker/commands/lab_age.py): 190 MB on the head (about seven days of a real head's 27 MB a
day), 60 MB on each worker. Fleet status, stage A's verify tags and the scheduled drift check then run again
and must give the same verdicts, and each rank's boot is read from its start and its end only (``read`` in
the boot facts). Their times fresh and aged are printed here and measured side by side by
``bench/bench_uptime_lab.py`` (a benchmark, not a timed test).
"""
import json
import re
import subprocess
import sys
import time

from labhelpers import HOSTS, LAB_INVENTORY, ROOT, env, lab, lab_container, playbook

AGE_MB = {"spark1": 190, "spark2": 60, "spark3": 60}
# Lines whose text is the same whatever the time: the fleet status table and the packed verdicts.
# The lines that carry a verdict: the status table's rows, a check's failure message, its all_* keys.
VERDICT_RE = re.compile(r"^\s*(?:spark\d\s+\d\s+\w+\s+dsv41-.*|.*Module failed: .*|all_(?:packed|ok): \w+)$")


def age(host, container, mb):
    subprocess.run(["podman", "exec", lab_container(host), "docker", "__lab-age", container, "--mb", str(mb)],
                   check=True, stdout=subprocess.DEVNULL)


def log_bytes(host, container):
    out = subprocess.run(["podman", "exec", lab_container(host), "docker", "inspect", "--format", "{{.LogPath}}",
                          container], check=True, text=True, stdout=subprocess.PIPE).stdout.strip()
    return int(subprocess.run(["podman", "exec", lab_container(host), "stat", "-c", "%s", out], check=True,
                              text=True, stdout=subprocess.PIPE).stdout)


def boot_read(host, container):
    """``read`` of the boot facts engine_boot_facts returns on ``host`` (ad hoc, as the roles call it)."""
    res = subprocess.run(["ansible", host, "-i", str(LAB_INVENTORY), "-m", "engine_boot_facts", "-a",
                          "container=%s" % container, "-o"], cwd=ROOT, env=env(), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:]
    return json.loads(res.stdout.split("=>", 1)[1])["boot"]["read"]


def timed(fn):
    t0 = time.monotonic()
    result = fn()
    return time.monotonic() - t0, result


def verdicts(output):
    return sorted(set(line.strip() for line in output.splitlines() if VERDICT_RE.match(line)))


def drift(records):
    cmd = [sys.executable, str(ROOT / "bin" / "fleet-drift"), "-i", str(LAB_INVENTORY), "--records", str(records)]
    res = subprocess.run(cmd, cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=900)
    # Each fleet's runs apart: records/<fleet>/drift/<UTC time>/, the lab inventory's fleet is "lab".
    run_dir = sorted(p for p in (records / "lab" / "drift").iterdir() if p.is_dir())[-1]
    report = json.loads((run_dir / "drift.json").read_text())
    findings = sorted((f["host"], f["area"], f["item"], f["class"]) for f in report["findings"])
    return res.returncode, findings


def runs(tmp_path, tag):
    out = {}
    out["status"] = timed(lambda: playbook("fleet_status.yml"))
    out["verify"] = timed(lambda: playbook("stage_a_pack.yml", "--tags", "verify", "-e",
                                           f"run_record_root={tmp_path / tag}"))
    out["drift"] = timed(lambda: drift(tmp_path / tag))
    return out


def test_reads_of_an_aged_fleet_cost_what_a_fresh_boot_costs(tmp_path):
    lab("reset")
    fresh = runs(tmp_path, "fresh")
    containers = {h: "dsv41-head" if h == "spark1" else "dsv41-worker" for h in HOSTS}
    for host in HOSTS:
        age(host, containers[host], AGE_MB[host])
    assert log_bytes("spark1", "dsv41-head") > 190e6
    aged = runs(tmp_path, "aged")
    try:
        report = {k: (round(fresh[k][0], 1), round(aged[k][0], 1)) for k in fresh}
        print("fresh vs aged seconds:", report)
        for name in ("status", "verify"):
            (rc_f, out_f), (rc_a, out_a) = fresh[name][1], aged[name][1]
            assert rc_a == rc_f, (name, out_a[-3000:])
            assert verdicts(out_a) == verdicts(out_f) and verdicts(out_f), name
        assert aged["drift"][1] == fresh["drift"][1]          # exit code and every finding
        for host in HOSTS:
            read = boot_read(host, containers[host])
            assert read["gap"] and read["stopped_at"], (host, read)
            assert read["head_bytes"] + read["tail_bytes"] < 16e6 < AGE_MB[host] * 1e6 / 3, (host, read)
    finally:
        lab("reset")
