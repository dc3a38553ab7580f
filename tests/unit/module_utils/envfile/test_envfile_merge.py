"""Adopt, never drop: the in-place converge (module_utils/envfile/merge.py) and adoption
(module_utils/envfile/adopt.py, library/launcher_adopt.py), checked with bash itself."""
import json
import os
import subprocess

import pytest
import yaml

from ansible.module_utils.envfile import adopt as A
from ansible.module_utils.launcher import env as E
from ansible.module_utils.envfile import merge as envfile_merge, render, shell
from ansible.module_utils.envfile.shell import EnvError

import launcher_adopt as launcher_adopt_module
from modrun import run_module

BASE = {"HOME": "/home/mia", "PATH": "/usr/bin:/bin"}
HEADER = render.render_env({})
# A hand-written fleet .env of the real kind: header from an earlier converge, undeclared keys in
# several syntaxes (export, double quotes, a reference to HOME and to an earlier key, a comment
# after a value, a line continuation), a secret, trailing notes.
FLEET = HEADER + (
    "MODEL_PATH=/srv/models/DeepSeek-V4.1-Flash\n"
    "# --- site ---\n"
    "export HEAD_IP=\"10.0.0.1\"   # data plane\n"
    "NCCL_SOCKET_IFNAME=enp1s0f0np0\n"
    "HCA_LIST='mlx5_0,mlx5_1'\n"
    "SSH_IDENTITY=$HOME/.ssh/id_spark\n"
    "WORKER_IPS=\"${HEAD_IP%%.1}.2 10.0.0.3\"\n".replace("${HEAD_IP%%.1}", "10.0.0") +
    "NFS_EXPORT=/srv/nfs\\\n/models\n"
    "HF_TOKEN=hf_live_value_1234\n"
    "DSPARK_BLOCK_SIZE=3\n"
    "API_KEY=sk-lab-0000000000000000000000000000\n"
    "# MEM_FRACTION_STATIC=0.98 was tried; spark3 failed to boot\n")
DECLARED = {"MODEL_PATH": "/srv/models/DeepSeek-V4.1-Flash", "DSPARK_BLOCK_SIZE": 3}
API = "sk-lab-0000000000000000000000000000"


def bash_env(tmp_path, text):
    path = tmp_path / "b.env"
    path.write_text(text)
    script = 'set -a; source "$1" >/dev/null; set +a; env -0'
    out = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in BASE.items()] + ["bash", "-c", script, "b",
                                                                                 str(path)],
                         stdout=subprocess.PIPE, check=True, timeout=20).stdout.decode()
    env = dict(item.partition("=")[::2] for item in out.split("\0") if item)
    return dict((k, v) for k, v in env.items() if k not in ("PWD", "SHLVL", "_", "HOME", "PATH"))


def merge(text, settings=None, **kw):
    kw.setdefault("api_key", API)
    return envfile_merge.merge_env(text, DECLARED if settings is None else settings, base=BASE, **kw)


def test_undeclared_keys_are_kept_verbatim_in_place(tmp_path):
    res = merge(FLEET)
    assert res["text"] == FLEET
    assert res["kept"] == ["HEAD_IP", "NCCL_SOCKET_IFNAME", "HCA_LIST", "SSH_IDENTITY", "WORKER_IPS", "NFS_EXPORT",
                           "HF_TOKEN"]
    assert res["removed"] == [] and res["rewritten"] == [] and res["added"] == []


def test_a_changed_declared_key_is_written_where_it_was_and_nothing_else_moves(tmp_path):
    res = merge(FLEET, dict(DECLARED, DSPARK_BLOCK_SIZE=5, MAX_RUNNING_REQUESTS=4))
    expected = FLEET.replace("DSPARK_BLOCK_SIZE=3\n", "DSPARK_BLOCK_SIZE=5\n").replace(
        "API_KEY=%s\n" % API, "API_KEY=%s\nMAX_RUNNING_REQUESTS=4\n" % API)
    assert res["text"] == expected and res["added"] == ["MAX_RUNNING_REQUESTS"]
    before, after = bash_env(tmp_path, FLEET), bash_env(tmp_path, res["text"])
    assert after == dict(before, DSPARK_BLOCK_SIZE="5", MAX_RUNNING_REQUESTS="4")


def test_removal_is_explicit(tmp_path):
    res = merge(FLEET, remove_keys=["NCCL_SOCKET_IFNAME", "HEAD_IP", "NOT_THERE"])
    assert "NCCL_SOCKET_IFNAME" not in res["text"] and "HEAD_IP=" not in res["text"]
    assert res["removed"] == ["NCCL_SOCKET_IFNAME", "HEAD_IP"]
    assert "HEAD_IP" not in res["kept"] and "HCA_LIST" in res["kept"]
    after = bash_env(tmp_path, res["text"])
    assert "HEAD_IP" not in after and after["HCA_LIST"] == "mlx5_0,mlx5_1"
    # a declared None is a removal too
    assert merge(FLEET, dict(DECLARED, HF_TOKEN=None))["removed"] == ["HF_TOKEN"]
    with pytest.raises(shell.EnvError, match="MODEL_PATH is both declared and listed for removal"):
        merge(FLEET, remove_keys=["MODEL_PATH"])
    with pytest.raises(shell.EnvError, match="remove_keys: 'A B' is not a shell variable name"):
        merge(FLEET, remove_keys=["A B"])


def test_a_line_shared_with_a_changed_key_is_split_with_the_same_values(tmp_path):
    text = "A=1 B=\"x $HOME\" C=$A\nexport D=4 E=5\n"
    res = merge(text, {"A": "2"}, api_key=None)
    assert res["text"] == HEADER + "A=2\nB='x /home/mia'\nC=1\nexport D=4 E=5\n"
    assert bash_env(tmp_path, res["text"]) == dict(bash_env(tmp_path, text), A="2")


def test_an_undeclared_key_that_refers_to_a_changed_key_is_not_silent(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=1\nB=$A/x\n")
    res = E.converge_env(str(env), {"A": "2"}, run_id="r", base=BASE)
    assert res["changes"] == ["A: 1 -> 2", "B: 1/x -> 2/x"] and res["kept_undeclared"] == ["B"]


def test_a_declared_key_assigned_twice_is_set_where_bash_last_assigns_it(tmp_path):
    text = "A=1\nB=$A\nA=3\n"
    res = merge(text, {"A": "2"}, api_key=None)
    assert res["text"] == HEADER + "A=1\nB=$A\nA=2\n"          # B keeps the value it had
    assert bash_env(tmp_path, res["text"]) == {"A": "2", "B": "1"}


def test_header_and_notes_are_added_once(tmp_path):
    res = merge("X=1\n", {}, api_key=None, notes=["tried 0.98"])
    assert res["text"] == HEADER + "X=1\n# tried 0.98\n"
    assert merge(res["text"], {}, api_key=None, notes=["tried 0.98"])["text"] == res["text"]
    assert merge("X=1", {"Y": "2"}, api_key=None)["text"] == HEADER + "X=1\nY=2\n"
    assert merge(None, {"Y": "2"}, api_key=None)["text"] == render.render_env({"Y": "2"})


def test_crlf_file_keeps_its_undeclared_lines_and_fixes_declared_ones(tmp_path):
    text = "A=1\r\nB=x\r\n"
    res = merge(text, {"A": "1"}, api_key=None)
    # bash holds A="1\r": the declared 1 differs, so A is rewritten; B keeps its \r as bash reads it
    assert res["text"] == HEADER + "A=1\nB=x\r\n" and res["kept"] == ["B"]
    assert bash_env(tmp_path, res["text"]) == {"A": "1", "B": "x\r"}


def test_a_value_that_cannot_be_rewritten_is_refused_naming_the_key():
    with pytest.raises(shell.EnvError, match=r"line 1: B: the value holds a carriage return.*put the changed key"):
        merge("A=1 B=$'x\\r'\n", {"A": "2"}, api_key=None)


def test_a_file_that_is_not_data_is_refused():
    with pytest.raises(shell.EnvSyntaxError, match="line 2"):
        merge("A=1\nB=$(curl x)\n")


# --------------------------------------------------------------------------- adoption

def test_adoption_declares_every_key_and_moves_secrets_to_the_vault(tmp_path):
    adopted = A.adopt_env(FLEET, BASE, "/x/.env")
    assert adopted["keys"] == 10 and adopted["secret_keys"] == ["HF_TOKEN", "API_KEY"]
    assert adopted["settings"]["HF_TOKEN"] == "{{ vault_dsv41_launcher_hf_token }}"
    assert adopted["settings"]["SSH_IDENTITY"] == "/home/mia/.ssh/id_spark" and "API_KEY" not in adopted["settings"]
    assert adopted["notes"] == ["MEM_FRACTION_STATIC=0.98 was tried; spark3 failed to boot"]
    proposal = A.proposal_yaml(adopted, "spark1:/x/.env")
    vault = A.vault_yaml(adopted, "spark1:/x/.env")
    for secret in ("hf_live_value_1234", API):
        assert secret not in proposal and secret in vault
    data, secrets = yaml.safe_load(proposal), yaml.safe_load(vault)
    assert data["dsv41_api_key"] == "{{ vault_dsv41_api_key }}" and secrets["vault_dsv41_api_key"] == API
    # the round trip: the proposal, its vault references resolved, converges to the same bytes
    settings = dict((k, secrets[v[3:-3]] if v.startswith("{{ vault_") else v)
                    for k, v in data["dsv41_launcher_settings"].items())
    res = envfile_merge.merge_env(FLEET, settings, api_key=secrets["vault_dsv41_api_key"],
                                  notes=data["dsv41_launcher_notes"], base=BASE)
    assert res["text"] == FLEET and res["kept"] == []
    # one key left out of the proposal is kept, not dropped
    del settings["NCCL_SOCKET_IFNAME"]
    res = envfile_merge.merge_env(FLEET, settings, api_key=API, notes=data["dsv41_launcher_notes"], base=BASE)
    assert res["text"] == FLEET and res["kept"] == ["NCCL_SOCKET_IFNAME"]


def test_adoption_leaves_out_what_cannot_be_declared_and_escapes_jinja():
    adopted = A.adopt_env("PATH=/opt/bin\nA=$'x\\r'\nB='{{ lookup(\"pipe\", \"id\") }}'\n", BASE)
    assert [u["key"] for u in adopted["undeclarable"]] == ["PATH", "A"]
    proposal = A.proposal_yaml(adopted, "here")
    assert "  B: !unsafe \"{{ lookup(\\\"pipe\\\", \\\"id\\\") }}\"" in proposal
    assert "# Not declarable, kept as it is: PATH is a variable of the shell" in proposal


def test_module_reads_only_and_refuses_code(monkeypatch, capsys, tmp_path):
    env = tmp_path / ".env"
    env.write_text(FLEET)
    os.chmod(str(env), 0o600)
    monkeypatch.setenv("HOME", "/home/mia")
    res = run_module(launcher_adopt_module.main, {"path": str(env), "host_label": "spark1"})
    assert not res.get("failed") and not res["changed"] and res["key_count"] == 10
    assert res["secret_keys"] == ["HF_TOKEN", "API_KEY"] and "hf_live_value_1234" in res["vault"]
    assert "hf_live_value_1234" not in res["proposal"] and "spark1:%s" % env in res["proposal"]
    assert sorted(os.listdir(str(tmp_path))) == [".env"] and env.read_text() == FLEET
    env.write_text("A=1\nHF_TOKEN=hf_x $(id)\n")
    res = run_module(launcher_adopt_module.main, {"path": str(env), "host_label": "spark1"})
    assert res["failed"] and res["msg"].startswith("spark1: %s: line 2" % env) and "hf_x" not in json.dumps(res)
    res = run_module(launcher_adopt_module.main, {"path": str(tmp_path / "none")})
    assert res["failed"] and "does not exist" in res["msg"]


def test_a_file_without_api_key_gets_none_from_its_proposal():
    adopted = A.adopt_env("A=1\n", BASE)
    data = yaml.safe_load(A.proposal_yaml(adopted, "here"))
    assert data["container_env_api_key"] is None and "dsv41_api_key" not in data
    assert envfile_merge.merge_env("A=1\n", data["dsv41_launcher_settings"], api_key=data["container_env_api_key"],
                       base=BASE)["text"] == HEADER + "A=1\n"


def test_adoption_refuses_secret_keys_that_differ_only_in_case_naming_both(monkeypatch, capsys, tmp_path):
    text = "HF_TOKEN=hf_AAAAaaaaBBBBbbbbCCCC1\nHf_Token=hf_ZZZZzzzzYYYYyyyyXXXX2\n"
    with pytest.raises(EnvError) as err:
        A.adopt_env(text, BASE, "/x/.env")
    assert "/x/.env: HF_TOKEN and Hf_Token differ only in case" in str(err.value)
    assert "vault_dsv41_launcher_hf_token" in str(err.value)
    env = tmp_path / ".env"
    env.write_text(text)
    os.chmod(str(env), 0o600)
    res = run_module(launcher_adopt_module.main, {"path": str(env), "host_label": "spark1"})
    assert res["failed"] and "HF_TOKEN and Hf_Token differ only in case" in res["msg"]
    assert "hf_AAAA" not in json.dumps(res) and "hf_ZZZZ" not in json.dumps(res)


def test_adoption_moves_a_secret_shaped_value_under_an_innocent_name_to_the_vault():
    adopted = A.adopt_env("DATABASE_URL=postgres://admin:hunter22@db/fleet\nHF_TOKENS=hf_AbCdEfGhIjKlMnOpQrSt\n"
                          "MAX_TOTAL_TOKENS=750000\n", BASE)
    assert adopted["secret_keys"] == ["DATABASE_URL", "HF_TOKENS"]
    proposal = A.proposal_yaml(adopted, "here")
    assert "hunter22" not in proposal and "hf_AbCd" not in proposal and "750000" in proposal
