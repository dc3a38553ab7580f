"""Finished and unfinished experiment runs on the control node (module_utils/experiment/runs.py), the
experiment_run module through its entry point, the preflight's guard filters, and an interrupted run's record."""
import json
import os

import pytest

import experiment_run
import preflight_filters as pf
from modrun import run_module
from ansible.module_utils.experiment import record as rec_md
from ansible.module_utils.experiment import runs as er

REPO = "/srv/repo"
ROOT = REPO + "/records/lab/experiments"   # the lab fleet's own run records
SNAP = {"spark1": {"files": {".env": "aa"}, "image_id": "sha256:1"}, "spark2": {"image_id": "sha256:1"}}
DEFINITION = {"name": "stage_d_wo_a", "arms": [{"name": "w8"}, {"name": "mid"}]}


def _run(root, name, before=SNAP, after=None, record=None, state=None, finished=None):
    d = root / name
    d.mkdir(parents=True)
    if state is not None:
        (d / "run.json").write_text(json.dumps(state))
    if before is not None:
        (d / "snapshot-before.json").write_text(json.dumps({"run": name, "label": "before", "snapshot": before}))
    if after is not None:
        (d / "snapshot-after.json").write_text(json.dumps({"run": name, "label": "after", "snapshot": after}))
    if record is not None:
        (d / "record.json").write_text(json.dumps(record))
    if finished is not None:
        (d / "finished.json").write_text(json.dumps(finished))
    return d


def test_rollback_command_is_typed_from_the_repository_root():
    assert er.rollback_command("R", [REPO + "/inventory/lab"], ROOT, REPO, "lab") == (
        "ansible-playbook playbooks/rollback.yml -i inventory/lab -e experiment_rollback_run=R -e maintenance_window=true")
    # another record root is named; an inventory outside the repository stays absolute
    assert er.rollback_command("R", ["/etc/fleet/inv", REPO + "/inventory/lab"], "/tmp/rec/", REPO, "lab") == (
        "ansible-playbook playbooks/rollback.yml -i /etc/fleet/inv -i inventory/lab -e experiment_rollback_run=R "
        "-e maintenance_window=true -e experiment_record_root=/tmp/rec")
    # another fleet's directory, the shared one of the old layout, or a fleet not known: the root is named
    for root, fleet in ((ROOT, "production"), (REPO + "/records/experiments", "lab"), (ROOT, None)):
        assert er.rollback_command("R", [], root, REPO, fleet).endswith("-e experiment_record_root=%s" % root)
    assert pf.dsv41_rollback_command("R", [REPO + "/inventory/lab"], ROOT, REPO, "lab").endswith("maintenance_window=true")


def test_what_counts_as_finished(tmp_path):
    changed = dict(SNAP, spark2={"image_id": "sha256:2"})
    _run(tmp_path, "20261201T000000Z-never-snapshotted", before=None, state={"at": {"step": "snapshot"}})
    _run(tmp_path, "20261201T000001Z-marker", finished={"finished": "2026-12-01T00:10:00Z", "by": "run"})
    _run(tmp_path, "20261201T000002Z-old-restored-equal", after=SNAP)          # before the marker existed
    _run(tmp_path, "20261201T000003Z-old-record-equal", record={"restore": {"equal": True}})
    _run(tmp_path, "20261201T000004Z-restore-differs", after=changed, record={"restore": {"equal": False}})
    _run(tmp_path, "20261201T000005Z-killed", state={"fleet": "lab", "at": {"condition": "w8", "step": "restart"},
                                                     "definition": DEFINITION, "rollback_command": "CMD"})
    (tmp_path / "not-a-run.txt").write_text("")
    runs = er.unfinished_runs(str(tmp_path), "lab", ["spark1", "spark2", "spark3"])
    assert [r["run"] for r in runs] == ["20261201T000004Z-restore-differs", "20261201T000005Z-killed"]
    killed = runs[1]
    assert (killed["definition"], killed["rollback_command"], er.where(killed)) == (
        "stage_d_wo_a", "CMD", "stopped in condition w8 at step restart")
    assert er.where(runs[0]) == "stopped at an unknown point (no run state recorded)"
    assert er.run_status(str(tmp_path / "20261201T000002Z-old-restored-equal"))["how"] == (
        "its snapshot after the restore equals its snapshot before")
    assert er.unfinished_runs(str(tmp_path / "absent"), "lab") == []


def test_only_this_fleet_s_runs_count(tmp_path):
    _run(tmp_path, "a-production", state={"fleet": "production"})
    _run(tmp_path, "b-lab", state={"fleet": "lab"})
    _run(tmp_path, "c-old-record-of-other-hosts", before={"gpu7": {}})
    _run(tmp_path, "d-old-record-of-these-hosts")
    names = [r["run"] for r in er.unfinished_runs(str(tmp_path), "lab", ["spark1", "spark2", "spark3"])]
    assert names == ["b-lab", "d-old-record-of-these-hosts"]


def test_an_unreadable_run_file_keeps_the_run_unfinished_and_says_why(tmp_path):
    d = _run(tmp_path, "r1")
    (d / "run.json").write_text("{half")
    (run,) = er.unfinished_runs(str(tmp_path), "lab", ["spark1"], [REPO + "/inventory/lab"], REPO)
    assert run["problem"] == "%s: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)" \
        % (d / "run.json")
    assert run["rollback_command"].endswith("-e experiment_rollback_run=r1 -e maintenance_window=true "
                                            "-e experiment_record_root=%s" % tmp_path)


def test_the_refusal_names_each_run_where_it_stopped_and_its_command(tmp_path):
    _run(tmp_path, "20261202T101500Z-stage_d_wo_a", state={"fleet": "lab", "definition": DEFINITION,
                                                           "at": {"condition": "w8", "step": "restart"},
                                                           "rollback_command": "ansible-playbook playbooks/rollback.yml X"})
    runs = pf.dsv41_unfinished_runs(str(tmp_path), "lab", ["spark1"], [], REPO)
    lines = pf.dsv41_unfinished_refusal(runs, "lab")
    assert lines[0].startswith("Refused before touching any host: 1 experiment run(s) on the lab fleet never ended "
                               "with the fleet proven equal to their snapshot")
    assert lines[1] == ("run 20261202T101500Z-stage_d_wo_a (stage_d_wo_a, stopped in condition w8 at step restart): "
                        "ansible-playbook playbooks/rollback.yml X")


def test_the_way_back_of_other_playbook_runs():
    assert pf.dsv41_way_back("20261202T101500Z-stage_b_autotune", "launcher_env", [REPO + "/inventory/lab"], REPO) == (
        "Run 20261202T101500Z-stage_b_autotune. The way back: ansible-playbook playbooks/rollback.yml -i inventory/lab "
        "-e rollback_launcher_env=true -e container_env_rollback_run=20261202T101500Z-stage_b_autotune (restores the "
        "head's launcher .env exactly as it was before this run, and any container the contention role paused or "
        "stopped; a stage playbook's restart then applies it).")
    assert pf.dsv41_way_back("R", "contention", [REPO + "/inventory/lab"], REPO) == (
        "Run R. The way back: ansible-playbook playbooks/rollback.yml -i inventory/lab (restores every container the "
        "contention role paused or stopped).")
    assert "rollback.yml -i inventory/lab -e rollback_engram_relocation=true (moves the Engram files" in (
        pf.dsv41_way_back("R", "pack", [REPO + "/inventory/lab"], REPO))
    with pytest.raises(ValueError):
        er.way_back("clocks", "R")


# --------------------------------------------------------------------------- the module

def _module(tmp_path, check_mode=False, **args):
    return run_module(experiment_run.main, dict({"root": str(tmp_path), "run": "R1"}, **args), check_mode=check_mode)


def test_module_keeps_where_the_run_is_what_it_measured_and_finishes_it(tmp_path):
    out = _module(tmp_path, state="started", fleet="lab", hosts=["spark1", "spark2"], rollback_command="CMD",
                  definition=DEFINITION, record_inputs={"image_digest": "d@sha256:1"})
    assert out["changed"] and out["status"]["changed"] is False, "no snapshot yet: nothing changed"
    (tmp_path / "R1" / "snapshot-before.json").write_text(json.dumps({"snapshot": SNAP}))
    _module(tmp_path, state="step", condition="baseline", step="benchmark")
    _module(tmp_path, state="measured", conditions={"baseline": {"results": [1]}}, arm_checks={"baseline": {}})
    _module(tmp_path, state="step", condition="w8", step="restart")
    status = _module(tmp_path)
    assert status["status"]["finished"] is False and status["status"]["at"] == {"condition": "w8", "step": "restart"}
    assert status["run_state"]["record_inputs"] == {"image_digest": "d@sha256:1"}
    assert status["interrupted"] == {
        "conditions": {"baseline": {"results": [1]}},
        "arm_checks": {"baseline": {}, "w8": {"refused": "not run: the run was interrupted (stopped in condition w8 "
                                                         "at step restart)"},
                       "mid": {"refused": "not run: the run was interrupted (stopped in condition w8 at step restart)"}},
        "at": {"condition": "w8", "step": "restart", "measured": ["baseline"]}}
    # a restore that left differences keeps it unfinished; an equal one finishes it
    out = _module(tmp_path, state="finished", restore={"equal": False, "differences": {"spark1": ["x"]}}, by="rollback")
    assert out["finished"] is False and out["status"]["finished"] is False
    out = _module(tmp_path, state="finished", restore={"equal": True, "differences": {}}, by="rollback")
    assert out["finished"] is True and out["status"]["how"].endswith("by rollback")
    assert er.unfinished_runs(str(tmp_path), "lab", ["spark1"]) == []


def test_module_check_mode_writes_nothing_and_bad_names_are_refused(tmp_path):
    out = _module(tmp_path, check_mode=True, state="started", rollback_command="CMD")
    assert not out["changed"] and not (tmp_path / "R1").exists()
    bad = _module(tmp_path, run="../x", state="step", step="restart")
    assert bad["failed"] and "run must be a directory name under" in bad["msg"]
    (tmp_path / "R2").mkdir()
    (tmp_path / "R2" / "run.json").write_text("[]")
    broken = _module(tmp_path, run="R2", state="step", step="restart")
    assert broken["failed"] and broken["msg"] == "experiment_run R2: %s: not a JSON object" % (tmp_path / "R2" / "run.json")


def test_an_interrupted_record_says_so_first():
    record = {"definition": {"name": "stage_d_wo_a", "stage": "D", "description": "W8.", "arms": []},
              "verdicts": [], "conditions": {}, "interrupted": {"condition": "w8", "step": "restart",
                                                               "measured": ["baseline"]}}
    md = rec_md.markdown(record)
    assert ("**Interrupted** in condition w8 at step restart; finished by playbooks/rollback.yml (the fleet restored "
            "to its snapshot, below). Measured before it stopped: baseline; the other conditions were not run.") in md
    assert md.index("**Interrupted**") < md.index("## Verdicts")
    assert os.path.basename(er.RUN_FILE) == "run.json"


def test_a_playbook_that_goes_on_reports_the_same_runs_without_refusing(tmp_path):
    _run(tmp_path, "R", state={"fleet": "lab", "at": {"step": "benchmark", "condition": "baseline"},
                               "rollback_command": "CMD"})
    lines = pf.dsv41_unfinished_refusal(pf.dsv41_unfinished_runs(str(tmp_path), "lab", ["spark1"]), "lab", False)
    assert lines[0].startswith("1 experiment run(s) on the lab fleet never ended") and lines[0].endswith(
        "Finish each with:")
    assert lines[1] == "run R (experiment, stopped in condition baseline at step benchmark): CMD"
