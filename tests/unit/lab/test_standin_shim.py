"""lab/standins/standin_shim: /usr/bin/docker and /usr/bin/nvidia-smi on the lab hosts run the stand-in of
their own name through Python's bytecode cache, and answer exactly as the stand-in run directly does."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

STANDINS = Path(__file__).resolve().parents[3] / "lab" / "standins"


def answer(argv, env):
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


def test_the_shim_answers_as_the_stand_in_and_runs_it_from_bytecode(tmp_path):
    lib = tmp_path / "lib"
    shutil.copytree(STANDINS, lib, ignore=shutil.ignore_patterns("__pycache__"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("docker", "nvidia-smi"):
        shutil.copy(STANDINS / "standin_shim", bindir / tool)
        os.chmod(bindir / tool, 0o755)
    env = dict(os.environ, DSV41_LAB_STANDIN_DIR=str(lib), LAB_DOCKER_STATE_DIR=str(tmp_path / "state"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # a lab host's sessions do not set it
    # (the plain nvidia-smi table carries the time and live figures; these answers are fixed)
    for argv in (["nvidia-smi", "-L"], ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                 ["docker", "--version"], ["docker", "ps", "-a"], ["docker", "no-such-command"]):
        direct = answer([sys.executable, str(lib / argv[0]), *argv[1:]], env)
        shimmed = answer([str(bindir / argv[0]), *argv[1:]], env)
        assert shimmed == direct, argv
    # the second run of a stand-in loads the bytecode the first one wrote instead of compiling the script
    for tool in ("docker", "nvidia-smi"):
        assert Path(importlib.util.cache_from_source(str(lib / tool))).is_file(), tool


def test_the_image_installs_the_shim_and_writes_the_bytecode_for_every_user():
    containerfile = (STANDINS.parent / "Containerfile").read_text()
    assert "standin_shim /usr/bin/docker" in containerfile
    assert "standin_shim /usr/bin/nvidia-smi" in containerfile
    assert "py_compile.compile" in containerfile
