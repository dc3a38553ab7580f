"""drift_schedule: the timer is listed, the runner is unprivileged with its own venv and checkout, and a
triggered run writes a report."""
import json

testinfra_hosts = ["ansible://drift_control"]
HOME = "/var/lib/dsv41-drift"
UNIT = "dsv41-fleet-drift"


def test_timer_is_listed_with_the_declared_schedule(host):
    assert UNIT + ".timer" in host.check_output("systemctl list-timers --all --no-pager")
    timer = host.file(f"/etc/systemd/system/{UNIT}.timer").content_string
    assert "OnCalendar=hourly" in timer and "RandomizedDelaySec=300" in timer and "Persistent=true" in timer
    assert host.run(f"systemctl is-enabled {UNIT}.timer").stdout.strip() == "enabled"


def test_runner_is_unprivileged_with_its_own_venv_and_checkout(host):
    user = host.user("dsv41-drift")
    assert user.exists and 0 < user.uid < 1000 and user.shell == "/usr/sbin/nologin" and user.home == HOME
    service = host.file(f"/etc/systemd/system/{UNIT}.service").content_string
    assert "User=dsv41-drift" in service and f"ExecStart={HOME}/venv/bin/python {HOME}/repo/bin/fleet-drift" in service
    # one timer for every fleet this host watches: --all over the checkout's fleets, the connection layer added to each
    assert (f"fleet-drift --all --fleets {HOME}/repo/inventory --fleet lab --with-inventory {HOME}/inventory/connection.yml"
            in service)
    with host.sudo():  # the runner's home is its own (0750)
        assert host.file(f"{HOME}/repo/bin/fleet-drift").exists and host.file(f"{HOME}/repo/playbooks/drift.yml").exists
        assert host.file(f"{HOME}/.ssh/id_drift").mode == 0o600
        assert host.file(f"{HOME}/.ssh/id_drift").user == "dsv41-drift"
    with host.sudo("dsv41-drift"):
        out = host.check_output(f"{HOME}/venv/bin/python -c 'import sys, ansible_runner, ansible; print(sys.prefix)'")
    assert out.strip() == f"{HOME}/venv"


def test_a_triggered_run_writes_a_report(host):
    with host.sudo():
        # each fleet's history apart: the timer checks the fleet lab, so its runs are under records/lab/drift/
        before = set(host.check_output(f"ls -1 {HOME}/records/lab/drift 2>/dev/null || true").split())
        host.run_test(f"systemctl start {UNIT}.service")  # oneshot: returns when the run ended
        after = set(host.check_output(f"ls -1 {HOME}/records/lab/drift").split())
        new = sorted(after - before)
        assert len(new) == 1
        report = json.loads(host.file(f"{HOME}/records/lab/drift/{new[0]}/drift.json").content_string)
        status = host.check_output(f"systemctl show -p ExecMainStatus --value {UNIT}.service").strip()
        assert "# Drift check " + new[0] in host.file(f"{HOME}/records/lab/drift/{new[0]}/summary.md").content_string
    assert set(report["hosts"]) == {"spark1", "spark2", "spark3"}
    assert all(v == "checked" for v in report["hosts"].values()), report["hosts"]
    assert report["exit_code"] in (0, 2) and int(status) == report["exit_code"]
    # the dashboards' view of the same run, where node_exporter's textfile collector reads it
    with host.sudo():
        prom = host.file(f"{HOME}/metrics/dsv41_drift_lab.prom")
        assert prom.exists and prom.user == "dsv41-drift" and prom.mode & 0o004, "readable by node_exporter"
        text = prom.content_string
    assert 'dsv41_drift_hosts_checked{fleet="lab"} 3.0' in text
    assert 'dsv41_drift_last_run_exit_code{fleet="lab"} %d.0' % report["exit_code"] in text
    assert "dsv41_drift_open_findings" in text and text.count("dsv41_drift_open_findings{") == len(
        {(f["host"], f["class"], f["area"]) for f in report["findings"]})
