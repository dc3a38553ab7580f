#!/usr/bin/env python3
"""Bring the local lab fleet (spark1..spark3; spark1..spark4 with DSV41_LAB_TP=4) up or down.

    labctl.py build    build the base root filesystem and the lab image, only if their inputs changed
    labctl.py up       build if needed, replace any lab host left from earlier runs, start and seed them
    labctl.py ensure   up, unless every host already runs and answers ssh
    labctl.py reset    back to the report state in seconds, without recreating the hosts (up if they are not up);
                       --only engines,clocks,launcher,engram,state limits it to what a run changed
    labctl.py down     remove the lab hosts, their network, the lab ssh keys and connection files
    labctl.py purge    down, then also remove the lab images and generated checkpoints
    labctl.py status   one line per lab host
    labctl.py age      --host spark1 --mb 190 [--days 7] [--container NAME]: days of a serving engine's periodic
                       log lines appended to a rank's container log (the docker stand-in's __lab-age)

The hosts are podman containers with systemd as PID 1 and sshd published on a random 127.0.0.1
port; Ansible reaches them over its builtin ssh connection exactly as it reaches the real fleet.
Every name this script creates carries the label ``dsv41-lab=1`` so ``down`` can find what an
interrupted run left behind. Paths and figures: lab/README.md.

DSV41_LAB_TP=4 drives a second lab beside the TP3 one: four hosts (spark1..spark4) in the state of a
four-node TP4 fleet of the same launcher family (TP4 settings, the downstream TP4 wo_a_w8, Engram not yet
packed), with its own containers, network, subnet and inventory (inventory/lab-tp4), so one checkout can run
both at once (bin/fleet-drift --all checks them side by side).
"""
import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LAB = Path(__file__).resolve().parent
REPO = LAB.parent
STATE = LAB / ".state"
SSH_DIR = STATE / "ssh"

# DSV41_LAB_TP=3 (default) or 4: which lab fleet this invocation drives (its own names and inventory).
try:
    LAB_TP = int(os.environ.get("DSV41_LAB_TP", "3") or 3)
except ValueError:
    raise SystemExit("[lab] DSV41_LAB_TP must be 3 or 4")
if LAB_TP not in (3, 4):
    raise SystemExit("[lab] DSV41_LAB_TP must be 3 or 4, got %d" % LAB_TP)
TP_TAG = "" if LAB_TP == 3 else f"-tp{LAB_TP}"
INVENTORY = REPO / "inventory" / ("lab" if LAB_TP == 3 else f"lab-tp{LAB_TP}")
# Every lab inventory of this checkout: the ssh keys serve all of them (removed only when none is in use).
ALL_INVENTORIES = (REPO / "inventory" / "lab", REPO / "inventory" / "lab-tp4")

# DSV41_LAB_INSTANCE=N (0..9, default 0) runs an independent lab beside the default one (its own
# containers, network, subnet and connection files; a separate checkout per instance), so two lab
# test runs on one machine never touch each other's hosts.
try:
    INSTANCE = int(os.environ.get("DSV41_LAB_INSTANCE", "0") or 0)
except ValueError:
    raise SystemExit("[lab] DSV41_LAB_INSTANCE must be an integer 0..9")
if not 0 <= INSTANCE <= 9:
    raise SystemExit("[lab] DSV41_LAB_INSTANCE must be an integer 0..9")
# A TP4 lab of instance N sits beside the TP3 lab of the same instance: other names, network, subnet
# (172.29.43+N) and instance label, so `down` of one never removes the other.
NAME_PREFIX = ("dsv41-lab" if INSTANCE == 0 else f"dsv41-lab{INSTANCE}") + TP_TAG + "-"
NETWORK = ("dsv41-lab" if INSTANCE == 0 else f"dsv41-lab{INSTANCE}") + TP_TAG
SUBNET_OCTET = 33 + INSTANCE if LAB_TP == 3 else 43 + INSTANCE
SUBNET = f"172.29.{SUBNET_OCTET}.0/24"
LABEL = "dsv41-lab=1"
INSTANCE_LABEL = f"dsv41-lab-instance={INSTANCE}{TP_TAG}"
MEMINFO_PREFIX = ("meminfo-" if INSTANCE == 0 else f"meminfo{INSTANCE}-") + (TP_TAG[1:] + "-" if TP_TAG else "")
BASE_REPO = "localhost/dsv41-lab-base"
IMAGE_REPO = "localhost/dsv41-lab"
SUITE = "bookworm"
MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "openssh-client", "python3",
            "sudo", "iproute2", "procps", "iputils-ping", "ca-certificates", "curl", "less",
            "bubblewrap"]
PODMAN_RUN = ["podman", "--runtime", "runc"]

GIB = 1 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")  # a tmpfs block (f_frsize), as the lab hosts see it


def _tp2_shard_sizes():
    """{name: bytes} of spark2's old TP2 shards, from the seeder that writes them (one source)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("dsv41_lab_host_seed", LAB / "seed" / "host_seed.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tp2_shard_sizes()


# spark2's Engram destination and its old TP2 shards share one filesystem, as on the fleet: one tmpfs (the
# "volume" below) whose two subdirectories are bind-mounted at /home/zurih/dsv41-3x-spark/engram and
# /home/zurih/dsv41-engram. The TP2 stand-ins are sparse; the lab allocation model
# (lab/standins/dsv41_lab_allocation.py) counts them at their full size, so the volume is the report's free
# space plus those shards rounded to blocks: Python on spark2 sees 64,906,600,448 bytes free at the
# destination, and 101,379,024,656 (rounded to blocks) more once the shards leave the filesystem.
SPARK2_REPORT_FREE = 64_906_600_448
SPARK2_ENGRAM_VOLUME = SPARK2_REPORT_FREE + sum(-(-n // PAGE) * PAGE for n in _tp2_shard_sizes().values())

# Per host: login user, the tmpfs volumes whose size is the free space the report saw (or a lab
# choice where the report is silent), and the meminfo figures (kB) for MemAvailable 3.07/7.55/4.13 GiB.
# "volume": a tmpfs mounted at a lab path, whose subdirectories are bind-mounted where the fleet has them
# (same filesystem, same st_dev), before the host is seeded.
TP3_HOSTS = {
    "spark1": {
        "ip": f"172.29.{SUBNET_OCTET}.11", "user": "mia", "models": "rw",
        "tmpfs": {"/home/mia/dsv41-engram": 384 * GIB},
        "mem_available_kb": round(3.07 * 1024 * 1024),
    },
    "spark2": {
        "ip": f"172.29.{SUBNET_OCTET}.12", "user": "zurih", "models": "ro",
        "tmpfs": {"/data": 256 * GIB},
        "volume": {"mount": "/var/lib/dsv41-lab/volumes/zurih-home", "size": SPARK2_ENGRAM_VOLUME,
                   "binds": {"dsv41-3x-spark-engram": "/home/zurih/dsv41-3x-spark/engram",
                             "dsv41-engram": "/home/zurih/dsv41-engram"}},
        "mem_available_kb": round(7.55 * 1024 * 1024),
    },
    # spark3's Engram destination and the archive directory a relocation of foreign shards moves them into
    # (engram_pack_archive_dir: ~/dsv41-engram-archive) share one filesystem too, as the fleet's home does:
    # spark3's ~448 GiB free is what both draw on (the archive exists, empty, owned by the login user).
    "spark3": {
        "ip": f"172.29.{SUBNET_OCTET}.13", "user": "zurih", "models": "ro",
        "tmpfs": {},
        "volume": {"mount": "/var/lib/dsv41-lab/volumes/zurih-home", "size": 448 * GIB,
                   "binds": {"dsv41-3x-spark-engram": "/home/zurih/dsv41-3x-spark/engram",
                             "dsv41-engram-archive": "/home/zurih/dsv41-engram-archive"},
                   "owned": ["dsv41-engram-archive"]},
        "mem_available_kb": round(4.13 * 1024 * 1024),
    },
}


def _tp4_worker(index):
    """A TP4 lab worker: its Engram destination and archive on one 448 GiB volume, as spark3's (a lab
    choice: the community's TP4 nodes are dedicated, no foreign shards, no second tenant)."""
    return {"ip": f"172.29.{SUBNET_OCTET}.{11 + index}", "user": "zurih", "models": "ro", "tmpfs": {},
            "volume": {"mount": "/var/lib/dsv41-lab/volumes/zurih-home", "size": 448 * GIB,
                       "binds": {"dsv41-3x-spark-engram": "/home/zurih/dsv41-3x-spark/engram",
                                 "dsv41-engram-archive": "/home/zurih/dsv41-engram-archive"},
                       "owned": ["dsv41-engram-archive"]},
            "mem_available_kb": round(9.5 * 1024 * 1024)}


# The TP4 lab: a head and three workers of a dedicated four-node fleet (MemAvailable 9.5 GiB each: a lab
# choice, the report gives no TP4 figure).
TP4_HOSTS = {
    "spark1": {"ip": f"172.29.{SUBNET_OCTET}.11", "user": "mia", "models": "rw",
               "tmpfs": {"/home/mia/dsv41-engram": 384 * GIB}, "mem_available_kb": round(9.5 * 1024 * 1024)},
    "spark2": _tp4_worker(1),
    "spark3": _tp4_worker(2),
    "spark4": _tp4_worker(3),
}
HOSTS = TP3_HOSTS if LAB_TP == 3 else TP4_HOSTS
HEAD = "spark1"
WORKERS = [h for h in HOSTS if h != HEAD]
MEM_TOTAL_KB = 124_603_392  # a GB10's unified memory as the kernel reports it (about 118.8 GiB)


def log(msg):
    print(f"[lab] {msg}", flush=True)


def run(cmd, check=True, capture=False, **kw):
    if capture:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
    res = subprocess.run(cmd, check=False, text=True, **kw)
    if check and res.returncode != 0:
        detail = (res.stderr or "").strip() if capture else ""
        raise SystemExit(f"[lab] command failed ({res.returncode}): {' '.join(cmd)}\n{detail}")
    return res


def container(host):
    return f"{NAME_PREFIX}{host}"


def image_exists(ref):
    return run(["podman", "image", "exists", ref], check=False).returncode == 0


def digest(*parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def tree_digest(paths):
    """Hash file names, modes and contents, so any edit to an image input changes the tag."""
    h = hashlib.sha256()
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                      and "__pycache__" not in p.parts)
        for f in files:
            h.update(str(f.relative_to(LAB)).encode() + b"\0")
            h.update(oct(f.stat().st_mode & 0o111).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------- build
def base_ref():
    return f"{BASE_REPO}:{digest(SUITE, MIRROR, *PACKAGES)}"


def build_base():
    ref = base_ref()
    if image_exists(ref):
        log(f"base image {ref} is current")
        return ref
    log(f"building base root filesystem {ref} with debootstrap")
    with tempfile.TemporaryDirectory(prefix="dsv41-rootfs-", dir=os.environ.get("TMPDIR")) as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            stdout=subprocess.DEVNULL)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run(["podman", "import", "-", ref], stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit("[lab] tar of the root filesystem failed")
    return ref


def image_inputs():
    return [LAB / "Containerfile", LAB / "units", LAB / "standins", LAB / "seed"]


def image_ref(base):
    return f"{IMAGE_REPO}:{digest(base, tree_digest(image_inputs()))}"


# One build at a time on this machine (images are the machine's, not a checkout's): CI builds the image in
# the test runner while `make fresh-check` may ask for the same base image beside it; the second waits, then
# finds the image current.
BUILD_LOCK = Path(tempfile.gettempdir()) / "dsv41-lab-build.lock"


def build():
    with open(BUILD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build()


def _build():
    base = build_base()
    ref = image_ref(base)
    if image_exists(ref):
        log(f"lab image {ref} is current (inputs unchanged), not rebuilding")
        return ref
    log(f"building lab image {ref}")
    with tempfile.TemporaryDirectory(prefix="dsv41-ctx-") as ctx:
        for src in image_inputs():
            dst = Path(ctx) / src.name
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, dst)
        run(PODMAN_RUN + ["build", "--quiet", "--label", LABEL, "--build-arg", f"BASE={base}",
                          "-t", ref, "-f", str(Path(ctx) / "Containerfile"), ctx], stdout=subprocess.DEVNULL)
    return ref


# ------------------------------------------------------------------------------------------ down/up
def lab_containers():
    out = run(["podman", "ps", "-a", "--filter", f"label={LABEL}", "--filter", f"label={INSTANCE_LABEL}",
               "--format", "{{.Names}}"], capture=True, check=False).stdout or ""
    names = set(out.split())
    # Records left by a killed run may have lost their label; catch them by name too.
    out = run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture=True, check=False).stdout or ""
    names |= {n for n in out.split() if n in {container(h) for h in HOSTS}}
    return sorted(names)


def remove_container(name, attempts=5):
    """Remove a lab container whatever state it was left in. Under load podman can report a
    container it is still stopping as "state improper"; try again until the name is free."""
    for attempt in range(attempts):
        run(["podman", "rm", "-f", "-t", "2", name], check=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        if run(["podman", "container", "exists", name], check=False).returncode != 0:
            return
        time.sleep(1 + attempt)
    raise SystemExit(f"[lab] could not remove {name} after {attempts} attempts (see `podman ps -a`)")


def down(purge=False):
    for name in lab_containers():
        log(f"removing {name}")
        remove_container(name)
    if run(["podman", "network", "exists", NETWORK], check=False).returncode == 0:
        run(["podman", "network", "rm", "-f", NETWORK], check=False, stdout=subprocess.DEVNULL)
    for host in HOSTS:
        conn = INVENTORY / "host_vars" / host / "lab_connection.yml"
        # The connection files of this checkout may belong to another instance's lab: keep those.
        if conn.exists() and f"dsv41_lab_instance: {INSTANCE}\n" in conn.read_text():
            conn.unlink()
    # The ssh keys of this checkout serve every instance driven from it: removed only when no other
    # instance's connection files remain.
    if not any(list(inv.glob("host_vars/*/lab_connection.yml")) for inv in ALL_INVENTORIES):
        shutil.rmtree(SSH_DIR, ignore_errors=True)
    for f in STATE.glob(f"{MEMINFO_PREFIX}*"):
        f.unlink()
    if purge:
        out = run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture=True).stdout
        for ref in out.split():
            if ref.startswith((BASE_REPO + ":", IMAGE_REPO + ":")):
                run(["podman", "rmi", "-f", ref], check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(STATE, ignore_errors=True)
    log("lab is down")


def ensure_keys():
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(SSH_DIR, 0o700)
    for name, comment in (("id_ed25519", "ansible@dsv41-lab"), ("fleet_ed25519", "mia@spark1-launcher")):
        key = SSH_DIR / name
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
    return SSH_DIR / "id_ed25519"


def ensure_models():
    run([sys.executable, str(LAB / "tools" / "make_checkpoint.py"), "--out", str(STATE / "models")])


def write_meminfo(host, spec):
    path = STATE / f"{MEMINFO_PREFIX}{host}"
    avail = spec["mem_available_kb"]
    free = avail // 3
    path.write_text(
        f"MemTotal:       {MEM_TOTAL_KB} kB\n"
        f"MemFree:        {free} kB\n"
        f"MemAvailable:   {avail} kB\n"
        f"Buffers:          12288 kB\n"
        f"Cached:         {avail - free} kB\n"
        f"SwapCached:           0 kB\n"
        f"Active:         {MEM_TOTAL_KB // 2} kB\n"
        f"Inactive:       {MEM_TOTAL_KB // 8} kB\n"
        f"SwapTotal:            0 kB\n"
        f"SwapFree:             0 kB\n"
        f"Dirty:              128 kB\n"
        f"Shmem:           262144 kB\n"
    )
    os.chmod(path, 0o444)
    return path


def ensure_network():
    if run(["podman", "network", "exists", NETWORK], check=False).returncode == 0:
        info = json.loads(run(["podman", "network", "inspect", NETWORK], capture=True).stdout)
        subnets = [s.get("subnet") for s in info[0].get("subnets", [])]
        if SUBNET in subnets:
            return
        run(["podman", "network", "rm", "-f", NETWORK], stdout=subprocess.DEVNULL)
    run(["podman", "network", "create", "--label", LABEL, "--label", INSTANCE_LABEL, "--subnet", SUBNET, NETWORK], stdout=subprocess.DEVNULL)


def start_host(host, spec, ref):
    args = PODMAN_RUN + [
        "run", "-d", "--name", container(host), "--hostname", host, "--label", LABEL, "--label", INSTANCE_LABEL,
        "--systemd=always", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
        "--network", NETWORK, "--ip", spec["ip"], "-p", "127.0.0.1::22",
        "-v", f"{write_meminfo(host, spec)}:/proc/meminfo:ro",
        "-v", f"{STATE / 'models'}:/srv/models:{spec['models']}",
    ]
    for other, ospec in HOSTS.items():
        args += ["--add-host", f"{other}:{ospec['ip']}"]
    for path, size in spec["tmpfs"].items():
        args += ["--tmpfs", f"{path}:rw,size={size},mode=0755"]
    if spec.get("volume"):
        args += ["--tmpfs", f"{spec['volume']['mount']}:rw,size={spec['volume']['size']},mode=0755"]
    run(args + [ref], stdout=subprocess.DEVNULL)


def mount_volume(host, spec):
    """Bind the subdirectories of the host's shared tmpfs where the fleet has them (same filesystem). The
    hosts run without CAP_SYS_ADMIN; this one exec has it. Idempotent: a bound target is left alone."""
    vol = spec.get("volume")
    if not vol:
        return
    lines = ["set -e"]
    for sub, target in vol["binds"].items():
        source = f"{vol['mount']}/{sub}"
        lines.append(f"mkdir -p '{source}' '{target}'")
        lines.append(f"mountpoint -q '{target}' || mount --bind '{source}' '{target}'")
        if sub in vol.get("owned", ()):     # the login user's own directory (uid/gid 1000, as setup_users makes it)
            lines.append(f"chown 1000:1000 '{source}'")
    pexec(host, "bash", "-c", "\n".join(lines), privileged=True)


def pexec(host, *cmd, user=None, check=True, capture=False, privileged=False):
    args = ["podman", "exec"] + (["--privileged"] if privileged else [])
    if user:
        args += ["--user", user, "--workdir", f"/home/{user}"]
    return run(args + [container(host), *cmd], check=check, capture=capture)


def wait_running(host, timeout=90):
    deadline = time.time() + timeout
    state = ""
    while time.time() < deadline:
        res = pexec(host, "systemctl", "is-system-running", check=False, capture=True)
        state = res.stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(1)
    if state != "running":
        failed = pexec(host, "systemctl", "--failed", "--no-legend", check=False, capture=True).stdout
        raise SystemExit(f"[lab] {host}: systemd is '{state}', not running. Failed units:\n{failed}")


def setup_users(host, spec):
    user = spec["user"]
    pub = (SSH_DIR / "id_ed25519.pub").read_text()
    fleet_pub = (SSH_DIR / "fleet_ed25519.pub").read_text()
    keys = pub + (fleet_pub if host != "spark1" else "")
    script = f"""
set -e
id -u {user} >/dev/null 2>&1 || useradd -u 1000 -U -s /bin/bash -d /home/{user} -m -k /etc/skel {user}
chown {user}:{user} /home/{user}
echo '{user} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/90-{user}
chmod 0440 /etc/sudoers.d/90-{user}
install -d -m 0700 -o {user} -g {user} /home/{user}/.ssh
printf '%s' '{keys}' > /home/{user}/.ssh/authorized_keys
chown {user}:{user} /home/{user}/.ssh/authorized_keys
chmod 0600 /home/{user}/.ssh/authorized_keys
"""
    pexec(host, "bash", "-c", script)
    if host == "spark1":
        # The launcher on the head reaches the workers as their login user over ssh.
        priv = (SSH_DIR / "fleet_ed25519").read_text()
        script = f"""
set -e
umask 077
printf '%s' '{priv}' > /home/{user}/.ssh/id_ed25519
printf '%s' '{fleet_pub}' > /home/{user}/.ssh/id_ed25519.pub
printf 'Host {" ".join(WORKERS)}\\n  StrictHostKeyChecking accept-new\\n  BatchMode yes\\n' > /home/{user}/.ssh/config
chown -R {user}:{user} /home/{user}/.ssh
"""
        pexec(host, "bash", "-c", script)


def write_connection(host, spec, key):
    port = run(["podman", "port", container(host), "22/tcp"], capture=True).stdout.strip().rsplit(":", 1)[1]
    path = INVENTORY / "host_vars" / host / "lab_connection.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "---\n# Written by `make lab-up` (lab/labctl.py); never committed. Where Ansible reaches this lab host.\n"
        f"ansible_host: 127.0.0.1\nansible_port: {port}\n"
        f"ansible_ssh_private_key_file: {key}\n"
        "ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR\n"
        f"# Which lab (DSV41_LAB_INSTANCE) these hosts belong to; `down` of another instance leaves this file.\n"
        f"dsv41_lab_instance: {INSTANCE}\n"
    )
    return int(port)


def wait_ssh(host, spec, port, key, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        res = run(["ssh", "-i", str(key), "-p", str(port), "-o", "StrictHostKeyChecking=no",
                   "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                   "-o", "ConnectTimeout=3", f"{spec['user']}@127.0.0.1", "hostname"],
                  check=False, capture=True)
        if res.returncode == 0 and res.stdout.strip() == host:
            return
        time.sleep(1)
    raise SystemExit(f"[lab] {host}: ssh on 127.0.0.1:{port} did not answer as {host} within {timeout}s")


def launcher_variant():
    """The launcher variant the lab installs as start.sh (lab/README.md, "Launcher variants")."""
    return os.environ.get("DSV41_LAB_LAUNCHER_VARIANT", "").strip() or "family"


# The DRM render node of a GB10 (stage I's DRM probe reads it as a character device, major 226): mknod needs
# CAP_MKNOD, which the hosts do not have, so a privileged exec makes it after the seed (anything else at that
# path, e.g. a test's stand-in, is replaced; the device cgroup allows mknod, never opening it).
DRM_NODE_SCRIPT = """
set -e
mkdir -p /dev/dri
if [ ! -c /dev/dri/renderD128 ] || [ "$(stat -c %t /dev/dri/renderD128)" != e2 ]; then
  rm -rf /dev/dri/renderD128
  mknod -m 0666 /dev/dri/renderD128 c 226 128
fi
"""


def seed(host, launcher_only=False):
    pexec(host, "python3", "/usr/local/lib/dsv41-lab/seed/host_seed.py", "--host", host, "--tp", str(LAB_TP),
          "--launcher-variant", launcher_variant(), *(["--launcher-only"] if launcher_only else []))
    if not launcher_only:
        pexec(host, "bash", "-c", DRM_NODE_SCRIPT, privileged=True)


def engine_knobs():
    """DSV41_LAB_ENGINE_KNOBS (e.g. `LAB_ENGINE_SPEED=10`, space-separated KEY=VALUE) goes into every host's
    /etc/dsv41-lab/engine.env before the engines start. Unset (the default) writes nothing: the lab
    answers in real time. `make test` sets it so decode benchmarks of the test suite do not sleep out the
    real latency model (ratios are unchanged; every figure is lab output either way)."""
    knobs = os.environ.get("DSV41_LAB_ENGINE_KNOBS", "").split()
    bad = [k for k in knobs if "=" not in k or not k.startswith("LAB_ENGINE_")]
    if bad:
        raise SystemExit(f"[lab] DSV41_LAB_ENGINE_KNOBS: expected LAB_ENGINE_*=VALUE words, got {' '.join(bad)}")
    if not knobs:
        return
    text = "# lab knobs of the engine stand-in, from DSV41_LAB_ENGINE_KNOBS (lab/labctl.py)\n" + "\n".join(knobs) + "\n"
    for host in HOSTS:
        pexec(host, "bash", "-c", 'mkdir -p /etc/dsv41-lab && printf "%s" "$1" > /etc/dsv41-lab/engine.env', "knobs", text)
    log(f"engine knobs: {' '.join(knobs)}")


def serve():
    """Start the engines through the lab launcher, as the operator would: workers first, then the head."""
    engine_knobs()
    pexec("spark1", "/home/mia/dsv41-3x-spark/start.sh", "serve", user="mia")


def up(skip_serve=False):
    t0 = time.time()
    ref = build()
    key = ensure_keys()
    ensure_models()
    for name in lab_containers():
        log(f"replacing {name} left from an earlier run")
        remove_container(name)
    ensure_network()
    for host, spec in HOSTS.items():
        start_host(host, spec, ref)
    for host, spec in HOSTS.items():
        wait_running(host)
        mount_volume(host, spec)  # before the user: its home exists already, as under the other hosts' tmpfs
        setup_users(host, spec)
        port = write_connection(host, spec, key)
        wait_ssh(host, spec, port, key)
        seed(host)
        log(f"{host} is up on 127.0.0.1:{port}")
    if not skip_serve:
        serve()
    log(f"lab up in {time.time() - t0:.1f}s")


# Everything the roles, the stand-ins and the tests change on a lab host, wiped so that the seeder
# (which only fills in what is missing) writes the report state again. Mount points (the tmpfs
# Engram directories, spark2's two bind mounts of its Engram volume, /data) are emptied, never
# removed; spark2's sparse TP2 shards are kept (the seeder checks their headers and sizes and
# rewrites them only when they differ). Users, ssh keys,
# sudoers, the journal and /srv/models are left alone: nothing under test changes them (the
# checkpoints are checked by ensure_models).
RESET_SCRIPT = r"""
set -eu
user=$1
parts=" $2 "
home=/home/$user
has() { case "$parts" in *" $1 "*) return 0 ;; esac; return 1; }
# engines: the docker stand-in kills each engine's process group and forgets the container; its
# state (containers, logs, images built by the roles) goes, with the lab knobs and the autotune
# cache the boots wrote
if has engines; then
  if command -v docker >/dev/null; then
    docker ps -aq 2>/dev/null | xargs -r docker rm -f >/dev/null 2>&1 || true
  fi
  rm -rf /var/lib/lab-docker /etc/dsv41-lab "$home/.cache/sglang"
fi
# clocks: what the stand-in nvidia-smi recorded (and its fault knobs), the clock-lock units
if has clocks; then
  rm -rf /var/lib/lab-nvidia
  rm -f /etc/systemd/system/nvidia-clock-*.service /etc/systemd/system/*.wants/nvidia-clock-*.service
fi
# launcher: the checkout (.env and its backups, start.sh, adapter/, logs/), all but the Engram mount point
if has launcher && [ -d "$home/dsv41-3x-spark" ]; then
  find "$home/dsv41-3x-spark" -mindepth 1 -maxdepth 1 ! -name engram -exec rm -rf {} +
fi
# engram: every shard destination (tmpfs mount points are emptied, never removed)
if has engram; then
  for d in "$home/dsv41-3x-spark/engram" /data "$home/dsv41-engram-archive"; do
    [ -d "$d" ] && find "$d" -mindepth 1 -delete
  done
  if [ "$user" = mia ]; then
    [ -d "$home/dsv41-engram" ] && find "$home/dsv41-engram" -mindepth 1 -delete
  elif [ -d "$home/dsv41-engram" ]; then
    find "$home/dsv41-engram" -mindepth 1 ! -name 'engram-l*-r1of2.bin' -delete
  fi
fi
# state: what the roles record on a node (contention actions), scratch files (benchmark, pack progress)
if has state; then
  rm -rf "$home/.local/state/dsv41-fleet" /tmp/dsv41-*
fi
# (the seed that follows every reset reloads systemd once, after it has written the units back)
systemctl reset-failed >/dev/null 2>&1 || true
"""


RESET_PARTS = ("engines", "clocks", "launcher", "engram", "state")


def reset_host(host, spec, parts):
    pexec(host, "bash", "-c", RESET_SCRIPT, "reset", spec["user"], " ".join(parts))
    seed(host)


def reset(parts=RESET_PARTS):
    """Back to the report state without recreating the hosts: wipe what runs change, seed, serve.
    Seconds instead of the containers' start; `up` when the hosts are not all up and reachable.
    `parts` limits the wipe to what a caller changed (a molecule scenario names its own); the seeder
    then restores the report state of those items, and the engines are served again when they went."""
    t0 = time.time()
    if not parts:
        log("reset: nothing to reset")
        return
    if not is_up():
        log("lab is not up: bringing it up instead of resetting")
        up()
        return
    ensure_models()
    errors = []

    def one(host, spec):
        try:
            reset_host(host, spec, parts)
        except SystemExit as exc:  # run() raises SystemExit naming the command that failed
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=item) for item in HOSTS.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("\n".join(errors))
    if "engines" in parts:
        serve()
    log(f"lab reset ({', '.join(parts)}) to the report state in {time.time() - t0:.1f}s")


def parse_parts(text):
    """`--only engines,launcher` (or `none`) -> the parts to reset, refusing unknown names."""
    if text is None:
        return RESET_PARTS
    names = [n for n in text.replace(",", " ").split() if n != "none"]
    unknown = sorted(set(names) - set(RESET_PARTS))
    if unknown:
        raise SystemExit(f"[lab] reset --only: unknown part(s) {', '.join(unknown)}; known: {', '.join(RESET_PARTS)}, none")
    return tuple(n for n in RESET_PARTS if n in names)


def is_up():
    """True when every host runs the lab image of the current inputs (a stand-in edited since they
    started means a stale image: they are brought up again, never reset onto old stand-in code), answer
    ssh as themselves and have their connection files."""
    key = SSH_DIR / "id_ed25519"
    if not key.exists():
        return False
    want = image_ref(base_ref())
    for host, spec in HOSTS.items():
        res = run(["podman", "inspect", "--format", "{{.State.Status}} {{.ImageName}}", container(host)],
                  check=False, capture=True)
        conn = INVENTORY / "host_vars" / host / "lab_connection.yml"
        state, _, image = res.stdout.strip().partition(" ")
        if res.returncode != 0 or state != "running" or not conn.exists():
            return False
        if image and image.replace("localhost/", "", 1) != want.replace("localhost/", "", 1):
            log(f"{host} runs {image}, not the current lab image {want} (lab/ inputs changed)")
            return False
        port = run(["podman", "port", container(host), "22/tcp"], capture=True, check=False).stdout.strip()
        if f"ansible_port: {port.rsplit(':', 1)[-1]}" not in conn.read_text():
            return False
        try:
            wait_ssh(host, spec, port.rsplit(":", 1)[-1], key, timeout=5)
        except SystemExit:
            return False
    return True


# The serving container of each host (its rank's): what `age` ages unless --container names another.
SERVING_CONTAINER = {host: "dsv41-head" if host == HEAD else "dsv41-worker" for host in HOSTS}


def age(hosts, mb, days=None, name=None):
    """Age the serving container of each host by `mb` MB of the periodic lines its engine logs (rank 0: decode
    reports and the Engram lines; workers: the Engram lines), spread over `days` days (default: mb/27, a real
    head's rate). The docker stand-in does the work (`docker __lab-age`,
    lab/standins/lab_docker/commands/lab_age.py): the lines go at the end of the log, in the formats of the boot
    there, stamped between its last record and now; a running engine is held (SIGSTOP) while they are written;
    State.StartedAt does not move."""
    for host in hosts:
        if host not in HOSTS:
            raise SystemExit(f"[lab] age: unknown host {host}; known: {', '.join(HOSTS)}")
        cmd = ["docker", "__lab-age", name or SERVING_CONTAINER[host], "--mb", str(mb)]
        if days is not None:
            cmd += ["--days", str(days)]
        res = pexec(host, *cmd, capture=True)
        log(f"{host}: {res.stdout.strip()}")


def status():
    for host in HOSTS:
        res = run(["podman", "inspect", "--format", "{{.State.Status}}", container(host)], check=False, capture=True)
        state = res.stdout.strip() if res.returncode == 0 else "absent"
        print(f"{host:7} {container(host):18} {state}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["build", "up", "ensure", "reset", "down", "purge", "status", "launcher",
                                           "age"],
                        help="launcher: reinstall start.sh on every host as DSV41_LAB_LAUNCHER_VARIANT; "
                             "age: append days of periodic engine lines to a container's log")
    parser.add_argument("--no-serve", action="store_true", help="up: seed the hosts but do not start the engines")
    parser.add_argument("--only", metavar="PARTS",
                        help="reset: only these parts (comma-separated: %s; or none)" % ", ".join(RESET_PARTS))
    parser.add_argument("--host", action="append", metavar="HOST",
                        help="age: the host whose serving container is aged (repeatable; default spark1)")
    parser.add_argument("--mb", type=float, help="age: MB of log lines to append (a real head logs 27 a day)")
    parser.add_argument("--days", type=float, help="age: days the lines span (default: MB / 27)")
    parser.add_argument("--container", metavar="NAME", help="age: another container than the host's serving one")
    args = parser.parse_args()
    if args.action == "age" and not (args.mb and args.mb > 0):
        parser.error("age needs --mb N (N > 0)")
    if os.geteuid() != 0:
        raise SystemExit("[lab] run as root (podman with runc and tmpfs volumes of exact sizes)")
    if args.action == "build":
        build()
    elif args.action == "up":
        up(skip_serve=args.no_serve)
    elif args.action == "ensure":
        if is_up():
            log("lab is up")
        else:
            up(skip_serve=args.no_serve)
    elif args.action == "reset":
        reset(parse_parts(args.only))
    elif args.action == "down":
        down()
    elif args.action == "launcher":
        for host in HOSTS:
            seed(host, launcher_only=True)
        log(f"launcher variant {launcher_variant()} installed")
    elif args.action == "purge":
        down(purge=True)
    elif args.action == "age":
        age(args.host or ["spark1"], args.mb, args.days, args.container)
    else:
        status()


if __name__ == "__main__":
    main()
