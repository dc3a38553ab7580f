"""The effective launch: the launcher's own serve path run in the sandbox (module_utils/launcher/sandbox.py,
launch_record.py) and the launcher_effective module, on every launcher shape."""
import json
import os
from pathlib import Path

import pytest

from ansible.module_utils.launcher import effective as R
from ansible.module_utils.launcher import sandbox as S

import launcher_effective
from launcher_fixtures import API_KEY, BASELINE_ENV, FIXTURE_VARIANTS, VARIANTS, checkout, tree_hash
from modrun import run_module

ALL = VARIANTS + ("lab",)


def launch(tmp_path, variant="explicit", env=BASELINE_ENV, **kw):
    script, home = checkout(tmp_path, variant, env)
    kw.setdefault("home", home)
    return R.effective_launch(script, head="spark1", user="mia", **kw), script, home


@pytest.mark.parametrize("variant", ALL)
def test_each_shape_gives_head_and_workers_in_order_with_their_environment(tmp_path, variant):
    got, script, home = launch(tmp_path, variant, BASELINE_ENV + "WORKER_ENGRAM_DIR=$HOME/engram\n")
    ctns = got["containers"]
    assert [(c["host"], c["name"], c["role"], c["rank"]) for c in ctns] == [
        ("spark2", "dsv41-worker", "worker", 1), ("spark3", "dsv41-worker", "worker", 2),
        ("spark1", "dsv41-head", "head", 0)]
    for c in ctns:
        assert c["image"] == "dsv41-sglang:tp3" and c["network"] == "host"
        assert c["env"]["DSV41_CACHE_GIB"] == "0" and c["env"]["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "0"
        assert c["env"]["DSV41_MOE_DENSE_ROUTING"] == "1"
    # $HOME in the .env is expanded on the head: the head user's home, for every worker
    assert [c["engram_source"] for c in ctns] == [home + "/engram", home + "/engram", "/home/mia/dsv41-engram"]
    assert ctns[2]["env"]["API_KEY"] == API_KEY
    if variant != "lab":           # real launchers send the API key to the workers too (the lab's old one does not)
        assert ctns[0]["env"]["API_KEY"] == API_KEY and ctns[1]["env"]["NODE_RANK"] == "2"
        assert ctns[0]["env"]["DSPARK_SPS_TABLE"] == "/state/dspark_sps.json"
    if variant in FIXTURE_VARIANTS:  # the lab's launchers mount no /state (the table is then "not found")
        assert {"source": script[:-len("/start.sh")] + "/state", "target": "/state", "type": "bind",
                "read_only": False} in ctns[2]["mounts"]
    assert got["unstubbed"] == [] and got["not_run"] == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_launcher_defaults_reach_the_containers_when_the_env_leaves_keys_out(tmp_path, variant):
    env = BASELINE_ENV.replace("DSV41_CACHE_GIB=0\n", "").replace("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0\n", "")
    got, _, _ = launch(tmp_path, variant, env)
    for c in got["containers"]:
        assert c["env"]["DSV41_CACHE_GIB"] == "4" and c["env"]["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "1"


@pytest.mark.parametrize("variant", ALL)
def test_evaluating_changes_nothing_on_the_host(tmp_path, variant):
    script, home = checkout(tmp_path, variant)
    before = tree_hash(tmp_path)
    R.effective_launch(script, head="spark1", user="mia", home=home,
                       env_text=BASELINE_ENV + "DSV41_AUTOTUNE_KEEP=1\n")
    R.effective_launch(script, head="spark1", user="mia", home=home)
    assert tree_hash(tmp_path) == before


def test_a_proposed_env_is_evaluated_without_being_written(tmp_path):
    script, home = checkout(tmp_path, "extra_env")
    env_path = os.path.join(os.path.dirname(script), ".env")
    before = open(env_path).read()
    got = R.effective_launch(script, head="spark1", home=home,
                             env_text=BASELINE_ENV + "EXTRA_CONTAINER_ENV='DSV41_AUTOTUNE_KEEP=1 DSV41_FOLDED_FENCE=1'\n")
    for c in got["containers"]:
        assert c["env"]["DSV41_AUTOTUNE_KEEP"] == "1" and c["env"]["DSV41_FOLDED_FENCE"] == "1"
    assert open(env_path).read() == before
    plain = R.effective_launch(script, head="spark1", home=home)
    assert all("DSV41_AUTOTUNE_KEEP" not in c["env"] for c in plain["containers"])


def test_a_missing_env_is_copied_from_the_example_in_the_sandbox_only(tmp_path):
    script, home = checkout(tmp_path, "explicit", env=None, example=BASELINE_ENV.replace("DSV41_CACHE_GIB=0", "DSV41_CACHE_GIB=0.5"))
    got = R.effective_launch(script, head="spark1", home=home)
    assert got["containers"][0]["env"]["DSV41_CACHE_GIB"] == "0.5"
    assert not os.path.exists(os.path.join(os.path.dirname(script), ".env"))


def test_secrets_are_masked_everywhere_in_what_is_shown(tmp_path):
    got, _, _ = launch(tmp_path, "printf_array")
    shown = R.masked(got)
    text = json.dumps(shown)
    assert API_KEY not in text
    assert all(c["env"]["API_KEY"] == "***" for c in shown["containers"])
    assert "API_KEY=***" in shown["containers"][0]["argv"]


def _custom(tmp_path, body):
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
    return str(co / "start.sh"), str(home)


def _real(*names):
    """The first of ``names`` that is a program on this host (the stand-ins are mounted over it)."""
    return next((n for n in names if os.path.isfile(n) and os.access(n, os.X_OK)), None)


def test_a_program_run_by_absolute_path_changes_nothing_and_stand_ins_answer_it(tmp_path):
    marker = tmp_path / "outside-marker"
    docker = _real("/usr/bin/docker", "/usr/local/bin/docker")
    ssh = _real("/usr/bin/ssh")
    body = 'T=/usr/bin/touch\n"$T" %s\n' % marker
    if ssh:
        body += '%s mia@spark2 "docker run -d --name w img"\n' % ssh
    if docker:
        body += '%s rm -f x\n%s run -d --name x img\n' % (docker, docker)
    script, home = _custom(tmp_path, body)
    got = R.effective_launch(script, head="spark1", home=home, check_ranks=False)
    assert not marker.exists()          # touched in the sandbox's own /tmp, gone with it
    hosts = [(c["host"], c["name"]) for c in got["containers"]]
    assert (ssh is None or ("spark2", "w") in hosts) and (docker is None or ("spark1", "x") in hosts)
    if docker:
        assert ("docker", ["rm", "-f", "x"]) in [(c["command"], c["argv"]) for c in got["calls"]]


def test_a_runner_starts_its_command_inside(tmp_path):
    script, home = _custom(tmp_path, "timeout 5 /bin/sh -c 'docker run -d --name x img'\n"
                                     "env -i /bin/bash -c 'docker run -d --name y img'\n")
    got = R.effective_launch(script, head="spark1", home=home, check_ranks=False)
    assert [c["name"] for c in got["containers"]] == ["x", "y"]


def test_loops_and_hangs_fail_clearly(tmp_path):
    script, home = _custom(tmp_path, "while true; do docker logs dsv41-head | grep -q NEVER || sleep 10; done\n")
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, max_calls=40)
    assert "more than 40 external commands: the launcher loops" in str(err.value)
    script, home = _custom(tmp_path / "b", "while :; do :; done\n")
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, timeout=2)
    assert "did not finish within 2 s" in str(err.value)


def test_writes_outside_the_sandbox_are_recorded_not_run(tmp_path):
    scratch = tmp_path / "made-in-the-sandbox-tmp"
    script, home = _custom(tmp_path, "mkdir -p /etc/dsv41-made-by-launcher\nmkdir -p %s\nfrobnicate --all\n"
                                     "sudo exportfs -ra\nmkdir -p \"$HOME/inside\"\n"
                                     "docker run -d --name c img\n" % scratch)
    got = R.effective_launch(script, head="spark1", home=home, check_ranks=False)
    assert not os.path.exists("/etc/dsv41-made-by-launcher") and not scratch.exists()
    assert not os.path.exists(os.path.join(home, "inside"))
    assert [c["argv"] for c in got["not_run"]] == [["-p", "/etc/dsv41-made-by-launcher"],
                                                   ["-p", os.path.join(home, "inside")]]
    assert [(c["command"], c["argv"]) for c in got["unstubbed"]] == [("frobnicate", ["--all"])]
    assert ("sudo", ["exportfs", "-ra"]) in [(c["command"], c["argv"]) for c in got["calls"]]


def test_a_failing_launcher_is_reported_with_its_last_lines_and_no_secret(tmp_path):
    script, home = _custom(tmp_path, 'API_KEY=sk-very-secret-1234\necho "bad key $API_KEY" >&2\n'
                                     'docker run -d -e API_KEY=$API_KEY --name c img\nexit 3\n')
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home)
    assert "exited 3" in str(err.value) and "bad key ***" in str(err.value)
    assert "sk-very-secret-1234" not in str(err.value)


def test_an_env_that_sets_path_still_reaches_the_stand_ins(tmp_path):
    # bash's own default PATH (what env -i and a login shell give): the stand-ins are mounted there too
    script, home = checkout(tmp_path, "explicit", BASELINE_ENV + "PATH=/usr/local/bin:/usr/bin:/bin\n")
    got = R.effective_launch(script, head="spark1", home=home)
    assert [c["host"] for c in got["containers"]] == ["spark2", "spark3", "spark1"]


def test_docker_run_arguments_are_read_as_docker_reads_them():
    call = {"host": "h", "argv": ["--log-level", "warn", "run", "-dit", "--name=n", "-eA=1", "--env", "B",
                                  "-e", "C", "--env-file", "/f", "--mount", "type=bind,source=/s,target=/engram,readonly",
                                  "-v", "vol:/data", "--net", "host", "img:1", "run", "--port", "1"],
            "env": {"B": "from-env"}, "files": {"/f": "# c\nD=4\nA=5\n\nE\n"}}
    got = R.parse_run(call)
    assert got["name"] == "n" and got["image"] == "img:1" and got["command"] == ["run", "--port", "1"]
    assert got["env"] == {"B": "from-env", "D": "4", "A": "5"}      # C and E are unset in docker's environment
    assert got["engram_source"] == "/s" and got["network"] == "host"
    assert got["mounts"][0]["read_only"] is True and got["mounts"][1]["type"] == "volume"


def test_module_entry_point_returns_ranks_and_masks_secrets(tmp_path, monkeypatch, capsys):
    script, home = checkout(tmp_path, "indirect", BASELINE_ENV + "WORKER_ENGRAM_DIR=/data/engram\n")
    res = run_module(launcher_effective.main,
                   {"launcher": script, "home": home, "head_host": "spark1",
                    "effect_keys": ["WORKER_ENGRAM_DIR", "WORKER_ENGRAM_DIR_SPARK2", "ENGRAM_DIR"]})
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False
    assert res["order"] == ["spark2/dsv41-worker", "spark3/dsv41-worker", "spark1/dsv41-head"]
    assert res["ranks"]["1"]["engram_source"] == "/data/engram" and res["ranks"]["0"]["host"] == "spark1"
    assert res["key_effects"]["WORKER_ENGRAM_DIR"]["engram_ranks"] == ["1", "2"]
    assert res["key_effects"]["ENGRAM_DIR"]["engram_ranks"] == ["0"]
    assert res["key_effects"]["WORKER_ENGRAM_DIR_SPARK2"] == {"effect": False, "ranks": [], "engram_ranks": [],
                                                               "error": None}
    assert API_KEY not in json.dumps(res)


def test_module_fails_clearly_on_an_unevaluable_launcher(tmp_path, monkeypatch, capsys):
    script, home = _custom(tmp_path, "docker run --bogus-option x\nexit 4\n")
    res = run_module(launcher_effective.main, {"launcher": script, "home": home})
    assert res["failed"] and "exited 4" in res["msg"] and res["changed"] is False
    res = run_module(launcher_effective.main, {"launcher": str(tmp_path / "nope.sh")})
    assert res["failed"] and "no such launcher script" in res["msg"]


def test_shebang_options_apply_and_one_off_helper_runs_are_not_containers(tmp_path):
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text("#!/bin/bash -e\nfalse\ndocker run -d --name late img\n")
    with pytest.raises(S.LaunchError) as err:       # -e on the #! line stops the script, as ./start.sh would
        R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home))
    assert "exited 1" in str(err.value)
    (co / "start.sh").write_text("#!/usr/bin/env bash\ndocker run --rm img python -c 1\n"
                                 "docker run -d --name dsv41-head img run\n")
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home))
    assert [c["name"] for c in got["containers"]] == ["dsv41-head"]


def test_the_heads_ready_line_names_the_port_it_was_given(tmp_path):
    # a key trial marks API_PORT: the launcher's wait must see Ready on that port at once, not loop to its timeout
    script, home = _custom(tmp_path, 'PORT=88880000109\n'
                                     'docker run -d --name dsv41-head -e NODE_RANK=0 -e "PORT=$PORT" img run\n'
                                     'n=0; until docker logs dsv41-head 2>&1 | grep -q "^Ready: API on port $PORT"; do\n'
                                     '  n=$((n + 1)); [ "$n" -gt 3 ] && exit 9; sleep 10; done\n')
    got = R.effective_launch(script, head="spark1", home=home, check_ranks=False)
    assert [c["name"] for c in got["containers"]] == ["dsv41-head"]


def test_the_family_launcher_reaches_each_worker_through_its_helper_with_the_workers_home(tmp_path):
    # scripts/remote.py runs for real and drives ssh; \$HOME in the worker's string is the worker user's home
    got, script, home = launch(tmp_path, "lab-family", expected_ranks=3)
    nccl = [(c["host"], [m["source"] for m in c["mounts"] if m["target"] == "/nccl"]) for c in got["containers"]]
    assert nccl == [("spark2", ["/home/zurih/nccl-2.30.7"]), ("spark3", ["/home/zurih/nccl-2.30.7"]),
                    ("spark1", [home + "/nccl-2.30.7"])]
    assert all(c["env"]["LD_LIBRARY_PATH"] == "/nccl" for c in got["containers"])
    helper = [c for c in got["calls"] if c["command"] == "python3"]
    assert [c["argv"][1] for c in helper][:2] == ["zurih@spark2", "zurih@spark3"]


@pytest.mark.parametrize("lines,name", [
    ('ENV_FILE="${ENV_FILE:-$ROOT/.env}"\nset -a\nsource "$ENV_FILE"\n', ".env"),
    ('CONF="$ROOT/fleet.env"\n. "$CONF"\n', "fleet.env"),
    ('source "$SCRIPT_DIR/fleet.env"\nsource "$SCRIPT_DIR/lib/common.sh"\n', "fleet.env"),
    ('source ./lib.sh\n', ".env"),
    ('source "$ROOT/a.env"\nsource "$ROOT/b.env"\n', ".env"),      # two: not guessed
])
def test_the_launchers_own_settings_file_is_found_by_its_name(tmp_path, lines, name):
    script = tmp_path / "start.sh"
    script.write_text("#!/usr/bin/env bash\nROOT=$(cd \"$(dirname \"$0\")\" && pwd)\n" + lines)
    assert S.config_name(str(script)) == name


def test_a_launcher_configured_by_fleet_env_arrays_is_evaluated_by_its_own_name(tmp_path):
    script, home = _custom(tmp_path, 'ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
                                     'source "$ROOT/fleet.env"\nr=0\nfor h in "${WORKERS[@]}"; do r=$((r + 1))\n'
                                     '  ssh "$h" "docker run -d --name w -e NODE_RANK=$r img"; done\n'
                                     'docker run -d --name h -e NODE_RANK=0 img\n')
    Path(script).with_name("fleet.env").write_text("WORKERS=(spark2)\n")
    got = R.effective_launch(script, head="spark1", home=home, env_text="WORKERS=(spark2 spark3)\n",
                             expected_ranks=3)
    assert [(c["host"], c["rank"]) for c in got["containers"]] == [("spark2", 1), ("spark3", 2), ("spark1", 0)]
