"""drift_metrics: one run's metrics in Prometheus text format for node_exporter's textfile collector, written
atomically, parsed back by prometheus-client's own parser; and bin/fleet-drift's --metrics-dir."""
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible.module_utils.drift import compare as dc
from ansible.module_utils.drift import metrics as dm
from modrun import load_script

ROOT = Path(__file__).resolve().parents[4]


def report(findings, hosts=None, code=2):
    return {"findings": findings, "exit_code": code,
            "hosts": hosts or {"spark1": "checked", "spark2": "checked", "spark3": "UNREACHABLE"}}


def samples(path):
    out = {}
    for family in text_string_to_metric_families(Path(path).read_text()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_one_finding_is_one_series_with_fleet_host_class_and_area(tmp_path):
    finding = dc.finding("spark2", "launcher_env", "MEM_FRACTION_STATIC", "0.95", "0.80", "drift")
    path = dm.write(str(tmp_path), "production", report([finding]), 1796300000.0, 41.5)
    assert os.path.basename(path) == "dsv41_drift_production.prom"
    got = samples(path)
    assert got["dsv41_drift_open_findings"] == [
        ({"fleet": "production", "host": "spark2", "class": "drift", "area": "launcher_env"}, 1.0)]
    assert got["dsv41_drift_hosts_unreachable"] == [({"fleet": "production"}, 1.0)]
    assert got["dsv41_drift_hosts_checked"] == [({"fleet": "production"}, 2.0)]
    assert got["dsv41_drift_last_run_timestamp_seconds"] == [({"fleet": "production"}, 1796300000.0)]
    assert got["dsv41_drift_last_run_duration_seconds"] == [({"fleet": "production"}, 41.5)]
    assert got["dsv41_drift_last_run_exit_code"] == [({"fleet": "production"}, 2.0)]
    print(Path(path).read_text())


def test_findings_of_one_host_class_and_area_are_counted_and_a_clean_run_has_none(tmp_path):
    found = [dc.finding("spark1", "adapters", "wo_a_w8.py", "a", "b", "drift"),
             dc.finding("spark1", "adapters", "verify_cap.py", "a", "b", "drift"),
             dc.finding("spark3", "gpu", "clocks", "locked", "unlocked", "degradation")]
    got = samples(dm.write(str(tmp_path), "lab", report(found), 0.0, 1.0))
    assert sorted((s[0]["host"], s[0]["area"], s[1]) for s in got["dsv41_drift_open_findings"]) == [
        ("spark1", "adapters", 2.0), ("spark3", "gpu", 1.0)]
    got = samples(dm.write(str(tmp_path), "lab", report([], {"spark1": "checked"}, 0), 0.0, 1.0))
    assert "dsv41_drift_open_findings" not in got, "a resolved finding's series disappears"
    assert got["dsv41_drift_last_run_exit_code"] == [({"fleet": "lab"}, 0.0)]


def test_the_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    dm.write(str(tmp_path), "lab", report([]), 0.0, 1.0)
    (tmp_path / "other.prom").write_text("# another exporter's file\n")
    dm.write(str(tmp_path), "lab", report([]), 1.0, 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dsv41_drift_lab.prom", "other.prom"]


def test_a_fleet_name_that_is_not_a_plain_word_cannot_leave_the_directory(tmp_path):
    assert dm.file_name("../../etc/x") == "dsv41_drift_.._.._etc_x.prom"
    path = dm.write(str(tmp_path), "../x y", report([]), 0.0, 1.0)
    assert os.path.dirname(path) == str(tmp_path)


def test_an_unwritable_directory_raises_oserror(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        dm.write(str(blocker / "metrics"), "lab", report([]), 0.0, 1.0)


def test_fleet_drift_takes_the_metrics_directory_from_its_option_or_the_environment(monkeypatch):
    mod = load_script("fleet_drift_metrics", ROOT / "bin" / "fleet-drift")
    assert mod.parse_args(["--metrics-dir", "/srv/m"]).metrics_dir == "/srv/m"
    monkeypatch.setenv("DSV41_DRIFT_METRICS_DIR", "/var/lib/node_exporter/textfile")
    mod = load_script("fleet_drift_metrics", ROOT / "bin" / "fleet-drift")   # the default is read at load
    assert mod.parse_args([]).metrics_dir == "/var/lib/node_exporter/textfile"
