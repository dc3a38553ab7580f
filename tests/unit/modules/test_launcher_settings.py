"""The launcher_settings module, run through its entry point like Ansible runs it, on launchers of the
real family's shape (tests/unit/fixtures/launchers) and the lab's launcher."""
import json

from ansible.module_utils.envfile import parse

import launcher_settings
from launcher_fixtures import API_KEY, BASELINE_ENV, checkout
from modrun import run_module


def settings(**changes):
    env = parse.parse_env(BASELINE_ENV, {"HOME": "/home/mia"})
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(monkeypatch, capsys, tmp_path, variant="explicit", env=BASELINE_ENV, **kw):
    script, home = checkout(tmp_path, variant, env)
    args = {"settings": settings(), "launcher": script, "tp_size": 3, "host_label": "spark1", "home": home,
            "head_host": "spark1"}
    args.update(kw)
    res = run_module(launcher_settings.main, args)
    res["_raw"] = json.dumps(res)
    return res


def test_declared_settings_that_every_container_receives_pass(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and res["errors"] == [] and res["problems"] == []
    assert res["unforwarded"] == {"head": [], "worker": []}
    assert "API_KEY" in res["forward_lists"]["head"] and "API_KEY" in res["forward_lists"]["worker"]
    # consumed by the launcher itself (engine arguments, mounts, image): found by changing them
    assert res["launcher_reads"] == ["DSPARK_BLOCK_SIZE", "ENGRAM_DIR", "IMAGE", "MAX_RUNNING_REQUESTS",
                                     "MEM_FRACTION_STATIC", "MODEL_PATH", "TP_SIZE", "WORKER_DIR", "WORKER_USER"]
    assert res["setting_warnings"] == ["DSV41_CACHE_WAYS='4' has no effect while DSV41_CACHE_GIB is 0 "
                                       "(ways matter only with a non-zero row cache)"] + [
        "spark%d (dsv41-worker, rank %d): cannot tell whether /home/zurih/dsv41-3x-spark/state/dspark_sps.json "
        "(DSPARK_SPS_TABLE=/state/dspark_sps.json) exists on spark%d; the engine uses the table if it is there"
        % (r + 1, r, r + 1) for r in (1, 2)]
    assert res["notes"][0].endswith("staying on the verify-all schedule")
    assert res["ranks"]["0"]["engram_source"] == "/home/mia/dsv41-engram"
    assert res["settings"]["API_KEY"] == "***" and API_KEY not in res["_raw"]


def test_a_setting_no_container_receives_fails_naming_it(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path, settings=settings(SGLANG_DSPARK_FOLDED_SAMPLING="0",
                                                               WORKER_ENGRAM_DIR_SPARK2="/data/engram"))
    assert res["failed"] is True
    everyone = "spark2 (dsv41-worker, rank 1), spark3 (dsv41-worker, rank 2) do not receive it"
    idle = " (nor does the launcher read it: it has no effect)"
    # the engine's switch is a gap on both paths; the per-host name this launcher never reads is reported only
    assert res["msg"].split("\n") == [
        "spark1: 2 launcher setting problem(s):",
        "SGLANG_DSPARK_FOLDED_SAMPLING is set but the head launch path does not forward it: spark1 (dsv41-head, "
        "rank 0) does not receive it" + idle,
        "SGLANG_DSPARK_FOLDED_SAMPLING is set but the worker launch path does not forward it: " + everyone + idle]
    assert res["no_effect"] == [
        "SGLANG_DSPARK_FOLDED_SAMPLING='0' is set but has no effect: the launcher does not read it and no container "
        "receives it",
        "WORKER_ENGRAM_DIR_SPARK2='/data/engram' is set but has no effect: the launcher does not read it and no "
        "container receives it"]
    assert res["unforwarded"] == {"head": ["SGLANG_DSPARK_FOLDED_SAMPLING"], "worker": ["SGLANG_DSPARK_FOLDED_SAMPLING"]}
    assert res["no_effect"][1] in res["setting_warnings"]
    res = run(monkeypatch, capsys, tmp_path / "b", settings=settings(SGLANG_DSPARK_FOLDED_SAMPLING="0"),
              fail_on_unforwarded=False)
    assert not res.get("failed") and len(res["no_effect"]) == 1 and res["problems"] == []


def test_the_lab_launcher_reads_its_per_host_key_but_keeps_the_api_key_on_the_head(monkeypatch, capsys, tmp_path):
    s = settings(WORKER_ENGRAM_DIR_SPARK2="/data/engram", WORKER_HOSTS="spark2 spark3", HEAD_HOST="spark1")
    res = run(monkeypatch, capsys, tmp_path, "lab", settings=s, env=None, env_text=None)
    assert res["failed"]
    assert "WORKER_ENGRAM_DIR_SPARK2" in res["launcher_reads"]
    assert res["msg"].split("\n")[1:] == [
        "API_KEY is set but the worker launch path does not forward it: spark2 (dsv41-worker, rank 1), "
        "spark3 (dsv41-worker, rank 2) do not receive it"]
    assert res["ranks"]["1"]["engram_source"] == "/data/engram"
    assert res["ranks"]["2"]["engram_source"] == "/home/zurih/dsv41-3x-spark/engram"


def test_launcher_defaults_are_refused_with_the_fix(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path, "printf_array",
              settings=settings(DSV41_CACHE_GIB=None, SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=None))
    assert res["failed"]
    assert [(f["rule"], f["key"]) for f in res["findings"] if f["level"] == "error"] == [
        ("moe_fused_finalize", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"), ("tp4_row_cache", "DSV41_CACHE_GIB")]
    for line in res["msg"].split("\n")[1:]:
        assert "from the launcher default in start.sh" in line and line.endswith("set it explicitly in the .env")
    assert "receive DSV41_CACHE_GIB='4'" in res["msg"] and "receive SGLANG_FLASHINFER_MOE_FUSED_FINALIZE='1'" in res["msg"]


def test_a_table_present_on_a_worker_is_refused(monkeypatch, capsys, tmp_path):
    table = "/home/zurih/dsv41-3x-spark/state/dspark_sps.json"
    res = run(monkeypatch, capsys, tmp_path, "indirect", worker_files={"spark3": [table], "spark2": []})
    assert res["failed"]
    assert res["msg"].split("\n")[1].startswith(
        "spark3 (dsv41-worker, rank 2) receives DSPARK_SPS_TABLE='/state/dspark_sps.json' from the launcher default")
    assert "the table exists where the container reads it (%s)" % table in res["msg"]
    assert any(n.startswith("spark2 (dsv41-worker, rank 1): DSPARK_SPS_TABLE=/state/dspark_sps.json not found")
               for n in res["notes"])


def test_unwritable_settings_are_refused_before_any_evaluation(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path, settings=settings(IMAGE="x\n$(touch /tmp/x)"))
    assert res["failed"] and "IMAGE: the value holds a newline" in res["msg"]
    assert "ranks" not in res


def test_an_unevaluable_launcher_fails_clearly(monkeypatch, capsys, tmp_path):
    script, home = checkout(tmp_path)
    with open(script, "a") as fh:
        fh.write("\necho 'no GPU found on this node' >&2\nexit 7\n")
    res = run_module(launcher_settings.main,
                   {"settings": settings(), "launcher": script, "tp_size": 3, "home": home, "host_label": "spark1"})
    assert res["failed"] and res["msg"].startswith("spark1: %s serve exited 7 in the sandbox" % script)
    assert "no GPU found on this node" in res["msg"]
    res = run_module(launcher_settings.main,
                   {"settings": settings(), "launcher": script + ".nope", "tp_size": 3, "host_label": "spark1"})
    assert res["failed"] and "cannot read the launcher" in res["msg"]


def test_tp_size_follows_the_inventory_and_secrets_never_leak(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path, tp_size=4,
              settings=settings(HF_TOKEN="hf_abcdefghijkl", DB_PASSWORD="hunter2-hunter2"))
    assert res["failed"] and "TP_SIZE='3' but the inventory has tp_size 4" in res["msg"]
    for value in (API_KEY, "hf_abcdefghijkl", "hunter2-hunter2"):
        assert value not in res["_raw"]
    assert res["settings"]["HF_TOKEN"] == "***"
    assert any("HF_TOKEN='***' is set but has no effect" in m for m in res["no_effect"])
    assert any("HF_TOKEN='***' is set but has no effect" in m for m in res["setting_warnings"])


def test_the_evaluated_env_keeps_the_undeclared_keys_the_launcher_reads(monkeypatch, capsys, tmp_path):
    """The lab's indirect launcher names its workers by WORKER1_HOST/WORKER2_HOST, site keys the inventory
    does not declare: with env_path the check evaluates the .env the converge will leave (those keys kept)."""
    declared = settings(HEAD_HOST="spark1", WORKER_HOSTS="spark2 spark3")
    declared.pop("API_KEY")
    res = run(monkeypatch, capsys, tmp_path / "a", "lab-indirect", settings=declared, api_key=API_KEY,
              env_path=str(tmp_path / "a" / "home" / "mia" / "dsv41-3x-spark" / ".env"), fail_on_unforwarded=False)
    assert [res["ranks"][r]["host"] for r in ("0", "1", "2")] == ["spark1", "spark2", "spark3"], res.get("msg")
    alone = run(monkeypatch, capsys, tmp_path / "b", "lab-indirect", settings=declared, api_key=API_KEY,
                fail_on_unforwarded=False)
    assert sorted(alone.get("ranks") or {}) == ["0"], "the declared keys alone name no worker"
    assert API_KEY not in res["_raw"] and API_KEY not in alone["_raw"]


def test_an_image_the_workers_ssh_string_reparses_is_refused(monkeypatch, capsys, tmp_path):
    """The lab's explicit launcher puts $IMAGE into the workers' ssh command string unquoted: the quotes of
    this value are stripped there, so the workers would run another image than the head."""
    hostile = 'x" ; touch /tmp/dsv41-pwned ; "'
    res = run(monkeypatch, capsys, tmp_path, "lab-explicit", settings=settings(IMAGE=hostile),
              env_path=str(tmp_path / "home" / "mia" / "dsv41-3x-spark" / ".env"))  # the lab's .env names the workers
    assert res["failed"] is True
    assert "IMAGE=%r is declared but spark2 (dsv41-worker, rank 1) runs" % hostile in res["msg"]
    assert "the launcher does not pass the value through intact" in res["msg"]
    assert not __import__("os").path.exists("/tmp/dsv41-pwned")


# The community's four-node TP4 profile on the base image (.env.tp4.example of
# knapcio/DeepSeek-V4.1-Flash-4x-DGX-Spark-TP4), as declared settings of a TP4 fleet.
TP4 = {"TP_SIZE": "4", "EP_SIZE": "2", "DSPARK_BLOCK_SIZE": "5", "MAX_RUNNING_REQUESTS": "16",
       "MAX_TOTAL_TOKENS": "8000000", "MEM_FRACTION_STATIC": "0.80", "DSV41_CACHE_GIB": "4", "DSV41_CACHE_WAYS": "16",
       "DSV41_SHARED_PAD_K": "1", "WORKER_HOSTS": "spark2 spark3 spark4",
       "WORKER_IPS": "192.168.100.2 192.168.100.3 192.168.100.4"}


def test_a_tp4_fleet_is_judged_by_the_tp4_rule_set(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path / "tp4", settings=settings(**TP4), tp_size=4, fail_on_unforwarded=False)
    assert res["errors"] == [] and not res.get("failed"), res.get("msg")
    # the same settings on a TP3 inventory: the TP3 set names every TP4 value (and the TP size)
    res = run(monkeypatch, capsys, tmp_path / "tp3", settings=settings(**TP4), tp_size=3, fail_on_unforwarded=False)
    assert res["failed"] is True
    assert [f["rule"] for f in res["findings"] if f["level"] == "error"] == [
        "shared_pad_tp3", "tp4_slots", "tp4_kv_pool", "tp4_fraction", "tp4_row_cache", "tp_size", "ep_size"]
    # what breaks the TP4 padding adapter is refused on TP4, naming the value
    res = run(monkeypatch, capsys, tmp_path / "pad", settings=settings(**dict(TP4, DSV41_SHARED_PAD_K="576")),
              tp_size=4, fail_on_unforwarded=False)
    assert res["failed"] is True and res["msg"].split("\n") == [
        "spark1: 1 launcher setting problem(s):",
        "DSV41_SHARED_PAD_K='576': DSV41_SHARED_PAD_K is the TP4 padding adapter's switch, 0 or 1 (the adapter pads "
        "the shared expert's K=576 to 640 itself; the TP4 profile runs 1)"]


def test_a_tp_size_without_a_rule_set_fails_before_anything_is_evaluated(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, tmp_path, tp_size=5)
    assert res["failed"] is True and res["msg"] == (
        "spark1: tp_size 5 has no launcher rule set (there is one for TP3 and TP4): the settings of such a fleet "
        "cannot be judged, and another size's rules would be wrong for it")
    assert "ranks" not in res and "findings" not in res
