"""What the stage tests (C, D, E) share: the fleet state a restore must bring back, read directly on the
lab hosts rather than through the role under test; the lab engine's knob file; a lab copy of a stage
definition; the one record a run wrote; and a run of a stage playbook that is killed mid-arm."""
import json
import subprocess
import threading

import yaml

from labhelpers import ROOT, env, sh

HOSTS = ("spark1", "spark2", "spark3")
# How much faster than real the lab engine serves during a stage test. The lab copies of the definitions
# let no speed decide (lab_definition below), so the request path only has to keep its shape: 200x keeps
# every condition's 5 measured repetitions and each periodic stats line (floored at 0.05 s) while the
# benchmark phase of a stage C pass falls from 36 s (40x) to 11 s on 2 cores.
STAGE_TEST_SPEED = 200
# Host-side knob file of the lab engine on the head (lab/README.md): read at each container start.
KNOBS = "/etc/dsv41-lab/engine.env"
HOOK = "/home/mia/dsv41-3x-spark/adapter/sitecustomize.py"
CLOCK_STATE = ("python3 -c 'import json; s = json.load(open(\"/var/lib/lab-nvidia/state.json\")); "
               "print(\"locked_clocks\", s.get(\"locked_clocks\"))' 2>/dev/null || echo locked_clocks None")


def container(host):
    return "dsv41-head" if host == "spark1" else "dsv41-worker"


def fleet_state():
    """Per host: sha256 of the launcher .env, start.sh and adapter files, the serving container's image id,
    and the GPU's clock state (the four things the issue names for the hash comparison)."""
    out = {}
    for host in HOSTS:
        home = "/home/mia" if host == "spark1" else "/home/zurih"
        out[host] = sh(host, "cd %s/dsv41-3x-spark && sha256sum .env start.sh adapter/*.py 2>/dev/null; "
                             "docker inspect --format '{{.Image}}' %s; %s"
                       % (home, container(host), CLOCK_STATE), check=False)
    return out


def engine_healthy():
    """The head answers /health with 200 (the restored engine serves)."""
    return sh("spark1", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8888/health", check=False) == "200"


def knobs(**values):
    """Write the lab engine's knob file on every host (each container start reads its own host's): a fault
    that is a property of the image (g4_not_taken) then holds on every rank, as it would on the fleet."""
    text = "".join("%s=%s\n" % kv for kv in sorted(values.items()))
    for host in HOSTS:
        sh(host, "mkdir -p %s && printf '%%s' '%s' > %s" % (KNOBS.rsplit("/", 1)[0], text, KNOBS))


def clear_knobs():
    for host in HOSTS:
        sh(host, "rm -f %s" % KNOBS)


def lab_definition(tmp_path, name, trim=False, **changes):
    """A copy of experiments/<name>.yml for the lab, where speed decides nothing: on a shared lab machine
    the stand-in's timings move with the load of other work, so neither a noise 'loss' nor a missing noise
    'win' may decide these tests (regression allowed, no win required; the speed rule is unit-tested in
    tests/unit/module_utils/experiment/test_experiment_stats.py). Evidence, correctness, memory and the restore decide, so the lab
    copy also asks for shorter answers. trim=True keeps one workload at
    C1 (still 5 measured repetitions): the fault tests judge evidence and correctness, not speed.
    Other keyword arguments replace top-level keys."""
    doc = yaml.safe_load((ROOT / "experiments" / (name + ".yml")).read_text())
    doc["acceptance"]["regression_allowed"] = True
    doc["acceptance"]["wins_required"] = "none"
    # answers of 64 tokens, not 256: the same conditions, repetitions and checks in a quarter of the time
    doc["benchmark"]["max_tokens"] = min(64, doc["benchmark"].get("max_tokens", 256))
    if trim:
        doc["benchmark"]["workloads"] = doc["benchmark"]["workloads"][:1]
        doc["benchmark"]["concurrency"] = [1]
    doc.update(changes)
    path = tmp_path / "def" / (name + ".yml")
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return "experiment_definition_file=%s" % path


def record(root):
    """(run directory, record.json) of the one run under root."""
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return run, json.loads((run / "record.json").read_text())


def verdicts(rec):
    return {v["arm"]: v for v in rec["verdicts"]}


def flat(out):
    """Playbook output with the result callback's line wrapping undone."""
    return " ".join(out.split())


def follow_playbook(name, args, on_line, inventories=None, timeout=1800):
    """Run playbooks/<name> (with the ledger layer the test module asks for), handing each output line to
    on_line(line, proc), which returns True to stop reading; a watchdog kills the run after ``timeout`` seconds.
    Returns (returncode, output read)."""
    from labhelpers import LAB_INVENTORY, ledger_inventories
    inventories = [x for inv in ledger_inventories(inventories or (LAB_INVENTORY,)) for x in ("-i", str(inv))]
    proc = subprocess.Popen(["ansible-playbook", str(ROOT / "playbooks" / name), *inventories, *args], cwd=ROOT, env=env(),
                            text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if on_line(line, proc):
                break
        else:
            proc.wait()
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    return proc.returncode, "".join(lines)


def kill_during(name, args, marker, timeout=1500, inventories=None):
    """Run playbooks/<name> and kill it (SIGKILL, as a lost terminal or an operator's kill -9 would) as soon
    as a line containing marker is printed. Returns (killed, output so far)."""
    killed = []

    def on_line(line, proc):
        if marker in line:
            proc.kill()
            killed.append(True)
            return True
        return False
    _, out = follow_playbook(name, args, on_line, inventories, timeout=timeout)
    return bool(killed), out


def inventory_layer(directory, group_vars_text):
    """The lab inventory plus one layer of group_vars for dsv41_ranks (what an operator would commit: a
    validation in the ledger, a declared switch): the inventories to run a playbook with."""
    from labhelpers import LAB_INVENTORY
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (directory / "group_vars" / "dsv41_ranks.yml").write_text("---\n" + group_vars_text)
    return (LAB_INVENTORY, directory)


def running_image_digest(book, record_root):
    """The running image's digest as a stage reads it (the facts its check mode prints before any verdict: a
    stage whose arms are refused, as stage F's without the W8 validation, prints them too)."""
    import re
    from labhelpers import playbook
    _, out = playbook(book, "--check", "-e", "experiment_record_root=%s" % record_root)
    m = re.search(r"image_digest: (\S+)", out)
    assert m, out[-3000:]
    return m.group(1)


def validation_layer(directory, name, digest):
    """An inventory layer whose ledger holds one validation for the image."""
    return inventory_layer(directory, "dsv41_validations:\n  - {name: %s, image_digest: '%s', record: "
                                      "records/lab/experiments/%s/record.json}\n" % (name, digest, name))


def mini_inventory(directory):
    """The lab inventory with the small real-format checkpoint (what the packer reads)."""
    from labhelpers import MINI_CHECKPOINT
    return inventory_layer(directory, "dsv41_checkpoint_dir: %s\n" % MINI_CHECKPOINT)


def pack_mini(inventories):
    """Stage A, run as an operator runs it on the mini checkpoint: six shards packed, engine restarted with
    packed=True. Returns the inventories the later stages run with."""
    from labhelpers import MINI_CHECKPOINT, playbook, set_launcher_env
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT)
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", inventories=inventories)
    assert rc == 0, out[-4000:]
    return inventories



# The checkout of the launcher on each lab host (the head's ROOT, the workers' WORKER_DIR).
CHECKOUTS = {"spark1": ("mia", "/home/mia/dsv41-3x-spark"), "spark2": ("zurih", "/home/zurih/dsv41-3x-spark"),
             "spark3": ("zurih", "/home/zurih/dsv41-3x-spark")}
# The registration a port adds to the import hook: an install function and a gated call in the loader's
# branch of the engine module it wraps (the hook's own shape, lab/seed/adapters/sitecustomize.py).
_HOOK_PATCH = r"""
import sys
path, name, module, switch = sys.argv[1:5]
src = open(path).read()
anchor = "\n\nclass _Loader"
assert anchor in src and ("def install_%s(" % name) not in src, path
src = src.replace(anchor, "\n\ndef install_%s(module):\n    _install(%r)\n" % (name, name) + anchor, 1)
branch = 'if name == "%s":\n' % module
assert branch in src, (path, module)
gate = ('            if os.environ.get("%s", "0") not in ("0", "", "off", "false"):\n'
        "                install_%s(module)\n" % (switch, name))
open(path, "w").write(src.replace(branch, branch + gate, 1))
"""
# The lab GPU's driver version (the stand-in merges its state file over its defaults: one key is enough).
_DRIVER_SET = r"""
import json, os, sys
p = "/var/lib/lab-nvidia/state.json"
s = json.load(open(p)) if os.path.exists(p) else {}
s["driver_version"] = sys.argv[1]
json.dump(s, open(p, "w"))
"""


def build_ported_adapter(name, engine_module, switch, driver=None):
    """An image that carries a ported adapter: lab/seed/adapters/ported/<name>.py copied into every host's
    launcher checkout and registered in its import hook (gated by switch, in the loader's branch of
    engine_module), the image rebuilt through the launcher's own `build` and served once so the running
    container is the new image (the snapshot an experiment takes is then this image). With driver, the lab
    GPU reports that driver version on every host."""
    import shlex
    from labhelpers import sh
    text = (ROOT / "lab" / "seed" / "adapters" / "ported" / (name + ".py")).read_text()
    for host, (user, checkout) in CHECKOUTS.items():
        sh(host, "cat > %s/adapter/%s.py <<'PORT'\n%sPORT\npython3 -c %s %s/adapter/sitecustomize.py %s %s %s"
           % (checkout, name, text, shlex.quote(_HOOK_PATCH), checkout, name, engine_module, switch), user=user)
        if driver:
            sh(host, "mkdir -p /var/lib/lab-nvidia && python3 -c %s %s" % (shlex.quote(_DRIVER_SET), driver))
    user, checkout = CHECKOUTS["spark1"]
    sh("spark1", "cd %s && ./start.sh build && ./start.sh serve" % checkout, user=user)


def drm_container_access(hosts=("spark1", "spark2", "spark3"), node="/dev/dri/renderD128", on=True):
    """The DRM node passed to every container the hosts' docker creates from now on (the docker stand-in's knob
    /etc/dsv41-lab/docker-run-devices, as if each launch path passed --device), or no longer (on=False). The running
    containers change at the next serve."""
    from labhelpers import sh
    for host in hosts:
        sh(host, ("mkdir -p /etc/dsv41-lab && echo %s > /etc/dsv41-lab/docker-run-devices" % node) if on
           else "rm -f /etc/dsv41-lab/docker-run-devices")


# The lab's pinned canary: the engine version of sglang f80c91a4b (its source layer in lab/seed/engine_src),
# built on every host from the launcher checkout's adapters, so it carries the same hooks as the running image.
CANARY_TAG = "dsv41-sglang:canary-f80c91a4b"
CANARY_VERSION = "0.5.6.dev0+f80c91a4b"


def build_canary_image(g4_dispatch=False):
    """Build the canary on every host from a copy of its launcher checkout's adapter/ (with g4_dispatch, the
    checkout's wo_a_w8.py extended by lab/seed/adapters/ported/wo_a_w8_g4_dispatch.py) and return its image
    id, the immutable reference a pin takes (a local build has no registry digest). The checkout and the
    running image are not touched; the next lab reset removes the image."""
    from labhelpers import sh
    port = (ROOT / "lab" / "seed" / "adapters" / "ported" / "wo_a_w8_g4_dispatch.py").read_text()
    ids = set()
    for host, (user, checkout) in CHECKOUTS.items():
        ctx = "/tmp/lab-canary-%s" % user
        script = "rm -rf %s && mkdir -p %s/adapter && cp %s/adapter/*.py %s/adapter/" % (ctx, ctx, checkout, ctx)
        if g4_dispatch:
            script += " && cat >> %s/adapter/wo_a_w8.py <<'PORT'\n\n%sPORT\n" % (ctx, port)
        sh(host, script, user=user)
        ids.add(sh(host, "docker build -q -t %s --label org.opencontainers.image.version=%s %s"
                   % (CANARY_TAG, CANARY_VERSION, ctx), user=user).strip().splitlines()[-1])
    assert len(ids) == 1, "the canary differs between hosts: %s" % sorted(ids)
    return ids.pop()


def act_during(name, args, marker, action, inventories=None, timeout=1800):
    """Run playbooks/<name> to its end, calling action() once as soon as a line containing marker is printed
    (a knob changed while the run goes, as the fleet's state can change in a window). Returns
    (returncode, output, acted)."""
    acted = []

    def on_line(line, proc):
        if not acted and marker in line:
            action()
            acted.append(True)
        return False
    rc, out = follow_playbook(name, args, on_line, inventories, timeout)
    return rc, out, bool(acted)
