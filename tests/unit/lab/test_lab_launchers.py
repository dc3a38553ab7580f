"""The lab launcher variants (assembled from lab/standins/launcher/ as the seeder installs them) run with
recording docker and ssh stand-ins (no lab).

Each variant is a launcher of the real family (SPEC section 3): `set -a; source .env`, script-side defaults,
the head's arguments filled by name, the workers' arguments in an ssh command string. What each container
would receive is read from the recorded `docker run` argv (shell-split exactly as docker gets it). The "family"
variant reaches the workers through the checkout's scripts/remote.py, which runs the same recording ssh.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab_launchers import assembled_variants, install_launcher

ROOT = Path(__file__).resolve().parents[3]
STANDINS = ROOT / "lab" / "standins"
SEED = ROOT / "lab" / "seed"
VARIANTS = assembled_variants()
# Files a variant needs beside start.sh (as the seeder installs them): stand-in file -> checkout path.
HELPERS = {"family": {"scripts/remote.py": "scripts/remote.py"}}
SWITCHES = ("DSV41_AUTOTUNE_KEEP", "DSV41_FOLDED_FENCE", "DSV41_WO_A_W8", "DSV41_ENGRAM_PREFETCH",
            "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY", "DSV41_VERIFY_CAP", "DSV41_DRAFT_TAU")

# docker: records its argv (and the API_KEY of its environment) as one JSON line per call, on the host the
# fake ssh says it runs on; `logs` shows the Ready line at once; `image inspect` answers the image's
# architecture (FAKE_ARCH, default arm64: the only template the launchers ask it is {{.Architecture}}).
FAKE_DOCKER = r"""#!/usr/bin/env bash
python3 -c 'import json, os, sys; print(json.dumps({"host": os.environ.get("FAKE_HOST", "spark1"),
  "argv": sys.argv[1:], "API_KEY": os.environ.get("API_KEY")}))' "$@" >> "$CALLS"
case $1 in
  run) echo cid ;;
  logs) echo "Ready: API on port 8888" ;;
  inspect) echo running ;;
  image) echo "${FAKE_ARCH:-arm64}" ;;
esac
"""
FAKE_SSH = r"""#!/usr/bin/env bash
echo "{\"ssh\": $(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@")}" >> "$CALLS"
host=${@: -2:1}; export FAKE_HOST=${host#*@}
env -u API_KEY bash -c "${@: -1}"
"""


def checkout(tmp_path, variant, env_edit=None):
    d = tmp_path / "home" / "mia" / "dsv41-3x-spark"
    d.mkdir(parents=True)
    install_launcher(variant, d / "start.sh")
    for name, dest in HELPERS.get(variant, {}).items():
        (d / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDINS / name, d / dest)
    shutil.copy(SEED / "launcher.env.example", d / ".env.example")
    text = (SEED / "launcher.env").read_text() + (SEED / "launcher.env.site").read_text()   # as seeded
    if env_edit is not None:
        text = env_edit(text)
    if text is not None:
        (d / ".env").write_text(text)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    # a login shell on a "worker" (bash -lc: /etc/profile resets PATH) finds the recording stand-ins through
    # the user's profile, as a real worker finds docker through its own
    (tmp_path / "home" / "mia" / ".bash_profile").write_text(f'PATH="{bindir}:$PATH"\n')
    return d, {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls.jsonl"),
               "HOME": str(tmp_path / "home" / "mia"), "LAB_LAUNCHER_KNOBS": str(tmp_path / "none"),
               "LAB_SERVE_POLL_SECONDS": "0"}


def serve(tmp_path, variant, env_edit=None, extra_env=None, check=True):
    d, env = checkout(tmp_path, variant, env_edit)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSV41_", "SGLANG_", "DSPARK_", "API_KEY"))}
    r = subprocess.run(["bash", "./start.sh", "serve"], cwd=d, capture_output=True, text=True,
                       env={**base, **env, **(extra_env or {})}, timeout=60)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    calls_file = Path(env["CALLS"])
    calls = [json.loads(ln) for ln in calls_file.read_text().splitlines()] if calls_file.exists() else []
    return d, r, calls


def containers(calls):
    """[(host, name, env dict, mounts dict)] of the `docker run -d` calls, in order."""
    out = []
    for c in calls:
        argv = c.get("argv") or []
        if argv[:2] != ["run", "-d"]:
            continue
        env, mounts, name, i = {}, {}, None, 2
        while i < len(argv):
            a = argv[i]
            if a in ("-e", "--env"):
                k, eq, v = argv[i + 1].partition("=")
                env[k] = v if eq else c["API_KEY"]
                i += 2
            elif a in ("-v", "--volume"):
                src, dst = argv[i + 1].split(":")[:2]
                mounts[dst] = src
                i += 2
            elif a == "--name":
                name = argv[i + 1]
                i += 2
            elif a in ("--network", "--ipc", "--shm-size", "--gpus", "--ulimit", "--group-add"):
                i += 2
            else:
                assert argv[i + 1:] == ["run"], argv[i:]     # IMAGE run
                break
        out.append((c["host"], name, env, mounts))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_workers_first_then_head_each_with_the_declared_values(tmp_path, variant):
    d, r, calls = serve(tmp_path, variant)
    runs = containers(calls)
    assert [(h, n, e["NODE_RANK"]) for h, n, e, _ in runs] == [
        ("spark2", "dsv41-worker", "1"), ("spark3", "dsv41-worker", "2"), ("spark1", "dsv41-head", "0")]
    for host, _name, env, mounts in runs:
        assert env["API_KEY"] == "sk-lab-0000000000000000000000000000", host
        assert env["MAX_TOTAL_TOKENS"] == "750000" and env["MEM_FRACTION_STATIC"] == "0.95"
        assert env["DSV41_CACHE_GIB"] == "0" and env["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "0"
        assert env["DSPARK_SPS_TABLE"] == "/state/dspark_sps.json", "a script-side default"
        assert env["DSV41_SOURCE"] == "/sgl-workspace" and env["DIST_INIT_ADDR"] == "192.168.100.11:20000"
        assert "SGLANG_DSPARK_FOLDED_SAMPLING" not in env and "DSV41_ENGRAM_PREFETCH_CHECK" not in env
        want = "/home/mia/dsv41-engram" if host == "spark1" else "/home/zurih/dsv41-3x-spark/engram"
        assert mounts["/engram"] == want, host
    head_run = next(c for c in calls if c.get("argv", [])[:2] == ["run", "-d"] and c["host"] == "spark1")
    assert "sk-lab-0000000000000000000000000000" not in " ".join(head_run["argv"]), "the head takes it from the env"
    ssh = [c["ssh"] for c in calls if "ssh" in c]
    assert all(s[:6] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-i", "/home/mia/.ssh/id_ed25519"]
               for s in ssh)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_script_side_defaults_reach_the_containers_when_the_env_leaves_them_out(tmp_path, variant):
    def drop(text):
        return "".join(l for l in text.splitlines(True)
                       if not l.startswith(("DSV41_CACHE_GIB=", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=")))
    _d, _r, calls = serve(tmp_path, variant, drop)
    for host, _n, env, _m in containers(calls):
        assert (env["DSV41_CACHE_GIB"], env["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"]) == ("4", "1"), host


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_switches_reach_both_paths_by_each_variants_own_way(tmp_path, variant):
    def arm(text):
        return text + "DSV41_AUTOTUNE_KEEP=1\nDSV41_VERIFY_CAP=conf:0.1\n"
    _d, _r, calls = serve(tmp_path, variant, arm)
    for host, _n, env, _m in containers(calls):
        if variant == "extra_env":   # the .env line alone does not reach the container
            assert not set(SWITCHES) & set(env), host
        else:
            assert env["DSV41_AUTOTUNE_KEEP"] == "1" and env["DSV41_VERIFY_CAP"] == "conf:0.1", host
            assert env["DSV41_WO_A_W8"] == "0" and env["DSV41_DRAFT_TAU"] == "1", "defaults off (${VAR:-0})"
    if variant == "extra_env":
        _d, _r, calls = serve(tmp_path / "x", variant, lambda t: t + "EXTRA_CONTAINER_ENV='DSV41_AUTOTUNE_KEEP=1 "
                                                                        "DSV41_VERIFY_CAP=conf:0.1'\n")
        for host, _n, env, _m in containers(calls):
            assert env["DSV41_AUTOTUNE_KEEP"] == "1" and env["DSV41_VERIFY_CAP"] == "conf:0.1", host
            assert "DSV41_WO_A_W8" not in env


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_worker_engram_dir_is_one_for_all_and_expanded_on_the_head(tmp_path, variant):
    _d, _r, calls = serve(tmp_path, variant, lambda t: t + "WORKER_ENGRAM_DIR=$HOME/engram\n"
                                                           "WORKER_ENGRAM_DIR_SPARK2=/data/dsv41-engram\n")
    mounts = [(h, m["/engram"]) for h, _n, _e, m in containers(calls)]
    home = str(tmp_path / "home" / "mia")
    assert mounts == [("spark2", home + "/engram"), ("spark3", home + "/engram"), ("spark1", "/home/mia/dsv41-engram")]


def test_missing_env_is_copied_from_the_example(tmp_path):
    d, _r, calls = serve(tmp_path, "explicit", lambda t: None)
    assert (d / ".env").read_text() == (SEED / "launcher.env.example").read_text()
    assert [e["API_KEY"] for _h, _n, e, _m in containers(calls)] == ["change-me"] * 3


def test_indirect_variant_reads_worker_names_by_number(tmp_path):
    _d, _r, calls = serve(tmp_path, "indirect", lambda t: t.replace("WORKER2_HOST=spark3\n", "WORKER2_HOST=spark9\n"))
    assert [h for h, _n, _e, _m in containers(calls)] == ["spark2", "spark9", "spark1"], "WORKER_HOSTS is not read"
    ssh = [c["ssh"][-1] for c in calls if "ssh" in c and "run_worker" in c["ssh"][-1]]
    assert ssh and all(s.startswith("run_worker () \n{") for s in ssh), "the helper is shipped with declare -f"


def test_printf_array_variant_keeps_a_value_with_spaces(tmp_path):
    _d, _r, calls = serve(tmp_path, "printf_array", lambda t: t + "DSV41_VERIFY_CAP='conf:0.1 x'\n")
    assert [e["DSV41_VERIFY_CAP"] for _h, _n, e, _m in containers(calls)] == ["conf:0.1 x"] * 3


# --------------------------------------------------------------------------------------------- family
def without_home(runs, home):
    """containers() with the checkout's scratch $HOME written as ~ (two checkouts have two homes)."""
    def strip(v):
        return v.replace(home, "~")
    return [(h, n, {k: strip(v) for k, v in e.items()}, {strip(k): strip(v) for k, v in m.items()})
            for h, n, e, m in runs]


@pytest.mark.parametrize("model_path_in_env", [True, False], ids=["env-model-path", "default-model-path"])
def test_family_variant_differs_from_explicit_only_in_nccl_and_model_path(tmp_path, model_path_in_env):
    def edit(text):
        return text if model_path_in_env else "".join(
            ln for ln in text.splitlines(True) if not ln.startswith("MODEL_PATH="))
    got = {}
    for variant in ("explicit", "family"):
        _d, _r, calls = serve(tmp_path / variant, variant, edit)
        got[variant] = without_home(containers(calls), str(tmp_path / variant / "home" / "mia"))
    assert [(h, n) for h, n, _e, _m in got["family"]] == [(h, n) for h, n, _e, _m in got["explicit"]]
    for (host, _n, fam_env, fam_mounts), (_h, _n2, exp_env, exp_mounts) in zip(got["family"], got["explicit"]):
        assert fam_env.pop("LD_LIBRARY_PATH") == "/nccl", host
        assert fam_mounts.pop("/nccl") == "~/nccl-2.30.7", "the head's $HOME, on every rank"
        if model_path_in_env:
            assert (fam_env, fam_mounts) == (exp_env, exp_mounts), host
            continue
        model = "~/NewModels/DeepSeek-V4.1-Flash"
        assert (exp_env["MODEL_PATH"], fam_env["MODEL_PATH"]) == ("/srv/models/DeepSeek-V4.1-Flash", model), host
        assert exp_mounts.pop("/srv/models") == "/srv/models" and fam_mounts.pop("~/NewModels") == "~/NewModels"
        fam_env["MODEL_PATH"] = exp_env["MODEL_PATH"]
        assert (fam_env, fam_mounts) == (exp_env, exp_mounts), host


def test_family_variant_starts_workers_through_remote_py_in_a_login_shell(tmp_path):
    _d, _r, calls = serve(tmp_path, "family")
    ssh = [c["ssh"] for c in calls if "ssh" in c]
    starts = [s for s in ssh if "docker run" in s[-1]]
    assert [s[-2] for s in starts] == ["zurih@spark2", "zurih@spark3"]
    for s in starts:
        # one command string, exactly the ssh options of the other variants
        assert s[:-2] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-i", "/home/mia/.ssh/id_ed25519"]
        assert s[-1].startswith("bash -lc 'docker run -d --name dsv41-worker ") and s[-1].endswith(" run'")
    # the arch check comes before anything is removed or started; no NFS exporter by default
    docker = [c["argv"] for c in calls if "argv" in c]
    assert docker[0] == ["image", "inspect", "-f", "{{.Architecture}}", "dsv41-sglang:tp3"]
    assert not any("dsv41-nfs" in a for a in docker)


def test_family_variant_refuses_an_image_of_another_architecture(tmp_path):
    _d, r, calls = serve(tmp_path, "family", extra_env={"FAKE_ARCH": "amd64"}, check=False)
    assert r.returncode == 1
    assert "image dsv41-sglang:tp3 is built for 'amd64', this fleet runs arm64" in r.stderr
    assert [c["argv"][:2] for c in calls] == [["image", "inspect"]], "nothing removed, nothing started"


def test_family_variant_nfs_exporter_on_the_head_before_the_workers(tmp_path):
    _d, _r, calls = serve(tmp_path, "family", lambda t: t + "ENGRAM_SHARE=nfs\n")
    runs = [(c["host"], c["argv"]) for c in calls if c.get("argv", [])[:2] == ["run", "-d"]]
    assert [(h, a[a.index("--name") + 1]) for h, a in runs] == [
        ("spark1", "dsv41-nfs"), ("spark2", "dsv41-worker"), ("spark3", "dsv41-worker"), ("spark1", "dsv41-head")]
    nfs = runs[0][1]
    env = [nfs[i + 1] for i, a in enumerate(nfs) if a == "-e"]
    assert env == ["NFS_EXPORT_0=/srv/models 192.168.100.0/24(ro,sync,no_subtree_check,no_root_squash)"], \
        "NFS_EXPORT to NFS_CLIENTS (the .env's), no rank settings"
    assert nfs[nfs.index("-v") + 1] == "/srv/models:/srv/models:ro"
    ranks = containers([c for c in calls if "dsv41-nfs" not in c.get("argv", [])])
    assert [e["NODE_RANK"] for _h, _n, e, _m in ranks] == ["1", "2", "0"]
    _d, r, calls = serve(tmp_path / "bad", "family", lambda t: t + "ENGRAM_SHARE=yes\n", check=False)
    assert r.returncode == 1 and "ENGRAM_SHARE must be nfs or off, not 'yes'" in r.stderr
    assert calls == [], "refused before anything runs"


def test_remote_py_runs_ssh_with_one_command_string_and_forwards_its_exit_code(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text('#!/usr/bin/env bash\npython3 -c \'import json, sys; print(json.dumps(sys.argv[1:]))\' '
                                '"$@" > "$OUT"\nexit "${SSH_EXIT:-0}"\n')
    (bindir / "ssh").chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "OUT": str(tmp_path / "argv.json")}

    def remote(*args, **extra):
        return subprocess.run([sys.executable, str(STANDINS / "scripts" / "remote.py"), *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=30)
    cmd = "bash -lc 'docker run -d --name x -e A=\"b c\" img run'"
    assert remote("zurih@spark2", cmd, SSH_EXIT="7").returncode == 7
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "zurih@spark2", cmd]
    assert remote("zurih@spark2", "true", SSH_IDENTITY="/k").returncode == 0
    assert json.loads((tmp_path / "argv.json").read_text())[4:] == ["-i", "/k", "zurih@spark2", "true"]
    assert remote("zurih@spark2", "true", SSH_EXIT="255").returncode == 255, "ssh's own failure keeps its code"
    assert remote("zurih@spark2").returncode == 2 and "usage: remote.py" in remote("x").stderr
    assert remote("h", "true", PATH=str(tmp_path / "none")).returncode == 127
