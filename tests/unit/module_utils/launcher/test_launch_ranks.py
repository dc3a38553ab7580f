"""Every rank expected is started, and only engine containers are ranks (module_utils/launcher/ranks.py through
launch_record.effective_launch and the launcher_effective module)."""
import json
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.launcher import effective as R
from ansible.module_utils.launcher import sandbox as S

import launcher_effective
from launcher_fixtures import API_KEY, BASELINE_ENV, ROOT, checkout
from modrun import run_module

# The fleet's own family: each worker started through the checkout's helper, which drives ssh itself; the
# helper runs for real in the sandbox, so its ssh reaches the stand-in and the worker's command string runs
# as sshd would run it. With NFS_SHARE=1 an exporter container (no rank, another image) starts first on the head.
HELPER_LAUNCHER = r'''#!/usr/bin/env bash
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
set -a
source "$ROOT/.env"
set +a
IMAGE="${IMAGE:-dsv41-sglang:tp3}"
WORKER_USER="${WORKER_USER:-zurih}"
WORKER_HOSTS="${WORKER_HOSTS:-spark2 spark3}"
ENGRAM_DIR="${ENGRAM_DIR:-$HOME/dsv41-engram}"
NFS_SHARE="${NFS_SHARE:-0}"
TP_SIZE="${TP_SIZE:-3}"
engine_args() {
  printf '%s ' --model-path /models/DeepSeek-V4.1-Flash --tp-size "$TP_SIZE" --node-rank "$1" @NNODES@
}
cmd_serve() {
  local rank=0 h
  [ "$(docker image inspect -f '{{.Architecture}}' "$IMAGE")" = arm64 ] || { echo "expected arm64 image"; exit 1; }
  docker rm -f dsv41-head dsv41-nfs >/dev/null 2>&1 || true
  if [ "$NFS_SHARE" = 1 ]; then
    docker run -d --name dsv41-nfs --privileged --network host -v "$ENGRAM_DIR:/export:ro" \
      -e SHARED_DIRECTORY=/export erichough/nfs-server:2.2.1 >/dev/null
  fi
  for h in $WORKER_HOSTS; do
    rank=$((rank + 1))
    python3 scripts/remote.py "$WORKER_USER@$h" "bash -lc 'docker rm -f dsv41-worker >/dev/null 2>&1; \
docker run -d --name dsv41-worker --network host -v \$HOME/dsv41-engram:/engram -e NODE_RANK=$rank \
-e API_KEY=$API_KEY $IMAGE run $(engine_args $rank)'"
  done
  docker run -d --name dsv41-head --network host -v "$ENGRAM_DIR:/engram" -e NODE_RANK=0 -e "API_KEY=$API_KEY" \
    "$IMAGE" run $(engine_args 0) >/dev/null
  until docker logs dsv41-head 2>&1 | grep -q "^Ready: API on port 8888"; do sleep 10; done
}
case "${1:-serve}" in
  serve) cmd_serve ;;
esac
'''


HELPERS = {
    # drives ssh with the standard library, as the family's helper does when pexpect is not wanted
    "ssh": "import subprocess, sys\n"
           "sys.exit(subprocess.call(['ssh', '-o', 'BatchMode=yes', sys.argv[1], sys.argv[2]]))\n",
    # a package the head's python3 lacks (the family's helper needs pexpect; any absent name shows the same)
    "pexpect": "import dsv41_absent_ssh_driver  # drives ssh to the worker\n",
    # a helper that loses the worker: it reaches no ssh and says nothing (a wrong host file, a typo)
    "silent": "import sys\nsys.exit(0)\n",
}


def helper_checkout(tmp_path, nnodes=True, env=BASELINE_ENV, helper="silent"):
    home = tmp_path / "home" / "mia"
    co = home / "dsv41-3x-spark"
    (co / "scripts").mkdir(parents=True)
    (co / "scripts" / "remote.py").write_text(HELPERS[helper])
    (co / "start.sh").write_text(HELPER_LAUNCHER.replace("@NNODES@", '--nnodes "$TP_SIZE"' if nnodes else ""))
    (co / ".env").write_text(env)
    return str(co / "start.sh"), str(home)


def with_exporter(tmp_path, image="itsthenetwork/nfs-server-alpine:12", args=""):
    """The explicit fixture launcher, starting an NFS exporter on the head before the workers."""
    script, home = checkout(tmp_path, "explicit")
    text = Path(script).read_text()
    anchor = '  docker rm -f "$HEAD_CTN" >/dev/null 2>&1 || true\n'
    assert anchor in text
    exporter = ('  docker run -d --name dsv41-nfs --privileged --network host -v "$ENGRAM_DIR:/export:ro" '
                '-e SHARED_DIRECTORY=/export %s %s >/dev/null\n' % (image, args))
    Path(script).write_text(text.replace(anchor, anchor + exporter))
    return script, home


def test_a_worker_started_through_the_helper_fails_naming_each_missing_rank_and_the_helper_command(tmp_path):
    script, home = helper_checkout(tmp_path)
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, expected_ranks=3, docker_client=False)
    msg = str(err.value)
    assert "starts 1 of the 3 engine ranks expected (expected_ranks 3)" in msg
    assert "rank 1 (spark2) never reached a docker run; the last command aimed at it: " \
           "python3 scripts/remote.py zurih@spark2 'bash -lc" in msg
    assert "rank 2 (spark3) never reached a docker run; the last command aimed at it: " \
           "python3 scripts/remote.py zurih@spark3 'bash -lc" in msg
    assert API_KEY not in msg


def test_a_worker_started_through_the_checkouts_own_helper_is_that_workers_rank(tmp_path):
    script, home = helper_checkout(tmp_path, helper="ssh")
    got = R.effective_launch(script, head="spark1", home=home, expected_ranks=3, docker_client=False)
    assert [(c["host"], c["rank"]) for c in got["containers"]] == [("spark2", 1), ("spark3", 2), ("spark1", 0)]
    # \$HOME in the worker's string is the worker user's home (sshd's), not the head's
    assert [c["engram_source"] for c in got["containers"][:2]] == ["/home/zurih/dsv41-engram"] * 2
    assert all(c["env"]["API_KEY"] == API_KEY for c in got["containers"])


def test_a_helper_needing_a_package_the_head_lacks_fails_naming_it(tmp_path):
    script, home = helper_checkout(tmp_path, helper="pexpect")
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, expected_ranks=3, docker_client=False)
    assert ("the launcher's Python helper cannot import dsv41_absent_ssh_driver on this host: install "
            "dsv41_absent_ssh_driver") in str(err.value)


def test_without_a_count_the_engines_own_nnodes_is_the_count(tmp_path):
    script, home = helper_checkout(tmp_path)
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, docker_client=False)
    assert "(the engine's own --nnodes 3 on spark1/dsv41-head)" in str(err.value)
    assert "rank 1 (spark2)" in str(err.value) and "rank 2 (spark3)" in str(err.value)


def test_without_any_count_the_hosts_left_out_are_warnings(tmp_path):
    script, home = helper_checkout(tmp_path, nnodes=False)
    got = R.effective_launch(script, head="spark1", home=home, docker_client=False)
    assert [(c["host"], c["rank"]) for c in got["containers"]] == [("spark1", 0)]
    left = [w for w in got["warnings"] if w.startswith("commands were aimed at")]
    assert [w.split()[4] for w in left] == ["spark2", "spark3"]
    assert "python3 scripts/remote.py zurih@spark3" in left[1] and API_KEY not in json.dumps(left)


def test_the_module_fails_naming_the_missing_ranks(tmp_path):
    script, home = helper_checkout(tmp_path, nnodes=False)
    res = run_module(launcher_effective.main, {"launcher": script, "home": home, "head_host": "spark1",
                                               "expected_ranks": 3})
    assert res["failed"] and res["changed"] is False
    assert "rank 1 (spark2) never reached a docker run" in res["msg"] and "rank 2 (spark3)" in res["msg"]
    assert API_KEY not in json.dumps(res)
    res = run_module(launcher_effective.main, {"launcher": script, "home": home, "expected_ranks": 0})
    assert res["failed"] and "expected_ranks 0 is not a positive number" in res["msg"]


def test_a_missing_rank_over_ssh_names_the_ssh_command(tmp_path):
    home = tmp_path / "home" / "mia"
    (home / "co").mkdir(parents=True)
    (home / "co" / "start.sh").write_text(
        "#!/usr/bin/env bash\nssh -o BatchMode=yes zurih@spark2 'docker pull img:1'\n"
        "docker run -d --name dsv41-head -e NODE_RANK=0 img:1 run --nnodes 3\n")
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(str(home / "co" / "start.sh"), head="spark1", home=str(home), docker_client=False)
    msg = str(err.value)
    assert "rank 1 (spark2) never reached a docker run; the last command aimed at it: " \
           "ssh -o BatchMode=yes zurih@spark2 'docker pull img:1'" in msg
    assert "rank 2 (host unknown: no ssh or helper command named one)" in msg
    assert "stand-in" not in msg          # ssh's command string is evaluated: nothing to add


@pytest.mark.parametrize("image,args", [("itsthenetwork/nfs-server-alpine:12", ""),
                                        ('"$IMAGE"', "exportfs -f")])
def test_an_exporter_on_the_head_is_auxiliary_not_a_second_rank_0(tmp_path, image, args):
    script, home = with_exporter(tmp_path, image, args)
    got = R.effective_launch(script, head="spark1", home=home, expected_ranks=3)
    assert [(c["host"], c["name"], c["role"], c["rank"]) for c in got["containers"]] == [
        ("spark2", "dsv41-worker", "worker", 1), ("spark3", "dsv41-worker", "worker", 2),
        ("spark1", "dsv41-head", "head", 0)]
    assert [(c["host"], c["name"], c["role"], c["rank"], c["order"]) for c in got["auxiliary"]] == [
        ("spark1", "dsv41-nfs", "auxiliary", None, 1)]
    assert sorted(R.summary(got)) == ["0", "1", "2"]
    assert R.masked(got)["auxiliary"][0]["env"] == {"SHARED_DIRECTORY": "/export"}


def test_the_helper_familys_exporter_is_auxiliary_too(tmp_path):
    script, home = helper_checkout(tmp_path, nnodes=False, env=BASELINE_ENV + "NFS_SHARE=1\n")
    got = R.effective_launch(script, head="spark1", home=home, docker_client=False)
    assert [(c["name"], c["rank"]) for c in got["containers"]] == [("dsv41-head", 0)]
    assert [c["name"] for c in got["auxiliary"]] == ["dsv41-nfs"]
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, docker_client=False, expected_ranks=3)
    assert "starts 1 of the 3 engine ranks" in str(err.value)


def test_the_plain_explicit_launch_is_still_exact(tmp_path):
    script, home = checkout(tmp_path, "explicit", BASELINE_ENV + "WORKER_ENGRAM_DIR=$HOME/engram\n")
    got = R.effective_launch(script, head="spark1", home=home, expected_ranks=3)
    assert [(c["host"], c["name"], c["role"], c["rank"], c["order"]) for c in got["containers"]] == [
        ("spark2", "dsv41-worker", "worker", 1, 1), ("spark3", "dsv41-worker", "worker", 2, 2),
        ("spark1", "dsv41-head", "head", 0, 3)]
    assert got["auxiliary"] == [] and got["warnings"] == []
    assert [c["engram_source"] for c in got["containers"]] == [home + "/engram", home + "/engram",
                                                               "/home/mia/dsv41-engram"]
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home, expected_ranks=4)
    assert "starts 3 of the 4 engine ranks expected (expected_ranks 4): rank 3 (host unknown" in str(err.value)


def _tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))


def test_every_role_that_evaluates_the_launch_passes_the_inventorys_tp_size():
    found = []
    for path in sorted((Path(ROOT) / "roles").glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            args = task.get("launcher_effective")
            if args is not None:
                found.append((path.relative_to(ROOT).as_posix(), args.get("expected_ranks")))
    assert len(found) >= 3 and all(v == "{{ preflight_tp_size | int }}" for _, v in found), found
