"""Stage B (autotune retention) on the lab, and the adapters role's refusals."""
import hashlib
import json
import shutil

import pytest
import yaml

from labhelpers import ROOT, playbook, sh

SOURCE = ROOT / "lab" / "seed" / "adapters"
SIDECAR = "/home/zurih/.cache/sglang/flashinfer/autotune"


def flat(out):
    return " ".join(out.split())


def adapter_files(host):
    return sh(host, "cd ~/dsv41-3x-spark/adapter 2>/dev/null || cd /home/mia/dsv41-3x-spark/adapter; sha256sum *.py",
              user="mia" if host == "spark1" else "zurih")


@pytest.fixture
def source_copy(tmp_path):
    dst = tmp_path / "adapters"
    shutil.copytree(SOURCE, dst)
    return dst


def manifest_for(directory, names):
    return {n: hashlib.sha256((directory / n).read_bytes()).hexdigest() for n in names}


def test_manifest_mismatch_is_refused_before_any_node_is_touched(source_copy):
    (source_copy / "draft_tau.py").write_text((source_copy / "draft_tau.py").read_text() + "# local edit\n")
    before = {h: adapter_files(h) for h in ("spark1", "spark2", "spark3")}
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", f"dsv41_adapters_source_dir={source_copy}")
    assert rc != 0
    text = flat(out)
    digest = hashlib.sha256((source_copy / "draft_tau.py").read_bytes()).hexdigest()
    assert f"{source_copy}/draft_tau.py: sha256 {digest}, manifest expects" in text
    assert {h: adapter_files(h) for h in ("spark1", "spark2", "spark3")} == before


def test_tp4_wo_a_w8_is_refused(source_copy):
    shutil.copy(source_copy / "tp4" / "wo_a_w8.py", source_copy / "wo_a_w8.py")
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", f"dsv41_adapters_source_dir={source_copy}")
    assert rc != 0
    text = flat(out)
    tp4 = hashlib.sha256((source_copy / "wo_a_w8.py").read_bytes()).hexdigest()
    assert f"wo_a_w8.py: sha256 {tp4}, manifest expects" in text and "never replace it with the TP4 file" in text


def test_enabled_adapter_missing_from_sitecustomize_is_refused(source_copy):
    shutil.copy(ROOT / "lab" / "seed" / "sitecustomize-report.py", source_copy / "sitecustomize.py")
    names = [p.name for p in source_copy.glob("*.py")]
    manifest = json.dumps({"dsv41_adapters_manifest": manifest_for(source_copy, names)})
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", f"dsv41_adapters_source_dir={source_copy}",
                       "-e", manifest)
    assert rc != 0
    assert ("sitecustomize.py: adapter autotune_keep is not registered (no install_autotune_keep call in the loader "
            "of any wrapped module)") in flat(out)


def test_enabled_adapter_gated_by_another_switch_is_refused(source_copy):
    hook = source_copy / "sitecustomize.py"
    hook.write_text(hook.read_text().replace('os.environ.get("DSV41_AUTOTUNE_KEEP", "0")',
                                             'os.environ.get("DSV41_AUTOTUNE_KEEP_V2", "0")'))
    manifest = json.dumps({"dsv41_adapters_manifest": manifest_for(source_copy, [p.name for p in source_copy.glob("*.py")])})
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", f"dsv41_adapters_source_dir={source_copy}",
                       "-e", manifest)
    assert rc != 0
    assert ("adapter autotune_keep: install_autotune_keep is gated by DSV41_AUTOTUNE_KEEP_V2, not armed by "
            "DSV41_AUTOTUNE_KEEP=1") in flat(out)


def test_stage_b_reuses_on_repeat_retunes_after_change_and_catches_a_partial_hit(tmp_path):
    # stage A passed on the image stage B starts from (committed by the operator): B rebuilds the image with
    # its adapter and carries that entry over to the new image beside its own
    from labhelpers import LAB_INVENTORY, running_image_digest, stage_ledger_layer
    start = running_image_digest()
    committed = stage_ledger_layer(tmp_path / "ledger", ["stage_a"])
    # no experiment records: the estimate uses the fleet's figures
    no_records = "experiment_record_root=%s" % (tmp_path / "no-records")
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", no_records,
                       inventories=(LAB_INVENTORY, committed))
    assert rc == 0, out[-4000:]
    text = flat(out)
    record = sorted((ROOT / "records").glob("*-stage_b-boot4-restored"))[-1]
    end = running_image_digest()
    assert end != start, "stage B rebuilt the image with the retention adapter"
    proposal = yaml.safe_load((record / "stage-ledger.yml").read_text())["dsv41_stages_passed"]
    assert proposal == [{"name": "stage_b", "image_digest": end, "record": "records/%s" % record.name},
                        {"name": "stage_a", "image_digest": end, "record": "records/%s" % record.name,
                         "carried_from": start}]
    assert "Stage ledger: commit to dsv41_stages_passed" in text
    # the plan said how long it takes on the fleet: the rebuild and four boots of 767 s each (no records yet)
    assert "stage_b_autotune expected on this fleet: 1 h 00 min in all, 4 boot(s)" in text, text[:6000]
    assert "boot2-repeat (identical settings: reuses on every rank, cache files unchanged): 13 min 47 s" in text
    # the retention switch B leaves in the .env is proposed for the declared baseline (drift stays quiet)
    diff = (record / "baseline.diff").read_text()
    assert diff.startswith("--- a/inventory/common/launcher_baseline.yml") and '+  DSV41_AUTOTUNE_KEEP: "1"' in diff
    # the import hook read by its structure: the retention adapter hooks the autotune module, gated by its switch
    assert ("autotune_keep: modules sglang.srt.model_executor.runner.flashinfer_autotune; gate DSV41_AUTOTUNE_KEEP; "
            "DSV41_AUTOTUNE_KEEP=1 arms it: yes") in text
    assert "verify_cap: modules sglang.srt.models.deepseek_v4, " in text
    for label, verdict in (("boot1-first", "tuned"), ("boot2-repeat", "reused"), ("boot3-changed", "tuned"),
                           ("boot4-restored", "reused")):
        table = text.split(f"{label}: host", 1)[1].split("TASK [", 1)[0]
        assert table.count(f" {verdict} True") == 3, (label, table)
    # the adapter is in the image that runs, on every node
    for host in ("spark1", "spark2", "spark3"):
        assert "autotune_keep.py" in sh(host, "docker run --rm --entrypoint sha256sum dsv41-sglang:tp3 "
                                              "/sgl-workspace/adapter/autotune_keep.py")
    # a stale sidecar on one rank: that rank retunes while the others reuse -> refused as a partial hit
    sh("spark2", f"for f in $(find {SIDECAR} -name '*.launch'); do echo stale > $f; done", user="zurih")
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true")
    assert rc != 0
    text = flat(out)
    assert "boot1-first: the ranks' autotune outcomes are" in text
    assert "'spark2': 'tuned'" in text and "'spark1': 'reused'" in text
    assert "a partial hit desynchronises the collectives" in text
    # a window too short for the four boots: refused before anything changes, naming what would fit
    env_before = sh("spark1", "sha256sum ~/dsv41-3x-spark/.env", user="mia")
    rc, out = playbook("stage_b_autotune.yml", "-e", "maintenance_window=true", "-e", "window_minutes=30",
                       "-e", no_records)
    text = flat(out)
    assert rc != 0 and "stage_b_autotune refused, nothing changed: it is expected to take 1 h 00 min" in text, text[-3000:]
    assert ("the first step(s) would fit (the retention adapter deployed and the image rebuilt, boot1-first (tunes "
            "and saves, or reuses a valid cache), 18 min 47 s)") in text
    assert "TASK [adapters" not in text and sh("spark1", "sha256sum ~/dsv41-3x-spark/.env", user="mia") == env_before
