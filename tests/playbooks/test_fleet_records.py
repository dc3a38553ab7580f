"""Each fleet's records apart, on the lab: a playbook writes under records/<dsv41_fleet_name>/ (one knob,
dsv41_records_dir, moves them all), the lab's unfinished-run guard never reads another fleet's directory, and runs
left in the records/experiments/ every fleet once shared are named with the command that moves them (an
unfinished one refuses). Records go to tmp_path; nothing changes on any host."""
import json

from experiment_lab import fleet_state, flat
from labhelpers import playbook

HOSTS = ["spark1", "spark2", "spark3"]
# stage D's check needs stage_a and stage_b in the ledger for the running image (tests/playbooks/conftest.py)
STAGES_PASSED = True


def _run(root, name, fleet=None, finished=False):
    """An experiment run directory as roles/experiment leaves it: run.json (fleet, hosts), the snapshot taken
    before its first change, and finished.json once the fleet was proven equal to it."""
    d = root / name
    d.mkdir(parents=True)
    if fleet:
        (d / "run.json").write_text(json.dumps({"fleet": fleet, "hosts": HOSTS, "at": {"step": "restart"}}))
    (d / "snapshot-before.json").write_text(json.dumps({"snapshot": {h: {} for h in HOSTS}}))
    if finished:
        (d / "finished.json").write_text(json.dumps({"finished": "2026-12-01T00:10:00Z", "by": "run"}))


def test_the_lab_s_records_go_to_its_own_directory_and_another_fleet_s_runs_are_never_its_own(tmp_path):
    records = tmp_path / "records"
    # production's unfinished run on hosts of the same names, recorded before runs named their fleet: in one
    # shared directory the lab's guard would refuse on it (a host in common); in production's own it is not read
    _run(records / "production" / "experiments", "20261201T000000Z-stage_d_wo_a")
    before = fleet_state()
    rc, out = playbook("adapters_manifest.yml", "-e", "dsv41_records_dir=%s" % (records / "lab"))
    assert rc == 0, out[-3000:]
    assert "dsv41_adapters_manifest:\n" in (records / "lab" / "adapters-manifest.yml").read_text()
    assert sorted(p.name for p in records.iterdir()) == ["lab", "production"]
    rc, out = playbook("stage_d_wo_a.yml", "--check", "-e", "dsv41_records_dir=%s" % (records / "lab"))
    assert rc == 0, out[-3000:]
    assert "never ended with the fleet proven equal" not in flat(out)
    assert not (records / "lab" / "experiments").exists(), "check mode writes no record"
    assert fleet_state() == before


def test_runs_left_in_the_old_shared_directory_are_named_and_an_unfinished_one_refuses(tmp_path):
    legacy, own = tmp_path / "records" / "experiments", tmp_path / "records" / "lab"
    args = ("-e", "dsv41_records_dir=%s" % own, "-e", "preflight_legacy_run_records=%s" % legacy)
    _run(legacy, "20261201T000000Z-stage_c_fence", "lab", finished=True)
    _run(legacy, "20261202T000000Z-stage_e_prefetch", "production")        # another fleet's: never named here
    rc, out = playbook("fleet_status.yml", *args)
    assert rc == 0, out[-3000:]
    notice = ("%s still holds 1 experiment run(s) of the lab fleet from before records were kept per fleet; the "
              "unfinished-run guard and the estimates read only %s/experiments. Move them with bin/records-migrate "
              "--apply" % (legacy, own))
    assert notice in flat(out), flat(out)[-3000:]

    _run(legacy, "20261203T000000Z-stage_d_wo_a", "lab")                    # killed in the middle
    before = fleet_state()
    rc, out = playbook("stage_d_wo_a.yml", "--check", *args)
    text = flat(out)
    assert rc != 0 and "Refused before touching any host. " + notice.replace("1 experiment", "2 experiment") in text
    assert "Unfinished among them (finish each with its rollback command once moved): 20261203T000000Z-stage_d_wo_a" \
        in text
    assert "UNREACHABLE" not in out and fleet_state() == before
    rc, out = playbook("fleet_status.yml", *args)                           # read-only: reported, not refused
    assert rc == 0 and "20261203T000000Z-stage_d_wo_a" in flat(out)
