"""The lab's seeded launcher .env is exactly what roles/container_env renders from the inventory baseline.

That is what makes the lab "the report's state": converging container_env on a fresh lab changes nothing.
"""
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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
        src: "{{ template }}"
        dest: "{{ out }}"
        mode: "0600"
      delegate_to: localhost
      vars:
        container_env_settings: "{{ dsv41_launcher_settings | combine(dsv41_launcher_overrides) }}"
        container_env_notes: "{{ dsv41_launcher_notes }}"
        container_env_api_key: "{{ dsv41_api_key }}"
"""


def test_seeded_env_is_the_rendered_baseline(tmp_path):
    playbook = tmp_path / "render.yml"
    playbook.write_text(PLAYBOOK)
    ansible_playbook = shutil.which("ansible-playbook")
    assert ansible_playbook, "ansible-playbook is not on PATH (put the project venv's bin on PATH)"
    out = tmp_path / "rendered.env"
    template = ROOT / "roles" / "container_env" / "templates" / "launcher.env.j2"
    res = subprocess.run([ansible_playbook, str(playbook), "-i", str(ROOT / "inventory" / "lab"),
                          "-e", f"out={out}", "-e", f"template={template}"], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={"PATH": "/usr/bin:/bin", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                              "DSV41_LAB_ONLY": "1", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout
    assert out.read_text() == (ROOT / "lab" / "seed" / "launcher.env").read_text()
