#!/usr/bin/env python3
r"""Seed one LAB host with the fleet state of the 2026-09-24 report (run as root inside the host).

    python3 /usr/local/lib/dsv41-lab/seed/host_seed.py --host spark2

Preconditions (done by lab/labctl.py before this runs): the login user (mia on spark1, zurih on
spark2/3, uid 1000) exists with its home, the tmpfs mount points and /srv/models are mounted, the
meminfo file is in place.  The lab image holds the stand-ins in /usr/local/lib/dsv41-lab/ and this
directory in /usr/local/lib/dsv41-lab/seed/ (the repo layout lab/standins + lab/seed works too).

What it creates (SPEC sections 1 and 5):
  all hosts  group ``docker`` (login user added); /var/lib/lab-docker (2775 root:docker) and
             /var/lib/lab-nvidia (0755 root); clocks locked 0,2200; nvidia-clock-lock.service;
             the per-rank autotune cache under ~/.cache/sglang/flashinfer/autotune/0.6.18/sm121/<hash>/;
             the serving container record (dsv41-head / dsv41-worker, exited; the launcher's
             ``serve`` replaces it with a running one); the launcher start.sh in the checkout (the
             variant of --launcher-variant, default family, as one file assembled from the stand-ins'
             launcher/ parts; recorded in /etc/dsv41-lab/launcher.variant)
  all hosts  variant family only: the checkout's scripts/remote.py (its ssh helper) and the launcher's
             $HOME defaults in the login user's home: NewModels -> /srv/models (a symlink:
             $HOME/NewModels/DeepSeek-V4.1-Flash is the lab's checkpoint) and nccl-2.30.7/ (empty; mounted at /nccl,
             on a worker from the worker's own home: its login shell expands \$HOME)
  all hosts  the checkout's adapter/ (lab/seed/adapters: the seven local adapters + sitecustomize.py,
             0644, login user; written only when absent); the engine image dsv41-sglang:tp3 built
             from that checkout (/var/lib/lab-docker/images/<id>/rootfs/sgl-workspace/adapter/)
  all hosts  the DRM side of a GB10 for stage I's DRM probe: /dev/dri/renderD128 a character device 226:128
             (mknod needs CAP_MKNOD, which only lab/labctl.py's privileged exec after this seed has: it makes
             the node when this run could not), nvidia_drm's modeset parameter ``Y`` in
             /var/lib/lab-sys/module/nvidia_drm/parameters/modeset (a lab host cannot write /sys; the lab
             inventory points experiment_drm_sysfs_root there); no device passed to any container (the
             serving containers get one only through the docker stand-in's knob
             /etc/dsv41-lab/docker-run-devices, which the seed removes)
  all hosts  /etc/dsv41-lab/allocated.roots: the roots (/home, /data) where the lab allocation model
             (lab/standins/dsv41_lab_allocation.py) finds the files it counts as fully allocated
  spark1     /home/mia/dsv41-3x-spark/{.env (0600: launcher.env + launcher.env.site, the keys the
             inventory does not declare), .env.example, adapter/, logs/dsv41.log (saved boot log)},
             /etc/dsv41-lab/launcher.env (LAB_SERVE_POLL_SECONDS=1: the launcher polls every second),
             /home/mia/dsv41-engram (empty), one non-serving container; default multi-user.target
  spark2     /home/zurih/dsv41-3x-spark/{adapter/, engram/}, old TP2 shards
             /home/zurih/dsv41-engram/engram-l{1,14}-r1of2.bin (sparse, 101,379,024,656 bytes in all;
             on the Engram destination's filesystem, counted at full size by the allocation model),
             /data/dsv41-engram, one non-serving container; default multi-user.target
  spark3     worker checkout, 19 non-serving running containers (12 with an ``owner`` label),
             gdm.service stand-in (display-manager alias) active, default graphical.target,
             gpu-dashboard.service (nvidia-smi poller every 2 s as zurih), an NVRM
             NV_ERR_NO_MEMORY kernel message in the journal (timestamp: now; text: 01:33:54)

Idempotent: running it again restores these items to the report state (seeded containers,
clock lock, .env, boot log (also as dsv41-head's json-file docker log), autotune cache, units,
lab knobs) and leaves everything else alone: other containers, a running serving container,
files the roles wrote (packed shards, sidecars, adapters).

``--root DIR`` (tests only) writes every path under DIR and skips users, groups, ownership,
systemctl and the journal.
"""
import argparse
import grp
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pwd
import re
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAB_DIR = HERE.parent  # /usr/local/lib/dsv41-lab on a lab host, lab/ in the repo

HOSTS = {
    "spark1": {"user": "mia", "rank": 0, "role": "head", "container": "dsv41-head"},
    "spark2": {"user": "zurih", "rank": 1, "role": "worker", "container": "dsv41-worker"},
    "spark3": {"user": "zurih", "rank": 2, "role": "worker", "container": "dsv41-worker"},
}
TP = 3
IMAGE = "dsv41-sglang:tp3"
# The TP4 lab (lab/labctl.py with DSV41_LAB_TP=4): a dedicated four-node fleet of the same launcher family,
# in the community's TP4 settings (the report's list of what TP3 must not copy: 16 slots, an 8M-token KV
# pool, memory fraction 0.80, a 4 GiB Engram row cache, shared-expert padding K=576; DSpark block 5, which
# the downstream's probes favour on TP4) and the downstream TP4 wo_a_w8. Nothing of the TP3 report's
# particulars (spark2's TP2 shards, spark3's second tenant and desktop, the saved TP3 boot log).
TP4_HOSTS = dict(HOSTS, spark4={"user": "zurih", "rank": 3, "role": "worker", "container": "dsv41-worker"})
TP4_IMAGE = "dsv41-sglang:tp4"
# Each lab fleet's serving settings as its serving records carry them (the report's TP3 boot; the TP4 profile).
SERVING_SETTINGS = {3: {"block": 3, "slots": 4, "chunk": 1024, "pool": 750000, "fraction": "0.95"},
                    4: {"block": 5, "slots": 16, "chunk": 1024, "pool": 8000000, "fraction": "0.80"}}
SEED_IMAGE_CREATED = "2026-09-19T22:41:07.000000000Z"
# lab/seed/adapters/: the single source of the lab's adapter files. A checkout's adapter/ gets the seven
# local adapters and sitecustomize.py (which registers exactly those); autotune_keep.py (downstream
# retention adapter, stage B) and tp4/ (downstream TP4 files) stay in the source only.
ADAPTER_SOURCE = HERE / "adapters"
LOCAL_ADAPTERS = ("engram_prefetch", "draft_head_fp8", "draft_tau", "block_verify", "verify_cap",
                  "folded_fence", "wo_a_w8")
MODEL_PATH = "/srv/models/DeepSeek-V4.1-Flash"
# Launcher variants (lab/README.md, "Launcher variants"), each installed as start.sh: one file assembled from the
# parts in the stand-ins' launcher/ (assemble_launcher), except those in LAUNCHER_FILES, installed as they are.
LAUNCHER_VARIANTS = ("explicit", "extra_env", "printf_array", "indirect", "family", "legacy")
LAUNCHER_FILES = {"legacy": "legacy/start.sh"}
LAUNCHER_PARTS = "launcher"
LAUNCHER_CORE = ("core_head.sh", "core_launch.sh", "core_commands.sh")
# Files a variant needs beside start.sh: {stand-in file: path in the checkout}, installed with it (0755).
LAUNCHER_HELPERS = {"family": {"scripts/remote.py": "scripts/remote.py"}}
# The family launcher's defaults under $HOME (MODEL_PATH=$HOME/NewModels/DeepSeek-V4.1-Flash, NCCL mounted
# from $HOME/nccl-2.30.7): NewModels is a symlink to the lab's model directory, the NCCL directory is empty.
FAMILY_MODELS_LINK = ("NewModels", os.path.dirname(MODEL_PATH))
FAMILY_NCCL_DIR = "nccl-2.30.7"
DEFAULT_VARIANT = "family"     # the fleet's own launcher family (SPEC section 3); the others stay as variants
VARIANT_FILE = "/etc/dsv41-lab/launcher.variant"
ENGRAM_ROWS = {1: 384006168, 14: 384016684}
MAGIC = 0x31344E4531565344  # b"DSV41EN1" little-endian
ROW_BYTES = 264
HEADER_BYTES = 4096
FLASHINFER = "0.6.18"
SM = "sm121"


def tp2_shard_sizes():
    """{name: bytes} of spark2's old TP2 rank-1 shards: 4096-byte header + its half of the layer's rows
    (101,379,024,656 bytes in all). lab/labctl.py sizes spark2's Engram volume from them."""
    return {"engram-l%d-r1of2.bin" % layer: HEADER_BYTES + (n - n // 2) * ROW_BYTES
            for layer, n in sorted(ENGRAM_ROWS.items())}


# Hash of the tuned settings, as the engine stand-in names its autotune cache directory (see
# autotune_paths in lab_engine/autotune.py); the saved boot log (dsv41.log) names the same directory.
def autotune_hash(tp):
    """The engine stand-in's key of the tuned settings of the TP``tp`` lab (sha256("block=K;mrr=M;chunk=C;tp=T"))."""
    text = "block=%(block)d;mrr=%(slots)d;chunk=%(chunk)d;" % SERVING_SETTINGS[tp] + "tp=%d" % tp
    return hashlib.sha256(text.encode()).hexdigest()[:16]
# The lab allocation model's roots (lab/standins/dsv41_lab_allocation.py: "PATH DEPTH" lines; the model's
# built-in default is the same list, so a reset that removes /etc/dsv41-lab changes nothing).
ALLOCATED_ROOTS_FILE = "/etc/dsv41-lab/allocated.roots"
ALLOCATED_ROOTS_TEXT = ("# Lab allocation model (lab/standins/dsv41_lab_allocation.py): where it looks for\n"
                        "# the files it counts as fully allocated (engram-l<L>-r<r>of<n>.bin, n != 3).\n"
                        "# PATH DEPTH (levels below PATH); written by lab/seed/host_seed.py\n"
                        "/home 4\n/data 4\n")
# The lab fleet's TP size, read by the allocation model (absent: 3).
FLEET_TP_FILE = "/etc/dsv41-lab/fleet.tp"
NVRM_MESSAGE = ("NVRM: _memdescAllocInternal: Out of memory: graphics context allocation failed "
                "[NV_ERR_NO_MEMORY] (0x00000051) at 01:33:54")

# The launcher's explicit forward list as the report's containers carried it (adapters ${VAR:-0}).
FORWARDED_ENV = [
    "DSPARK_BLOCK_SIZE=3", "DSV41_MOE_DENSE_ROUTING=1", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0",
    "DSV41_CACHE_GIB=0", "DSV41_CACHE_WAYS=4", "DSV41_PACKED_DIR=/engram",
    "DSV41_FOLDED_FENCE=0", "DSV41_WO_A_W8=0", "DSV41_WO_A_W8_MID=0", "DSV41_WO_A_W8_DROP=0",
    "DSV41_ENGRAM_PREFETCH=0", "DSV41_DRAFT_HEAD_FP8=0", "DSV41_DRAFT_TAU=1", "DSV41_BLOCK_VERIFY=0",
    "PYTHONPATH=/adapter", "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0", "NCCL_SOCKET_IFNAME=enp1s0f0np0",
]

# The TP4 lab's forward list: the same launcher family with the TP4 values (block 5, 4 GiB row cache, the K=576 padding switch on).
TP4_FORWARDED_ENV = [e.replace("DSPARK_BLOCK_SIZE=3", "DSPARK_BLOCK_SIZE=5").replace("DSV41_CACHE_GIB=0", "DSV41_CACHE_GIB=4")
                     for e in FORWARDED_ENV] + ["DSV41_SHARED_PAD_K=1"]

# spark3's 19 non-serving containers: name, image, owner, network, ports, created, cpu %, memory MiB
SPARK3_CONTAINERS = [
    ("grafana", "grafana/grafana:11.2.0", "ops", "bridge", [(3000, 3000)], "2026-08-30T09:14:02", 0.41, 212),
    ("prometheus", "prom/prometheus:v2.54.1", "ops", "bridge", [(9090, 9090)], "2026-08-30T09:14:05", 0.83, 1126),
    ("node-exporter", "prom/node-exporter:v1.8.2", "ops", "host", [], "2026-08-30T09:14:07", 0.12, 18),
    ("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8-3.6.0-ubuntu22.04", "ops", "host", [],
     "2026-08-30T09:20:41", 1.24, 310),
    ("loki", "grafana/loki:3.1.1", "ops", "bridge", [(3100, 3100)], "2026-09-02T16:03:11", 0.37, 262),
    ("promtail", "grafana/promtail:3.1.1", "ops", "bridge", [], "2026-09-02T16:03:14", 0.29, 64),
    ("portainer", "portainer/portainer-ce:2.21.2", "ops", "bridge", [(9443, 9443)], "2026-09-03T11:47:30", 0.05, 48),
    ("open-webui", "ghcr.io/open-webui/open-webui:v0.3.30", "mia", "bridge", [(3080, 8080)],
     "2026-09-05T20:12:55", 0.21, 784),
    ("ollama", "ollama/ollama:0.3.12", "mia", "bridge", [(11434, 11434)], "2026-09-05T20:13:40", 0.02, 1946),
    ("jupyterlab", "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11", "zurih", "bridge", [(8889, 8888)],
     "2026-09-09T13:31:08", 0.33, 2355),
    ("comfyui", "ghcr.io/ai-dock/comfyui:latest-cuda", "zurih", "bridge", [(8188, 8188)],
     "2026-09-12T18:44:21", 0.11, 1638),
    ("code-server", "codercom/code-server:4.92.2", "zurih", "bridge", [(8443, 8080)], "2026-09-14T08:05:59", 0.18, 420),
    ("cadvisor", "gcr.io/cadvisor/cadvisor:v0.49.1", None, "bridge", [(8081, 8080)], "2026-09-15T10:22:37", 4.72, 141),
    ("minio", "minio/minio:RELEASE.2024-09-13T20-26-02Z", None, "bridge", [(9000, 9000), (9001, 9001)],
     "2026-09-16T14:09:03", 0.09, 232),
    ("redis", "redis:7.4-alpine", None, "bridge", [], "2026-09-17T07:51:26", 0.16, 12),
    ("postgres", "postgres:16.4", None, "bridge", [], "2026-09-17T07:51:29", 0.07, 96),
    ("n8n", "n8nio/n8n:1.61.0", None, "bridge", [(5678, 5678)], "2026-09-18T21:36:44", 0.26, 308),
    ("netdata", "netdata/netdata:v1.47.1", None, "host", [], "2026-09-20T12:00:18", 3.08, 281),
    ("uptime-kuma", "louislam/uptime-kuma:1.23.14", None, "bridge", [(3001, 3001)], "2026-09-22T17:28:50", 0.44, 118),
]
# spark1/spark2 stay small: one exporter each.
SMALL_HOST_CONTAINERS = [
    ("node-exporter", "prom/node-exporter:v1.8.2", "ops", "host", [], "2026-08-30T09:13:41", 0.10, 17),
]
COMPOSE_PROJECT = {"grafana": "monitoring", "prometheus": "monitoring", "node-exporter": "monitoring",
                   "dcgm-exporter": "monitoring", "loki": "monitoring", "promtail": "monitoring",
                   "cadvisor": "monitoring", "redis": "automation", "postgres": "automation", "n8n": "automation"}
CONTAINER_CMD = {
    "grafana": ["/run.sh"], "prometheus": ["--config.file=/etc/prometheus/prometheus.yml"],
    "node-exporter": ["--path.rootfs=/host"], "dcgm-exporter": ["/usr/local/dcgm/dcgm-exporter-entrypoint.sh"],
    "loki": ["-config.file=/etc/loki/local-config.yaml"], "promtail": ["-config.file=/etc/promtail/config.yml"],
    "portainer": ["/portainer"], "open-webui": ["bash", "start.sh"], "ollama": ["/bin/ollama", "serve"],
    "jupyterlab": ["start-notebook.py"], "comfyui": ["/opt/ai-dock/bin/init.sh"],
    "code-server": ["/usr/bin/entrypoint.sh", "--bind-addr", "0.0.0.0:8080", "."],
    "cadvisor": ["/usr/bin/cadvisor", "-logtostderr"], "minio": ["minio", "server", "/data", "--console-address", ":9001"],
    "redis": ["redis-server"], "postgres": ["postgres"], "n8n": ["tini", "--", "/docker-entrypoint.sh"],
    "netdata": ["/usr/sbin/run.sh"], "uptime-kuma": ["/usr/bin/dumb-init", "--", "node", "server/server.js"],
}

UNITS = {
    "nvidia-clock-lock.service": """[Unit]
Description=Lock GPU clocks for DeepSeek serving (nvidia-smi -lgc 0,2200)
After=multi-user.target nvidia-persistenced.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-smi -lgc 0,2200

[Install]
WantedBy=multi-user.target
""",
    "gdm.service": """# LAB STAND-IN for the GNOME Display Manager (spark3's desktop session).
[Unit]
Description=GNOME Display Manager (lab stand-in)
After=systemd-user-sessions.service

[Service]
ExecStart=/bin/sleep infinity
Restart=always

[Install]
Alias=display-manager.service
WantedBy=graphical.target
""",
    "gpu-dashboard.service": """[Unit]
Description=GPU dashboard poller (nvidia-smi every 2 s)
After=nvidia-clock-lock.service

[Service]
User=zurih
ExecStart=/usr/bin/nvidia-smi --query-gpu=utilization.gpu,clocks.sm,temperature.gpu --format=csv,noheader -l 2
StandardOutput=null
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
""",
}


def lab_site_env(text, addresses):
    """launcher.env.site with the report fleet's addresses (HEAD_IP, WORKER_IPS, NFS_CLIENTS) replaced by the lab's:
    the workers' rendezvous (DIST_INIT_ADDR=$HEAD_IP:$DIST_PORT) must reach the lab head, never an
    address outside the lab."""
    out = []
    for line in text.splitlines(True):
        workers = " ".join(addresses[h] for h in sorted(addresses) if h != "spark1")
        if line.startswith("HEAD_IP="):
            line = "HEAD_IP=%s\n" % addresses["spark1"]
        elif line.startswith("WORKER_IPS="):
            line = "WORKER_IPS='%s'\n" % workers
        elif line.startswith("NFS_CLIENTS="):
            head = addresses["spark1"].split(".")
            line = "NFS_CLIENTS=%s\n" % (".".join(head[:3] + ["0/24"]) if len(head) == 4 else "'%s'" % workers)
        out.append(line)
    return "".join(out)


# ------------------------------------------------------------------------------ launcher assembly
# A lab host gets one start.sh, as a real fleet has one launcher file (the roles read and edit it as one
# file): the parts are put together here, never sourced by the script. The core parts (LAUNCHER_CORE, in
# order) are the "explicit" launcher; a variant's part (launcher/variants/<name>.sh) holds only what is its
# own. Directive lines (never in the result):
#   core parts:   #@ slot NAME [required]       the variant's piece NAME here; nothing when it has none
#                 #@ default NAME ... #@ end NAME these lines, unless the variant's piece NAME replaces them
#                 #@ set NAME VALUE              @@NAME@@ on any line stands for VALUE
#   variant part: #@ piece NAME                  starts piece NAME: every line up to the next piece (blank
#                                                lines included) or the end of the file
#                 #@ set NAME VALUE              another value for a core's @@NAME@@
#   anywhere:     #@ insert NAME                 the lines of block NAME as this variant has them
#                 #@# ...                        a note for the reader of the parts
DIRECTIVE = re.compile(r"#@(?:# |#$| (slot|default|end|set|piece|insert) ([A-Za-z_][A-Za-z0-9_]*)(?: (.*))?$)")
INLINE = re.compile(r"@@([A-Za-z_][A-Za-z0-9_]*)@@")


class LauncherPartsError(Exception):
    """A launcher variant cannot be assembled from its parts (the message names the part and what is wrong)."""


def find_standin(name, kind="file"):
    """The stand-in ``name`` (a file, or with kind="dir" a directory): in the lab directory on a lab host (the
    image copies lab/standins there), in lab/standins in the repo; None when neither has it."""
    for cand in (LAB_DIR / name, LAB_DIR / "standins" / name):
        if cand.is_dir() if kind == "dir" else cand.is_file():
            return cand
    return None


def _launcher_part(path, variant):
    try:
        text = path.read_text()
    except OSError as exc:
        raise LauncherPartsError("launcher variant %s: part %s missing or unreadable (%s)"
                                 % (variant, path, exc.strerror or exc))
    if text and not text.endswith("\n"):
        raise LauncherPartsError("launcher variant %s: part %s does not end with a newline" % (variant, path))
    return text.splitlines(True)


def _directive(line, where):
    """(kind, name, rest) of a directive line, ("note", ...) for a note, None for a script line."""
    if not line.startswith("#@"):
        return None
    m = DIRECTIVE.match(line.rstrip("\n"))
    if not m:
        raise LauncherPartsError("%s: not a launcher directive: %r" % (where, line.rstrip("\n")))
    return ("note", None, None) if m.group(1) is None else (m.group(1), m.group(2), m.group(3))


def _parse_core(lines, path, variant, blocks, slots, values):
    """The core part as a tree: ("line", text) | ("slot", name) | ("block", name, tree) | ("insert", name)."""
    stack = [("", [])]
    for no, line in enumerate(lines, 1):
        where = "launcher variant %s: %s line %d" % (variant, path, no)
        d = _directive(line, where)
        if d is None:
            stack[-1][1].append(("line", line))
            continue
        kind, name, rest = d
        if kind == "note":
            continue
        if kind in ("slot", "default") and (name in slots or name in blocks or name in [s[0] for s in stack]):
            raise LauncherPartsError("%s: %s is named twice in the core parts" % (where, name))
        if kind == "slot":
            if rest not in (None, "required"):
                raise LauncherPartsError("%s: slot %s takes only 'required', not %r" % (where, name, rest))
            slots[name] = rest == "required"
            stack[-1][1].append(("slot", name))
        elif kind == "default":
            stack.append((name, []))
        elif kind == "end":
            if len(stack) == 1 or stack[-1][0] != name:
                raise LauncherPartsError("%s: end %s without its default block" % (where, name))
            block, tree = stack.pop()
            blocks[block] = tree
            stack[-1][1].append(("block", block, tree))
        elif kind == "set":
            values[name] = rest or ""
        elif kind == "insert":
            stack[-1][1].append(("insert", name))
        else:
            raise LauncherPartsError("%s: %s belongs in a variant's part" % (where, kind))
    if len(stack) > 1:
        raise LauncherPartsError("launcher variant %s: %s: default block %s has no end" % (variant, path, stack[-1][0]))
    return stack[0][1]


def _parse_variant(lines, path, variant, values):
    """{piece name: lines} of a variant's part; its set directives go into values."""
    pieces, current = {}, None
    for no, line in enumerate(lines, 1):
        where = "launcher variant %s: %s line %d" % (variant, path, no)
        kind, name, rest = _directive(line, where) or ("line", None, None)
        if kind == "piece":
            if name in pieces:
                raise LauncherPartsError("%s: piece %s given twice" % (where, name))
            current = pieces[name] = []
        elif kind == "set":
            values[name] = rest or ""
        elif current is not None and kind in ("line", "note", "insert"):
            current.append(line)          # a note is dropped when the piece is put in place
        elif current is None and (kind == "note" or not line.strip()):
            continue                      # notes and blank lines before the first piece
        else:
            raise LauncherPartsError("%s: %s" % (where, "a script line before the first piece" if kind == "line"
                                                 else "%s is not for a variant's part" % kind))
    return pieces


def assemble_launcher(variant, parts_dir=None):
    """The text of ``variant``'s start.sh: the core parts in order, the variant's pieces in their slots and in
    place of the default blocks they name, @@NAME@@ values filled in. LauncherPartsError names the part (and
    line) of anything missing or wrong: a part file, a required piece, a piece with no place in the core, an
    @@NAME@@ without a value."""
    if variant not in LAUNCHER_VARIANTS or variant in LAUNCHER_FILES:
        raise LauncherPartsError("launcher variant %s is not assembled from parts (assembled: %s)"
                                 % (variant, ", ".join(v for v in LAUNCHER_VARIANTS if v not in LAUNCHER_FILES)))
    parts = Path(parts_dir or find_standin(LAUNCHER_PARTS, kind="dir") or LAB_DIR / "standins" / LAUNCHER_PARTS)
    blocks, slots, values = {}, {}, {}
    cores = [_parse_core(_launcher_part(parts / name, variant), parts / name, variant, blocks, slots, values)
             for name in LAUNCHER_CORE]
    own = parts / "variants" / (variant + ".sh")
    core_values = set(values)
    pieces = _parse_variant(_launcher_part(own, variant), own, variant, values)
    unused = sorted(set(values) - core_values)
    if unused:
        raise LauncherPartsError("launcher variant %s: %s sets %s, which no core part uses"
                                 % (variant, own, ", ".join(unused)))
    homeless = sorted(n for n in pieces if n not in slots and n not in blocks)
    if homeless:
        raise LauncherPartsError("launcher variant %s: piece %s in %s has no slot or default block in the core parts"
                                 % (variant, ", ".join(homeless), own))
    lacking = sorted(n for n, required in slots.items() if required and n not in pieces)
    if lacking:
        raise LauncherPartsError("launcher variant %s: %s lacks the required piece %s"
                                 % (variant, own, ", ".join(lacking)))
    out = []

    def piece(name, seen):
        for line in pieces[name]:
            d = _directive(line, "launcher variant %s: %s piece %s" % (variant, own, name))
            if d is None:
                out.append(line)
            elif d[0] == "insert":
                insert(d[1], seen)

    def insert(name, seen):
        if name not in blocks:
            raise LauncherPartsError("launcher variant %s: insert %s names no default block of the core parts"
                                     % (variant, name))
        if name in seen:
            raise LauncherPartsError("launcher variant %s: block %s inserts itself" % (variant, name))
        if name in pieces:
            piece(name, seen | {name})
        else:
            walk(blocks[name], seen | {name})

    def walk(tree, seen):
        for node in tree:
            if node[0] == "line":
                out.append(node[1])
            elif node[0] == "slot":
                if node[1] in pieces:
                    piece(node[1], seen)
            else:
                insert(node[1], seen)

    for tree in cores:
        walk(tree, frozenset())
    text = "".join(out)

    def value(m):
        if m.group(1) not in values:
            raise LauncherPartsError("launcher variant %s: @@%s@@ has no value (#@ set %s ... in a core part)"
                                     % (variant, m.group(1), m.group(1)))
        return values[m.group(1)]
    return INLINE.sub(value, text)


def launcher_text(variant):
    """The bytes installed as start.sh for ``variant``: assembled from the parts, or the variant's own file
    (LAUNCHER_FILES); None when that file is not beside the stand-ins."""
    if variant in LAUNCHER_FILES:
        path = find_standin(LAUNCHER_FILES[variant])
        return None if path is None else path.read_bytes()
    return assemble_launcher(variant).encode()


class Seeder:
    def __init__(self, host, root=None, variant=DEFAULT_VARIANT, tp=TP):
        if variant not in LAUNCHER_VARIANTS:
            raise SystemExit("host_seed: unknown launcher variant %r (known: %s)"
                             % (variant, ", ".join(sorted(LAUNCHER_VARIANTS))))
        if tp not in (3, 4):
            raise SystemExit("host_seed: --tp must be 3 or 4, got %r" % (tp,))
        self.tp = tp
        self.hosts = HOSTS if tp == 3 else TP4_HOSTS
        if host not in self.hosts:
            raise SystemExit("host_seed: %s is not a host of the TP%d lab (%s)" % (host, tp, ", ".join(self.hosts)))
        self.report = tp == 3           # the TP3 report's particulars (spark2's TP2 shards, spark3's tenant...)
        self.image = IMAGE if tp == 3 else TP4_IMAGE
        self.variant = variant
        self.host = host
        self.spec = self.hosts[host]
        self.user = self.spec["user"]
        self.rank = self.spec["rank"]
        self.test_root = Path(root) if root else None
        if self.test_root:
            self.uid, self.gid = os.getuid(), os.getgid()
        else:
            pw = pwd.getpwnam(self.user)
            self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.home = Path("/home") / self.user
        self.actions = []

    # -- helpers ------------------------------------------------------------------------------
    def lab_addresses(self):
        """{host: address} of the lab hosts as this host resolves them (the podman --add-host entries);
        in --root test mode, the names themselves."""
        if self.test_root:
            return dict((h, h) for h in self.hosts)
        import socket
        try:
            return dict((h, socket.gethostbyname(h)) for h in self.hosts)
        except OSError as exc:
            raise SystemExit("host_seed: cannot resolve the lab hosts (%s); refusing to seed the report's "
                             "fleet addresses into a lab .env" % exc)

    def p(self, path):
        """A host path (under --root in tests; paths already under it are returned unchanged)."""
        path = Path(path)
        if not self.test_root or path == self.test_root or self.test_root in path.parents:
            return path
        return self.test_root / path.relative_to("/")

    def log(self, msg):
        self.actions.append(msg)
        print("host_seed[%s]: %s" % (self.host, msg))

    def chown(self, path, uid=None, gid=None):
        if self.test_root:
            return
        os.chown(path, self.uid if uid is None else uid, self.gid if gid is None else gid)

    def mkdir(self, path, mode=0o755, owner=True):
        """mkdir -p; the created levels (and the leaf) belong to the login user when owner is set."""
        path = self.p(path)
        missing = []
        cur = path
        while not cur.exists():
            missing.append(cur)
            cur = cur.parent
        for d in reversed(missing):
            d.mkdir(mode=mode)
            if owner:
                self.chown(d)
        if owner:
            self.chown(path)
        os.chmod(path, mode)
        return path

    def write(self, path, data, mode=0o644, owner=True):
        """Atomic write (temporary file + rename); data is str or bytes."""
        path = self.p(path)
        tmp = path.with_name("." + path.name + ".seed-tmp")
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        if owner:
            self.chown(tmp)
        os.replace(tmp, path)
        return path

    def run(self, *cmd, check=True):
        if self.test_root:
            self.log("(test root) skipped: %s" % " ".join(cmd))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.run(cmd, check=check, text=True, capture_output=True)

    def find_standin(self, name):
        return find_standin(name)

    # -- steps --------------------------------------------------------------------------------
    def docker_group(self):
        if self.test_root:
            self.docker_gid = os.getgid()
            return
        try:
            grp.getgrnam("docker")
        except KeyError:
            self.run("groupadd", "--system", "docker")
            self.log("created group docker")
        self.docker_gid = grp.getgrnam("docker").gr_gid
        if self.user not in grp.getgrnam("docker").gr_mem:
            self.run("usermod", "-aG", "docker", self.user)
            self.log("added %s to group docker" % self.user)

    def state_dirs(self):
        for d in ("/var/lib/lab-docker", "/var/lib/lab-docker/logs", "/var/lib/lab-docker/run"):
            path = self.mkdir(d, mode=0o2775, owner=False)
            self.chown(path, 0, self.docker_gid)
            os.chmod(path, 0o2775)
            # files root wrote earlier must stay writable for the docker group
            for f in path.iterdir():
                if f.is_file():
                    if f.stat().st_uid == 0:
                        self.chown(f, 0, self.docker_gid)
                    os.chmod(f, f.stat().st_mode | 0o060)
        path = self.mkdir("/var/lib/lab-nvidia", mode=0o755, owner=False)
        self.chown(path, 0, 0)

    def nvidia_state(self):
        path = self.p("/var/lib/lab-nvidia/state.json")
        try:
            st = json.loads(path.read_text())
        except (OSError, ValueError):
            st = {"history": []}
        st.update(gpu_name="NVIDIA GB10", driver_version="580.95.05", locked_clocks={"min": 0, "max": 2200})
        st["history"] = (st.get("history") or [])[-199:] + [{
            "ts": _utcnow(), "argv": ["host_seed.py", "--host", self.host], "uid": 0,
            "note": "lab seed: clocks locked 0,2200 as the clock-lock unit applies them at boot"}]
        self.write(path, json.dumps(st, indent=1) + "\n", mode=0o644, owner=False)
        self.chown(path, 0, 0)
        self.log("nvidia: clocks locked 0,2200")

    def drm_state(self):
        """The DRM render node, nvidia_drm's modeset parameter and no device knob (stage I's DRM probe)."""
        import stat as _stat
        self.mkdir("/var/lib/lab-sys/module/nvidia_drm/parameters", owner=False)
        self.write("/var/lib/lab-sys/module/nvidia_drm/parameters/modeset", "Y\n", owner=False)
        knob = self.p("/etc/dsv41-lab/docker-run-devices")
        if knob.exists():
            knob.unlink()
        node = self.p("/dev/dri/renderD128")
        if self.test_root:
            self.log("(test root) skipped: mknod /dev/dri/renderD128")
            return
        self.mkdir("/dev/dri", owner=False)
        try:
            st = os.lstat(node)
            if _stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 226:
                return
            os.unlink(node)
        except FileNotFoundError:
            pass
        try:
            os.mknod(node, 0o666 | _stat.S_IFCHR, os.makedev(226, 128))
            self.log("drm: /dev/dri/renderD128 (226:128), nvidia_drm modeset Y")
        except OSError as exc:
            self.log("drm: /dev/dri/renderD128 left to the privileged step of lab/labctl.py (%s)" % exc)

    def checkout(self):
        base = self.home / "dsv41-3x-spark"
        self.mkdir(base)
        self.mkdir(base / "adapter")
        self.adapters(base / "adapter")
        self.launcher()
        if self.spec["role"] == "head":
            # the inventory's rendered baseline, then keys the inventory does not declare (a real fleet's
            # .env holds both: addresses, HCAs, NFS, NCCL, ssh identity, ports)
            suffix = "" if self.tp == 3 else "-tp%d" % self.tp
            site = lab_site_env((HERE / ("launcher%s.env.site" % suffix)).read_text(), self.lab_addresses())
            self.write(base / ".env", (HERE / ("launcher%s.env" % suffix)).read_bytes() + site.encode(), mode=0o600)
            self.write(base / ".env.example", (HERE / "launcher.env.example").read_bytes(), mode=0o644)
            self.mkdir(base / "logs")
            if self.report:     # the report's saved TP3 boots; a TP4 head has only the boots it makes
                self.write(base / "logs" / "dsv41.log", (HERE / "dsv41.log").read_bytes(), mode=0o644)
            self.mkdir(self.home / "dsv41-engram")  # tmpfs mount point: ownership only
            self.log("head checkout: .env%s, adapter/; ~/dsv41-engram" % (", logs/dsv41.log" if self.report else ""))
        else:
            self.mkdir(base / "engram")  # tmpfs mount point: ownership only, contents left alone
            self.log("worker checkout: adapter/, engram/")

    def launcher(self):
        """The selected launcher variant as the checkout's start.sh (0755, login user; one file, assembled by
        launcher_text), recorded in /etc/dsv41-lab/launcher.variant. Every run rewrites it: the variant is the
        lab's choice."""
        try:
            starter = launcher_text(self.variant)
        except LauncherPartsError as exc:
            raise SystemExit("host_seed: %s" % exc)
        base = self.home / "dsv41-3x-spark"
        if starter is None:
            self.log("launcher %s not found beside the stand-ins; skipped" % LAUNCHER_FILES[self.variant])
            return
        self.mkdir(base)
        self.write(base / "start.sh", starter, mode=0o755)
        for name, dest in sorted(LAUNCHER_HELPERS.get(self.variant, {}).items()):
            helper = self.find_standin(name)
            if helper is None:
                raise SystemExit("host_seed: %s (launcher variant %s) not found beside the stand-ins"
                                 % (name, self.variant))
            self.mkdir((base / dest).parent)
            self.write(base / dest, helper.read_bytes(), mode=0o755)
            self.log("installed launcher helper %s" % (base / dest))
        if self.variant == "family":
            self.family_home_paths()
        self.mkdir("/etc/dsv41-lab", owner=False)
        self.write(VARIANT_FILE, self.variant + "\n", mode=0o644, owner=False)
        self.log("installed launcher %s (variant %s)" % (base / "start.sh", self.variant))

    def family_home_paths(self):
        r"""The family launcher's $HOME defaults, made to resolve on this host, in the login user's home:
        <home>/NewModels is a symlink to the lab's model directory (docker resolves a bind source through
        it, so the container sees the checkpoint); <home>/nccl-2.30.7 is an empty directory (a worker mounts
        its own: the worker's login shell expands \$HOME). A NewModels that is not a symlink is left alone."""
        link_name, target = FAMILY_MODELS_LINK
        for home in [self.home]:
            own = True
            if not self.p(home).is_dir():
                self.mkdir(home, owner=own)
            link = self.p(home / link_name)
            if os.path.islink(link) and os.readlink(link) == target:
                pass
            elif os.path.lexists(link) and not os.path.islink(link):
                self.log("%s exists and is not a symlink: left alone" % (home / link_name))
            else:
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(target, link)
                if own and not self.test_root:
                    os.lchown(link, self.uid, self.gid)
            self.mkdir(home / FAMILY_NCCL_DIR, owner=own)
            self.log("family launcher paths: %s -> %s, %s/" % (home / link_name, target, home / FAMILY_NCCL_DIR))

    def lab_knobs(self):
        """/etc/dsv41-lab/launcher.env on the head: the launcher stand-in polls for Ready every second
        instead of the real 10 s (lab runs do not wait 10 s per serve; delete the line for the real cadence).
        The engine's knobs (/etc/dsv41-lab/engine.env) are left to the tests: none by default."""
        if self.spec["role"] != "head":
            return
        self.mkdir("/etc/dsv41-lab", owner=False)
        self.write("/etc/dsv41-lab/launcher.env",
                   "# lab knobs of the launcher stand-in (start.sh); written by host_seed.py\n"
                   "LAB_SERVE_POLL_SECONDS=1\n", mode=0o644, owner=False)
        self.log("lab knobs: /etc/dsv41-lab/launcher.env (LAB_SERVE_POLL_SECONDS=1)")

    def adapters(self, adir):
        """The seven local adapters + the report's sitecustomize.py (which registers exactly those; the
        ported hook in lab/seed/adapters also registers autotune_keep), 0644, login user, each only if
        absent: once seeded, the adapter directory belongs to the roles (stage B adds autotune_keep)."""
        written = []
        sources = dict((n + ".py", ADAPTER_SOURCE / (n + ".py")) for n in LOCAL_ADAPTERS)
        if self.tp == 4:    # a TP4 fleet runs the downstream TP4 wo_a_w8 (two groups per rank)
            sources["wo_a_w8.py"] = ADAPTER_SOURCE / "tp4" / "wo_a_w8.py"
        sources["sitecustomize.py"] = ADAPTER_SOURCE.parent / "sitecustomize-report.py"
        for name, source in sources.items():
            dst = self.p(adir) / name
            if dst.exists():
                continue
            self.write(dst, source.read_bytes(), mode=0o644)
            written.append(name)
        self.log("adapter/: %s" % (("wrote " + ", ".join(written)) if written else "present, left alone"))

    def allocation_roots(self):
        """/etc/dsv41-lab/allocated.roots: where the lab allocation model (lab/standins/dsv41_lab_allocation.py)
        looks for the files it counts as fully allocated (the TP2 stand-ins). Every host gets the same roots:
        a relocation may put the stand-ins on any host's /home or /data, and bring them back."""
        self.mkdir("/etc/dsv41-lab", owner=False)
        text = ALLOCATED_ROOTS_TEXT if self.tp == 3 else ALLOCATED_ROOTS_TEXT.replace("n != 3", "n != %d" % self.tp)
        self.write(ALLOCATED_ROOTS_FILE, text, mode=0o644, owner=False)
        # the lab fleet's own TP size: its shards are real files; shards of any other TP size stand for full data
        self.write(FLEET_TP_FILE, "%d\n" % self.tp, mode=0o644, owner=False)
        self.log("allocation model roots: %s" % ALLOCATED_ROOTS_FILE)

    def tp2_shards(self):
        """spark2's old TP2 rank-1 shards (sparse), outside its /engram source; on the filesystem of the
        Engram destination (lab/labctl.py binds both directories from one tmpfs), where the allocation model
        counts them at their full size."""
        d = self.mkdir(self.home / "dsv41-engram")
        total = 0
        for layer, n in sorted(ENGRAM_ROWS.items()):
            lo, hi = n * 1 // 2, n * 2 // 2
            header = struct.pack("<6Q", MAGIC, layer, lo, hi, n, ROW_BYTES).ljust(HEADER_BYTES, b"\0")
            size = tp2_shard_sizes()["engram-l%d-r1of2.bin" % layer]
            total += size
            path = d / ("engram-l%d-r1of2.bin" % layer)
            if path.is_file() and path.stat().st_size == size:
                with open(path, "rb") as f:
                    if f.read(HEADER_BYTES) == header:
                        self.chown(path)
                        continue
            tmp = d / ("engram-l%d-r1of2.partial" % layer)
            with open(tmp, "wb") as f:
                f.write(header)
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            self.chown(tmp)
            os.replace(tmp, path)
            self.log("wrote sparse TP2 shard %s (%d bytes)" % (path, size))
        self.log("TP2 shards: %d bytes in all" % total)
        self.mkdir("/data", owner=False)
        self.mkdir("/data/dsv41-engram")

    def autotune_cache(self):
        settings_hash = autotune_hash(self.tp)
        d = self.mkdir(self.home / ".cache" / "sglang" / "flashinfer" / "autotune" / FLASHINFER / SM / settings_hash)
        r = self.rank
        shapes = ["fp4_moe_gemm1[m=%d,n=1536,k=4096]", "fp4_moe_gemm2[m=%d,n=4096,k=768]",
                  "bf16_dense_gemm[m=%d,n=7168,k=4096]", "mla_decode[m=%d,heads=43]"]
        tactics = {}
        for i, shape in enumerate(shapes):
            for m in (1, 4, 8, 16):
                # per-rank choices differ: the stock engine sees the disagreement and retunes
                tactics[shape % m] = {"tactic": (7 * i + 3 * m + 5 * r) % 23,
                                      "tile": [64 * (1 + (i + r) % 2), 128], "us": round(11.5 + i * 3.1 + r * 0.37 + m * 0.21, 2)}
        doc = {"flashinfer_version": FLASHINFER, "sm": SM, "settings_hash": settings_hash,
               "rank": "tp%d_pp0_dp0" % r, "tp_size": self.tp, "created": "2026-09-24T02:50:01Z", "tactics": tactics}
        self.write(d / ("rank_tp%d_pp0_dp0.json" % r), json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self.log("autotune cache rank_tp%d_pp0_dp0.json in %s" % (r, d))

    def _docker_module(self):
        path = self.find_standin("docker")
        if path is None:
            raise SystemExit("host_seed: docker stand-in not found under %s" % LAB_DIR)
        os.environ["LAB_DOCKER_STATE_DIR"] = str(self.p("/var/lib/lab-docker"))
        loader = importlib.machinery.SourceFileLoader("lab_docker_standin", str(path))
        spec = importlib.util.spec_from_loader("lab_docker_standin", loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod

    def _fixed_id(self, name):
        return hashlib.sha256(("lab-seed:%s:%s" % (self.host, name)).encode()).hexdigest()

    def serving_record(self, dk, store):
        name = self.spec["container"]
        if self.spec["role"] == "head":
            engram_src = str(self.home / "dsv41-engram")
        else:
            engram_src = str(self.home / "dsv41-3x-spark" / "engram")
        mounts = [
            {"Type": "bind", "Source": engram_src, "Destination": "/engram", "Mode": "", "RW": True,
             "Propagation": "rprivate"},
            {"Type": "bind", "Source": "/srv/models", "Destination": "/srv/models", "Mode": "ro", "RW": False,
             "Propagation": "rprivate"},
            {"Type": "bind", "Source": str(self.home / ".cache"), "Destination": "/root/.cache", "Mode": "",
             "RW": True, "Propagation": "rprivate"},
            {"Type": "bind", "Source": str(self.home / "dsv41-3x-spark" / "adapter"), "Destination": "/adapter",
             "Mode": "ro", "RW": False, "Propagation": "rprivate"},
        ]
        v = SERVING_SETTINGS[self.tp]
        cmd = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL_PATH, "--trust-remote-code",
               "--tp", str(self.tp), "--ep", str(self.tp), "--nnodes", str(self.tp), "--node-rank", str(self.rank),
               "--dist-init-addr", "spark1:5000", "--host", "0.0.0.0", "--port", "8888",
               "--mem-fraction-static", v["fraction"], "--max-running-requests", str(v["slots"]),
               "--chunked-prefill-size", str(v["chunk"]), "--max-total-tokens", str(v["pool"]),
               "--moe-runner-backend", "b12x",
               "--speculative-algorithm", "DSPARK", "--speculative-num-draft-tokens", str(v["block"])]
        env = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:" + dk.DEFAULT_PATH] + (
            FORWARDED_ENV if self.tp == 3 else TP4_FORWARDED_ENV)
        c = dk.new_container(store, name, self.image, cmd=cmd, env=env, mounts=mounts, network="host",
                             created="2026-09-24T02:38:39.412093117Z",
                             host_config={"IpcMode": "host", "ShmSize": "32g", "Privileged": True,
                                          "DeviceRequests": [{"Driver": "", "Count": -1,
                                                              "Capabilities": [["gpu"]], "Options": {}}],
                                          "Ulimits": ["memlock=-1", "stack=67108864"]})
        c["Id"] = self._fixed_id(name)
        c["Config"]["Hostname"] = self.host
        c["State"].update(Status="exited", Running=False, Paused=False, Pid=0, ExitCode=0,
                          StartedAt="2026-09-24T02:38:40.118804221Z", FinishedAt="2026-09-24T03:12:44.902417550Z")
        return c

    def other_records(self, dk, store):
        table = SPARK3_CONTAINERS if self.report and self.host == "spark3" else SMALL_HOST_CONTAINERS
        out = []
        for i, (name, image, owner, net, ports, created, cpu, mem_mib) in enumerate(table):
            labels = {}
            if owner:
                labels["owner"] = owner
            if name in COMPOSE_PROJECT:
                labels.update({"com.docker.compose.project": COMPOSE_PROJECT[name],
                               "com.docker.compose.service": name})
            mounts = [{"Type": "volume", "Name": "%s-data" % name,
                       "Source": "/var/lib/docker/volumes/%s-data/_data" % name, "Destination": "/data",
                       "Mode": "z", "RW": True, "Propagation": ""}]
            dk_ports = [{"IP": "0.0.0.0", "PublicPort": pub, "PrivatePort": priv, "Type": "tcp"} for pub, priv in ports]
            stats = {"cpu_percent": cpu, "mem_bytes": mem_mib * 1024 * 1024 + 1024 * (37 * i % 997),
                     "pids": 3 + (7 * i) % 40, "net_rx": 0 if net == "host" else 48_000_000 + 1_300_000 * i,
                     "net_tx": 0 if net == "host" else 9_100_000 + 870_000 * i,
                     "blk_read": 12_000_000 + 5_500_000 * i, "blk_write": 3_000_000 + 910_000 * i}
            c = dk.new_container(store, name, image, cmd=CONTAINER_CMD.get(name, []), labels=labels,
                                 mounts=mounts, network=net, created=created + ".%09dZ" % (104729 * (i + 1)),
                                 host_config={"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}},
                                 ports=dk_ports, stats=stats)
            c["Id"] = self._fixed_id(name)
            # the fleet's last reboot (2026-09-21 06:02) restarted the older ones
            started = max(created, "2026-09-21T06:02:%02d" % (10 + i))
            c["State"].update(Status="running", Running=True, Paused=False, ExitCode=0,
                              Pid=2000 + 97 * i, StartedAt=started + ".%09dZ" % (7919 * (i + 1)),
                              FinishedAt=dk.ZERO_TIME)
            out.append(c)
        return out

    def docker_state(self):
        dk = self._docker_module()
        with dk.Store(self.p("/var/lib/lab-docker")) as store:
            dk.reconcile(store)
            # the engine image, built from this node's launcher checkout (its adapter/ is copied to
            # /sgl-workspace/adapter in <state>/images/<id>/rootfs), with the version labels roles read
            # through docker image inspect. An image already built (by the roles) is left alone.
            im = store.image(self.image)
            if im is None or not dk.image_rootfs(store.root, im["Id"]).is_dir():
                im = dk.build_image(store, [self.image], self.p(self.home / "dsv41-3x-spark"), created=SEED_IMAGE_CREATED)
                digest = hashlib.sha256(("lab-digest:%s" % im["Id"]).encode()).hexdigest()
                for rec in store.images:
                    if rec["Id"] == im["Id"]:
                        rec["RepoDigests"] = ["dsv41-sglang@sha256:%s" % digest]
                        rec["Lab"]["context"] = str(self.home / "dsv41-3x-spark")
                self.log("docker: image %s built from the checkout: %s" % (self.image, im["Id"][7:19]))
            im.setdefault("Labels", dict(dk.ENGINE_IMAGE_LABELS))
            seeded = [self.serving_record(dk, store)] + self.other_records(dk, store)
            for rec in seeded:
                old = next((c for c in store.containers if c["Name"] == rec["Name"]), None)
                if old is not None and rec["Name"] == self.spec["container"] and old["State"]["Running"]:
                    self.log("docker: %s is running (launcher-managed); left alone" % rec["Name"])
                    continue
                if old is not None:
                    store.containers.remove(old)
                store.containers.append(rec)
                if rec["Name"] == "dsv41-head" and self.report:
                    # docker logs dsv41-head shows the saved boots until the launcher replaces it
                    # (as the json-file log of the engine's two streams, stamped with the lines' times)
                    dk.import_text_log(store.log_path(rec["Name"]), (HERE / "dsv41.log").read_bytes())
            others = len(seeded) - 1
        self.log("docker: %s recorded (exited) + %d non-serving running containers" % (self.spec["container"], others))

    def units(self):
        names = ["nvidia-clock-lock.service"]
        if self.report and self.host == "spark3":
            names += ["gdm.service", "gpu-dashboard.service"]
        self.mkdir("/etc/systemd/system", owner=False)
        for n in names:
            self.write(self.p("/etc/systemd/system") / n, UNITS[n], mode=0o644, owner=False)
        # One reload for the whole seed: enable and set-default reload the manager each by default, and a
        # reload costs systemd about 0.13 CPU-s, paid on every lab reset (the reset script leaves it to here).
        self.run("systemctl", "daemon-reload")
        self.run("systemctl", "enable", "--no-reload", "--now", *names)
        target = "graphical.target" if self.report and self.host == "spark3" else "multi-user.target"
        self.run("systemctl", "set-default", "--no-reload", target)
        self.log("units: %s enabled and started; default %s" % (", ".join(names), target))

    def journal(self):
        if not (self.report and self.host == "spark3"):
            return
        if self.test_root:
            self.log("(test root) skipped journal message")
            return
        seen = subprocess.run(["journalctl", "-t", "kernel", "-o", "cat", "--no-pager"],
                              text=True, capture_output=True, check=False).stdout
        if "NV_ERR_NO_MEMORY" in seen:
            self.log("journal: NV_ERR_NO_MEMORY message already present")
            return
        subprocess.run(["systemd-cat", "-t", "kernel", "-p", "err"], input=NVRM_MESSAGE + "\n",
                       text=True, check=True)
        self.log("journal: logged the NVRM NV_ERR_NO_MEMORY message")

    def seed(self):
        if not self.test_root and os.geteuid() != 0:
            raise SystemExit("host_seed: run as root")
        self.docker_group()
        self.state_dirs()
        self.nvidia_state()
        self.drm_state()
        self.checkout()
        self.lab_knobs()
        self.allocation_roots()
        if self.report and self.host == "spark2":
            self.tp2_shards()
        self.autotune_cache()
        self.docker_state()
        self.units()
        self.journal()
        return 0


def _utcnow():
    import datetime as _dt
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Seed a lab host with the 2026-09-24 report state.")
    ap.add_argument("--host", required=True, choices=sorted(TP4_HOSTS))
    ap.add_argument("--tp", type=int, default=TP, choices=(3, 4),
                    help="which lab fleet: the TP3 report's (default) or the four-node TP4 one")
    ap.add_argument("--root", help="tests only: write under this directory, skip privileged steps")
    ap.add_argument("--launcher-variant", default=DEFAULT_VARIANT, choices=sorted(LAUNCHER_VARIANTS),
                    help="the launcher installed as start.sh (default %(default)s)")
    ap.add_argument("--launcher-only", action="store_true", help="only (re)install the launcher variant")
    args = ap.parse_args(argv)
    seeder = Seeder(args.host, args.root, args.launcher_variant, args.tp)
    if args.launcher_only:
        seeder.launcher()
        return 0
    return seeder.seed()


if __name__ == "__main__":
    sys.exit(main())
