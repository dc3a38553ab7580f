"""The lab's seeded launcher .env: the rendered inventory baseline, then keys the inventory does not declare.

The declared part (lab/seed/launcher.env) is exactly what roles/container_env renders from the inventory
baseline (the report's state); the seeder appends lab/seed/launcher.env.site: keys a real fleet's .env holds
that the inventory does not declare (addresses, HCAs, NFS, NCCL, ssh identity, ports), which a converge
must keep, never drop.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

PLAYBOOK = """
- name: Render the baseline .env on the control node
  hosts: head
  gather_facts: false
  roles:
    - role: preflight
      vars:
        preflight_fleet_scope: any  # renders on the control node only: the head alone is enough
  tasks:
    - name: Render
      ansible.builtin.template:
        src: "{{ root }}/roles/container_env/templates/launcher.env.j2"
        dest: "{{ out }}"
        mode: "0600"
      delegate_to: localhost
      vars:
        container_env_settings: "{{ dsv41_launcher_settings | combine(dsv41_launcher_overrides) }}"
        container_env_notes: "{{ dsv41_launcher_notes }}"
        container_env_api_key: "{{ dsv41_api_key }}"
"""


# (inventory, the seeded declared part, the seeded site keys): the TP3 lab and the TP4 lab (DSV41_LAB_TP=4)
LABS = [("lab", "launcher.env", "launcher.env.site"), ("lab-tp4", "launcher-tp4.env", "launcher-tp4.env.site")]


@pytest.mark.parametrize("inventory, declared_file, site_file", LABS)
def test_seeded_env_is_the_rendered_baseline_plus_undeclared_keys(tmp_path, inventory, declared_file, site_file):
    playbook = tmp_path / "render.yml"    # outside the tree: tests never write into it
    playbook.write_text(PLAYBOOK)
    out = tmp_path / "rendered.env"
    tool = shutil.which("ansible-playbook")
    assert tool, "ansible-playbook on PATH"
    res = subprocess.run([tool, str(playbook), "-i", str(ROOT / "inventory" / inventory), "-e", f"out={out}",
                          "-e", f"root={ROOT}",
                          # nothing is reached: the render runs on the control node, whether or not a lab is up
                          "-e", "ansible_connection=local"], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={"PATH": "%s:/usr/bin:/bin" % Path(tool).parent, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                              "DSV41_LAB_ONLY": "1", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout
    rendered = out.read_text()
    assert (ROOT / "lab" / "seed" / declared_file).read_text() == rendered, "the declared part, byte for byte"
    declared = set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", rendered, re.M))
    extra = (ROOT / "lab" / "seed" / site_file).read_text().splitlines()
    keys = [line.split("=", 1)[0] for line in extra]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S.*", line) for line in extra), extra
    assert len(keys) >= 12 and len(set(keys)) == len(keys) and not set(keys) & declared, keys
    for key in ("HEAD_IP", "WORKER_IPS", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NFS_EXPORT", "SSH_IDENTITY",
                "DIST_PORT", "WORKER1_HOST", "WORKER2_HOST"):
        assert key in keys, key
