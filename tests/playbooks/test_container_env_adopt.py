"""Adopt, never drop, on the lab: a .env holding keys the inventory does not declare.

playbooks/adopt.yml proposes the inventory that declares the head's .env (nothing written on the
fleet; nothing at all in check mode); converged with that proposal the .env stays byte-identical and
a second converge changes nothing; a key left out of the proposal is kept (and named); a key listed
in container_env_remove_keys goes; the inventory's own baseline converge keeps the extra keys too.
"""
import json
import subprocess

import pytest
import yaml

from labhelpers import ROOT, LAB_INVENTORY, changed_tasks, env, lab, lab_container, playbook, recap, sh

DIR = "/home/mia/dsv41-3x-spark"
ENV = DIR + "/.env"
WRITE = "container_env : Write the launcher settings as data (this run's \"before\" kept as a recorded backup)"
API = "sk-lab-0000000000000000000000000000"
# Hand-written keys the inventory does not declare, in the syntaxes fleets use: export, double quotes,
# a comment after the value, a reference to HOME (expanded by the head's bash).
EXTRA = ("# site-local settings (hand-written, not in the inventory)\n"
         "export SERVE_TIMEOUT=\"3600\"   # seconds\n"
         "WORKER_ENGRAM_DIR_SPARK3=$HOME/engram-s3\n"
         "DSV41_AUTOTUNE_KEEP=0\n")
# The role alone (with the inventory check it needs): no task that reports a change of its own.
CE_PLAY = """---
- name: Validate the inventory
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: preflight
- name: Launcher settings on the head
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: container_env
"""


def read_env():
    return subprocess.run(["podman", "exec", lab_container("spark1"), "cat", ENV], stdout=subprocess.PIPE,
                          check=True).stdout


def write_env(data):
    subprocess.run(["podman", "exec", "-i", "--user", "mia", lab_container("spark1"), "bash", "-c",
                    f"cat > {ENV} && chmod 0600 {ENV}"], input=data, check=True)


def launcher_dir():
    out = sh("spark1", f"cd {DIR} && for f in .[!.]* *; do [ -f \"$f\" ] && stat -c '%n %a %s %Y' \"$f\"; done")
    return sorted(out.splitlines())


def run_play(tmp_path, *args):
    play = tmp_path / "ce.yml"
    play.write_text(CE_PLAY)
    res = subprocess.run(["ansible-playbook", str(play), "-i", str(LAB_INVENTORY)] + list(args), cwd=ROOT, env=env(),
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    return res.returncode, res.stdout


@pytest.fixture(scope="module")
def fleet_env():
    """The seeded .env plus hand-written undeclared keys; everything put back afterwards."""
    lab("up")
    original = read_env()
    names_before = set(line.split()[0] for line in launcher_dir())
    write_env(original + EXTRA.encode())
    yield read_env()
    write_env(original)
    for name in set(line.split()[0] for line in launcher_dir()) - names_before:
        if name.startswith(".env.dsv41-"):
            sh("spark1", f"rm -f {DIR}/{name}", user="mia")


@pytest.fixture(scope="module")
def proposal(fleet_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("adopt")
    rc, text = playbook("adopt.yml", "-e", "container_env_adopt_dir=" + str(out))
    assert rc == 0, text[-3000:]
    return out / "group_vars" / "dsv41_ranks", text


def test_adoption_writes_nothing_on_the_fleet_and_nothing_at_all_in_check_mode(fleet_env, tmp_path):
    before = launcher_dir()
    rc, out = playbook("adopt.yml", "--check", "-e", "container_env_adopt_dir=" + str(tmp_path / "p"))
    assert rc == 0, out[-3000:]
    assert not (tmp_path / "p").exists() and "would write" in out
    assert read_env() == fleet_env and launcher_dir() == before
    assert API not in out


def test_adoption_proposes_every_key_with_secrets_in_the_vault_file(fleet_env, proposal):
    group_vars, out = proposal
    text = (group_vars / "launcher_adopted.yml").read_text()
    vault = (group_vars / "vault.yml").read_text()
    data = yaml.safe_load(text)
    assert API not in text and API not in out and yaml.safe_load(vault) == {"vault_dsv41_api_key": API}
    assert oct((group_vars / "vault.yml").stat().st_mode & 0o777) == "0o600"
    settings = data["dsv41_launcher_settings"]
    assert settings["SERVE_TIMEOUT"] == "3600" and settings["DSV41_AUTOTUNE_KEEP"] == "0"
    assert settings["WORKER_ENGRAM_DIR_SPARK3"] == "/home/mia/engram-s3"     # as the head's bash expands it
    assert settings["WORKER_HOSTS"] == "spark2 spark3" and "API_KEY" not in settings
    assert data["dsv41_api_key"] == "{{ vault_dsv41_api_key }}"
    # notes are the comment lines after the last assignment; here the hand-written keys come after the
    # seeded note, which stays in the file as a comment (the converge never removes comments)
    assert data["dsv41_launcher_notes"] == []
    assert "declared: MODEL_PATH," in out and "secrets moved to vault.yml: API_KEY" in out


def test_converging_the_proposal_leaves_the_env_byte_identical_twice(fleet_env, proposal, tmp_path):
    group_vars, _out = proposal
    files = ["-e", "@" + str(group_vars / "launcher_adopted.yml"), "-e", "@" + str(group_vars / "vault.yml")]
    before = launcher_dir()
    for _run in range(2):
        rc, out = run_play(tmp_path, *files)
        assert rc == 0, out[-3000:]
        assert read_env() == fleet_env and launcher_dir() == before
        assert WRITE not in changed_tasks(out)
        assert all(counts["changed"] == 0 for counts in recap(out).values()), recap(out)
        assert "no change: the fleet runs exactly the declared settings" in out and API not in out
    # check mode with a change: reported, nothing written
    rc, out = run_play(tmp_path, *files, "--check", "--diff", "-e", json.dumps(
        {"dsv41_launcher_overrides": {"DSPARK_BLOCK_SIZE": 5}}))
    assert rc == 0, out[-3000:]
    assert "DSPARK_BLOCK_SIZE: 3 -> 5" in out and read_env() == fleet_env and launcher_dir() == before


def test_a_key_left_out_of_the_proposal_is_kept_and_named(fleet_env, proposal, tmp_path):
    group_vars, _out = proposal
    data = yaml.safe_load((group_vars / "launcher_adopted.yml").read_text())
    del data["dsv41_launcher_settings"]["SERVE_TIMEOUT"]
    smaller = tmp_path / "smaller.yml"
    smaller.write_text(yaml.safe_dump(data))
    files = ["-e", "@" + str(smaller), "-e", "@" + str(group_vars / "vault.yml")]
    rc, out = run_play(tmp_path, *files)
    assert rc == 0, out[-3000:]
    assert read_env() == fleet_env and WRITE not in changed_tasks(out)
    assert "kept 1 key(s) the inventory does not declare, as they are" in out and "SERVE_TIMEOUT" in out
    # listed for removal, it goes (and nothing else changes); the rollback brings it back
    rc, out = run_play(tmp_path, *files, "-e", json.dumps({"container_env_remove_keys": ["SERVE_TIMEOUT"]}))
    assert rc == 0, out[-3000:]
    assert read_env() == fleet_env.replace(b'export SERVE_TIMEOUT="3600"   # seconds\n', b"")
    assert "SERVE_TIMEOUT: 3600 -> (unset)" in out and "removed as listed in container_env_remove_keys: SERVE_TIMEOUT" in out
    rc, out = playbook("rollback.yml", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert read_env() == fleet_env


def test_the_inventory_baseline_converge_keeps_undeclared_keys(fleet_env, tmp_path):
    rc, out = run_play(tmp_path)
    assert rc == 0, out[-3000:]
    assert read_env() == fleet_env and WRITE not in changed_tasks(out)
    site = (ROOT / "lab" / "seed" / "launcher.env.site").read_text().splitlines()  # the seeded site keys
    flat = " ".join(out.split())  # the result callback wraps a long list
    assert "kept %d key(s) the inventory does not declare" % (3 + len(site)) in flat
    assert "SERVE_TIMEOUT, WORKER_ENGRAM_DIR_SPARK3, DSV41_AUTOTUNE_KEEP" in flat
