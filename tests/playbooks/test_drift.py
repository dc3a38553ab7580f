"""Scheduled drift checks on the lab (issue 14 acceptance): bin/fleet-drift over playbooks/drift.yml.

One converge for the whole module (site.yml, the adapters, stage A on the small checkpoint so every
rank has its shards and a packed boot, and a stage record to compare the image with), then every
hand-made change is made, checked, reverted and checked again on that same state. A webhook on
127.0.0.1 counts the notifier's calls. Nothing is written into the tree: records go to tmp_path.
"""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from labhelpers import LAB_INVENTORY, MINI_CHECKPOINT, ROOT, env, lab, playbook, sh

API_KEY = "sk-lab-0000000000000000000000000000"   # the lab inventory's value (not a secret there)
NEW_KEY = "sk-by-hand-7d1e2f3a4b5c6d7e8f90"
TOKEN = "notify-token-5f0c9a7e3d21"
HEAD_DIR = "/home/mia/dsv41-3x-spark"
ENGRAM_DIR = "/home/zurih/dsv41-3x-spark/engram"
SHARD = f"{ENGRAM_DIR}/engram-l14-r1of3.bin"
# Rewrites 4 bytes of the shard's second-to-last row (never among the 64 sampled: those are spread from the
# first row to the last) and sets the mtime back, or restores the saved bytes the same way.
ROW_TOOL = ("-c 'import os, sys; p, keep, how = sys.argv[1:]; st = os.stat(p); off = st.st_size - 2 * 264 + 9; "
            "fd = os.open(p, os.O_RDWR); old = os.pread(fd, 4, off) if how == \"flip\" else None; "
            "open(keep, \"wb\").write(old) if old else None; "
            "os.pwrite(fd, bytes(b ^ 0xff for b in old) if old else open(keep, \"rb\").read(), off); os.close(fd); "
            "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))'")


class Hook(object):
    """The notifier's endpoint: records each POST (body and Authorization header)."""

    def __init__(self):
        calls = self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                calls.append({"auth": self.headers.get("Authorization"), "body": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/drift" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hook():
    h = Hook()
    yield h
    h.server.shutdown()


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory, hook):
    """Converged lab + an inventory layer (small checkpoint, notifier) + a records directory."""
    tmp = tmp_path_factory.mktemp("drift")
    inv = tmp / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (inv / "group_vars" / "dsv41_ranks.yml").write_text(
        f"---\ndsv41_checkpoint_dir: {MINI_CHECKPOINT}\ndrift_notify_webhook: {hook.url}\n"
        f"drift_notify_token: {TOKEN}\ndrift_retention_runs: 6\n")
    records = tmp / "records"
    adapters_play = tmp / "adapters.yml"
    adapters_play.write_text("---\n- name: Validate\n  hosts: dsv41_ranks\n  gather_facts: false\n  roles: [preflight]\n"
                             "- name: Adapters\n  hosts: dsv41_ranks\n  gather_facts: false\n  roles: [adapters]\n")
    lab("reset")  # the seed state: drift findings below are ours alone
    invs = (LAB_INVENTORY, inv)
    # one knob moves every record of the fleet (run records, boot logs, benchmark output) out of the tree
    for args in (("site.yml",), (str(adapters_play),), ("stage_a_pack.yml", "-e", "maintenance_window=true")):
        rc, out = playbook(*args, "-e", f"dsv41_records_dir={records / 'lab'}", inventories=invs)
        assert rc == 0, out[-4000:]
    return {"inv": inv, "records": records, "tmp": tmp}


def drift(lab_run, *extra, environ=None):
    cmd = [sys.executable, str(ROOT / "bin" / "fleet-drift"), "-i", str(LAB_INVENTORY), "-i", str(lab_run["inv"]),
           "--records", str(lab_run["records"])]
    res = subprocess.run(cmd + list(extra), cwd=ROOT, env=dict(env(), **(environ or {})), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    run_dir = sorted(p for p in (lab_run["records"] / "lab" / "drift").iterdir() if p.is_dir())[-1]
    report = json.loads((run_dir / "drift.json").read_text())
    return res.returncode, res.stdout, run_dir, report


def metrics(lab_run):
    """{sample name: [(labels, value)]} of the fleet's metrics file, read with prometheus-client's own parser
    (what node_exporter's textfile collector would expose)."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    text = (lab_run["records"] / "lab" / "metrics" / "dsv41_drift_lab.prom").read_text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def secrets_in(run_dir, *values):
    """Files of the run directory (runner artifacts included) holding any of ``values``."""
    hits = []
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [(str(path), v) for v in values if v.encode() in data]
    return hits


@pytest.mark.smoke
def test_refuses_without_check_mode():
    rc, out = playbook("drift.yml")
    assert rc != 0 and "drift.yml only reports; run it with --check" in out


def test_converged_fleet_has_no_drift(lab_run, hook):
    rc, out, run_dir, report = drift(lab_run)
    assert rc == 0, out
    assert report["findings"] == [] and set(report["hosts"]) == {"spark1", "spark2", "spark3"}
    assert "**No drift**" in (run_dir / "summary.md").read_text()
    assert report["accepted"] and all(f["accepted"] for f in report["accepted"])  # known, with the reason
    assert hook.calls == []  # nothing changed: nothing to notify
    assert (run_dir / "artifacts" / "playbook" / "job_events").is_dir()  # the runner's private data dir
    # everything the lab fleet's runs wrote is under records/lab/: stage A's run record (which the image is
    # compared with), its boot logs and benchmark output, the drift history and the metrics
    assert [p.name for p in lab_run["records"].iterdir()] == ["lab"]
    assert {p.name for p in (lab_run["records"] / "lab").iterdir()} >= {"runs", "boot-logs", "bench", "drift", "metrics"}
    assert [p.name for p in (lab_run["records"] / "lab" / "runs").glob("*-stage_a")]
    # every shard was read whole once and found as packed: the next run reads none of them until one changes
    assert {h: sorted(v) for h, v in report["shards_verified"].items()} == {
        h: sorted(f"{d}/engram-l{layer}-r{r}of3.bin" for layer in (1, 14))
        for h, d, r in (("spark1", "/home/mia/dsv41-engram", 0), ("spark2", ENGRAM_DIR, 1), ("spark3", ENGRAM_DIR, 2))}


def _env_edit():
    sh("spark1", f"cp {HEAD_DIR}/.env /tmp/drift-env.bak && sed -i 's/^MAX_RUNNING_REQUESTS=4$/MAX_RUNNING_REQUESTS=6/' "
       f"{HEAD_DIR}/.env", user="mia")


def _api_key_edit():
    sh("spark1", f"cp {HEAD_DIR}/.env /tmp/drift-env.bak && sed -i 's/^API_KEY=.*/API_KEY={NEW_KEY}/' {HEAD_DIR}/.env",
       user="mia")


def _env_revert():
    sh("spark1", f"cp /tmp/drift-env.bak {HEAD_DIR}/.env", user="mia")


CHANGES = [
    # (name, make, revert, (host, area, item), actual)
    ("env key", _env_edit, _env_revert, ("spark1", "env", "MAX_RUNNING_REQUESTS"), "6"),
    ("API key", _api_key_edit, _env_revert, ("spark1", "env", "API_KEY"), "changed"),
    ("adapter file",
     lambda: sh("spark1", f"echo '# edited by hand' >> {HEAD_DIR}/adapter/draft_tau.py", user="mia"),
     lambda: sh("spark1", f"sed -i '$d' {HEAD_DIR}/adapter/draft_tau.py", user="mia"),
     ("spark1", "adapters", "draft_tau.py"), None),
    ("clock reset",
     lambda: sh("spark2", "sudo -n nvidia-smi -rgc", user="zurih"),
     lambda: sh("spark2", "systemctl restart nvidia-clock-lock.service"),  # what clock_lock re-applies
     ("spark2", "clock_lock", "applied lock"), None),
    ("shard deleted",
     lambda: sh("spark2", f"mv {SHARD} /tmp/drift-shard.bin"),
     lambda: sh("spark2", f"mv /tmp/drift-shard.bin {SHARD}"),
     ("spark2", "shards", "layer 14 shard"), "missing"),
    # bytes rewritten outside the 64 sampled rows with the mtime set back: the packer's content hash, read
    # again because the file's ctime moved since the last run verified it
    ("shard bytes under the old mtime",
     lambda: sh("spark2", "python3 %s %s /tmp/drift-shard-row.bin flip" % (ROW_TOOL, SHARD)),
     lambda: sh("spark2", "python3 %s %s /tmp/drift-shard-row.bin restore" % (ROW_TOOL, SHARD)),
     ("spark2", "shards", "layer 14 shard"), None),
    ("unknown container",
     lambda: sh("spark3", "docker run -d --name by-hand busybox:latest sleep 3600"),
     lambda: sh("spark3", "docker rm -f by-hand"),
     ("spark3", "containers", "by-hand"), None),
]


@pytest.mark.parametrize("name,make,revert,where,actual", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_hand_made_change_is_one_finding_then_resolved(lab_run, hook, name, make, revert, where, actual):
    calls = len(hook.calls)
    make()
    try:
        rc, out, run_dir, report = drift(lab_run)
        assert rc == 2, out
        assert [(f["host"], f["area"], f["item"]) for f in report["findings"]] == [where], report["findings"]
        f = report["findings"][0]
        assert f["new"] and f["since"] and f["class"] in ("drift", "degradation", "unmanaged")
        if actual is not None:
            assert f["actual"] == actual
        host_, area, item = where  # the printed table names it
        assert any(line.startswith(host_ + " ") and f" {area} " in line and f" {item} " in line for line in out.splitlines())
        assert secrets_in(run_dir, API_KEY, NEW_KEY, TOKEN) == []
        # the dashboards' view of the same run: one open-findings series for the host, class and area
        assert metrics(lab_run)["dsv41_drift_open_findings"] == [
            ({"fleet": "lab", "host": where[0], "class": f["class"], "area": where[1]}, 1.0)]
        assert metrics(lab_run)["dsv41_drift_last_run_exit_code"] == [({"fleet": "lab"}, 2.0)]
        assert len(hook.calls) == calls + 1 and hook.calls[-1]["auth"] == f"Bearer {TOKEN}"
        assert [(x["host"], x["area"], x["item"]) for x in hook.calls[-1]["body"]["findings"]] == [where]
        if name == "env key":
            # read-only: the change is still there, and an unchanged repeat notifies nobody
            assert "MAX_RUNNING_REQUESTS=6" in sh("spark1", f"cat {HEAD_DIR}/.env")
            rc, out, run_dir, report = drift(lab_run)
            assert rc == 2 and not report["findings"][0]["new"] and report["findings"][0]["since"] == f["since"]
            assert len(hook.calls) == calls + 1
    finally:
        revert()
    rc, out, run_dir, report = drift(lab_run)
    assert rc == 0, out
    assert [(x["host"], x["area"], x["item"]) for x in report["resolved"]] == [where]
    assert "dsv41_drift_open_findings" not in metrics(lab_run)
    assert metrics(lab_run)["dsv41_drift_last_run_exit_code"] == [({"fleet": "lab"}, 0.0)]
    assert "resolved: " + " ".join(where) in (run_dir / "summary.md").read_text()
    assert len(hook.calls) == calls + 2 and hook.calls[-1]["body"]["findings"] == []
    assert secrets_in(run_dir, API_KEY, NEW_KEY, TOKEN) == []


def test_unreachable_host_exit_3_and_the_others_reported(lab_run, tmp_path, hook):
    calls = len(hook.calls)
    sh("spark2", "systemctl stop ssh.service")
    try:
        # A fresh ssh control directory: a master connection kept from an earlier run would still reach it.
        rc, out, run_dir, report = drift(lab_run, environ={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")})
    finally:
        sh("spark2", "systemctl start ssh.service")
    assert rc == 3, out
    assert report["hosts"] == {"spark1": "checked", "spark2": "UNREACHABLE", "spark3": "checked"}
    assert [(f["host"], f["area"], f["class"]) for f in report["findings"]] == [("spark2", "host", "probe")]
    assert metrics(lab_run)["dsv41_drift_hosts_unreachable"] == [({"fleet": "lab"}, 1.0)]
    assert len(hook.calls) == calls + 1
    rc, out, run_dir, report = drift(lab_run)
    assert rc == 0, out
    assert len(hook.calls) == calls + 2


def test_retention_keeps_the_last_runs(lab_run):
    runs = [p for p in (lab_run["records"] / "lab" / "drift").iterdir() if p.is_dir()]
    assert 1 <= len(runs) <= 6  # drift_retention_runs: 6 in this inventory layer


def test_all_fleets_checked_at_once_each_reported_apart_and_the_worst_exit(lab_run, tmp_path, hook):
    """bin/fleet-drift --all: every fleet inventory under --fleets checked by its own run, all at once. Two fleets
    on the lab's hosts: "lab" as converged, "lab-b" declaring 6 request slots where the hosts run 4. The drift is
    lab-b's alone (its finding, its notification naming it, its metrics), lab stays clean, records apart, and the
    exit code is the worst (2)."""
    import shutil
    import yaml
    layer = yaml.safe_load((lab_run["inv"] / "group_vars" / "dsv41_ranks.yml").read_text())
    fleets = tmp_path / "fleets"
    for name, extra in (("lab", {}), ("lab-b", {"dsv41_fleet_name": "lab-b",
                                                "dsv41_launcher_overrides": {"MAX_RUNNING_REQUESTS": 6}})):
        shutil.copytree(LAB_INVENTORY, fleets / name)       # the baseline link copied as the file it names
        (fleets / name / "group_vars" / "dsv41_ranks" / "zz_fleet_test.yml").write_text(
            "---\n" + yaml.safe_dump(dict(layer, **extra)))
    (tmp_path / "fleets" / "common").mkdir()                  # a shared layer holds no hosts.yml: no fleet
    calls = len(hook.calls)
    records, metrics_dir = tmp_path / "records", tmp_path / "metrics"
    res = subprocess.run([sys.executable, str(ROOT / "bin" / "fleet-drift"), "--all", "--fleets", str(fleets),
                          "--records", str(records), "--metrics-dir", str(metrics_dir)], cwd=ROOT, env=env(),
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert res.returncode == 2, res.stdout
    assert "fleet lab (%s): exit 0" % (fleets / "lab") in res.stdout
    assert "fleet lab-b (%s): exit 2" % (fleets / "lab-b") in res.stdout
    assert "fleet-drift --all: 2 fleet(s), exit 2 (the worst: lab 0, lab-b 2)" in res.stdout
    reports = {}
    assert sorted(p.name for p in records.iterdir()) == ["lab", "lab-b"], "each fleet's records in its own directory"
    for name in ("lab", "lab-b"):
        (run_dir,) = [p for p in (records / name / "drift").iterdir() if p.is_dir()]
        reports[name] = json.loads((run_dir / "drift.json").read_text())
    assert reports["lab"]["findings"] == [] and reports["lab"]["fleet"] == "lab"
    # the one declared difference, in the head's .env and in what every rank's launch would receive
    assert sorted((f["host"], f["area"], f["item"]) for f in reports["lab-b"]["findings"]) == [
        ("spark1", "env", "MAX_RUNNING_REQUESTS"), ("spark1", "launch", "env MAX_RUNNING_REQUESTS"),
        ("spark2", "launch", "env MAX_RUNNING_REQUESTS"), ("spark3", "launch", "env MAX_RUNNING_REQUESTS")]
    assert sorted(p.name for p in metrics_dir.iterdir()) == ["dsv41_drift_lab-b.prom", "dsv41_drift_lab.prom"]
    assert 'fleet="lab-b"' in (metrics_dir / "dsv41_drift_lab-b.prom").read_text()
    assert 'fleet="lab-b"' not in (metrics_dir / "dsv41_drift_lab.prom").read_text()
    new = hook.calls[calls:]
    assert [c["body"]["fleet"] for c in new] == ["lab-b"], new
    assert new[0]["body"]["summary"].startswith("fleet lab-b: 4 open finding(s), 4 new")
