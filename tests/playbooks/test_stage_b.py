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
    record = sorted((ROOT / "records" / "lab" / "runs").glob("*-stage_b-boot4-restored"))[-1]
    end = running_image_digest()
    assert end != start, "stage B rebuilt the image with the retention adapter"
    proposal = yaml.safe_load((record / "stage-ledger.yml").read_text())["dsv41_stages_passed"]
    assert proposal == [{"name": "stage_b", "image_digest": end, "record": "records/lab/runs/%s" % record.name},
                        {"name": "stage_a", "image_digest": end, "record": "records/lab/runs/%s" % record.name,
                         "carried_from": start}]
    assert "Stage ledger: commit to dsv41_stages_passed" in text
    # The chain A -> B -> C as the operator walks it: until the proposal is committed, stage C's plan is refused
    # for the image B ends on (stage A's entry names the image before the rebuild); committed, the plan is shown.
    rc, out = playbook("stage_c_fence.yml", "--check", "-e", no_records, inventories=(LAB_INVENTORY, committed))
    refused = flat(out)
    assert rc != 0 and "stage_c_fence refused, nothing changed" in refused, refused[-3000:]
    assert "stage B has not passed on image %s (no stage_b entry" % end in refused
    operator = tmp_path / "committed-b" / "group_vars"
    operator.mkdir(parents=True)
    (operator.parent / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (operator / "dsv41_ranks.yml").write_text(yaml.safe_dump({"dsv41_stages_passed": proposal}))
    rc, out = playbook("stage_c_fence.yml", "--check", "-e", no_records,
                       inventories=(LAB_INVENTORY, operator.parent))
    planned = flat(out)
    assert rc == 0 and "arm fence: DSV41_FOLDED_FENCE=1; prose/code x C1/C4" in planned, planned[-3000:]
    assert "fence: []" in planned, "no precondition fails once A and B are committed for the running image"
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
    # last (it rebuilds the image): a cache tuned under another kernel or image is moved aside on every rank
    autotune_provenance_moves_every_cache_after_a_kernel_or_image_change(tmp_path)


CACHE_USERS = (("spark1", "mia"), ("spark2", "zurih"), ("spark3", "zurih"))
ENGINE_CONVERGE = ROOT / "roles" / "engine" / "molecule" / "default" / "converge.yml"


def cache_root(user):
    return f"/home/{user}/.cache/sglang/flashinfer/autotune"


def restart(tmp_path):
    """One restart through the launcher (the engine role), retention still on from stage B."""
    import subprocess
    from labhelpers import env
    res = subprocess.run(["ansible-playbook", str(ENGINE_CONVERGE), "-e", f"engine_log_dir={tmp_path}"], cwd=ROOT,
                         env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:]
    return flat(res.stdout)


def boot_outcomes():
    """{host: (reused, tuned and saved)} counted in each rank's running container's log (this boot only)."""
    out = {}
    for host, _user in CACHE_USERS:
        log = sh(host, "docker logs %s 2>&1" % ("dsv41-head" if host == "spark1" else "dsv41-worker"))
        out[host] = (log.count("[autotune_keep] reused "), log.count("[autotune_keep] tuned and saved "))
    return out


def invalidated(user_host):
    host, user = user_host
    return sh(host, f"ls {cache_root(user)}.invalidated 2>/dev/null || true", user=user).split()


def autotune_provenance_moves_every_cache_after_a_kernel_or_image_change(tmp_path):
    """After stage B: every boot recorded the image id and kernel beside each rank's cache; a kernel change on one
    rank, then an image rebuild, each move every rank's cache aside (kept) so every rank retunes together."""
    image_id = json.loads(sh("spark1", "docker image inspect dsv41-sglang:tp3"))[0]["Id"]
    kernel = sh("spark1", "uname -r").strip()
    for host, user in CACHE_USERS:
        doc = json.loads(sh(host, f"cat {cache_root(user)}/.dsv41-provenance.json", user=user))
        assert doc["image_id"] == image_id and doc["kernel"] == kernel and doc["entries"], (host, doc)
    before = {h: invalidated((h, u)) for h, u in CACHE_USERS}
    # the same image and kernel: the restart keeps every cache and every rank reuses it
    text = restart(tmp_path)
    assert "Move aside every rank's autotune cache" not in text or "skipping" in text.split(
        "Move aside every rank's autotune cache", 1)[1][:200]
    assert all(reused and not tuned for reused, tuned in boot_outcomes().values()), boot_outcomes()
    # spark3's cache recorded as tuned under an older kernel: every rank's cache moves, every rank tunes
    sh("spark3", "python3 - <<'EOF'\n"
                 "import json\n"
                 f"p = '{cache_root('zurih')}/.dsv41-provenance.json'\n"
                 "d = json.load(open(p)); d['kernel'] = '6.8.0-1004-nvidia'; json.dump(d, open(p, 'w'))\n"
                 "EOF", user="zurih")
    text = restart(tmp_path)
    assert "spark3: autotune cache %s moved to %s.invalidated/" % (cache_root("zurih"), cache_root("zurih")) in text
    assert "kernel changed: tuned under 6.8.0-1004-nvidia, this rank runs %s" % kernel in text, text[-6000:]
    assert "spark1: autotune cache %s moved to" % cache_root("mia") in text and "moved with the others" in text
    assert all(tuned and not reused for reused, tuned in boot_outcomes().values()), boot_outcomes()
    after_kernel = {h: invalidated((h, u)) for h, u in CACHE_USERS}
    assert all(len(after_kernel[h]) == len(before[h]) + 1 for h in after_kernel), after_kernel
    # the image rebuilt (an adapter file edited on every host, then the launcher's build): every rank tunes again
    for host, user in CACHE_USERS:
        sh(host, f"echo '# rebuilt' >> /home/{user}/dsv41-3x-spark/adapter/autotune_keep.py", user=user)
    sh("spark1", "cd ~/dsv41-3x-spark && ./start.sh build", user="mia")
    new_id = json.loads(sh("spark1", "docker image inspect dsv41-sglang:tp3"))[0]["Id"]
    assert new_id != image_id
    text = restart(tmp_path)
    assert "image changed: tuned under %s (dsv41-sglang:tp3), the next boot runs %s" % (
        image_id[:19], new_id[:19]) in text, text[-6000:]
    assert all(tuned and not reused for reused, tuned in boot_outcomes().values()), boot_outcomes()
    for host, user in CACHE_USERS:
        doc = json.loads(sh(host, f"cat {cache_root(user)}/.dsv41-provenance.json", user=user))
        assert doc["image_id"] == new_id and doc["kernel"] == kernel
        assert len(invalidated((host, user))) == len(before[host]) + 2    # both moves kept, none deleted
