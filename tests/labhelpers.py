"""Helpers shared by the lab-level tests: run playbooks, reach lab hosts, snapshot their files.

Lab hosts are reached through podman (`podman exec`) for inspection only; everything under test goes
through Ansible exactly as an operator runs it.
"""
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAB_INVENTORY = ROOT / "inventory" / "lab"
HOSTS = ("spark1", "spark2", "spark3")
# The lab instance this checkout drives (lab/labctl.py: DSV41_LAB_INSTANCE); names its podman containers.
LAB_INSTANCE = int(os.environ.get("DSV41_LAB_INSTANCE", "0") or 0)


def lab_container(host, tp=3):
    """The podman container of a lab host (instance-aware, as lab/labctl.py names it; ``tp=4``: the TP4 lab's)."""
    tag = "" if tp == 3 else "-tp%d" % tp
    return (f"dsv41-lab{tag}-{host}" if LAB_INSTANCE == 0 else f"dsv41-lab{LAB_INSTANCE}{tag}-{host}")
MODELS = ROOT / "lab" / ".state" / "models"
FULL_CHECKPOINT = "/srv/models/DeepSeek-V4.1-Flash"
MINI_CHECKPOINT = "/srv/models/DeepSeek-V4.1-Flash-mini"


def env():
    e = dict(os.environ)
    venv_bin = str(ROOT / ".venv" / "bin")
    e["PATH"] = venv_bin + os.pathsep + e.get("PATH", "")
    e.update({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "DSV41_LAB_ONLY": "1",
              "ANSIBLE_NOCOLOR": "1"})
    return e


def lab(action):
    subprocess.run(["python3", str(ROOT / "lab" / "labctl.py"), action], check=True, cwd=ROOT)


# The launcher variant a lab host has unless a test installs another (lab/labctl.py launcher_variant()).
DEFAULT_LAUNCHER = "family"


def install_launcher(variant):
    """Install a lab launcher variant as start.sh on every host (``labctl.py launcher``)."""
    subprocess.run(["python3", str(ROOT / "lab" / "labctl.py"), "launcher"], check=True, cwd=ROOT,
                   env={**os.environ, "DSV41_LAB_LAUNCHER_VARIANT": variant})


# The stage ledger the tests of stages C to I run with: those stages require stage_a and stage_b in
# dsv41_stages_passed for the running image (the report's order). A test module that sets STAGES_PASSED = True
# (tests/playbooks/conftest.py) runs every playbook with one more inventory layer holding both entries for
# the image the lab's head runs at that moment: what an operator commits after stages A and B passed. The
# ledger's own behaviour (refusal without it, the proposals of A and B) is tested without it.
STAGE_LEDGER = {"on": False}


def running_image_digest(tp=3):
    """The head engine's image as the ledger keys it: its first registry digest, else its id."""
    image_id = sh("spark1", "docker inspect --format '{{.Image}}' dsv41-head", tp=tp).strip()
    info = json.loads(sh("spark1", "docker image inspect %s" % image_id, tp=tp))[0]
    return (info.get("RepoDigests") or [None])[0] or info["Id"]


def stage_ledger_layer(directory=None, names=("stage_a", "stage_b"), inventory=LAB_INVENTORY, tp=3):
    """An inventory layer (a directory beside the lab inventory, or ``inventory`` with ``tp``: the TP4 lab's)
    whose dsv41_stages_passed holds ``names`` for the image the lab runs now. Returns the directory."""
    import tempfile
    # one directory per test process, rewritten at each call (playbooks of one process run one at a time)
    directory = Path(directory or Path(tempfile.gettempdir()) / ("dsv41-stage-ledger-%d" % os.getpid()))
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text((inventory / "hosts.yml").read_text())
    digest = running_image_digest(tp)
    (directory / "group_vars" / "dsv41_ranks.yml").write_text(
        "---\ndsv41_stages_passed:\n" + "".join("  - {name: %s, image_digest: '%s', record: records/lab-tests}\n"
                                                 % (name, digest) for name in names))
    return directory


def ledger_inventories(inventories=(LAB_INVENTORY,)):
    """``inventories`` plus the stage ledger layer when the running test module asks for it."""
    return tuple(inventories) + ((stage_ledger_layer(),) if STAGE_LEDGER["on"] else ())


def playbook(name, *args, inventories=(LAB_INVENTORY,)):
    """Run a playbook; return (returncode, combined output)."""
    cmd = ["ansible-playbook", str(ROOT / "playbooks" / name)]
    for inv in ledger_inventories(inventories):
        cmd += ["-i", str(inv)]
    # stdin from /dev/null: a playbook never prompts here, and ansible refuses a non-blocking stdin inherited
    # from the runner (seen under pytest -s: "Ansible requires blocking IO on stdin/stdout/stderr")
    res = subprocess.run(cmd + list(args), cwd=ROOT, env=env(), text=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    return res.returncode, res.stdout


def recap(output):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP (summed over plays)."""
    result = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
        result[host] = counts
    return result


def changed_tasks(output):
    """Names of the tasks that reported a change on any host."""
    changed, task = set(), None
    for line in output.splitlines():
        m = re.match(r"^TASK \[(.+?)\] \*", line)
        if m:
            task = m.group(1)
        elif line.startswith("changed: [") and task:
            changed.add(task)
    return changed


def sh(host, script, user=None, check=True, tp=3):
    cmd = ["podman", "exec"]
    if user:
        cmd += ["--user", user]
    res = subprocess.run(cmd + [lab_container(host, tp), "bash", "-c", script], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and res.returncode != 0:
        raise AssertionError(f"{host}: {script!r} failed ({res.returncode}): {res.stderr}")
    return res.stdout


def read_bytes(host, path):
    res = subprocess.run(["podman", "exec", lab_container(host), "cat", path], stdout=subprocess.PIPE, check=True)
    return res.stdout


SNAPSHOT_SCRIPT = r"""
import hashlib, json, os, sys
out = {}
for root in sys.argv[1:]:
    if not os.path.exists(root):
        continue
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            h = ""
            if os.path.isfile(p) and not os.path.islink(p):
                # Hash every data extent with its offset (SEEK_DATA/SEEK_HOLE): exact for the sparse
                # full-scale checkpoint and TP2 files without reading hundreds of GB of holes.
                hd = hashlib.sha256()
                fd = os.open(p, os.O_RDONLY)
                try:
                    off = 0
                    while off < st.st_size:
                        try:
                            start = os.lseek(fd, off, os.SEEK_DATA)
                        except OSError:
                            break
                        end = os.lseek(fd, start, os.SEEK_HOLE)
                        hd.update(str(start).encode())
                        pos = start
                        while pos < end:
                            chunk = os.pread(fd, min(1 << 22, end - pos), pos)
                            if not chunk:
                                break
                            hd.update(chunk)
                            pos += len(chunk)
                        off = end
                finally:
                    os.close(fd)
                h = hd.hexdigest()
            out[p] = [st.st_size, oct(st.st_mode), h]
print(json.dumps(out, sort_keys=True))
"""


def snapshot(paths_by_host):
    """{host: {path: [size, mode, sha256]}} for every file and directory under the given roots."""
    snap = {}
    for host, roots in paths_by_host.items():
        out = subprocess.run(["podman", "exec", lab_container(host), "python3", "-c", SNAPSHOT_SCRIPT, *roots],
                             check=True, text=True, stdout=subprocess.PIPE).stdout
        snap[host] = json.loads(out)
    return snap


def set_launcher_env(**settings):
    """Set keys in the head's launcher .env (a lab fixture step standing in for container_env)."""
    lines = "".join(f"sed -i '/^{k}=/d' .env; echo '{k}={v}' >> .env; " for k, v in settings.items())
    sh("spark1", f"cd /home/mia/dsv41-3x-spark && {lines}", user="mia")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def boot_facts(host, container, user=None):
    """Latest-boot facts of a lab container's log, read as the roles read it: both streams of
    `docker logs --timestamps`, through the project's one reader (module_utils/engine_log/source.py)."""
    from ansible.module_utils.base import command_stream
    from ansible.module_utils.engine_log import source

    def run(args):
        cmd = ["podman", "exec"] + (["--user", user] if user else []) + [lab_container(host)] + list(args)
        res = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return res.returncode, res.stdout, res.stderr

    return source.scan_docker(run, container, open_stream=command_stream.opener_over(run))
