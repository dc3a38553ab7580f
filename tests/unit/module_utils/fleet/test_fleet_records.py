"""Each fleet's records apart (module_utils/fleet/records.py): the fleet name an inventory declares, the
unfinished-run guard reading only its own fleet's directory, the preflight's notice of runs left in the old shared
directory, and bin/records-migrate moving the old shared layout into records/<fleet>/."""
import json
from pathlib import Path

import pytest

import preflight_filters as pf
from ansible.module_utils.fleet import records as fr
from modrun import load_script

ROOT = Path(__file__).resolve().parents[4]
HOSTS = ["spark1", "spark2", "spark3"]        # the lab's host names are the fleet's
SNAP = {"snapshot": {"spark1": {"image_id": "sha256:1"}}}


def _run(root, name, fleet=None, finished=False, snapshot=True):
    d = root / name
    d.mkdir(parents=True)
    if fleet is not None:
        (d / "run.json").write_text(json.dumps({"fleet": fleet, "hosts": HOSTS}))
    if snapshot:
        (d / "snapshot-before.json").write_text(json.dumps(SNAP))
    if finished:
        (d / "finished.json").write_text(json.dumps({"finished": "2026-12-01T00:00:00Z", "by": "run"}))
    return d


def _files(root):
    """{relative path: bytes} of every file under ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- the fleet name of an inventory

def test_the_repository_inventories_name_their_fleets():
    assert fr.inventory_fleet_name(ROOT / "inventory" / "lab") == "lab"
    assert fr.inventory_fleet_name(ROOT / "inventory" / "production") == "production"
    # an inventory file: the group_vars beside it
    assert fr.inventory_fleet_name(ROOT / "inventory" / "lab" / "hosts.yml") == "lab"


def test_the_name_is_read_in_ansible_s_order_and_secrets_are_never_opened(tmp_path):
    gv = tmp_path / "group_vars"
    (gv / "dsv41_ranks").mkdir(parents=True)
    (gv / "all.yml").write_text("---\ndsv41_fleet_name: from-all\n")
    assert fr.inventory_fleet_name(tmp_path) == "from-all"
    (gv / "dsv41_ranks" / "main.yml").write_text("---\ndsv41_fleet_name: lab\napi: !vault |\n  $ANSIBLE_VAULT;1.1\n")
    assert fr.inventory_fleet_name(tmp_path) == "lab", "the rank group over all; a !vault value read as nothing"
    (gv / "dsv41_ranks" / "zz_layer.yml").write_text("---\ndsv41_fleet_name: lab-b\n")
    assert fr.inventory_fleet_name(tmp_path) == "lab-b", "a later file of the directory wins"
    (gv / "dsv41_ranks" / "zzz_vault.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162630a\n")
    assert fr.inventory_fleet_name(tmp_path) == "lab-b", "an encrypted file is skipped, not an error"


@pytest.mark.parametrize("text,message", [
    ("---\nother: 1\n", "dsv41_fleet_name is not set in group_vars/all or group_vars/dsv41_ranks"),
    ("---\ndsv41_fleet_name: ../../etc\n", "main.yml: dsv41_fleet_name='../../etc' is not a fleet name"),
    ("---\ndsv41_fleet_name: \"{{ x }}\"\n", "dsv41_fleet_name='{{ x }}' is not a fleet name"),
    ("---\ndsv41_fleet_name: experiments\n", "dsv41_fleet_name='experiments' is taken"),
    ("---\ndsv41_fleet_name: [unclosed\n", "main.yml: not YAML"),
])
def test_an_inventory_without_a_valid_name_is_refused_naming_the_file_and_value(tmp_path, text, message):
    (tmp_path / "group_vars" / "dsv41_ranks").mkdir(parents=True)
    (tmp_path / "group_vars" / "dsv41_ranks" / "main.yml").write_text(text)
    with pytest.raises(fr.FleetRecordsError, match=r"^%s" % str(tmp_path).replace(".", r"\.")) as exc:
        fr.inventory_fleet_name(tmp_path)
    assert message in str(exc.value)


def test_a_records_directory_is_one_component_under_records():
    assert fr.fleet_dir("/srv/records", "lab-tp4") == "/srv/records/lab-tp4"
    for bad in ("..", ".", "a/b", "", "drift", "adopt-x"):
        with pytest.raises(fr.FleetRecordsError):
            fr.fleet_dir("/srv/records", bad)


# --------------------------------------------------------------------------- one fleet never reads another's runs

def test_the_unfinished_run_guard_of_one_fleet_never_reads_another_fleet_s_directory(tmp_path):
    records = tmp_path / "records"
    _run(records / "lab" / "experiments", "20261201T000000Z-stage_c_fence", "lab")
    # production's run on hosts of the same names, one recorded before runs named their fleet: in one shared
    # directory the lab's guard would count it (a host in common); in production's own it is never read
    _run(records / "production" / "experiments", "20261202T000000Z-stage_d_wo_a", "production")
    _run(records / "production" / "experiments", "20261130T000000Z-old")
    lab = pf.dsv41_unfinished_runs(str(records / "lab" / "experiments"), "lab", HOSTS)
    prod = pf.dsv41_unfinished_runs(str(records / "production" / "experiments"), "production", HOSTS)
    assert [r["run"] for r in lab] == ["20261201T000000Z-stage_c_fence"]
    assert [r["run"] for r in prod] == ["20261130T000000Z-old", "20261202T000000Z-stage_d_wo_a"]
    assert "lab" not in {r["fleet"] for r in prod}


def test_the_preflight_names_the_old_shared_directory_while_it_holds_this_fleet_s_runs(tmp_path):
    legacy, own = tmp_path / "records" / "experiments", tmp_path / "records" / "lab" / "experiments"
    _run(legacy, "20261201T000000Z-stage_c_fence", "lab", finished=True)
    _run(legacy, "20261202T000000Z-stage_d_wo_a", "lab")                      # unfinished
    _run(legacy, "20261203T000000Z-stage_e_prefetch", "production")           # another fleet's: not named
    runs = pf.dsv41_legacy_runs(str(legacy), "lab", HOSTS, str(own))
    assert [r["run"] for r in runs] == ["20261201T000000Z-stage_c_fence", "20261202T000000Z-stage_d_wo_a"]
    lines = pf.dsv41_legacy_runs_notice(runs, str(legacy), str(own), "lab")
    assert lines[0] == (
        "%s still holds 2 experiment run(s) of the lab fleet from before records were kept per fleet; the "
        "unfinished-run guard and the estimates read only %s. Move them with bin/records-migrate --apply (each run "
        "into records/<its fleet>/, nothing deleted, nothing moved if a destination is taken)." % (legacy, own))
    assert lines[1] == ("Unfinished among them (finish each with its rollback command once moved): "
                        "20261202T000000Z-stage_d_wo_a")
    assert pf.dsv41_legacy_runs(str(legacy), "production", HOSTS, str(own))[0]["fleet"] == "production"
    assert pf.dsv41_legacy_runs("", "lab", HOSTS, str(own)) == []
    assert pf.dsv41_legacy_runs(str(legacy), "lab", HOSTS, str(legacy)) == [], "the root in use is not 'old'"
    assert pf.dsv41_legacy_runs(str(tmp_path / "absent"), "lab", HOSTS, str(own)) == []


# --------------------------------------------------------------------------- bin/records-migrate

def _old_layout(records):
    """records/ as every fleet shared it: what each fleet's runs wrote, and what names no fleet."""
    _run(records / "experiments", "20261201T000000Z-stage_c_fence", "lab", finished=True)
    _run(records / "experiments", "20261202T000000Z-stage_d_wo_a", "production")
    _run(records / "experiments", "20261130T000000Z-old")                             # names no fleet
    _run(records / "experiments", "20261129T000000Z-hostile", "../../escaped")
    stage = records / "20261204T153326Z-stage_a" / "nodes"
    stage.mkdir(parents=True)
    for host in HOSTS:
        (stage / ("%s.json" % host)).write_text(json.dumps({"fleet": "lab", "host": host}))
    (records / "20261204T153326Z-stage_a" / "summary.md").write_text("# Run record\n")
    (records / "adapters-manifest").mkdir()
    (records / "adapters-manifest" / "production.yml").write_text("dsv41_adapters_manifest: {}\n")
    (records / "drift" / "lab" / "20261203T100000Z").mkdir(parents=True)
    (records / "drift" / "lab" / "20261203T100000Z" / "drift.json").write_text("{}")
    (records / "metrics").mkdir()
    (records / "metrics" / "dsv41_drift_lab.prom").write_text("# metrics\n")
    (records / "bench").mkdir()
    (records / "bench" / "spark2-raw.json").write_text("[]")
    (records / "boot-logs").mkdir()
    (records / "boot-logs" / "spark1-rank0.log").write_text("server_args=...\n")
    (records / "adopt-spark1-20261201T000000Z" / "group_vars").mkdir(parents=True)
    (records / "lab" / "experiments").mkdir(parents=True)                           # the new layout: left alone


def load_tool():
    return load_script("records_migrate", ROOT / "bin" / "records-migrate")


def test_the_plan_moves_each_record_to_the_fleet_it_recorded_and_changes_nothing(tmp_path, capsys):
    records = tmp_path / "records"
    _old_layout(records)
    before = _files(records)
    moves, left, conflicts = fr.migration_plan(str(records))
    got = {str(Path(s).relative_to(records)): str(Path(d).relative_to(records)) for s, d, _how in moves}
    assert got == {
        "experiments/20261201T000000Z-stage_c_fence": "lab/experiments/20261201T000000Z-stage_c_fence",
        "experiments/20261202T000000Z-stage_d_wo_a": "production/experiments/20261202T000000Z-stage_d_wo_a",
        "20261204T153326Z-stage_a": "lab/runs/20261204T153326Z-stage_a",
        "adapters-manifest/production.yml": "production/adapters-manifest.yml",
        "drift/lab/20261203T100000Z": "lab/drift/20261203T100000Z",
        "metrics/dsv41_drift_lab.prom": "lab/metrics/dsv41_drift_lab.prom"}
    stays = {str(Path(s).relative_to(records)): why for s, why in left}
    assert set(stays) == {"experiments/20261130T000000Z-old", "experiments/20261129T000000Z-hostile",
                          "bench/spark2-raw.json", "boot-logs/spark1-rank0.log", "adopt-spark1-20261201T000000Z"}
    assert stays["experiments/20261129T000000Z-hostile"].startswith("dsv41_fleet_name='../../escaped' is not a fleet")
    assert stays["bench/spark2-raw.json"].endswith("give its fleet with --fleet NAME")
    assert conflicts == []
    assert load_tool().main(["--records", str(records)]) == 0
    out = capsys.readouterr().out
    assert "would move experiments/20261202T000000Z-stage_d_wo_a -> production/experiments/20261202T000000Z-stage_d_wo_a" \
        " (run.json names fleet production)" in out
    assert "records-migrate: 6 record(s) would move, 5 stay" in out
    assert _files(records) == before, "the plan alone changes nothing"


def test_apply_moves_every_byte_deletes_nothing_and_lets_the_guard_see_the_runs(tmp_path, capsys):
    records = tmp_path / "records"
    _old_layout(records)
    before = _files(records)
    assert load_tool().main(["--records", str(records), "--fleet", "lab", "--apply"]) == 0
    after = _files(records)
    assert sorted(before.values()) == sorted(after.values()) and len(before) == len(after), "every file, moved"
    assert (records / "lab" / "runs" / "20261204T153326Z-stage_a" / "summary.md").read_text() == "# Run record\n"
    assert (records / "lab" / "bench" / "spark2-raw.json").exists()          # --fleet lab: what names no fleet
    assert (records / "lab" / "boot-logs" / "spark1-rank0.log").exists()
    assert (records / "lab" / "adopt" / "spark1-20261201T000000Z" / "group_vars").is_dir()
    assert (records / "lab" / "experiments" / "20261130T000000Z-old").is_dir()
    assert (records / "experiments" / "20261129T000000Z-hostile").is_dir(), "a hostile name stays where it is"
    assert not (tmp_path / "escaped").exists() and not (records.parent.parent / "escaped").exists()
    assert (records / "experiments").is_dir() and (records / "drift" / "lab").is_dir(), "emptied, never removed"
    # the lab's guard and estimates now read its runs; production's stay production's
    assert [r["run"] for r in pf.dsv41_unfinished_runs(str(records / "production" / "experiments"), "production",
                                                       HOSTS)] == ["20261202T000000Z-stage_d_wo_a"]
    assert pf.dsv41_legacy_runs(str(records / "experiments"), "lab", HOSTS, str(records / "lab" / "experiments")) == []
    assert "records-migrate: 10 record(s) moved, 1 stay" in capsys.readouterr().out


def test_a_taken_destination_moves_nothing_at_all(tmp_path, capsys):
    records = tmp_path / "records"
    _old_layout(records)
    taken = records / "production" / "experiments" / "20261202T000000Z-stage_d_wo_a"
    taken.mkdir(parents=True)
    (taken / "mine.txt").write_text("already here")
    before = _files(records)
    assert load_tool().main(["--records", str(records), "--apply"]) == 1
    err = capsys.readouterr().err
    assert "CONFLICT experiments/20261202T000000Z-stage_d_wo_a -> production/experiments/20261202T000000Z-stage_d_wo_a" \
        in err and "1 conflict(s); nothing moved" in err
    assert _files(records) == before
    with pytest.raises(fr.FleetRecordsError, match="nothing moved: 1 destination"):
        fr.migrate(*fr.migration_plan(str(records))[::2])


def test_a_bad_fleet_option_is_refused(tmp_path, capsys):
    assert load_tool().main(["--records", str(tmp_path), "--fleet", "../x"]) == 1
    assert "--fleet: dsv41_fleet_name='../x' is not a fleet name" in capsys.readouterr().err


# --------------------------------------------------------------------------- lab output, by the inventory's flag

@pytest.mark.parametrize("role,var", [("benchmark", "benchmark_measured_on"), ("experiment", "experiment_measured_on")])
def test_figures_are_labelled_lab_output_by_the_inventory_s_flag_never_by_the_fleet_s_name(role, var):
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    expression = trust_as_template(yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[var])

    def label(**inventory):
        return Templar(loader=DataLoader(), variables=inventory).template(expression).strip()

    lab = "lab output (stand-in engine, not a fleet result)"
    assert label(dsv41_fleet_name="lab", dsv41_fleet_is_lab=True) == lab
    assert label(dsv41_fleet_name="lab-tp4", dsv41_fleet_is_lab=True) == lab, "a second lab fleet is a lab too"
    assert label(dsv41_fleet_name="production", dsv41_fleet_is_lab=False) == "production fleet"
    assert label(dsv41_fleet_name="lab") == "lab fleet", "the name alone never makes a fleet a lab"
