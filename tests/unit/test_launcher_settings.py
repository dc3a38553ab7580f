"""The launcher_settings module, run through its entry point like Ansible runs it."""
import json
import os

import pytest

from ansible.module_utils import basic
from ansible.module_utils import launcher as L
from ansible.module_utils.common.text.converters import to_bytes

import launcher_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_SH = os.path.join(ROOT, "lab", "standins", "legacy", "start.sh")  # forward arrays
LAUNCHER_ENV = os.path.join(ROOT, "lab", "seed", "launcher.env")
API_KEY = "sk-lab-0000000000000000000000000000"


def settings(**changes):
    with open(LAUNCHER_ENV) as fh:
        env = L.parse_env(fh.read(), {"HOME": "/home/mia"})
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(monkeypatch, capsys, args):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    if hasattr(basic, "_ANSIBLE_PROFILE"):      # ansible-core >= 2.19 needs a serialization profile
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        launcher_settings.main()
    raw = capsys.readouterr().out
    out = json.loads(raw)
    out["_raw"] = raw
    return out


def base(**kw):
    args = {"settings": settings(), "launcher": START_SH, "tp_size": 3, "host_label": "spark1"}
    args.update(kw)
    return args


def test_report_baseline_passes(monkeypatch, capsys):
    res = run(monkeypatch, capsys, base())
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and res["errors"] == [] and res["problems"] == []
    assert res["unforwarded"] == {"head": [], "worker": []}
    assert res["forward_lists"]["head"][0] == "API_KEY" and "API_KEY" not in res["forward_lists"]["worker"]
    assert res["setting_warnings"] == ["DSV41_CACHE_WAYS='4' has no effect while DSV41_CACHE_GIB is 0 "
                                       "(ways matter only with a non-zero row cache)"]
    assert any("DSV41_CACHE_WAYS='4' has no effect" in str(w) for w in res.get("warnings", []))
    assert res["settings"]["API_KEY"] == "***" and res["settings"]["MAX_TOTAL_TOKENS"] == "750000"
    assert API_KEY not in res["_raw"]
    assert res["launcher"] == START_SH


def test_unforwarded_variables_fail_naming_variable_and_path(monkeypatch, capsys):
    res = run(monkeypatch, capsys, base(settings=settings(SGLANG_DSPARK_FOLDED_SAMPLING="0",
                                                          DSV41_ENGRAM_PREFETCH_CHECK="1",
                                                          DSV41_ENGRAM_PREFETCH="1"),
                                        packed=True))
    assert res["failed"] is True
    lines = res["msg"].split("\n")
    assert lines[0] == "spark1: 4 launcher setting problem(s):"
    assert lines[1:] == [
        "DSV41_ENGRAM_PREFETCH_CHECK is set but the head launch path does not forward it (start.sh HEAD_FORWARD)",
        "SGLANG_DSPARK_FOLDED_SAMPLING is set but the head launch path does not forward it (start.sh HEAD_FORWARD)",
        "DSV41_ENGRAM_PREFETCH_CHECK is set but the worker launch path does not forward it (start.sh WORKER_FORWARD)",
        "SGLANG_DSPARK_FOLDED_SAMPLING is set but the worker launch path does not forward it "
        "(start.sh WORKER_FORWARD)"]
    assert res["unforwarded"]["worker"] == ["DSV41_ENGRAM_PREFETCH_CHECK", "SGLANG_DSPARK_FOLDED_SAMPLING"]
    assert res["errors"] == []


def test_unforwarded_reported_without_failing_when_asked(monkeypatch, capsys):
    res = run(monkeypatch, capsys, base(settings=settings(SGLANG_DSPARK_FOLDED_SAMPLING=0),
                                        fail_on_unforwarded=False))
    assert not res.get("failed")
    assert res["unforwarded"] == {"head": ["SGLANG_DSPARK_FOLDED_SAMPLING"],
                                  "worker": ["SGLANG_DSPARK_FOLDED_SAMPLING"]}
    assert res["problems"] == [] and len(res["forwarding_gaps"]) == 2


def test_forwarded_by_a_fixed_launcher(monkeypatch, capsys, tmp_path):
    with open(START_SH) as fh:
        text = fh.read()
    fixed = text.replace("  OFFLOAD_MODE\n)", "  OFFLOAD_MODE\n  SGLANG_DSPARK_FOLDED_SAMPLING  # AUTO when unset\n)")
    assert fixed.count("SGLANG_DSPARK_FOLDED_SAMPLING") == 2
    path = tmp_path / "start.sh"
    path.write_text(fixed)
    res = run(monkeypatch, capsys, base(launcher=str(path), settings=settings(SGLANG_DSPARK_FOLDED_SAMPLING="0")))
    assert not res.get("failed"), res.get("msg")
    assert res["forward_lists"]["worker"][-1] == "SGLANG_DSPARK_FOLDED_SAMPLING"


def test_broken_rules_fail_one_line_each(monkeypatch, capsys):
    bad = settings(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=None,
                   MEM_FRACTION_STATIC="0.9")
    res = run(monkeypatch, capsys, base(settings=bad))
    assert res["failed"]
    lines = res["msg"].split("\n")
    assert lines[0] == "spark1: 3 launcher setting problem(s):"
    assert lines[1].startswith("PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' enables expandable_segments:True")
    assert lines[2].startswith("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE is unset")
    assert lines[3].startswith("MEM_FRACTION_STATIC='0.9' is below 0.944")
    assert [f["rule"] for f in res["findings"] if f["level"] == "error"] == \
        ["alloc_expandable", "moe_fused_finalize", "fraction_floor"]
    assert API_KEY not in res["_raw"]


def test_rule_inputs_validated_packed_timing(monkeypatch, capsys):
    s = settings(DSV41_WO_A_W8="1", DSV41_WO_A_W8_DROP="1", DSV41_ENGRAM_PREFETCH="1")
    res = run(monkeypatch, capsys, base(settings=s))
    assert res["failed"]
    assert {f["rule"] for f in res["findings"]} >= {"wo_a_drop_validated", "prefetch_packed"}
    res = run(monkeypatch, capsys, base(settings=s, validated=["wo_a_w8"], packed=True))
    assert not res.get("failed"), res.get("msg")
    s = settings(DSV41_ENGRAM_PREFETCH="1")
    res = run(monkeypatch, capsys, base(settings=s, packed=True, timing=True))
    assert not res.get("failed")


def test_tp_size_follows_the_inventory(monkeypatch, capsys):
    res = run(monkeypatch, capsys, base(tp_size=4))
    assert res["failed"] and "TP_SIZE='3' but the inventory has tp_size 4" in res["msg"]


def test_secret_values_never_leak(monkeypatch, capsys):
    s = settings(HF_TOKEN="hf_abcdefghijkl", DB_PASSWORD="hunter2-hunter2", MY_SECRET="s3cr3t-value")
    res = run(monkeypatch, capsys, base(settings=s, fail_on_unforwarded=True))
    assert res["failed"]          # the three are not forwarded
    for value in (API_KEY, "hf_abcdefghijkl", "hunter2-hunter2", "s3cr3t-value"):
        assert value not in res["_raw"]
    assert res["settings"]["HF_TOKEN"] == "***" and res["settings"]["DB_PASSWORD"] == "***"
    assert "HF_TOKEN is set but the worker launch path does not forward it" in res["msg"]


def test_unknown_validation_is_a_warning(monkeypatch, capsys):
    res = run(monkeypatch, capsys, base(validated=["wo_a_w8", "w8_typo"]))
    assert not res.get("failed")
    assert any("validated: 'w8_typo' unlocks nothing here" in w for w in res["setting_warnings"])


def test_check_mode_is_read_only_and_same(monkeypatch, capsys):
    normal = run(monkeypatch, capsys, base(settings=settings(DSV41_SHARED_PAD_K="576")))
    checked = run(monkeypatch, capsys, base(settings=settings(DSV41_SHARED_PAD_K="576"), _ansible_check_mode=True))
    assert checked["failed"] and checked["changed"] is False and not checked.get("skipped")
    for key in ("errors", "unforwarded", "forward_lists", "msg"):
        assert checked[key] == normal[key]
    ok = run(monkeypatch, capsys, base(_ansible_check_mode=True))
    assert not ok.get("failed") and ok["changed"] is False


def test_missing_launcher(monkeypatch, capsys, tmp_path):
    res = run(monkeypatch, capsys, base(launcher=str(tmp_path / "start.sh")))
    assert res["failed"] and res["msg"].startswith("spark1: cannot read the launcher %s" % (tmp_path / "start.sh"))


def test_launcher_without_worker_block(monkeypatch, capsys, tmp_path):
    path = tmp_path / "start.sh"
    path.write_text("#!/bin/bash\nHEAD_FORWARD=(API_KEY DSV41_WO_A_W8)\n")
    res = run(monkeypatch, capsys, base(launcher=str(path)))
    assert res["failed"]
    assert res["msg"] == ("spark1: %s has no WORKER_FORWARD=( ... ) block: cannot tell which variables the worker "
                          "launch path forwards" % path)


@pytest.mark.parametrize("args, needle", [
    ({"launcher": START_SH, "tp_size": 3}, "settings"),
    ({"settings": {}, "tp_size": 3}, "launcher"),
    ({"settings": {}, "launcher": START_SH}, "tp_size"),
    ({"settings": {}, "launcher": START_SH, "tp_size": 0}, "tp_size 0 is not a positive integer"),
])
def test_argument_validation(monkeypatch, capsys, args, needle):
    res = run(monkeypatch, capsys, args)
    assert res["failed"] and needle in res["msg"]


def test_documentation_blocks_parse():
    import yaml
    doc = yaml.safe_load(launcher_settings.DOCUMENTATION)
    assert doc["module"] == "launcher_settings"
    assert set(doc["options"]) == {"settings", "launcher", "tp_size", "validated", "packed", "timing",
                                   "fail_on_unforwarded", "host_label"}
    yaml.safe_load(launcher_settings.EXAMPLES)
    ret = yaml.safe_load(launcher_settings.RETURN)
    assert {"forward_lists", "unforwarded", "errors", "setting_warnings", "problems", "settings"} <= set(ret)


UNWRITABLE = [
    ("FOO;touch /tmp/x", "1", "spark1: 1 launcher setting problem(s):\n'FOO;touch /tmp/x' is not a shell variable name"),
    ("1ABC", "1", "'1ABC' is not a shell variable name"),
    ("BASH_ENV", "/tmp/evil.sh", "BASH_ENV is a variable of the shell or the program loader"),
    ("LD_PRELOAD", "/tmp/evil.so", "LD_PRELOAD is a variable of the shell or the program loader"),
    ("MODEL_PATH", "/srv\ntouch /tmp/x", "MODEL_PATH: the value holds a newline"),
    ("IMAGE", "x\x00y", "IMAGE: the value holds a NUL byte"),
    ("hf_token", "hf_secret\rvalue", "hf_token: the value holds a carriage return"),
]


@pytest.mark.parametrize("key,value,needle", UNWRITABLE, ids=[k for k, _, _ in UNWRITABLE])
def test_unwritable_keys_and_values_are_refused_naming_the_key(monkeypatch, capsys, key, value, needle):
    res = run(monkeypatch, capsys, base(settings=settings(**{key: value}), fail_on_unforwarded=False))
    assert res["failed"] and needle in res["msg"]
    assert [f["rule"] for f in res["findings"] if f["key"] == key] == ["env_writable"]
    assert "hf_secret" not in res["_raw"]                # a secret's value is never echoed, even refused
