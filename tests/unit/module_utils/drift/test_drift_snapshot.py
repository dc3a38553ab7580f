"""A host's drift snapshot (module_utils/drift/snapshot.py) directly and through the fleet_snapshot module."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

import ckpt_factory
import drift_filters as drift_filters
import engine_logs
import fleet_snapshot
from ansible.module_utils.drift import compare, snapshot as drift_snapshot
from modrun import run_module

ROOT = Path(__file__).resolve().parents[4]
SECRET = "sk-unit-secret-value-0123456789"
IMAGE_ID = "sha256:" + "1" * 64


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake host: unit dir, launcher checkout (.env, adapters), checkpoint, empty Engram dir, meminfo."""
    units = tmp_path / "units"
    units.mkdir()
    (units / "nvidia-clock-lock.service").write_text("[Service]\nExecStart=/usr/bin/nvidia-smi -lgc 0,2200\n")
    monkeypatch.setattr(drift_snapshot, "UNIT_DIR", str(units))
    launcher = tmp_path / "dsv41-3x-spark"
    (launcher / "adapter").mkdir(parents=True)
    for name in ("draft_tau.py", "sitecustomize.py"):
        shutil.copy(ROOT / "lab" / "seed" / "adapters" / name, launcher / "adapter" / name)
    (launcher / ".env").write_text(f"MAX_RUNNING_REQUESTS=4\nAPI_KEY={SECRET}\nNOTE='key is {SECRET}'\n")
    ckpt = tmp_path / "ckpt"
    ckpt_factory.make_checkpoint(str(ckpt), rows={1: 30, 14: 30})
    engram = tmp_path / "engram"
    engram.mkdir()
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       128000000 kB\nMemAvailable:    3219128 kB\n")
    files = {n: sha(launcher / "adapter" / n) for n in ("draft_tau.py", "sitecustomize.py")}
    args = {"host_label": "spark1", "rank": 0, "tp_size": 3, "container": "dsv41-head", "launcher_dir": str(launcher),
            "env_path": str(launcher / ".env"), "env_settings": {"MAX_RUNNING_REQUESTS": 4, "NOTE": f"key is {SECRET}"},
            "env_secrets": {"API_KEY": SECRET}, "adapters_enabled": {"draft_tau": "DSV41_DRAFT_TAU"},
            "checkpoint": str(ckpt), "engram_dir": str(engram), "meminfo": str(meminfo),
            "declared": {"adapters_manifest": files, "clock_exec_start": "/usr/bin/nvidia-smi -lgc 0,2200",
                         "clock_range": "0,2200", "layers": [1, 14], "mem_available_floor_gib": 2.0,
                         "contention_names": [], "default_target": "multi-user.target", "display_manager": "",
                         "is_head": True}}
    return {"args": args, "files": files, "launcher": launcher, "engram": engram}


def fake_commands(files, docker=True, containers=("dsv41-head",)):
    out, err = engine_logs.docker_streams(engine_logs.boot(0, packed=(True, False), ready=True))

    def run(cmd):
        if cmd[0] == "docker" and not docker:
            return 127, "", "docker: command not found"
        c = " ".join(cmd)
        if c == "systemctl show -p UserspaceTimestampMonotonic":
            return 0, "UserspaceTimestampMonotonic=0\n", ""
        if c.startswith("systemctl show nvidia-clock-lock.service"):
            return 0, "LoadState=loaded\nActiveState=active\nResult=success\nUnitFileState=enabled\n", ""
        if cmd[0] == "journalctl":
            return 0, "", ""
        if c == "docker inspect dsv41-head":
            return 0, json.dumps([{"Image": IMAGE_ID, "Config": {"Image": "dsv41-sglang:tp3", "Env": [f"API_KEY={SECRET}"]},
                                   "State": {"Status": "running"}, "Mounts": []}]), ""
        if c == "docker image inspect " + IMAGE_ID:
            return 0, json.dumps([{"Id": IMAGE_ID, "RepoDigests": ["dsv41-sglang@sha256:ab"]}]), ""
        if cmd[:2] == ["docker", "run"]:
            return 0, "".join("%s  /sgl-workspace/adapter/%s\n" % (files[n], n) for n in sorted(files)), ""
        if cmd == ["docker", "inspect", "--format", "{{json .State}}", "dsv41-head"]:
            return 0, json.dumps({"Status": "running", "StartedAt": "2026-09-11T00:00:00Z"}) + "\n", ""
        if c == "docker logs --timestamps --since 2026-09-11T00:00:00Z dsv41-head":
            return 0, out, err
        if cmd[:2] == ["docker", "ps"]:
            return 0, "".join(json.dumps({"Names": n, "Image": "img", "State": "running", "Status": "Up"}) + "\n"
                              for n in containers), ""
        if c == "systemctl get-default":
            return 0, "multi-user.target\n", ""
        if "display-manager.service" in c:
            return 0, "display-manager.service\n", ""
        raise AssertionError("unexpected command %r" % cmd)
    return run


def test_module_snapshot_masks_secrets_and_feeds_the_comparison(host, monkeypatch, capsys):
    res = run_module(fleet_snapshot.main, host["args"], run_command=fake_commands(host["files"]))
    assert res["changed"] is False and res["declared"] == host["args"]["declared"]
    snap = res["snapshot"]
    assert snap["errors"] == []
    assert snap["env"]["actual"]["API_KEY"] == "(secret)" and snap["env"]["actual"]["NOTE"] == "key is ***"
    assert SECRET not in json.dumps(res)
    assert snap["clock"]["exec_start"] == ["/usr/bin/nvidia-smi -lgc 0,2200"] and snap["clock"]["enabled"] == "enabled"
    assert snap["image"] == {"ref": IMAGE_ID, "id": IMAGE_ID, "digests": ["dsv41-sglang@sha256:ab"]}
    assert snap["image_adapters"] == host["files"] and snap["adapters"]["registration_problems"] == []
    assert snap["boot"]["packed"] == {"1": True, "14": False} and snap["boot"]["pool_full"] == 491520
    assert [s["state"] for s in snap["shards"]["shards"]] == ["missing", "missing"]
    assert snap["memory"]["mem_available_bytes"] == 3219128 * 1024
    found = {(f["area"], f["item"]) for f in compare.compare_host("spark1", snap, res["declared"])}
    # the journal shows no run of the unit here, so the lock cannot be established
    assert found == {("clock_lock", "applied lock"), ("engine", "layer 14 packed"), ("engine", "KV pool"),
                     ("shards", "layer 1 shard"), ("shards", "layer 14 shard")}


def test_changed_secret_and_edited_adapter(host, monkeypatch, capsys):
    env = host["launcher"] / ".env"
    env.write_text(env.read_text().replace(f"API_KEY={SECRET}", "API_KEY=sk-typed-by-hand-99999999"))
    with open(host["launcher"] / "adapter" / "draft_tau.py", "a") as handle:
        handle.write("# edited\n")
    res = run_module(fleet_snapshot.main, host["args"], run_command=fake_commands(host["files"]))
    assert res["snapshot"]["env"]["actual"]["API_KEY"] == "(secret changed)"
    assert "sk-typed-by-hand-99999999" not in json.dumps(res) and SECRET not in json.dumps(res)
    found = compare.compare_host("spark1", res["snapshot"], res["declared"])
    env_f = [(f["item"], f["expected"], f["actual"]) for f in found if f["area"] == "env"]
    assert env_f == [("API_KEY", "(secret)", "changed")]
    assert [f["item"] for f in found if f["area"] == "adapters"] == ["draft_tau.py"]


def test_a_failed_probe_is_listed_and_the_others_still_run(host, monkeypatch, capsys):
    res = run_module(fleet_snapshot.main, host["args"], run_command=fake_commands(host["files"], docker=False))
    snap = res["snapshot"]
    assert {e["area"] for e in snap["errors"]} == {"engine", "image", "containers"}
    assert snap["clock"]["verdict"] and snap["env"]["actual"] and snap["shards"] and snap["memory"]
    assert compare.exit_code(compare.compare_host("spark1", snap, res["declared"])) == 3


def test_bad_rank_is_refused(host, monkeypatch, capsys):
    res = run_module(fleet_snapshot.main, dict(host["args"], rank=3), run_command=fake_commands(host["files"]))
    assert res["failed"] and "spark1: rank 3 is outside 0..2 for tp_size 3" in res["msg"]


def test_logic_helpers():
    assert drift_snapshot.exec_start("[Service]\nExecStart=/a -lgc 0,1\n ExecStart = /b\n") == ["/a -lgc 0,1", "/b"]
    env = {"API_KEY": "v", "TOKENIZER": "has v inside", "HF_TOKEN": "w"}
    assert drift_snapshot.mask_env(env, ["v"], {"API_KEY": "v"}) == {
        "API_KEY": "(secret)", "TOKENIZER": "has v inside", "HF_TOKEN": "(secret, not declared)"}
    assert drift_snapshot.mask_strings({"a": ["x sk-1234567890 y"]}, ["sk-1234567890"]) == {"a": ["x *** y"]}


def test_the_running_container_is_compared_with_the_launch_the_inventory_gives(host, monkeypatch, capsys):
    # the host returns what its container received (secrets masked); the control node compares it with the
    # prediction (launcher_effective's result for the fleet, secrets masked), key by key
    args = dict(host["args"], declared=dict(host["args"]["declared"], compare_launch=True))
    res = run_module(fleet_snapshot.main, args, run_command=fake_commands(host["files"]))
    launch = res["snapshot"]["launch"]
    assert launch["rank"] == 0 and launch["container"]["Config"]["Env"] == ["API_KEY=***"]
    assert SECRET not in json.dumps(res)
    want = {"name": "dsv41-head", "rank": 0, "env": {"API_KEY": "***", "DSV41_CACHE_GIB": "0"}, "mounts": [
        {"source": str(host["engram"]), "target": "/engram", "type": "bind", "read_only": False}]}
    prediction = {"containers": [want, dict(want, rank=1, name="dsv41-worker")]}
    found = [(f["area"], f["item"], f["expected"], f["actual"], f["class"])
             for f in compare.compare_host("spark1", res["snapshot"], res["declared"], prediction)
             if f["area"] == "launch"]
    assert found == [("launch", "env DSV41_CACHE_GIB", "0", "(absent)", "drift"),
                     ("launch", "mount /engram", str(host["engram"]), "(absent)", "drift")]
    # a launch that could not be predicted is one finding naming why; no prediction asked, no comparison
    failed = compare.compare_host("spark1", res["snapshot"], res["declared"],
                                        {"error": "start.sh serve exited 1 in the sandbox"})
    assert [(f["item"], f["actual"], f["class"]) for f in failed if f["area"] == "launch"] == [
        ("prediction", "start.sh serve exited 1 in the sandbox", "probe")]
    res = run_module(fleet_snapshot.main, host["args"], run_command=fake_commands(host["files"]))
    assert res["snapshot"]["launch"] is None


def test_values_shaped_like_secrets_never_leave_in_clear_whatever_their_name(tmp_path):
    # issue: names that say nothing (HF_TOKENS, DATABASE_URL, UPSTREAM_HDR) with secret-shaped values went to
    # the module's public option, which Ansible echoes in the invocation the drift runner keeps in its events
    shaped = {"HF_TOKENS": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "DATABASE_URL": "postgres://admin:pw9876@db",
              "UPSTREAM_HDR": "Bearer abcdefghijklmnop1234567890", "SLACK_USER": "xoxp-9999-8888-zyxwvutsrqpo"}
    env = tmp_path / ".env"
    env.write_text("".join("%s='%s'\n" % kv for kv in dict(shaped, DATABASE_URL="postgres://admin:other@db").items())
                   + "TP_SIZE=3\n")
    split = drift_filters.dsv41_drift_env_split(dict(shaped, TP_SIZE=3), "sk-api-key-0000000000")
    assert split["public"] == {"TP_SIZE": 3} and set(split["secrets"]) == set(shaped) | {"API_KEY"}
    snap = drift_snapshot.env_snapshot(str(env), split["public"], split["secrets"])
    assert snap["actual"]["DATABASE_URL"] == "postgres://admin:***@db" and snap["actual"]["TP_SIZE"] == "3"
    assert snap["actual"]["UPSTREAM_HDR"] == "Bearer ***"
    text = json.dumps(snap)
    assert not [v for v in shaped.values() if v in text] and "other" not in text and "pw9876" not in text


def test_a_unit_state_systemd_left_out_is_asked_again_with_is_enabled(host, monkeypatch, capsys):
    """`systemctl show` can omit UnitFileState while the manager is busy: the snapshot asks `is-enabled` before
    calling the state unknown (which the comparison would report as drift)."""
    base = fake_commands(host["files"])
    asked = []

    def run(cmd):
        c = " ".join(cmd)
        if c.startswith("systemctl show nvidia-clock-lock.service"):
            return 0, "LoadState=loaded\nActiveState=active\nResult=success\nUnitFileState=\n", ""
        if c == "systemctl is-enabled nvidia-clock-lock.service":
            asked.append(c)
            return 0, "enabled\n", ""
        return base(cmd)
    res = run_module(fleet_snapshot.main, host["args"], run_command=run)
    assert asked and res["snapshot"]["clock"]["enabled"] == "enabled"
    found = {(f["area"], f["item"]) for f in compare.compare_host("spark1", res["snapshot"], res["declared"])}
    assert ("clock_lock", "enabled at boot") not in found
