"""A share's scratch checkout (tests/run_lab_suites.py checkout_copy) is the working tree under test and nothing
else, except the lab state that makes a second run warm: a stand-in file left from another revision would be
built into the lab image and change what the share tests."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))

import run_lab_suites  # noqa: E402


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false",
                    *args], cwd=repo, check=True, stdout=subprocess.DEVNULL)


@pytest.fixture
def source(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "lab" / "standins" / "lab_docker").mkdir(parents=True)
    (repo / ".venv").mkdir()
    (repo / ".gitignore").write_text(".venv\nlab/.state/\n")
    (repo / "site.yml").write_text("---\n")
    (repo / "lab" / "standins" / "lab_docker" / "cli.py").write_text("# new layout\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    monkeypatch.setattr(run_lab_suites, "ROOT", repo)
    return repo


def test_a_second_copy_drops_files_the_tree_no_longer_has_and_keeps_the_lab_state(source, tmp_path):
    dest = tmp_path / "checkout-1"
    run_lab_suites.checkout_copy(dest)
    assert (dest / "lab" / "standins" / "lab_docker" / "cli.py").read_text() == "# new layout\n"
    (dest / "lab" / ".state" / "ssh").mkdir(parents=True)
    (dest / "lab" / ".state" / "ssh" / "id_ed25519").write_text("key")

    # the tree under test moves the stand-in back to one file (another revision)
    git(source, "rm", "-q", "-r", "lab/standins/lab_docker")
    (source / "lab" / "standins").mkdir(parents=True, exist_ok=True)
    (source / "lab" / "standins" / "docker").write_text("# old layout\n")
    run_lab_suites.checkout_copy(dest)

    assert not (dest / "lab" / "standins" / "lab_docker").exists()
    assert (dest / "lab" / "standins" / "docker").read_text() == "# old layout\n"
    assert (dest / "lab" / ".state" / "ssh" / "id_ed25519").read_text() == "key"
    assert (dest / ".venv").resolve() == (source / ".venv").resolve()
