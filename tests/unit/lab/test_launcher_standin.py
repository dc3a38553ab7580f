"""The launcher stand-in (the explicit variant, assembled from lab/standins/launcher/): serve (the latest boot saved, both streams polled in rounds, the
timeout), status, and build on every node, with fakes and with the docker stand-in.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab_launchers import install_launcher


ROOT = Path(__file__).resolve().parents[3]

ADAPTERS = ROOT / "lab" / "seed" / "adapters"

DOCKER = ROOT / "lab" / "standins" / "docker"


SEED_ENV = ROOT / "lab" / "seed" / "launcher.env"
SITE_ENV = ROOT / "lab" / "seed" / "launcher.env.site"   # appended by the seeder: the .env's undeclared site keys


def seeded_env_text() -> str:
    """The head's .env as the lab seeds it: the rendered baseline, then the site keys."""
    return SEED_ENV.read_text() + SITE_ENV.read_text()


def bash(script: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


@pytest.fixture()
def checkout(tmp_path):
    d = tmp_path / "dsv41-3x-spark"
    d.mkdir()
    install_launcher("explicit", d / "start.sh")
    (d / ".env").write_text(seeded_env_text())
    return d


# docker logs as the real docker returns them: the engine's logging on stderr, its print() lines on stdout.
# The head's log shows its readiness line from the READY_AFTER-th call on (a boot that takes a few rounds).
FAKE_DOCKER = r"""#!/usr/bin/env bash
echo "$(hostname -s 2>/dev/null) docker $*" >> "$CALLS"
case $1 in
  run) for a in "$@"; do [[ $a == API_KEY* ]] && echo "API_KEY-ENV=${API_KEY:-unset}" >> "$CALLS"; done; echo cid ;;
  logs)
    n=$(( $(cat "$CALLS.logs" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$CALLS.logs"
    echo "[2026-01-01 00:00:00] server_args=ServerArgs(old=1)" >&2
    echo "[2026-01-01 00:00:01] Receive: obj=ChatCompletionRequest(messages=[{'content': \"server_args={'x': 1}\"}])" >&2
    echo "[2026-01-01 00:00:02] server_args={'new': 1}" >&2
    echo "[autotune_keep] armed"
    echo "[2026-01-01 00:00:03 TP0 EP0] Exact nvme Engram layer=1 rank=0 rows=[0,10) packed=False" >&2
    echo "Ready: API on port 88889"
    if (( n >= ${READY_AFTER:-1} )); then echo "[2026-01-01 00:00:04] The server is fired up and ready to roll!" >&2; echo "Ready: API on port 8888"; fi ;;
  inspect) if [[ $2 == --format ]]; then echo running; else echo '[{"Mounts":[{"Source":"/src/e","Destination":"/engram"}]}]'; fi ;;
  *) ;;
esac
"""
FAKE_SSH = r"""#!/usr/bin/env bash
echo "ssh $*" >> "$CALLS"
bash -c "${@: -1}"
"""


def serve_env(tmp_path, **extra):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls.txt"), "HOME": str(tmp_path),
            "LAB_LAUNCHER_KNOBS": str(tmp_path / "no-launcher.env"), "LAB_SERVE_POLL_SECONDS": "0", **extra}


def test_serve_saves_the_latest_boot_and_status_reads_the_mounts(checkout, tmp_path):
    env = serve_env(tmp_path)
    calls = tmp_path / "calls.txt"
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [l for l in calls.read_text().splitlines() if " docker run " in l and not l.startswith("ssh ")]
    assert len(runs) == 3 and "NODE_RANK=1" in runs[0] and "NODE_RANK=2" in runs[1] and "NODE_RANK=0" in runs[2]
    # the saved log: the latest boot (from the last marker MESSAGE, not the echoed request), both streams
    saved = (checkout / "logs" / "dsv41.log").read_text()
    assert saved.splitlines()[0] == "[2026-01-01 00:00:02] server_args={'new': 1}"
    assert "[autotune_keep] armed" in saved and "Ready: API on port 8888" in saved
    assert "ServerArgs(old=1)" not in saved and "Exact nvme Engram layer=1" in saved
    st = bash("./start.sh status", checkout, env=env)
    assert st.returncode == 0, st.stderr
    assert len(st.stdout.splitlines()) == 3 and "engram=/src/e" in st.stdout and "rank=2" in st.stdout
    assert bash("./start.sh pack", checkout, env=env).returncode == 2


def test_serve_polls_both_streams_in_rounds(checkout, tmp_path):
    env = serve_env(tmp_path, READY_AFTER="3", SERVE_TIMEOUT="5", LAB_SERVE_POLL_SECONDS="1")
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    waits = [l for l in r.stdout.splitlines() if "waiting for the head's Ready line" in l]
    assert waits == ["[start.sh] waiting for the head's Ready line: round 1/5",
                     "[start.sh] waiting for the head's Ready line: round 2/5"], "'Ready: ... 88889' is not port 8888"
    assert (tmp_path / "calls.txt.logs").read_text().strip() == "4", "three polls and the save"


def test_serve_times_out_after_its_rounds(checkout, tmp_path):
    env = serve_env(tmp_path, READY_AFTER="99", SERVE_TIMEOUT="2", LAB_SERVE_POLL_SECONDS="1")
    r = bash("./start.sh serve", checkout, env=env)
    assert r.returncode == 1
    assert "[start.sh] ERROR: head not ready after 2s (2 rounds of 1s); last log lines:" in r.stderr
    assert "Exact nvme Engram layer=1 rank=0" in r.stderr, "the tail shows both streams"


def test_serve_wait_defaults_and_lab_knob(checkout, tmp_path):
    script = "START_SH_LIB_ONLY=1 source ./start.sh; echo $SERVE_TIMEOUT $LAB_SERVE_POLL_SECONDS"
    base = {k: v for k, v in os.environ.items() if k not in ("SERVE_TIMEOUT", "LAB_SERVE_POLL_SECONDS")}
    none = tmp_path / "none.env"
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(none)})
    assert r.stdout.split() == ["3600", "10"], "360 rounds of 10 s, as the real launchers"
    knobs = tmp_path / "launcher.env"
    knobs.write_text("# lab\nLAB_SERVE_POLL_SECONDS=1\n")
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(knobs), "SERVE_TIMEOUT": "900"})
    assert r.stdout.split() == ["900", "1"]
    r = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, text=True,
                       env={**base, "LAB_LAUNCHER_KNOBS": str(knobs), "LAB_SERVE_POLL_SECONDS": "5"})
    assert r.stdout.split() == ["3600", "5"], "the environment wins over the file"


FAKE_BUILD_DOCKER = r"""#!/usr/bin/env bash
echo "${FAKE_HOST:-head} docker $*" >> "$CALLS"
if [[ $1 == build ]]; then
  if [[ ${FAKE_HOST:-head} == "${FAIL_HOST:-none}" ]]; then
    echo "Sending build context to Docker daemon  2kB" ; echo 'ERROR: unable to prepare context: path "x" not found' >&2; exit 1
  fi
  echo "Successfully built 0123456789ab"; echo "Successfully tagged $3"
fi
"""
FAKE_BUILD_SSH = r"""#!/usr/bin/env bash
echo "ssh $*" >> "$CALLS"
host=${@: -2:1}; export FAKE_HOST=${host#*@}
bash -c "${@: -1}"
"""


def fake_bin(tmp_path, docker, ssh):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in (("docker", docker), ("ssh", ssh)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return bindir


def test_build_on_every_node_with_fakes(checkout, tmp_path):
    bindir = fake_bin(tmp_path, FAKE_BUILD_DOCKER, FAKE_BUILD_SSH)
    calls = tmp_path / "calls.txt"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(calls), "HOME": str(tmp_path)}
    r = bash("./start.sh build", checkout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        f"[start.sh] built dsv41-sglang:tp3 on spark1 (rank 0) from {checkout}: image 0123456789ab",
        "[start.sh] built dsv41-sglang:tp3 on spark2 (rank 1) from /home/zurih/dsv41-3x-spark: image 0123456789ab",
        "[start.sh] built dsv41-sglang:tp3 on spark3 (rank 2) from /home/zurih/dsv41-3x-spark: image 0123456789ab"]
    lines = calls.read_text().splitlines()
    assert lines[0] == f"head docker build -t dsv41-sglang:tp3 {checkout}"
    # the seeded .env names the head's ssh identity (a site key): the launcher passes it to ssh
    assert "ssh -o BatchMode=yes -o ConnectTimeout=10 -i /home/mia/.ssh/id_ed25519 zurih@spark2 docker build " \
           "-t dsv41-sglang:tp3 /home/zurih/dsv41-3x-spark" in lines
    assert "spark3 docker build -t dsv41-sglang:tp3 /home/zurih/dsv41-3x-spark" in lines
    # one node fails: the others are still built, exit 1 naming it
    calls.unlink()
    r = bash("./start.sh build", checkout, env={**env, "FAIL_HOST": "spark2"})
    assert r.returncode == 1
    assert "[start.sh] ERROR: build of dsv41-sglang:tp3 failed on spark2 (rank 1): " \
           'ERROR: unable to prepare context: path "x" not found' in r.stderr
    assert r.stderr.rstrip().endswith("[start.sh] ERROR: build failed on: spark2")
    assert "on spark1 (rank 0)" in r.stdout and "on spark3 (rank 2)" in r.stdout
    builds = [l for l in calls.read_text().splitlines() if not l.startswith("ssh ") and " docker build " in l]
    assert [l.split()[0] for l in builds] == ["head", "spark2", "spark3"]
    r = bash("./start.sh build", checkout, env={**env, "FAIL_HOST": "head"})
    assert r.returncode == 1 and "build failed on: spark1" in r.stderr


def test_build_with_the_docker_standin(tmp_path):
    """start.sh build against the real docker stand-in, one state dir per node (no podman)."""
    nodes = {}
    for host, user in (("spark1", "mia"), ("spark2", "zurih"), ("spark3", "zurih")):
        co = tmp_path / host / "home" / user / "dsv41-3x-spark"
        (co / "adapter").mkdir(parents=True)
        for f in ADAPTERS.glob("*.py"):
            if f.name != "autotune_keep.py":
                shutil.copy(f, co / "adapter" / f.name)
        nodes[host] = co
    head = nodes["spark1"]
    install_launcher("explicit", head / "start.sh")
    # WORKER_DIR is one path for all workers; the fake ssh maps its @WORKER@ part to the worker's tree
    env_text = seeded_env_text().replace("WORKER_DIR=/home/zurih/dsv41-3x-spark",
                                         f"WORKER_DIR={tmp_path}/@WORKER@/home/zurih/dsv41-3x-spark")
    assert env_text != seeded_env_text()
    (head / ".env").write_text(env_text)
    # stage B's change on spark3 only: the retention adapter is added there
    shutil.copy(ADAPTERS / "autotune_keep.py", nodes["spark3"] / "adapter" / "autotune_keep.py")
    docker = f"""#!/usr/bin/env bash
export LAB_DOCKER_STATE_DIR={tmp_path}/${{FAKE_HOST:-spark1}}/state
exec {sys.executable} {DOCKER} "$@"
"""
    ssh = r"""#!/usr/bin/env bash
host=${@: -2:1}; export FAKE_HOST=${host#*@}
cmd=${@: -1}
bash -c "${cmd//@WORKER@/$FAKE_HOST}"
"""
    bindir = fake_bin(tmp_path, docker, ssh)
    r = bash("./start.sh build", head, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout + r.stderr
    ids = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"\[start\.sh\] built dsv41-sglang:tp3 on (spark\d) \(rank \d\) from (\S+): image ([0-9a-f]{12})",
                         line)
        assert m, line
        ids[m.group(1)] = m.group(3)
    assert sorted(ids) == ["spark1", "spark2", "spark3"]
    assert ids["spark1"] == ids["spark2"] != ids["spark3"], "same adapters, same image; spark3 differs"
    for host, co in nodes.items():
        images = tmp_path / host / "state" / "images"
        (rootfs,) = [d / "rootfs" for d in images.iterdir() if d.name.startswith(ids[host])]
        assert sorted(p.name for p in (rootfs / "sgl-workspace/adapter").iterdir()) == \
            sorted(p.name for p in (co / "adapter").iterdir())
