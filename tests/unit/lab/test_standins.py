"""Tests for the lab stand-ins (docker, nvidia-smi), the host seeder and the checkpoint maker.

They run on the control machine: every stand-in is pointed at a temporary state directory
through its environment variables, and the engine is replaced by a tiny fake script.
"""
import ast
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab_launchers import launcher_bytes

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "lab"
DOCKER = LAB / "standins" / "docker"
NVSMI = LAB / "standins" / "nvidia-smi"
SEED = LAB / "seed" / "host_seed.py"
ADAPTERS = LAB / "seed" / "adapters"
REPORT_HOOK = LAB / "seed" / "sitecustomize-report.py"  # the import hook as the report found it
LOCAL_ADAPTERS = ["engram_prefetch", "draft_head_fp8", "draft_tau", "block_verify", "verify_cap",
                  "folded_fence", "wo_a_w8"]
PINNED = "4d8f4c0868ed3b394688b65d88cd99a82c237642"
MAKE_CKPT = LAB / "tools" / "make_checkpoint.py"
DISAGREE = ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all "
            "ranks agree on the tactics.")

FAKE_ENGINE = r'''
import os, sys, time, json
print("fake engine argv=%s name=%s mounts=%s secret=%s mode=%s image_root=%s" % (
    json.dumps(sys.argv[1:]), os.environ.get("LAB_CONTAINER_NAME"), os.environ.get("LAB_MOUNTS"),
    os.environ.get("CALLER_SECRET", "-"), os.environ.get("DSV41_MODE", "-"),
    os.environ.get("LAB_IMAGE_ROOT", "-")), flush=True)
print("Ready: API on port 8888", flush=True)
if "--exit-3" in sys.argv:
    sys.exit(3)
while True:
    time.sleep(0.1)
'''


def load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture
def dk(tmp_path):
    """Run the docker stand-in against a private state dir and a fake engine."""
    engine = tmp_path / "fake_engine.py"
    engine.write_text(FAKE_ENGINE)
    state = tmp_path / "docker-state"
    env = dict(os.environ, LAB_DOCKER_STATE_DIR=str(state), LAB_DOCKER_ENGINE=str(engine),
               CALLER_SECRET="must-not-leak")

    def run(*args, check=True, extra_env=None):
        e = dict(env, **(extra_env or {}))
        p = subprocess.run([sys.executable, str(DOCKER)] + list(args), env=e, text=True,
                           capture_output=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError("docker %s failed (%d): %s" % (args, p.returncode, p.stderr))
        return p

    run.state = state
    run.env = env
    yield run
    # stop whatever engines the test left running (by their recorded process group)
    try:
        data = json.loads((state / "containers.json").read_text())
    except (OSError, ValueError):
        data = []
    for c in data:
        pgid = c.get("Lab", {}).get("pgid")
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass


def wait_for(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def logs(dk, name, *flags, extra_env=None):
    """docker logs NAME: (stdout, stderr) byte for byte (text mode would turn tqdm's \r into \n)."""
    p = subprocess.run([sys.executable, str(DOCKER), "logs", *flags, name], env=dict(dk.env, **(extra_env or {})),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode(), p.stderr.decode()


# --------------------------------------------------------------------------------------------
# docker stand-in
# --------------------------------------------------------------------------------------------
def test_docker_engine_lifecycle(dk, tmp_path):
    engram = tmp_path / "engram"
    engram.mkdir()
    out = dk("run", "-d", "--name", "dsv41-head", "--network", "host", "-v", "%s:/engram" % engram,
             "-v", "/srv/models:/srv/models:ro", "-e", "DSV41_MODE", "-e", "NOT_SET_ANYWHERE", "-e", "A=1",
             "--label", "owner=mia", "dsv41-sglang:tp3", "--tp", "3",
             extra_env={"DSV41_MODE": "from-caller"}).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", out)
    log = dk.state / "logs" / "dsv41-head.log"
    assert wait_for(lambda: "Ready: API on port 8888" in logs(dk, "dsv41-head")[0])
    text = logs(dk, "dsv41-head")[0]
    assert 'argv=["--tp", "3"]' in text and "name=dsv41-head" in text
    assert '"/engram": "%s"' % engram in text
    assert "secret=-" in text, "the caller's environment must not reach the engine"
    assert "mode=from-caller" in text, "-e K takes K from the caller's environment"

    env = json.loads(dk("inspect", "-f", "{{json .Config.Env}}", "dsv41-head").stdout)
    assert "DSV41_MODE=from-caller" in env and "A=1" in env
    assert not any(e.startswith("NOT_SET_ANYWHERE") for e in env)
    mounts = json.loads(dk("inspect", "--format", "{{json .Mounts}}", "dsv41-head").stdout)
    assert [m["Source"] for m in mounts if m["Destination"] == "/engram"] == [str(engram)]
    assert json.loads(dk("inspect", "-f", "{{json .Config.Labels}}", "dsv41-head").stdout)["owner"] == "mia"
    assert dk("inspect", "-f", "{{.Name}} {{.State.Status}} {{.HostConfig.NetworkMode}}",
              "dsv41-head").stdout.strip() == "/dsv41-head running host"

    # conflict, like docker
    p = dk("run", "-d", "--name", "dsv41-head", "dsv41-sglang:tp3", check=False)
    assert p.returncode == 125 and 'Conflict. The container name "/dsv41-head" is already in use' in p.stderr

    # pause / unpause signal the process group
    pid = int(dk("inspect", "-f", "{{.State.Pid}}", "dsv41-head").stdout)
    assert dk("pause", "dsv41-head").stdout == "dsv41-head\n"
    assert wait_for(lambda: open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "T")
    assert "(Paused)" in dk("ps", "--format", "{{.Status}}").stdout
    dk("unpause", "dsv41-head")
    assert dk("ps", "--format", "{{.State}}").stdout.strip() == "running"

    # restart appends a second boot to the log
    dk("restart", "-t", "2", "dsv41-head")
    assert wait_for(lambda: logs(dk, "dsv41-head")[0].count("Ready: API on port 8888") == 2)

    # stop: SIGTERM, recorded exit
    assert dk("stop", "-t", "5", "dsv41-head").stdout == "dsv41-head\n"
    st = json.loads(dk("inspect", "-f", "{{json .State}}", "dsv41-head").stdout)
    assert st["Status"] == "exited" and not st["Running"] and st["ExitCode"] == 143
    assert dk("ps", "-q").stdout == ""
    assert re.match(r"Exited \(143\) ", dk("ps", "-a", "--format", "{{.Status}}").stdout)

    # rm deletes the container and its log; rm -f of a missing name is quiet
    assert dk("rm", "dsv41-head").stdout == "dsv41-head\n"
    assert not log.exists()
    p = dk("rm", "-f", "dsv41-head")
    assert p.returncode == 0 and p.stdout == ""


# An engine that writes like the real one: logging on stderr, print() on stdout, a glued tqdm line, a 20 KiB
# line, and (with --partial) a last line without its newline before it dies.
STREAMS_ENGINE = r'''
import os, sys, time
def out(fd, text):
    os.write(fd, text.encode())
    time.sleep(0.05)   # lets the supervisor read one stream before the other is written
out(2, "[2026-09-24 02:38:41] server_args={'node_rank': 0}\n")
out(1, "[autotune_keep] armed\n")
out(2, "[2026-09-24 02:39:02 TP0 EP0] Load weight begin. avail mem=103.24 GB\n")
out(2, "Capturing batches (bs=4 avail_mem=3.89 GB):   0%|          | 0/4 [00:00<?, ?it/s]\r\x1b[A")
out(2, "[2026-09-24 02:49:29 TP0 EP0] FlashInfer autotune: per-rank caches disagree <&>\n")
out(2, "[2026-09-24 02:49:30 TP0 EP0] big=" + "x" * 20000 + "\n")
out(1, "Ready: API on port 8888\n")
if "--partial" in sys.argv:
    out(2, "[2026-09-24 02:49:31 TP0 EP0] DSV4 pool sizes: full=49")
    sys.exit(3)
time.sleep(0.3)
out(2, "[2026-09-24 02:49:32 TP0 EP0] Decode batch, #running-req: 1\n")
while True:
    time.sleep(0.1)
'''


@pytest.fixture
def dks(dk, tmp_path):
    engine = tmp_path / "streams_engine.py"
    engine.write_text(STREAMS_ENGINE)
    env = {"LAB_DOCKER_ENGINE": str(engine)}
    dk.streams = env
    return dk


def test_docker_logs_split_streams_like_docker(dks):
    env = dks.streams
    dks("run", "-d", "--name", "dsv41-head", "--network", "host", "dsv41-sglang:tp3", extra_env=env)
    assert wait_for(lambda: "Decode batch" in logs(dks, "dsv41-head", extra_env=env)[1])
    out, err = logs(dks, "dsv41-head", extra_env=env)
    assert out == "[autotune_keep] armed\nReady: API on port 8888\n"
    assert err.startswith("[2026-09-24 02:38:41] server_args={'node_rank': 0}\n") and "armed" not in err
    glued = "Capturing batches (bs=4 avail_mem=3.89 GB):   0%|          | 0/4 [00:00<?, ?it/s]\r\x1b[A" \
            "[2026-09-24 02:49:29 TP0 EP0] FlashInfer autotune: per-rank caches disagree <&>\n"
    assert glued in err, "a line is one message however it was written"
    assert "big=" + "x" * 20000 + "\n" in err, "a long line comes back whole"
    # the json-file log: one record per message, 16 KiB at most, Go's escaping, nanosecond times
    recs = [json.loads(line) for line in (dks.state / "logs" / "dsv41-head.log").read_text().splitlines()]
    assert all(set(r) == {"log", "stream", "time"} for r in recs)
    assert [r["stream"] for r in recs[:3]] == ["stderr", "stdout", "stderr"]
    big = [r for r in recs if "xxxx" in r["log"]]
    assert len(big) == 2 and not big[0]["log"].endswith("\n") and all(len(r["log"].encode()) <= 16384 for r in big)
    raw = (dks.state / "logs" / "dsv41-head.log").read_text()
    assert "\\u003c\\u0026\\u003e" in raw and "\\r\\u001b[A" in raw
    # 2>&1 keeps the written order; -t stamps every record with its own, increasing time
    both_out, both_err = logs(dks, "dsv41-head", extra_env=env)
    combined = subprocess.run([sys.executable, str(DOCKER), "logs", "dsv41-head"], env=dict(dks.env, **env),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
    assert combined.index("server_args") < combined.index("[autotune_keep] armed") < combined.index("Load weight")
    assert combined.index("big=") < combined.index("Ready: API") < combined.index("Decode batch")
    assert len(combined) == len(both_out) + len(both_err)
    ts_out, ts_err = logs(dks, "dsv41-head", "-t", extra_env=env)
    stamped = [ln for ln in (ts_out + ts_err).split("\n") if ln]
    stamp = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) ")
    times = [stamp.match(ln).group(1) for ln in stamped if stamp.match(ln)]
    assert len(times) == len(recs) - 1, "every record but the continued long line starts a stamped line"
    assert ts_out.startswith(stamp.match(ts_out).group(0) + "[autotune_keep] armed\n")
    merged = sorted(times)
    assert len(set(merged)) == len(merged), "each line its own time"
    assert merged[-1] > merged[0]
    # --tail counts records of both streams together
    t_out, t_err = logs(dks, "dsv41-head", "--tail", "2", extra_env=env)
    assert t_out == "Ready: API on port 8888\n" and t_err == "[2026-09-24 02:49:32 TP0 EP0] Decode batch, #running-req: 1\n"
    t_out, t_err = logs(dks, "dsv41-head", "-n", "3", extra_env=env)
    assert t_out == "Ready: API on port 8888\n" and t_err.startswith("x") and t_err.endswith("Decode batch, #running-req: 1\n")
    assert logs(dks, "dsv41-head", "--tail", "0", extra_env=env) == ("", "")
    # --since a record's time keeps that record and the later ones
    ready_time = stamp.match([ln for ln in stamped if ln.endswith("Ready: API on port 8888")][0]).group(1)
    s_out, s_err = logs(dks, "dsv41-head", "--since", ready_time, extra_env=env)
    assert s_out == "Ready: API on port 8888\n" and "Decode batch" in s_err and "server_args" not in s_err
    p = dks("logs", "--tail", "x", "dsv41-head", check=False, extra_env=env)
    assert p.returncode == 1 and "tail" in p.stderr
    dks("rm", "-f", "dsv41-head", extra_env=env)


def test_docker_logs_follow_both_streams_and_partial_last_line(dks):
    env = dks.streams
    dks("run", "-d", "--name", "dsv41-head", "--network", "host", "dsv41-sglang:tp3", "--partial", extra_env=env)
    p = subprocess.run([sys.executable, str(DOCKER), "logs", "-f", "dsv41-head"], env=dict(dks.env, **env),
                       capture_output=True, timeout=30)
    assert p.returncode == 0, "follow ends when the container stops"
    assert p.stdout.decode() == "[autotune_keep] armed\nReady: API on port 8888\n"
    assert p.stderr.decode().endswith("\n[2026-09-24 02:49:31 TP0 EP0] DSV4 pool sizes: full=49"), "no newline added"
    assert dks("inspect", "-f", "{{.State.ExitCode}}", "dsv41-head", extra_env=env).stdout.strip() == "3"
    _, err = logs(dks, "dsv41-head", "-t", "--tail", "1", extra_env=env)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z \[2026-09-24 02:49:31 TP0 EP0\] "
                        r"DSV4 pool sizes: full=49", err)


def test_docker_engine_exit_code_recorded(dk):
    dk("run", "-d", "--name", "dsv41-worker", "--network", "host", "dsv41-sglang:tp3", "--exit-3")

    def exited():
        return dk("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "dsv41-worker").stdout.strip() == "exited 3"
    assert wait_for(exited)
    assert "Ready" in dk("logs", "--tail", "1", "dsv41-worker").stdout


def test_docker_rm_force_kills_running_engine(dk):
    dk("run", "-d", "--name", "dsv41-head", "dsv41-sglang:tp3")
    pid = int(dk("inspect", "-f", "{{.State.Pid}}", "dsv41-head").stdout)
    assert dk("rm", "-f", "dsv41-head").stdout == "dsv41-head\n"
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid) or
                    open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z")
    assert dk("ps", "-a", "-q").stdout == ""


def test_docker_ps_table_json_and_filters(dk):
    dk("run", "-d", "--name", "grafana", "-p", "3000:3000", "--label", "owner=ops", "grafana/grafana:11.2.0")
    dk("run", "-d", "--name", "redis", "redis:7.4-alpine", "redis-server")
    dk("stop", "redis")
    table = dk("ps").stdout.splitlines()
    assert re.match(r"CONTAINER ID\s{3}IMAGE\s+COMMAND\s+CREATED\s+STATUS\s+PORTS\s+NAMES$", table[0])
    assert len(table) == 2 and table[1].endswith("grafana") and "0.0.0.0:3000->3000/tcp" in table[1]
    rows = [json.loads(ln) for ln in dk("ps", "-a", "--format", "{{json .}}").stdout.splitlines()]
    assert {r["Names"] for r in rows} == {"grafana", "redis"}
    keys = {"ID", "Names", "Image", "Command", "CreatedAt", "RunningFor", "Status", "State", "Labels",
            "Mounts", "Ports", "Networks", "Size", "LocalVolumes"}
    assert keys <= set(rows[0])
    by = {r["Names"]: r for r in rows}
    assert by["grafana"]["Labels"] == "owner=ops" and by["grafana"]["State"] == "running"
    assert by["redis"]["Command"] == '"redis-server"' and by["redis"]["Status"].startswith("Exited (0)")
    assert dk("ps", "-a", "--filter", "label=owner=ops", "--format", "{{.Names}}").stdout == "grafana\n"
    assert dk("ps", "-a", "--filter", "status=exited", "--format", "{{.Names}}").stdout == "redis\n"
    assert dk("ps", "-a", "--filter", "name=^red", "--format", "{{.Names}}:{{.Labels}}").stdout == "redis:\n"
    assert len(dk("ps", "-q", "--no-trunc").stdout.strip()) == 64
    # inspect of unknown names
    p = dk("inspect", "grafana", "nope", check=False)
    assert p.returncode == 1 and "Error: No such object: nope" in p.stderr
    assert json.loads(p.stdout)[0]["Name"] == "/grafana"
    # stats
    st = dk("stats", "--no-stream", "--format", "{{json .}}", "grafana").stdout
    rec = json.loads(st)
    assert set(rec) >= {"Container", "Name", "ID", "CPUPerc", "MemUsage", "MemPerc", "NetIO", "BlockIO", "PIDs"}
    assert re.fullmatch(r"\d+\.\d\d%", rec["CPUPerc"]) and " / " in rec["MemUsage"]
    assert dk("stats", "--no-stream").stdout.startswith("CONTAINER ID   NAME")
    assert dk("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.count("\n") == 2
    assert dk("version", "--format", "{{.Server.Version}}").stdout.strip()


ENGINE_LABELS = {"org.opencontainers.image.version": "0.5.4.post1-dsv41",
                 "dsv41.flashinfer.version": "0.6.18", "dsv41.cuda.version": "13.0"}


def check_engine_image(im):
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", im["Id"])
    assert im["RepoTags"] == ["dsv41-sglang:tp3"]
    assert len(im["RepoDigests"]) == 1 and re.fullmatch(r"dsv41-sglang@sha256:[0-9a-f]{64}", im["RepoDigests"][0])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", im["Created"])
    assert im["Config"]["Labels"] == ENGINE_LABELS


def test_docker_image_inspect(dk):
    dk("run", "-d", "--name", "redis", "redis:7.4-alpine", "redis-server")
    dk("create", "--name", "dsv41-head", "dsv41-sglang:tp3")
    (im,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3").stdout)
    check_engine_image(im)
    assert json.loads(dk("inspect", "dsv41-sglang:tp3").stdout) == [im]
    assert json.loads(dk("inspect", "--type", "image", im["RepoDigests"][0]).stdout) == [im]
    assert json.loads(dk("image", "inspect", im["Id"]).stdout) == [im]
    labels = json.loads(dk("image", "inspect", "-f", "{{json .Config.Labels}}", "dsv41-sglang:tp3").stdout)
    assert labels["org.opencontainers.image.version"] == "0.5.4.post1-dsv41"
    assert dk("inspect", "-f", "{{.Image}}", "dsv41-head").stdout.strip() == im["Id"]
    # other images carry no labels; unknown images fail like docker
    assert json.loads(dk("image", "inspect", "redis:7.4-alpine").stdout)[0]["Config"]["Labels"] == {}
    p = dk("image", "inspect", "dsv41-sglang:tp2", check=False)
    assert p.returncode == 1 and "Error: No such image: dsv41-sglang:tp2" in p.stderr
    # the architecture, as docker's -f/--format prints it (the family launcher's check): the host's, arm64,
    # one line per image; an image record may name another (pulled for the wrong platform)
    assert im["Architecture"] == "arm64" and im["Os"] == "linux"
    assert dk("image", "inspect", "-f", "{{.Architecture}}", "dsv41-sglang:tp3").stdout == "arm64\n"
    assert dk("image", "inspect", "--format={{.Architecture}}", "dsv41-sglang:tp3", "redis:7.4-alpine").stdout == \
        "arm64\narm64\n"
    assert dk("inspect", "--format", "{{.Os}}/{{.Architecture}}", "dsv41-sglang:tp3").stdout == "linux/arm64\n"
    assert "OS/Arch:          linux/arm64" in dk("version").stdout
    images = json.loads((dk.state / "images.json").read_text())
    next(r for r in images if r["Repository"] == "redis")["Architecture"] = "amd64"
    (dk.state / "images.json").write_text(json.dumps(images))
    assert dk("image", "inspect", "-f", "{{.Architecture}}", "redis:7.4-alpine").stdout == "amd64\n"
    # an images.json written before labels existed still shows the engine labels
    images = json.loads((dk.state / "images.json").read_text())
    for rec in images:
        rec.pop("Labels")
    (dk.state / "images.json").write_text(json.dumps(images))
    assert json.loads(dk("image", "inspect", "dsv41-sglang:tp3").stdout)[0]["Config"]["Labels"] == ENGINE_LABELS


# --------------------------------------------------------------------------------------------
# adapter sources, docker build, one-off docker run
# --------------------------------------------------------------------------------------------
def sha(path):
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_checkout(tmp_path, extra=()):
    """A launcher checkout whose adapter/ is what the seeder writes (plus EXTRA adapters)."""
    co = tmp_path / "dsv41-3x-spark"
    (co / "adapter" / "tp4").mkdir(parents=True)
    for name in LOCAL_ADAPTERS + list(extra):
        shutil.copy(ADAPTERS / (name + ".py"), co / "adapter" / (name + ".py"))
    shutil.copy(REPORT_HOOK, co / "adapter" / "sitecustomize.py")
    shutil.copy(ADAPTERS / "tp4" / "wo_a_w8.py", co / "adapter" / "tp4" / "wo_a_w8.py")
    (co / "adapter" / "README.txt").write_text("not python: never copied\n")
    return co


def test_adapter_sources():
    import ast
    names = sorted(p.name for p in ADAPTERS.glob("*.py"))
    assert names == sorted([n + ".py" for n in LOCAL_ADAPTERS] + ["autotune_keep.py", "sitecustomize.py"])
    for path in [ADAPTERS / (n + ".py") for n in LOCAL_ADAPTERS + ["autotune_keep"]] + [ADAPTERS / "tp4/wo_a_w8.py"]:
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree)
        assert doc and "LAB STAND-IN" in doc, path
        assert any(isinstance(n, ast.FunctionDef) and n.name == "install" for n in tree.body), path
    for n in LOCAL_ADAPTERS[:6]:
        assert PINNED in (ADAPTERS / (n + ".py")).read_text(), n
    local, tp4 = (ADAPTERS / "wo_a_w8.py").read_text(), (ADAPTERS / "tp4/wo_a_w8.py").read_text()
    assert "G=4" in local and "LOCAL_GROUPS = 4" in local and "GROUPS = 2" in tp4 and local != tp4
    keep = (ADAPTERS / "autotune_keep.py").read_text()
    for sym in ("_autotune_cache_digest", "flashinfer_autotune_context", "flashinfer_autotune_cache_path"):
        assert sym in keep
    from ansible.module_utils.adapters import hook as H  # tests/conftest.py maps module_utils
    regs = H.read_hook(REPORT_HOOK.read_text())["adapters"]
    # the seven local adapters, plus the TP4-only shared padding (never installed on TP3)
    assert sorted(regs) == sorted(LOCAL_ADAPTERS + ["shared_pad"]) and regs["shared_pad"]["tp4_only"]
    ported = H.read_hook((ADAPTERS / "sitecustomize.py").read_text())["adapters"]
    assert sorted(ported) == sorted(LOCAL_ADAPTERS + ["autotune_keep", "shared_pad"])


BUILD_RE = re.compile(r"Successfully built ([0-9a-f]{12})\nSuccessfully tagged dsv41-sglang:tp3\n$")


def test_docker_build_image_rootfs_and_tag_move(dk, tmp_path):
    co = make_checkout(tmp_path)
    p = dk("build", "-t", "dsv41-sglang:tp3", str(co))
    m = BUILD_RE.search(p.stdout)
    assert m, p.stdout
    (im,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3").stdout)
    assert im["Id"][7:19] == m.group(1) and im["RepoTags"] == ["dsv41-sglang:tp3"]
    assert im["Config"]["Labels"] == ENGINE_LABELS
    rootfs = dk.state / "images" / im["Id"][7:] / "rootfs"
    adir = rootfs / "sgl-workspace" / "adapter"
    assert sorted(p.name for p in rootfs.rglob("*") if p.is_file()) == \
        sorted([n + ".py" for n in LOCAL_ADAPTERS] + ["sitecustomize.py"])
    for f in adir.iterdir():
        assert f.read_bytes() == (co / "adapter" / f.name).read_bytes()
    assert (adir / "wo_a_w8.py").read_bytes() == (ADAPTERS / "wo_a_w8.py").read_bytes(), "the local file, not tp4/"
    # same content: same id (cache); -q prints the full id
    assert dk("build", "-q", "-t", "dsv41-sglang:tp3", str(co)).stdout == im["Id"] + "\n"
    # new content: new id, the tag moves, the old image stays (untagged, still inspectable by id)
    shutil.copy(ADAPTERS / "autotune_keep.py", co / "adapter" / "autotune_keep.py")
    new_id = BUILD_RE.search(dk("build", "--tag", "dsv41-sglang:tp3", "-f", str(co / "adapter" / "README.txt"),
                                str(co)).stdout).group(1)
    assert new_id != im["Id"][7:19]
    (new,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3").stdout)
    assert new["Id"][7:19] == new_id and new["Config"]["Labels"] == ENGINE_LABELS
    assert (dk.state / "images" / new["Id"][7:] / "rootfs/sgl-workspace/adapter/autotune_keep.py").is_file()
    (old,) = json.loads(dk("image", "inspect", im["Id"]).stdout)
    assert old["RepoTags"] == [] and rootfs.is_dir()
    rows = dk("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.splitlines()
    assert sorted(rows) == sorted(["dsv41-sglang:tp3 %s" % new_id, "<none>:<none> %s" % im["Id"][7:19]])
    # back to the first content: the dangling image gets the tag back
    (co / "adapter" / "autotune_keep.py").unlink()
    assert dk("build", "-q", "-t", "dsv41-sglang:tp3", str(co)).stdout.strip() == im["Id"]
    assert len(dk("images", "-q").stdout.split()) == 2
    # failures like docker's
    p = dk("build", "-t", "dsv41-sglang:tp3", str(tmp_path / "missing"), check=False)
    assert p.returncode == 1 and 'unable to prepare context: path "%s" not found' % (tmp_path / "missing") in p.stderr
    (tmp_path / "empty").mkdir()
    p = dk("build", "-t", "dsv41-sglang:tp3", str(tmp_path / "empty"), check=False)
    assert p.returncode == 1 and "COPY failed" in p.stderr


def test_docker_run_rm_sha256sum(dk, tmp_path):
    co = make_checkout(tmp_path)
    dk("build", "-t", "dsv41-sglang:tp3", str(co))
    paths = ["/sgl-workspace/adapter/%s.py" % n for n in LOCAL_ADAPTERS] + ["/sgl-workspace/adapter/sitecustomize.py"]
    want = "".join("%s  %s\n" % (sha(co / "adapter" / Path(p).name), p) for p in paths)
    p = dk("run", "--rm", "--entrypoint", "sha256sum", "dsv41-sglang:tp3", *paths)
    assert p.stdout == want and p.stderr == ""
    assert dk("run", "--rm", "dsv41-sglang:tp3", "sha256sum", *paths).stdout == want
    # a missing file: exit 1, the real tool's message, the other lines still printed
    p = dk("run", "--rm", "--entrypoint", "sha256sum", "dsv41-sglang:tp3", paths[0],
           "/sgl-workspace/adapter/autotune_keep.py", check=False)
    assert p.returncode == 1
    assert p.stdout == "%s  %s\n" % (sha(co / "adapter/engram_prefetch.py"), paths[0])
    assert p.stderr == "sha256sum: /sgl-workspace/adapter/autotune_keep.py: No such file or directory\n"
    # globs are not expanded (docker passes argv as is); cat and ls see the image, not the host
    p = dk("run", "--rm", "--entrypoint", "sha256sum", "dsv41-sglang:tp3", "/sgl-workspace/adapter/*.py", check=False)
    assert p.returncode == 1 and p.stderr == "sha256sum: '/sgl-workspace/adapter/*.py': No such file or directory\n"
    assert dk("run", "--rm", "--entrypoint", "cat", "dsv41-sglang:tp3",
              "/sgl-workspace/adapter/sitecustomize.py").stdout == REPORT_HOOK.read_text()
    assert dk("run", "--rm", "dsv41-sglang:tp3", "ls", "/sgl-workspace/adapter").stdout.split() == \
        sorted([n + ".py" for n in LOCAL_ADAPTERS] + ["sitecustomize.py"])
    p = dk("run", "--rm", "--entrypoint", "cat", "dsv41-sglang:tp3", "/etc/hostname", check=False)
    assert p.returncode == 1 and p.stderr == "cat: /etc/hostname: No such file or directory\n"
    # relative paths resolve in the image's workdir /sgl-workspace
    assert dk("run", "--rm", "dsv41-sglang:tp3", "sha256sum", "adapter/draft_tau.py").stdout == \
        "%s  adapter/draft_tau.py\n" % sha(co / "adapter/draft_tau.py")
    # nothing left behind with --rm; an unknown executable fails like docker
    assert dk("ps", "-aq").stdout == ""
    p = dk("run", "--rm", "--entrypoint", "nosuchtool", "dsv41-sglang:tp3", check=False)
    assert p.returncode == 127 and 'exec: "nosuchtool": executable file not found in $PATH' in p.stderr


def test_engine_container_gets_image_root(dk, tmp_path):
    co = make_checkout(tmp_path)
    dk("build", "-t", "dsv41-sglang:tp3", str(co))
    (im,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3").stdout)
    dk("run", "-d", "--name", "dsv41-head", "--network", "host", "dsv41-sglang:tp3", "--role", "head")
    assert wait_for(lambda: "Ready: API on port 8888" in logs(dk, "dsv41-head")[0])
    root = dk.state / "images" / im["Id"][7:] / "rootfs"
    out = logs(dk, "dsv41-head")[0]
    assert "image_root=%s " % root in out or "image_root=%s\n" % root in out
    dk("rm", "-f", "dsv41-head")
    # the container keeps its image after a rebuild moves the tag (docker start uses the old image)
    dk("create", "--name", "dsv41-head", "--network", "host", "dsv41-sglang:tp3")
    shutil.copy(ADAPTERS / "autotune_keep.py", co / "adapter" / "autotune_keep.py")
    dk("build", "-t", "dsv41-sglang:tp3", str(co))
    dk("start", "dsv41-head")
    assert wait_for(lambda: "image_root=" in logs(dk, "dsv41-head")[0])
    assert "image_root=%s" % root in logs(dk, "dsv41-head")[0]
    dk("rm", "-f", "dsv41-head")


def test_an_engine_image_named_by_id_or_digest_runs_the_engine(dk, tmp_path):
    # IMAGE=sha256:<id> or repo@sha256:<digest> in the launcher's .env (a pinned image) must start the engine, as
    # docker runs whatever the reference resolves to; the lab once kept such a container as bookkeeping only
    co = make_checkout(tmp_path)
    image_id = dk("build", "-q", "-t", "dsv41-sglang:canary", str(co)).stdout.strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", image_id)
    dk("run", "-d", "--name", "dsv41-head", "--network", "host", image_id, "--role", "head")
    assert wait_for(lambda: "Ready: API on port 8888" in logs(dk, "dsv41-head")[0])
    (c,) = json.loads(dk("inspect", "dsv41-head").stdout)
    assert c["Image"] == image_id and c["Config"]["Image"] == image_id
    dk("rm", "-f", "dsv41-head")


def test_one_off_reads_see_the_engine_source_layer_of_the_image_version(dk, tmp_path):
    # the engine's own Python tree (lab/seed/engine_src: one layer per engine version plus a common one) is
    # under /sgl-workspace/sglang/ of every engine image, beneath what the build copied
    co = make_checkout(tmp_path)
    src = ROOT / "lab" / "seed" / "engine_src"
    env = {"LAB_DOCKER_ENGINE_SRC": str(src)}
    dk("build", "-t", "dsv41-sglang:tp3", str(co), extra_env=env)
    dk("build", "-t", "dsv41-sglang:canary", "--label", "org.opencontainers.image.version=0.5.6.dev0+f80c91a4b",
       str(co), extra_env=env)
    model = "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v4.py"
    for tag, version in (("dsv41-sglang:tp3", "0.5.4.post1-dsv41"), ("dsv41-sglang:canary", "0.5.6.dev0+f80c91a4b")):
        got = dk("run", "--rm", "--network", "none", "--entrypoint", "cat", tag, model, extra_env=env).stdout
        assert got == (src / version / "python/sglang/srt/models/deepseek_v4.py").read_text()
    common = "/sgl-workspace/sglang/python/sglang/srt/speculative/dspark_worker.py"
    assert dk("run", "--rm", "--entrypoint", "cat", "dsv41-sglang:canary", common, extra_env=env).stdout == \
        (src / "common/python/sglang/srt/speculative/dspark_worker.py").read_text()
    # what the build copied still wins; a path no layer has is missing, named as in the image
    assert dk("run", "--rm", "--entrypoint", "cat", "dsv41-sglang:canary", "/sgl-workspace/adapter/sitecustomize.py",
              extra_env=env).stdout == REPORT_HOOK.read_text()
    p = dk("run", "--rm", "--entrypoint", "cat", "dsv41-sglang:canary", "/sgl-workspace/sglang/python/nope.py",
           extra_env=env, check=False)
    assert p.returncode == 1 and p.stderr == "cat: /sgl-workspace/sglang/python/nope.py: No such file or directory\n"
    # a non-engine image has no engine source
    p = dk("run", "--rm", "--entrypoint", "cat", "busybox:1", model, extra_env=env, check=False)
    assert p.returncode == 1


def test_docker_non_root_member(dk):
    """A non-root user with write access to the state dir (group docker on the lab) can use it."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to switch user")
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="lab-docker-nonroot-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        state = base / "state"
        state.mkdir(mode=0o2777)
        os.chmod(state, 0o2777)
        env = dict(dk.env, LAB_DOCKER_STATE_DIR=str(state))
        cmd = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
               sys.executable, str(DOCKER), "run", "-d", "--name", "web", "nginx:1.27"]
        p = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert dk("ps", "--format", "{{.Names}}", extra_env={"LAB_DOCKER_STATE_DIR": str(state)}).stdout == "web\n"
        assert (state / "containers.json").stat().st_mode & 0o060 == 0o060, "group-writable state"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# The formats the project uses (module_utils/host/docker_ps.py, the contention role, the lab launchers in
# lab/standins/launcher/, the playbook and testinfra tests); the stand-in supports these and refuses the rest.
PROJECT_FORMATS = [
    ("{{json .}}", None),
    ("{{.State.Status}}", "running"),
    ("{{.Names}} {{.State}}", None),
    ("{{.Name}} {{.State.Status}} {{.State.Running}} {{.State.Paused}}", "/x running true false"),
    ("{{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.Id}}", "/x running 2026-09-24T02:50:01Z abc"),
]


def test_format_renders_the_project_formats_and_refuses_others():
    sys.path.insert(0, str(DOCKER.parent))   # the stand-in's package, lab_docker/ (as the docker file puts it there)
    from lab_docker import gotemplate, sizes, timefmt
    data = {"Name": "/x", "Id": "abc", "Config": {"Labels": {"owner": "mia"}, "Env": ["A=1", "B=2"]},
            "State": {"Status": "running", "Running": True, "Paused": False, "Pid": 12,
                      "StartedAt": "2026-09-24T02:50:01Z"}}
    for fmt, want in PROJECT_FORMATS:
        if want is not None:
            assert gotemplate.render(fmt, data) == want, fmt
    assert json.loads(gotemplate.render("{{json .}}", data)) == data
    assert gotemplate.render("{{json .Config.Env}}", data) == '["A=1","B=2"]'
    assert gotemplate.render("{{.State.Pid}}:{{.Config.Labels}}", data) == "12:map[owner:mia]"
    assert gotemplate.render("{{json .Name}}", {"Name": "<&>"}) == '"\\u003c\\u0026\\u003e"'   # Go's HTML-safe JSON
    for bad in ('{{index .Config.Labels "owner"}}', "{{range .Mounts}}{{.Source}}{{end}}", '{{.Label "owner"}}',
                "{{.Name", "{{printf \"%s\" .Name}}"):
        with pytest.raises(gotemplate.TemplateError):
            gotemplate.render(bad, data)
    with pytest.raises(gotemplate.TemplateError, match="can't evaluate field Nope"):
        gotemplate.render("{{.Nope}}", data)
    # table rendering as docker's tabwriter: min width 10, padding 3
    out = gotemplate.render_list("table {{.ID}}\\t{{.Name}}", [{"ID": "abc", "Name": "n"}],
                                 {"ID": "CONTAINER ID", "Name": "NAMES"})
    assert out == "CONTAINER ID   NAMES\nabc            n\n"
    assert timefmt.human_duration(3 * 86400) == "3 days" and timefmt.human_duration(300) == "5 minutes"
    assert sizes.bytes_size(int(119.7 * 1024 ** 3)) == "119.7GiB"


def test_unsupported_format_exits_with_a_clear_error(dk):
    dk("run", "-d", "--name", "web", "nginx:1.27")
    p = dk("inspect", "--format", '{{index .Config.Labels "owner"}}', "web", check=False)
    assert p.returncode == 1 and "supports only {{.Field.Path}}" in p.stderr and "Traceback" not in p.stderr
    assert dk("inspect", "--format", "{{.State.Status}}", "web").stdout == "running\n"


# --------------------------------------------------------------------------------------------
# make_checkpoint
# --------------------------------------------------------------------------------------------
def read_st(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def test_make_checkpoint_mini(tmp_path):
    out = tmp_path / "models"
    subprocess.run([sys.executable, str(MAKE_CKPT), "--out", str(out), "--only", "mini"], check=True,
                   capture_output=True)
    ck = out / "DeepSeek-V4.1-Flash-mini"
    index = json.loads((ck / "model.safetensors.index.json").read_text())["weight_map"]
    for layer, n in ((1, 4099), (14, 3001)):
        w, s = "layers.%d.engram.embed.weight" % layer, "layers.%d.engram.embed.scale" % layer
        assert index[w] == index[s]
        hdr, start = read_st(ck / index[w])
        assert hdr["__metadata__"] == {"format": "pt"}
        assert hdr[w]["dtype"] == "F8_E4M3" and hdr[w]["shape"] == [n, 256]
        assert hdr[s]["dtype"] == "F8_E8M0" and hdr[s]["shape"] == [n, 8]
        assert hdr[w]["data_offsets"][1] - hdr[w]["data_offsets"][0] == n * 256
        assert hdr[w]["data_offsets"][0] > 0, "an unrelated tensor precedes the table"
        size = (ck / index[w]).stat().st_size
        assert size == start + max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
        with open(ck / index[w], "rb") as f:
            f.seek(start + hdr[w]["data_offsets"][0])
            assert len(set(f.read(4096))) > 200, "real (random) bytes"
    assert any(f != index["layers.1.engram.embed.weight"] for f in set(index.values()))
    marker = json.loads((ck / ".complete").read_text())
    assert marker["version"] >= 1
    # idempotent and deterministic
    mtime = (ck / ".complete").stat().st_mtime_ns
    r = subprocess.run([sys.executable, str(MAKE_CKPT), "--out", str(out), "--only", "mini"], check=True,
                       capture_output=True, text=True)
    assert "already present" in r.stdout and (ck / ".complete").stat().st_mtime_ns == mtime
    out2 = tmp_path / "again"
    subprocess.run([sys.executable, str(MAKE_CKPT), "--out", str(out2), "--only", "mini"], check=True,
                   capture_output=True)
    assert json.loads((out2 / ck.name / ".complete").read_text())["sha256"] == marker["sha256"]
    # a damaged checkpoint is rebuilt
    (ck / index["layers.14.engram.embed.weight"]).write_bytes(b"x")
    r = subprocess.run([sys.executable, str(MAKE_CKPT), "--out", str(out), "--only", "mini"], check=True,
                       capture_output=True, text=True)
    assert "created" in r.stdout


def test_make_checkpoint_full_sparse_arithmetic(tmp_path):
    out = tmp_path / "models"
    subprocess.run([sys.executable, str(MAKE_CKPT), "--out", str(out), "--only", "full"], check=True,
                   capture_output=True)
    ck = out / "DeepSeek-V4.1-Flash"
    index = json.loads((ck / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["layers.1.engram.embed.weight"] == "model-00002-of-00046.safetensors"
    assert index["layers.14.engram.embed.scale"] == "model-00014-of-00046.safetensors"
    assert index["layers.1.mlp.experts.0.w1.weight"] == "model-00001-of-00046.safetensors"
    rows = {}
    for layer in (1, 14):
        f = ck / index["layers.%d.engram.embed.weight" % layer]
        hdr, start = read_st(f)
        rows[layer] = hdr["layers.%d.engram.embed.weight" % layer]["shape"][0]
        assert hdr["layers.%d.engram.embed.scale" % layer]["shape"] == [rows[layer], 8]
        end = max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
        assert f.stat().st_size == start + end
        assert f.stat().st_blocks * 512 < 1 << 20, "sparse"
    assert rows == {1: 384006168, 14: 384016684}

    def shard(n, r, tp):
        lo, hi = n * r // tp, n * (r + 1) // tp
        return 4096 + (hi - lo) * 264
    assert sum(shard(n, 1, 3) for n in rows.values()) == 67_586_019_080
    assert sum(shard(n, 1, 2) for n in rows.values()) == 101_379_024_656
    assert round(sum(shard(n, 1, 3) for n in rows.values()) / 2 ** 30, 3) == 62.944


# --------------------------------------------------------------------------------------------
# host_seed (--root test mode: files and docker/nvidia state; no users, units or journal)
# --------------------------------------------------------------------------------------------
def seed(host, root, tp=3):
    return subprocess.run([sys.executable, str(SEED), "--host", host, "--root", str(root), "--tp", str(tp)],
                          check=True, capture_output=True, text=True)


def test_host_seed_spark1(tmp_path, dk):
    root = tmp_path / "spark1"
    seed("spark1", root)
    co = root / "home/mia/dsv41-3x-spark"
    site = (LAB / "seed/launcher.env.site").read_text()
    # the report fleet's addresses are replaced by the lab's (here, in --root mode, the host names)
    assert "HEAD_IP=192.168.100.11\n" in site and "192.168." not in (co / ".env").read_text()
    site = site.replace("HEAD_IP=192.168.100.11", "HEAD_IP=spark1").replace(
        "WORKER_IPS='192.168.100.12 192.168.100.13'", "WORKER_IPS='spark2 spark3'").replace(
        "NFS_CLIENTS=192.168.100.0/24", "NFS_CLIENTS='spark2 spark3'")
    assert (co / ".env").read_text() == (LAB / "seed/launcher.env").read_text() + site
    assert (co / ".env").stat().st_mode & 0o777 == 0o600
    assert (co / ".env.example").read_text() == (LAB / "seed/launcher.env.example").read_text()
    # the default launcher variant (the fleet's own family, with its helper), recorded for the lab's users
    assert (co / "start.sh").read_bytes() == launcher_bytes("family")
    assert (co / "scripts/remote.py").read_bytes() == (LAB / "standins/scripts/remote.py").read_bytes()
    assert (root / "etc/dsv41-lab/launcher.variant").read_text() == "family\n"
    assert (co / "adapter").is_dir() and (root / "home/mia/dsv41-engram").is_dir()
    assert not any((root / "home/mia/dsv41-engram").iterdir())
    assert (co / "logs/dsv41.log").read_text() == (LAB / "seed/dsv41.log").read_text()
    caches = list((root / "home/mia/.cache/sglang/flashinfer/autotune/0.6.18/sm121").glob("*/rank_tp0_pp0_dp0.json"))
    assert len(caches) == 1
    nv = json.loads((root / "var/lib/lab-nvidia/state.json").read_text())
    assert nv["locked_clocks"] == {"min": 0, "max": 2200}
    unit = (root / "etc/systemd/system/nvidia-clock-lock.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-smi -lgc 0,2200" in unit and "Type=oneshot" in unit
    state = str(root / "var/lib/lab-docker")
    names = dk("ps", "-a", "--format", "{{.Names}} {{.State}}", extra_env={"LAB_DOCKER_STATE_DIR": state}).stdout
    assert "dsv41-head exited" in names and len(names.splitlines()) <= 3
    mounts = json.loads(dk("inspect", "-f", "{{json .Mounts}}", "dsv41-head",
                           extra_env={"LAB_DOCKER_STATE_DIR": state}).stdout)
    assert [m["Source"] for m in mounts if m["Destination"] == "/engram"] == ["/home/mia/dsv41-engram"]
    out, err = logs(dk, "dsv41-head", extra_env={"LAB_DOCKER_STATE_DIR": state})
    assert out == "Ready: API on port 8888\n" * 2, "the print() lines of the two saved boots"
    assert len((out + err).split("\n")) == len((LAB / "seed/dsv41.log").read_bytes().split(b"\n"))
    assert err.count("] server_args={") == 2 and "Ready:" not in err
    # each record carries the time of its line; lines without a prefix follow the previous one
    ts_out, ts_err = logs(dk, "dsv41-head", "-t", extra_env={"LAB_DOCKER_STATE_DIR": state})
    assert ts_err.startswith("2026-09-23T21:12:04.000000000Z [2026-09-23 21:12:04] server_args={")
    assert re.search(r"^2026-09-24T02:51:0\d\.\d{9}Z Ready: API on port 8888$", ts_out, re.M)
    # each saved marker (17 KB, as the real head's) is two json-file records, as docker's copier cuts it
    recs = [json.loads(ln) for ln in (root / "var/lib/lab-docker/logs/dsv41-head.log").read_text().splitlines()]
    cut = [r for r in recs if not r["log"].endswith("\n")]
    assert len(cut) == 2 and all(len(r["log"].encode()) == 16384 and "] server_args={" in r["log"] for r in cut)
    inside = re.findall(r"(?<=[^\n])\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ", ts_err)
    assert len(inside) == 2, "-t stamps each marker's second part inside its line"
    (im,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3", extra_env={"LAB_DOCKER_STATE_DIR": state}).stdout)
    check_engine_image(im)
    assert im["Created"] == "2026-09-19T22:41:07.000000000Z"
    # adapter/: the seven local adapters from lab/seed/adapters and the report's sitecustomize.py
    # (no autotune_keep, no tp4/)
    adir = co / "adapter"
    assert sorted(p.name for p in adir.iterdir()) == sorted([n + ".py" for n in LOCAL_ADAPTERS] + ["sitecustomize.py"])
    for f in adir.iterdir():
        source = REPORT_HOOK if f.name == "sitecustomize.py" else ADAPTERS / f.name
        assert f.read_bytes() == source.read_bytes() and f.stat().st_mode & 0o777 == 0o644
    # the image is built from that checkout
    rootfs = root / "var/lib/lab-docker/images" / im["Id"][7:] / "rootfs"
    assert sorted(p.name for p in (rootfs / "sgl-workspace/adapter").iterdir()) == sorted(p.name for p in adir.iterdir())
    env = {"LAB_DOCKER_STATE_DIR": state}
    out = dk("run", "--rm", "--entrypoint", "sha256sum", "dsv41-sglang:tp3", "/sgl-workspace/adapter/wo_a_w8.py",
             extra_env=env).stdout
    assert out == "%s  /sgl-workspace/adapter/wo_a_w8.py\n" % sha(ADAPTERS / "wo_a_w8.py")
    assert dk("inspect", "-f", "{{.Image}}", "dsv41-head", extra_env=env).stdout.strip() == im["Id"]
    # a rebuild from the unchanged checkout is the same image
    assert dk("build", "-q", "-t", "dsv41-sglang:tp3", str(co), extra_env=env).stdout.strip() == im["Id"]
    # re-seeding leaves adapter files and an image the roles changed alone
    shutil.copy(ADAPTERS / "autotune_keep.py", adir / "autotune_keep.py")
    (adir / "sitecustomize.py").write_text(REPORT_HOOK.read_text() + "# role edit\n")
    new_id = dk("build", "-q", "-t", "dsv41-sglang:tp3", str(co), extra_env=env).stdout.strip()
    (adir / "draft_tau.py").unlink()
    seed("spark1", root)
    assert (adir / "sitecustomize.py").read_text().endswith("# role edit\n") and (adir / "autotune_keep.py").is_file()
    assert (adir / "draft_tau.py").read_bytes() == (ADAPTERS / "draft_tau.py").read_bytes(), "missing ones restored"
    (im2,) = json.loads(dk("image", "inspect", "dsv41-sglang:tp3", extra_env=env).stdout)
    assert im2["Id"] == new_id and im2["Config"]["Labels"] == ENGINE_LABELS


@pytest.mark.parametrize("variant", ["extra_env", "printf_array", "indirect", "family", "legacy"])
def test_host_seed_launcher_variant_only(tmp_path, variant):
    root = tmp_path / "spark2"
    subprocess.run([sys.executable, str(SEED), "--host", "spark2", "--root", str(root), "--launcher-only",
                    "--launcher-variant", variant], check=True, capture_output=True, text=True)
    start = root / "home/zurih/dsv41-3x-spark/start.sh"
    assert start.read_bytes() == launcher_bytes(variant) and start.stat().st_mode & 0o777 == 0o755
    assert (root / "etc/dsv41-lab/launcher.variant").read_text() == variant + "\n"
    assert not (root / "home/zurih/dsv41-3x-spark/adapter").exists(), "the launcher only"
    bad = subprocess.run([sys.executable, str(SEED), "--host", "spark2", "--root", str(root), "--launcher-variant",
                          "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


@pytest.mark.parametrize("host, user", [("spark1", "mia"), ("spark2", "zurih")])
def test_host_seed_family_variant_helper_and_home_paths(tmp_path, host, user):
    """The family launcher's scripts/remote.py beside start.sh, and its $HOME defaults on every host, in the
    login user's own home only (a worker's string expands $HOME on the worker: nothing at the head user's path)."""
    root = tmp_path / host
    args = [sys.executable, str(SEED), "--host", host, "--root", str(root), "--launcher-only", "--launcher-variant"]
    subprocess.run(args + ["family"], check=True, capture_output=True, text=True)
    helper = root / f"home/{user}/dsv41-3x-spark/scripts/remote.py"
    assert helper.read_bytes() == (LAB / "standins/scripts/remote.py").read_bytes()
    assert helper.stat().st_mode & 0o777 == 0o755
    home = f"home/{user}"
    assert os.readlink(root / home / "NewModels") == "/srv/models", "NewModels/DeepSeek-V4.1-Flash is the lab's"
    nccl = root / home / "nccl-2.30.7"
    assert nccl.is_dir() and not any(nccl.iterdir())
    if user != "mia":
        assert not (root / "home/mia").exists()
    # again: nothing changes; a NewModels that is a real directory is left alone
    (root / f"home/{user}/NewModels").unlink()
    (root / f"home/{user}/NewModels").mkdir()
    out = subprocess.run(args + ["family"], check=True, capture_output=True, text=True).stdout
    assert (root / f"home/{user}/NewModels").is_dir() and "is not a symlink: left alone" in out
    # another variant installs no helper and no home paths
    other = tmp_path / "other"
    subprocess.run([*args[:5], str(other), *args[6:], "explicit"], check=True, capture_output=True, text=True)
    assert not (other / f"home/{user}/dsv41-3x-spark/scripts").exists() and not (other / "home/mia/NewModels").exists()


def test_host_seed_spark2_tp2_shards(tmp_path):
    root = tmp_path / "spark2"
    seed("spark2", root)
    d = root / "home/zurih/dsv41-engram"
    total = 0
    for layer, n in ((1, 384006168), (14, 384016684)):
        f = d / ("engram-l%d-r1of2.bin" % layer)
        with open(f, "rb") as fh:
            magic, lay, lo, hi, rows, rb = struct.unpack("<6Q", fh.read(48))
            rest = fh.read(4096 - 48)
        assert (magic, lay, lo, hi, rows, rb) == (0x31344E4531565344, layer, n // 2, n, n, 264)
        assert rest == b"\0" * (4096 - 48)
        assert f.stat().st_size == 4096 + (hi - lo) * 264
        total += f.stat().st_size
    assert total == 101_379_024_656
    assert (root / "home/zurih/dsv41-3x-spark/engram").is_dir()
    assert (root / "data/dsv41-engram").is_dir()
    assert list((root / "home/zurih/.cache").rglob("rank_tp1_pp0_dp0.json"))
    # idempotent: the second run leaves the shards (same inode, same content)
    ino = (d / "engram-l1-r1of2.bin").stat().st_ino
    seed("spark2", root)
    assert (d / "engram-l1-r1of2.bin").stat().st_ino == ino


def test_host_seed_spark3_and_reseed(tmp_path, dk):
    root = tmp_path / "spark3"
    seed("spark3", root)
    state = {"LAB_DOCKER_STATE_DIR": str(root / "var/lib/lab-docker")}
    running = dk("ps", "--format", "{{.Names}}", extra_env=state).stdout.split()
    assert len(running) == 19 and "dsv41-worker" not in running
    owners = [dict(kv.split("=", 1) for kv in labels.split(","))["owner"] for labels in
              dk("ps", "--filter", "label=owner", "--format", "{{.Labels}}", extra_env=state).stdout.split()]
    assert len(owners) == 12 and set(owners) <= {"mia", "zurih", "ops"}
    for rec in map(json.loads, dk("ps", "--format", "{{json .}}", extra_env=state).stdout.splitlines()):
        assert rec["CreatedAt"] < "2026-09-24" and rec["State"] == "running"
    mounts = json.loads(dk("inspect", "-f", "{{json .Mounts}}", "dsv41-worker", extra_env=state).stdout)
    assert [m["Source"] for m in mounts if m["Destination"] == "/engram"] == ["/home/zurih/dsv41-3x-spark/engram"]
    units = root / "etc/systemd/system"
    assert "Alias=display-manager.service" in (units / "gdm.service").read_text()
    assert "User=zurih" in (units / "gpu-dashboard.service").read_text()
    tactics = json.loads(next((root / "home/zurih/.cache").rglob("rank_tp2_pp0_dp0.json")).read_text())["tactics"]
    assert tactics
    # a role paused a container, added its own and the launcher runs the worker; re-seeding restores
    # the seeded containers and leaves the rest alone
    dk("pause", "jupyterlab", extra_env=state)
    dk("run", "-d", "--name", "extra", "busybox:1", extra_env=state)
    dk("rm", "-f", "dsv41-worker", extra_env=state)
    dk("run", "-d", "--name", "dsv41-worker", "--network", "host", "dsv41-sglang:tp3", extra_env=state)
    (root / "home/zurih/dsv41-3x-spark/engram/engram-l1-r2of3.bin").write_bytes(b"packed")
    seed("spark3", root)
    states = dict(ln.split() for ln in dk("ps", "-a", "--format", "{{.Names}} {{.State}}", extra_env=state).stdout.splitlines())
    assert states["jupyterlab"] == "running" and states["extra"] == "running"
    assert states["dsv41-worker"] == "running"
    assert (root / "home/zurih/dsv41-3x-spark/engram/engram-l1-r2of3.bin").read_bytes() == b"packed"
    dk("rm", "-f", "dsv41-worker", extra_env=state)


def test_host_seed_tp4_lab_head_and_fourth_rank(tmp_path, dk):
    """--tp 4: the TP4 lab's hosts. The head's .env is the TP4 baseline with the lab's four addresses, the checkout
    carries the downstream TP4 wo_a_w8, the serving records run TP4 settings; none of the TP3 report's
    particulars (no saved TP3 boot log, no TP2 shards, no second tenant); spark4 is rank 3."""
    root = tmp_path / "spark1"
    seed("spark1", root, tp=4)
    co = root / "home/mia/dsv41-3x-spark"
    text = (co / ".env").read_text()
    assert text.startswith((LAB / "seed/launcher-tp4.env").read_text())
    assert "WORKER_IPS='spark2 spark3 spark4'\n" in text and "192.168." not in text
    assert "TP_SIZE=4\n" in text and "DSV41_SHARED_PAD_K=1\n" in text and "MAX_RUNNING_REQUESTS=16\n" in text
    assert (co / "adapter/wo_a_w8.py").read_bytes() == (ADAPTERS / "tp4/wo_a_w8.py").read_bytes()
    assert not (co / "logs/dsv41.log").exists()
    assert (root / "etc/dsv41-lab/fleet.tp").read_text() == "4\n"
    state = {"LAB_DOCKER_STATE_DIR": str(root / "var/lib/lab-docker")}
    (rec,) = json.loads(dk("inspect", "dsv41-head", extra_env=state).stdout)
    assert rec["Config"]["Image"] == "dsv41-sglang:tp4"
    cmd = rec["Config"]["Cmd"]
    assert cmd[cmd.index("--tp") + 1] == "4" and cmd[cmd.index("--max-total-tokens") + 1] == "8000000"
    out, err = logs(dk, "dsv41-head", extra_env=state)
    assert out == err == "", "no saved TP3 boots on a TP4 head"
    worker = tmp_path / "spark4"
    seed("spark4", worker, tp=4)
    assert json.loads(next((worker / "home/zurih/.cache").rglob("rank_tp3_pp0_dp0.json")).read_text())["tp_size"] == 4
    assert not (worker / "home/zurih/dsv41-engram").exists()
    running = dk("ps", "--format", "{{.Names}}", extra_env={"LAB_DOCKER_STATE_DIR": str(worker / "var/lib/lab-docker")})
    assert running.stdout.split() == ["node-exporter"]
    bad = subprocess.run([sys.executable, str(SEED), "--host", "spark4", "--root", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "spark4 is not a host of the TP3 lab" in bad.stderr


def test_saved_boot_log_latest_boot():
    """lab/seed/dsv41.log: the head's saved log of the report state, in the real engine's format."""
    text = (LAB / "seed/dsv41.log").read_bytes().decode()  # not read_text(): it turns tqdm's \r into \n
    lines = text.split("\n")[:-1]
    markers = [i for i, ln in enumerate(lines) if re.match(r"^\[[\d: -]{19}\] server_args=\{", ln)]
    assert len(markers) == 2, "an earlier boot, then the report's boot"
    for i in markers:
        args = ast.literal_eval(lines[i].split("] server_args=", 1)[1])
        assert args["max_total_tokens"] == 750000 and args["node_rank"] == 0 and args["page_size"] == 256
        assert args["api_key"] == "[REDACTED]" and args["tp_size"] == 3
        assert 16_800 <= len(lines[i].encode()) <= 17_400, "the real head's marker is 17,130 bytes (over 16 KiB)"
    earlier, latest = "\n".join(lines[markers[0]:markers[1]]), "\n".join(lines[markers[1]:])
    assert latest.count(DISAGREE) == 2 and earlier.count(DISAGREE) == 1
    pools = re.findall(r"\] DSV4 pool sizes: full=(\d+), ", latest)
    assert pools == ["491520", "491520"], "printed twice; the last is what was allocated"
    assert ("DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, "
            "c128_state_fixed=0.00 GB, swa_fixed=0.28 GB, full_token=491520") in latest
    assert "WARNING: max_total_tokens=750000 is larger than the profiled value 491520." in latest
    assert re.search(r"\] max_total_num_tokens=491520, chunked_prefill_size=1024, max_prefill_tokens=16384, "
                     r"max_running_requests=4, context_len=1048576, available_gpu_mem=\d+\.\d\d GB$", latest, re.M)
    assert re.findall(r"\] DSV4 pool sizes: full=(\d+), ", earlier)[-1] == "565248", "the earlier boot differs"
    for layer, hi in ((1, 128002056), (14, 128005561)):
        assert (f"] Exact nvme Engram layer={layer} rank=0 rows=[0,{hi}) cache=0.0GiB (0 slots, 4-way, 0.0% of owned "
                "rows) scales=0.0GiB io_threads=96 packed=False") in latest
    assert "packed=True" not in text
    runs = re.findall(r"Running FlashInfer autotune with cache: (\S+)", latest)
    assert runs == ["/root/.cache/sglang/flashinfer/autotune/0.6.18/sm121/6779985a30fe55c4/rank_tp0_pp0_dp0.json"] * 2
    assert latest.count("FlashInfer autotune completed.") == 2
    glued = [ln for ln in latest.split("\n") if ln.startswith("Capturing batches")]
    assert len(glued) == 2 and all("\r" in ln and "\x1b[A[2026-09-24 " in ln and DISAGREE in ln for ln in glued)
    assert "\nReady: API on port 8888\n" in latest and "TP1" not in text and "TP2" not in text
    assert re.search(r"\] Decode batch, #running-req: 1, #full token: \d+, .*accept len: \d\.\d\d, accept rate: \d\.\d\d, ",
                     latest)


def test_labstate_locks_reads_and_replaces_whole_files(tmp_path):
    """The stand-ins' one state library: an exclusive lock, a missing file reads as the default, and a
    replaced file is whole (no temporary file left beside it)."""
    import fcntl
    labstate = load(DOCKER.parent / "labstate.py", "lab_labstate_t")
    path = tmp_path / "containers.json"
    assert labstate.read_json(path, []) == []
    with labstate.locked(tmp_path):
        with open(tmp_path / labstate.LOCK_NAME, "a+") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        labstate.write_json(path, [{"Name": "web"}], mode=0o664)
    assert labstate.read_json(path, []) == [{"Name": "web"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [labstate.LOCK_NAME, "containers.json"]
    assert path.stat().st_mode & 0o777 == 0o664
    path.write_text("{broken")
    with pytest.raises(ValueError):
        labstate.read_json(path, [])


def test_docker_devices_as_docker_shows_them_and_the_device_knob(dk, tmp_path):
    """HostConfig.Devices as docker inspect prints them (stage I's DRM probe reads the running container's), from
    --device flags and from the lab knob that stands for a launch path passing the DRM node."""
    dk("run", "-d", "--name", "dsv41-head", "--device", "/dev/dri/renderD128", "dsv41-sglang:tp3")
    devices = json.loads(dk("inspect", "--format", "{{json .HostConfig.Devices}}", "dsv41-head").stdout)
    assert devices == [{"PathOnHost": "/dev/dri/renderD128", "PathInContainer": "/dev/dri/renderD128",
                        "CgroupPermissions": "rwm"}]
    knob = tmp_path / "devices"
    knob.write_text("# the DRM node on both launch paths\n/dev/dri/renderD128:/dev/dri/renderD128:rw\n")
    dk("run", "-d", "--name", "dsv41-worker", "dsv41-sglang:tp3", extra_env={"LAB_DOCKER_RUN_DEVICES": str(knob)})
    hc = json.loads(dk("inspect", "--format", "{{json .HostConfig}}", "dsv41-worker").stdout)
    assert hc["Devices"] == [{"PathOnHost": "/dev/dri/renderD128", "PathInContainer": "/dev/dri/renderD128",
                              "CgroupPermissions": "rw"}]
    dk("run", "-d", "--name", "other", "dsv41-sglang:tp3", extra_env={"LAB_DOCKER_RUN_DEVICES": str(tmp_path / "none")})
    assert json.loads(dk("inspect", "--format", "{{json .HostConfig.Devices}}", "other").stdout) == []


def test_host_seed_models_the_drm_side_and_removes_the_device_knob(tmp_path):
    root = tmp_path / "spark2"
    (root / "etc/dsv41-lab").mkdir(parents=True)
    (root / "etc/dsv41-lab/docker-run-devices").write_text("/dev/dri/renderD128\n")
    out = seed("spark2", root).stdout
    assert (root / "var/lib/lab-sys/module/nvidia_drm/parameters/modeset").read_text() == "Y\n"
    assert not (root / "etc/dsv41-lab/docker-run-devices").exists(), "no container has the node after a seed"
    assert "(test root) skipped: mknod /dev/dri/renderD128" in out
