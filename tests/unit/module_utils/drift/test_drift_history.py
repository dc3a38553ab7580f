"""History, retention, notifier and report of the drift check (module_utils/drift/history.py,
drift_notify.py, drift_report.py) and the runner's event reading (bin/fleet-drift)."""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from ansible.module_utils.drift import compare as dc
from ansible.module_utils.drift import history as dh
from ansible.module_utils.drift import notify as dn
from ansible.module_utils.drift import report as dr
from modrun import load_script

ROOT = Path(__file__).resolve().parents[4]


def f(host, item, cls="drift", actual="6"):
    return dc.finding(host, "env", item, "4", actual, cls)


def report(run, findings, resolved=(), code=None):
    return {"run": run, "started": run, "exit_code": dc.exit_code(findings) if code is None else code,
            "inventory": "lab", "hosts": {"spark1": "checked"}, "findings": list(findings), "accepted": [],
            "resolved": list(resolved), "previous_run": None}


def write_run(root, name, rep):
    root.mkdir(parents=True, exist_ok=True)
    d = Path(dh.new_run_dir(str(root), name))       # as bin/fleet-drift creates it: exclusive, with the marker
    (d / "drift.json").write_text(json.dumps(rep))
    return d


def test_since_is_carried_over_and_new_resolved_are_named():
    prev = {"findings": [dict(f("spark1", "A"), since="T0"), dict(f("spark2", "B"), since="T0")], "accepted": []}
    now, resolved = dh.apply_history([f("spark1", "A", actual="7"), f("spark1", "C")], prev, "T1", ["spark1", "spark2"])
    assert [(x["item"], x["since"], x["new"]) for x in now] == [("A", "T0", False), ("C", "T1", True)]
    assert [(x["host"], x["item"], x["since"], x["resolved_at"]) for x in resolved] == [("spark2", "B", "T0", "T1")]


def test_an_unchecked_host_resolves_nothing():
    prev = {"findings": [dict(f("spark2", "B"), since="T0")]}
    _, resolved = dh.apply_history([], prev, "T1", ["spark1"])
    assert resolved == []


def test_previous_report_is_the_newest_earlier_readable_run(tmp_path):
    write_run(tmp_path, "20261130T100000Z", report("20261130T100000Z", []))
    write_run(tmp_path, "20261130T110000Z", report("20261130T110000Z", [f("spark1", "A")]))
    dh.new_run_dir(str(tmp_path), "20261130T113000Z")          # an interrupted run: no drift.json
    current = Path(dh.new_run_dir(str(tmp_path), "20261130T120000Z"))
    assert dh.previous_report(str(tmp_path), str(current))["run"] == "20261130T110000Z"
    assert dh.previous_report(str(tmp_path / "none"), str(current)) is None


def test_retention_keeps_the_last_n_runs_and_the_current_one(tmp_path):
    names = ["20261130T1%d0000Z" % i for i in range(6)]
    for n in names:
        write_run(tmp_path, n, report(n, []))
    (tmp_path / "not-a-run").mkdir()
    removed = dh.prune(str(tmp_path), 3, str(tmp_path / names[-1]))
    assert [Path(p).name for p in removed] == names[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == names[3:] + ["not-a-run"]
    assert dh.prune(str(tmp_path), 0, str(tmp_path / names[-1])) and [p.name for p in tmp_path.iterdir()
                                                                      if p.name != "not-a-run"] == [names[-1]]


def test_notification_only_when_the_set_changes():
    a, b = f("spark1", "A"), f("spark1", "B")
    assert not dh.notify_needed([], None)                  # a clean first run says nothing
    assert dh.notify_needed([a], None)
    prev = {"notified_signature": dh.signature([a, b])}
    assert not dh.notify_needed([b, dict(a, actual="9")], prev)   # same findings, another value
    assert dh.notify_needed([a], prev)
    assert dh.carried_signature([a], prev, False) == prev["notified_signature"]  # retried next run
    assert dh.carried_signature([a], prev, True) == dh.signature([a])


def test_latest_stage_record(tmp_path):
    for name, image in (("20261130T100000Z-stage_a", "sha256:old"), ("20261130T110000Z-stage_b-boot1", "sha256:new")):
        (tmp_path / name / "nodes").mkdir(parents=True)
        (tmp_path / name / "nodes" / "spark1.json").write_text(json.dumps({"image_id": image}))
    (tmp_path / "drift").mkdir()
    rec = dh.latest_stage_record(str(tmp_path), "spark1")
    assert rec["image_id"] == "sha256:new" and rec["stage"] == "stage_b-boot1 20261130T110000Z"
    assert dh.latest_stage_record(str(tmp_path), "spark9") is None
    # a newer record whose node file is JSON but not an object (hand-edited, truncated to a list) is passed over
    (tmp_path / "20261130T120000Z-stage_a" / "nodes").mkdir(parents=True)
    (tmp_path / "20261130T120000Z-stage_a" / "nodes" / "spark1.json").write_text('["not", "a", "record"]')
    assert dh.latest_stage_record(str(tmp_path), "spark1")["image_id"] == "sha256:new"


class Hook(object):
    def __init__(self, status=204):
        calls = self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                calls.append((self.headers.get("Authorization"), json.loads(body)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.server.shutdown()


def test_webhook_gets_the_findings_and_the_token_as_bearer(hook):
    rep = report("R1", [f("spark1", "A")])
    out = dn.notify({"notify_webhook": hook.url, "notify_token": "tok-123456789"}, rep, True)
    assert out["sent"] and out["ok"] and out["how"] == ["webhook"]
    assert hook.calls[0][0] == "Bearer tok-123456789" and hook.calls[0][1]["findings"][0]["item"] == "A"
    assert dn.notify({"notify_webhook": hook.url}, rep, False)["sent"] is False and len(hook.calls) == 1


def test_webhook_failure_is_reported_without_the_token():
    h = Hook(status=500)
    try:
        out = dn.notify({"notify_webhook": h.url, "notify_token": "tok-123456789"}, report("R", []), True)
    finally:
        h.server.shutdown()
    assert out["sent"] and not out["ok"] and "HTTP 500" in out["text"] and "tok-123456789" not in out["text"]


def test_command_gets_the_report_on_stdin_and_the_token_in_its_environment(tmp_path):
    script = tmp_path / "notify.py"
    script.write_text("import json, os, sys\nd = json.load(sys.stdin)\n"
                      "open(sys.argv[1], 'w').write(json.dumps([d['run'], os.environ['DRIFT_NOTIFY_TOKEN']]))\n")
    out_file = tmp_path / "got.json"
    res = dn.notify({"notify_command": [sys.executable, str(script), str(out_file)], "notify_token": "tok-abcdefgh"},
                    report("R7", []), True)
    assert res["ok"] and json.loads(out_file.read_text()) == ["R7", "tok-abcdefgh"]
    bad = dn.notify({"notify_command": [sys.executable, "-c", "import sys; print('tok-abcdefgh boom'); sys.exit(3)"],
                     "notify_token": "tok-abcdefgh"}, report("R8", []), True)
    assert not bad["ok"] and "exited 3" in bad["text"] and "tok-abcdefgh" not in bad["text"]
    assert dn.notify({}, report("R9", []), True) == {"configured": False, "sent": False, "ok": True, "how": None,
                                                      "text": "not configured (drift_notify_command / drift_notify_webhook)"}


def test_report_files_say_the_verdict_and_hide_secret_values(tmp_path):
    rep = report("R1", [dict(f("spark1", "A", actual="x sk-live-123456789 y"), since="T0", new=True)],
                 resolved=[dict(f("spark1", "B"), since="T-1")])
    rep.update(notification={"text": "webhook sent"}, accepted=[])
    dr.write_report(str(tmp_path), rep, ["sk-live-123456789"])
    summary = (tmp_path / "summary.md").read_text()
    assert "**Drift found**: 1 open finding(s)." in summary and "- resolved: spark1 env B (since T-1)" in summary
    assert "- new: spark1 env A" in summary and "Exit code 2 (drift found)" in summary
    for name in ("summary.md", "drift.json"):
        assert "sk-live-123456789" not in (tmp_path / name).read_text()
    data = json.loads((tmp_path / "drift.json").read_text())
    assert [set(x) >= {"host", "area", "item", "expected", "actual", "since", "class"} for x in data["findings"]] == [True]
    assert dr.table([]) == ["no findings"]
    assert dr.table(data["findings"])[0].split() == ["host", "class", "area", "item", "expected", "actual", "since"]


def load_runner():
    return load_script("fleet_drift", ROOT / "bin" / "fleet-drift")


def test_runner_reads_snapshots_unreachable_hosts_and_failures_from_events():
    runner = load_runner()
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "spark1", "task_action": "fleet_snapshot",
                                                 "res": {"snapshot": {"host": "spark1"}, "declared": {"is_head": True}}}},
        {"event": "runner_on_ok", "event_data": {"host": "spark1", "task_action": "ansible.builtin.set_fact", "res": {}}},
        {"event": "runner_on_unreachable", "event_data": {"host": "spark2", "res": {"msg": "ssh: connect\n refused"}}},
        {"event": "runner_on_failed", "event_data": {"host": "spark3", "task": "Snapshot", "res": {"msg": "boom"}}},
        {"event": "runner_on_failed", "event_data": {"host": "spark3", "task": "x", "ignore_errors": True, "res": {}}},
        {"event": "playbook_on_stats", "event_data": {"processed": {"spark1": 1, "spark2": 1, "spark3": 1}}},
    ]
    prediction = {"event": "runner_on_ok", "event_data": {
        "host": "spark1", "task": runner.PREDICTION_TASK, "task_action": "ansible.builtin.async_status",
        "res": {"finished": 1, "containers": [{"rank": 0, "env": {}}]}}}
    snaps, dark, failed, stats, predicted, unfinished = runner.collect(events + [prediction])
    assert snaps == {"spark1": ({"host": "spark1"}, {"is_head": True})}
    assert dark == {"spark2": "ssh: connect refused"} and failed == [("spark3", "Snapshot", "boom")]
    assert set(stats["processed"]) == {"spark1", "spark2", "spark3"}
    assert predicted["containers"] == [{"rank": 0, "env": {}}]
    # a prediction that failed (async_status keeps going: failed_when false) is its error
    prediction["event_data"]["res"] = {"finished": 1, "failed": True, "msg": "start.sh serve exited 1\n in the sandbox"}
    assert runner.collect([prediction])[4] == {"error": "start.sh serve exited 1 in the sandbox"}
    assert runner.collect(events)[4] is None
    assert unfinished == []


def test_runner_turns_the_preflight_s_unfinished_runs_into_findings():
    runner = load_runner()
    status = {"run": "20261202T101500Z-stage_d_wo_a", "at": {"condition": "w8", "step": "restart"},
              "rollback_command": "ansible-playbook playbooks/rollback.yml -e experiment_rollback_run=x"}
    event = {"event": "runner_on_ok", "event_data": {"host": "spark1", "task": runner.UNFINISHED_TASK,
                                                     "res": {"ansible_facts": {"preflight_unfinished_runs": [status]}}}}
    unfinished = runner.collect([event])[5]
    assert unfinished == [("spark1", status)]
    (finding,) = [dc.unfinished_run(host, s) for host, s in unfinished]
    assert finding == {"host": "spark1", "area": "experiment run", "item": "20261202T101500Z-stage_d_wo_a",
                       "expected": "finished (the fleet proven equal to its snapshot)", "class": "drift",
                       "actual": "unfinished, stopped in condition w8 at step restart; finish it: "
                                 "ansible-playbook playbooks/rollback.yml -e experiment_rollback_run=x"}
    assert dc.exit_code([finding]) == 2


# --------------------------------------------------------------------------- records trust nothing

def test_each_fleet_keeps_its_own_history(tmp_path):
    records = tmp_path / "records"
    lab = dh.history_root(str(records), dh.fleet_key([str(ROOT / "inventory" / "lab"), "/x/connection.yml"]))
    prod = dh.history_root(str(records), dh.fleet_key([str(ROOT / "inventory" / "production")]))
    # the key is the inventory's dsv41_fleet_name, the one the playbooks file the fleet's records under
    assert (lab, prod) == (str(records / "lab" / "drift"), str(records / "production" / "drift"))
    write_run(Path(lab), "20261130T100000Z", report("20261130T100000Z", [f("spark1", "A")]))
    current = dh.new_run_dir(prod, "20261130T110000Z")
    assert dh.previous_report(prod, current) is None      # the lab's finding is not production's history


def test_a_symlinked_or_blocked_drift_directory_is_refused_and_nothing_foreign_is_deleted(tmp_path):
    records, foreign = tmp_path / "records", tmp_path / "foreign"
    (foreign / "20200101T000000Z").mkdir(parents=True)
    (foreign / "20200101T000000Z" / "precious").write_text("x")
    (records / "lab").mkdir(parents=True)
    for link in (records / "lab" / "drift", records / "prod"):
        link.symlink_to(foreign)
        with pytest.raises(dh.HistoryError, match=r" is a symlink .*never kept through one"):
            dh.history_root(str(records), link.parent.name if link.name == "drift" else link.name)
    (records / "lab" / "drift").unlink()
    (records / "lab" / "drift").write_text("a file")
    with pytest.raises(dh.HistoryError, match="is not a directory"):
        dh.history_root(str(records), "lab")
    (records / "lab" / "drift").unlink()
    for bad in ("..", "../x", "drift", "Lab"):   # a name that is not one fleet directory under records/
        with pytest.raises(dh.HistoryError, match="dsv41_fleet_name=%r is " % bad):
            dh.history_root(str(records), bad)
    root = Path(dh.history_root(str(records), "lab"))
    (root / "20200101T000000Z").symlink_to(foreign / "20200101T000000Z")       # a run name pointing away
    (root / "20200102T000000Z").mkdir()                                       # a directory this tool did not write
    runs = [write_run(root, "20261130T1%d0000Z" % i, report("r", [])) for i in range(3)]
    removed = dh.prune(str(root), 1, str(runs[-1]))
    assert [Path(p).name for p in removed] == [r.name for r in runs[:2]]
    assert (foreign / "20200101T000000Z" / "precious").exists() and (root / "20200102T000000Z").is_dir()


def test_two_runs_in_one_second_get_two_directories_in_order(tmp_path):
    first = dh.new_run_dir(str(tmp_path), "20261130T100000Z")
    second = dh.new_run_dir(str(tmp_path), "20261130T100000Z")
    assert Path(second).name == "20261130T100000Z-2"
    assert [Path(p).name for p in dh.run_dirs(str(tmp_path))] == [Path(first).name, Path(second).name]


def test_a_value_can_neither_add_a_line_to_the_summary_nor_drive_the_terminal(tmp_path):
    from ansible.module_utils.drift import report as dr
    evil = "x\n\n**No drift**: the fleet is what the repository declares.\n\x1b]52;c;ZXZpbA==\x07\x1b[2J"
    token = "hf_" + "Q1w2E3r4T5y6U7i8O9p0"
    rep = dict(report("20261130T100000Z", [dict(f("spark2", "MODEL_PATH", actual=evil), new=True,
                                                 expected="/srv " + token)]), notification={"text": evil})
    rep["hosts"] = {"spark2": "UNREACHABLE: " + evil}
    dr.write_report(str(tmp_path), rep)
    text = (tmp_path / "summary.md").read_text()
    assert "\x1b" not in text and "\x07" not in text and token not in text
    assert [line for line in text.splitlines() if line.startswith("**No drift**")] == []
    assert "x\\n\\n**No drift**" in text and "\\x1b]52;c;" in text
    assert all("\x1b" not in line and "\n" not in line for line in dr.table(rep["findings"]))
    assert token not in (tmp_path / "drift.json").read_text()


# --------------------------------------------------------------------------- shards read in full once per change

def _shard(path, state="complete", recorded="a" * 64, identity="10:1:2:3", hashed=True, sha256=None):
    return {"layer": 1, "path": path, "state": state,
            "content": {"recorded": recorded, "identity": identity, "hashed": hashed,
                        "sha256": (sha256 or recorded) if hashed else None}}


def _snap(*shards):
    return {"shards": {"dest": "/e", "shards": list(shards)}}


def test_shards_verified_keeps_what_was_read_and_equal_and_what_the_last_run_vouched_for():
    previous = {"shards_verified": {"spark2": {"/e/b": "10:1:2:3"}, "spark3": {"/e/c": "7:7:7:7"}}}
    snaps = {"spark1": _snap(_shard("/e/a"),                                  # read now, equal: kept
                             _shard("/e/x", sha256="b" * 64),                  # read now, different: not kept
                             _shard("/e/s", state="stale"),                    # stale: not kept
                             _shard("/e/o", recorded=None, hashed=False)),     # no hash recorded: not kept
             "spark2": _snap(_shard("/e/b", hashed=False),                      # not read, vouched for: kept
                             _shard("/e/d", hashed=False))}                     # not read, never verified: dropped
    assert dh.shards_verified(previous, snaps) == {"spark1": {"/e/a": "10:1:2:3"},
                                                        "spark2": {"/e/b": "10:1:2:3"},
                                                        "spark3": {"/e/c": "7:7:7:7"}}   # unchecked: carried


def test_shards_verified_forgets_an_identity_that_changed_and_survives_odd_history():
    previous = {"shards_verified": {"spark2": {"/e/b": "10:1:2:3"}}}
    moved = _snap(_shard("/e/b", identity="10:9:2:3", hashed=False))
    assert dh.shards_verified(previous, {"spark2": moved}) == {"spark2": {}}
    for odd in (None, {}, {"shards_verified": "x"}, {"shards_verified": {"spark9": [1]}}):
        assert dh.shards_verified(odd, {"spark1": {"shards": None}}) == {"spark1": {}}
        # a history this tool did not write never stops the run, and vouches for nothing
        assert dh.shards_verified(odd, {"spark2": moved}) == {"spark2": {}}


def _fleet_inventory(path, name, where="dsv41_ranks/main.yml"):
    (path / "group_vars" / where).parent.mkdir(parents=True, exist_ok=True)
    (path / "hosts.yml").write_text("---\n")
    (path / "group_vars" / where).write_text("---\ndsv41_fleet_name: %s\n" % name)


def test_every_fleet_inventory_is_found_and_common_layers_are_not_fleets(tmp_path):
    for directory, name in (("production", "production"), ("lab", "lab"), ("tp4", "tp4-example")):
        _fleet_inventory(tmp_path / directory, name)
    (tmp_path / "common").mkdir()                    # the shared layer: no hosts.yml
    (tmp_path / "README.md").write_text("x")
    # keyed by the name each declares, not by its directory
    assert dh.fleet_inventories(str(tmp_path)) == [("lab", str(tmp_path / "lab")),
                                                   ("production", str(tmp_path / "production")),
                                                   ("tp4-example", str(tmp_path / "tp4"))]
    # the repository's own: each keyed by its dsv41_fleet_name, never common
    found = dict(dh.fleet_inventories(str(ROOT / "inventory")))
    assert found["lab"] == str(ROOT / "inventory" / "lab") and found["production"] == str(ROOT / "inventory" / "production")
    assert "common" not in found
    _fleet_inventory(tmp_path / "lab-copy", "lab", "all.yml")
    with pytest.raises(dh.HistoryError, match="lab and .*lab-copy both name the fleet 'lab': they would share"):
        dh.fleet_inventories(str(tmp_path))
    (tmp_path / "lab-copy" / "group_vars" / "all.yml").write_text("---\ndsv41_fleet_name: ../lab\n")
    with pytest.raises(dh.HistoryError, match=r"lab-copy/group_vars/all.yml: dsv41_fleet_name='../lab' is not a fleet"):
        dh.fleet_inventories(str(tmp_path))
    (tmp_path / "lab-copy" / "group_vars" / "all.yml").unlink()
    with pytest.raises(dh.HistoryError, match="lab-copy: dsv41_fleet_name is not set in group_vars"):
        dh.fleet_inventories(str(tmp_path))
    with pytest.raises(dh.HistoryError, match="no fleet inventory"):
        dh.fleet_inventories(str(tmp_path / "common"))


def test_the_worst_exit_code_of_several_fleets():
    assert dh.worst_exit([0, 0]) == 0 and dh.worst_exit([0, 2]) == 2 and dh.worst_exit([2, 3, 0]) == 3
    assert dh.worst_exit([3, 1, 2]) == 1, "a check that could not run says the least"
    assert dh.worst_exit([0, -9]) == 1, "a run killed by a signal could not run"
    assert dh.worst_exit([]) == 0


def test_the_notification_names_its_fleet():
    report = {"fleet": "tp4-example", "run": "r", "exit_code": 2, "inventory": "inventory/tp4-example",
              "hosts": {}, "findings": [{"new": True}], "resolved": []}
    body = dn.payload(report)
    assert body["fleet"] == "tp4-example" and body["summary"] == "fleet tp4-example: 1 open finding(s), 1 new, 0 resolved"


def test_all_checks_only_the_fleets_named_with_each_layer_after_the_fleet_s_own(tmp_path, monkeypatch, capsys):
    """--all --fleet: the fleets one control host can reach (a timer's selection), each its own run with the
    timer's connection layer after the fleet's inventory (the first inventory names the fleet); a name no
    inventory declares is refused before any run starts."""
    runner = load_runner()
    fleets = tmp_path / "inventory"
    for directory, name in (("lab", "lab"), ("lab-tp4", "lab-tp4"), ("production", "production")):
        (fleets / directory / "group_vars").mkdir(parents=True)
        (fleets / directory / "hosts.yml").write_text("---\nall: {}\n")
        (fleets / directory / "group_vars" / "all.yml").write_text("---\ndsv41_fleet_name: %s\n" % name)
    started = []

    class Run:
        def __init__(self, argv, **_kw):
            started.append(argv)
            self.returncode = {"lab": 0, "lab-tp4": 2}[Path(argv[argv.index("-i") + 1]).name]

        def communicate(self):
            return "fleet-drift: exit %d\n" % self.returncode, None

    monkeypatch.setattr("subprocess.Popen", Run)
    args = runner.parse_args(["--all", "--fleets", str(fleets), "--fleet", "lab", "--fleet", "lab-tp4",
                              "--with-inventory", "/srv/conn.yml", "--records", str(tmp_path / "r")])
    assert runner.check_all(args) == 2
    assert [a[a.index("-i") + 1:a.index("-i") + 2] for a in started] == [[str(fleets / "lab")], [str(fleets / "lab-tp4")]]
    assert all(a[-2:] == ["-i", "/srv/conn.yml"] for a in started)
    assert "fleet-drift --all: 2 fleet(s), exit 2 (the worst: lab 0, lab-tp4 2)" in capsys.readouterr().out
    started.clear()
    args = runner.parse_args(["--all", "--fleets", str(fleets), "--fleet", "tp4-example"])
    assert runner.check_all(args) == 1 and started == []
    err = capsys.readouterr().err
    assert "declares tp4-example (it holds: lab, lab-tp4, production)" in err
    with pytest.raises(SystemExit):
        runner.parse_args(["--fleet", "lab"])      # a selection without --all is a usage error
