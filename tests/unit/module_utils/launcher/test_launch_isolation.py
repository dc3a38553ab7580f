"""The launch sandbox is real isolation (module_utils/launcher/sandbox.py): hostile settings values and
launcher constructs that escaped the former DEBUG-trap guard change nothing on the host and leave no
process, whichever way they run (a worker string, sh -c, bash -lc, bash -p, env -i, an absolute path,
a redirection, a $(...) line in the .env). Each case evaluates the launcher for real on this host."""
import os
import sys

import pytest

from ansible.module_utils.base import process_wait
from ansible.module_utils.launcher import effective as R
from ansible.module_utils.launcher import sandbox as S

from launcher_fixtures import checkout, tree_hash

TAG = "dsv41-escape-%d" % os.getpid()
MARKERS = ["/tmp/%s-%s" % (TAG, n) for n in ("value", "env", "lc", "p", "envi", "redirect")] + [
    "/var/tmp/%s-var" % TAG]
SLEEPS = ("31337", "31338", "31339")

# The family's worker start: the settings value expanded into the worker's command string on the head.
WORKER_LAUNCHER = r"""#!/usr/bin/env bash
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
set -a; source "$ROOT/.env"; set +a
ssh mia@spark2 "docker run -d --name dsv41-worker -e NODE_RANK=1 -e MOE_RUNNER_BACKEND=$MOE_RUNNER_BACKEND img run"
ssh mia@spark3 "bash -lc 'id > /tmp/%(tag)s-lc; docker run -d --name dsv41-worker -e NODE_RANK=2 img run'"
ssh mia@spark3 "bash -p -c 'id > /tmp/%(tag)s-p'; env -i /bin/bash -c 'id > /tmp/%(tag)s-envi'"
ssh mia@spark3 "nohup sleep 31337 >/dev/null 2>&1 & setsid sleep 31338 >/dev/null 2>&1 &"
%(absolute)s
echo pwned > /tmp/%(tag)s-redirect
echo pwned >> "$HOME/.bashrc" 2>/dev/null || true
(sleep 31339 &)
docker run -d --name dsv41-head -e NODE_RANK=0 img run
"""


def _docker():
    return next((p for p in ("/usr/bin/docker", "/usr/local/bin/docker") if os.path.isfile(p)), None)


def _processes(words):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if any(("sleep " + w) in cmd for w in words):
                found.append(cmd)
    return found


@pytest.fixture()
def clean():
    for m in MARKERS:
        if os.path.exists(m):
            os.unlink(m)
    yield
    for m in MARKERS:
        if os.path.exists(m):
            os.unlink(m)


def test_hostile_values_and_constructs_change_nothing_and_leave_no_process(tmp_path, clean):
    home = tmp_path / "home" / "mia"
    co = home / "dsv41-3x-spark"
    co.mkdir(parents=True)
    docker = _docker()
    absolute = ('ssh mia@spark2 "%s rm -f x; %s run -d --name aux busybox"' % (docker, docker)) if docker else ""
    (co / "start.sh").write_text(WORKER_LAUNCHER % {"tag": TAG, "absolute": absolute})
    (home / ".bashrc").write_text("# the user's own\n")
    env = ("MOE_RUNNER_BACKEND=\"b12x;sh -c 'id >/tmp/%s-value'\"\n" % TAG
           + "NOTE=$(touch /tmp/%s-env; touch /var/tmp/%s-var; echo x)\n" % (TAG, TAG))
    (co / ".env").write_text(env)
    before = tree_hash(home)
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="mia", check_ranks=False)
    assert tree_hash(home) == before
    assert [m for m in MARKERS if os.path.exists(m)] == []
    assert _processes(SLEEPS) == []
    # the stand-ins still recorded what the launcher would have started, each on its own host
    names = [(c["host"], c["name"]) for c in got["containers"]]
    assert ("spark2", "dsv41-worker") in names and ("spark3", "dsv41-worker") in names
    assert names[-1] == ("spark1", "dsv41-head")
    if docker:      # a rankless container is auxiliary, never an engine rank
        assert [(c["host"], c["name"]) for c in got["auxiliary"]] == [("spark2", "aux")]
        assert ("docker", ["rm", "-f", "x"]) in [(c["command"], c["argv"]) for c in got["calls"]
                                                 if c["host"] == "spark2"]


def test_the_worker_runs_in_its_own_environment_and_home_not_the_heads(tmp_path):
    home = tmp_path / "home" / "mia"
    co = home / "dsv41-3x-spark"
    co.mkdir(parents=True)
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nexport HEAD_ONLY=from-the-head\n"
        "ssh zurih@spark2 'docker run -d --name w -e HEAD_ONLY -e WHO=$(whoami)-$(hostname) -e HOME=$HOME img'\n"
        "docker run -d --name h -e HEAD_ONLY -e WHO=$(hostname) img\n")
    got = R.effective_launch(str(co / "start.sh"), head="spark1", head_hostname="spark1", home=str(home),
                             user="mia", check_ranks=False)
    worker, head = got["containers"]
    assert worker["host"] == "spark2" and "HEAD_ONLY" not in worker["env"]     # sshd gives a fresh environment
    assert worker["env"]["WHO"].endswith("-spark2") and worker["env"]["HOME"] == "/home/zurih"
    assert head["env"]["HEAD_ONLY"] == "from-the-head" and head["env"]["WHO"] == "spark1"


def test_no_bubblewrap_is_a_clear_refusal(tmp_path, monkeypatch):
    script, home = checkout(tmp_path)
    monkeypatch.setattr(S, "_which", lambda name: None if name == "bwrap" else "/bin/" + name)
    with pytest.raises(S.LaunchError) as err:
        R.effective_launch(script, head="spark1", home=home)
    assert "bwrap is not installed" in str(err.value) and "bubblewrap" in str(err.value)


def test_a_workers_own_home_is_writable_and_device_names_exist_as_on_the_head(tmp_path, monkeypatch):
    # the family's worker ensures ~/.ssh/authorized_keys and tests /dev/infiniband before its docker run
    fake_dev = tmp_path / "dev"
    (fake_dev / "infiniband").mkdir(parents=True)
    (fake_dev / "infiniband" / "uverbs0").write_text("")
    (fake_dev / "nvidia0").write_text("")
    views = S.Sandbox._device_views(str(fake_dev))
    monkeypatch.setattr(S.Sandbox, "_device_views", staticmethod(lambda root="/dev": views))
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nset -e\n"
        "ssh zurih@spark2 \"bash -lc 'mkdir -p ~/.ssh && touch ~/.ssh/authorized_keys && "
        "echo key >> ~/.ssh/authorized_keys && test -d /dev/infiniband && test -c /dev/infiniband/uverbs0 && "
        "test -c /dev/nvidia0 && docker run -d --name w -e NODE_RANK=1 img'\"\n"
        "docker run -d --name h -e NODE_RANK=0 img\n")
    existed = os.path.exists("/home/zurih")
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="mia", expected_ranks=2)
    assert [(c["host"], c["name"]) for c in got["containers"]] == [("spark2", "w"), ("spark1", "h")]
    assert os.path.exists("/home/zurih") == existed       # the worker's home was the sandbox's, gone with it


def test_the_nfs_readiness_check_answers_once_the_exporter_runs(tmp_path):
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nset -e\n"
        "if rpcinfo -t 127.0.0.1 nfs 4 >/dev/null 2>&1; then echo up-before; fi\n"
        "docker run -d --name dsv41-nfs --privileged erichough/nfs-server:2.2.1\n"
        "timeout 3 rpcinfo -t 127.0.0.1 nfs 4 >/dev/null && echo up-after\n"
        "docker run -d --name h -e NODE_RANK=0 img\n")
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="mia", expected_ranks=1)
    assert [w for w in got["stdout"].split() if w.startswith("up-")] == ["up-after"]
    assert [c["name"] for c in got["auxiliary"]] == ["dsv41-nfs"]


def test_a_worker_sharing_the_head_users_home_writes_its_own(tmp_path):
    # cqingwang's ring profile: the same user on every node, the worker making ~/dsv41-4x-spark/state
    home = tmp_path / "home" / "spark"
    co = home / "co"
    co.mkdir(parents=True)
    (home / "models").mkdir()
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nset -e\n"
        "ssh spark@192.168.1.56 \"bash -lc 'mkdir -p $HOME/dsv41-4x-spark/state && echo e30= | base64 -d > "
        "$HOME/dsv41-4x-spark/state/t.json && test -d $HOME/models && "
        "docker run -d --name w -e NODE_RANK=1 -v $HOME/dsv41-4x-spark/state:/state img'\"\n"
        "docker run -d --name h -e NODE_RANK=0 img\n")
    before = tree_hash(home)
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="spark", expected_ranks=2)
    assert [(c["host"], c["name"]) for c in got["containers"]] == [("192.168.1.56", "w"), ("spark1", "h")]
    assert tree_hash(home) == before


def test_a_workers_own_tests_see_what_was_read_in_its_home(tmp_path):
    # the family's worker mounts NCCL only when ~/nccl-2.30.7 exists on that worker
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nset -e\n"
        "ssh zurih@spark2 \"bash -lc 'n=; [ -d ~/nccl-2.30.7 ] && n=\\\"-v \\$HOME/nccl-2.30.7:/nccl:ro\\\"; "
        "test -f ~/NewModels/M/config.json && docker run -d --name w -e NODE_RANK=1 \\$n img'\"\n"
        "docker run -d --name h -e NODE_RANK=0 img\n")
    read = {"zurih": ["nccl-2.30.7/", "NewModels/M/config.json", "../escape", "/etc/x"]}
    got = R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="mia", expected_ranks=2,
                             worker_homes=read)
    assert [m["source"] for m in got["containers"][0]["mounts"]] == ["/home/zurih/nccl-2.30.7"]
    with pytest.raises(S.LaunchError):      # nothing read there: the worker's own model check fails, named
        R.effective_launch(str(co / "start.sh"), head="spark1", home=str(home), user="mia", expected_ranks=2)


def test_a_launcher_killed_at_its_timeout_leaves_no_process_once_the_evaluation_returns(tmp_path):
    """bwrap killed at the timeout dies before its pid namespace's init: the evaluation waits for the init (the
    pid bwrap gives on --info-fd), so the launcher's background processes are gone when it returns."""
    marker = "%s-timeout" % TAG
    co = tmp_path / "co"
    co.mkdir()
    (co / "start.sh").write_text("#!/usr/bin/env bash\n"
                                 "bash -c 'trap \"\" TERM; while :; do :; done' %s-bg &\n"
                                 "exec bash -c 'while :; do :; done' %s-fg\n" % (marker, marker))
    with pytest.raises(S.LaunchError, match="did not finish within 1 s"):
        S.evaluate(str(co / "start.sh"), timeout=1, docker_client=False)
    assert _processes_named(marker) == []


def _processes_named(word):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if word in cmd:
                found.append(cmd)
    return found


def test_the_namespace_init_pid_is_read_from_bwraps_info_fd_and_a_zombie_counts_as_ended(tmp_path):
    r, w = os.pipe()
    os.write(w, b'{\n    "child-pid": 4242\n}\n')
    os.close(w)
    assert S._read_child_pid(r) == 4242
    for text in (b"", b"not json", b'{"child-pid": true}', b'{"child-pid": 1}', b"[]"):
        r, w = os.pipe()
        os.write(w, text)
        os.close(w)
        assert S._read_child_pid(r) is None, text
    assert process_wait.pid_alive(os.getpid()) is True
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    import time
    deadline = time.monotonic() + 10
    while process_wait.pid_alive(pid) and time.monotonic() < deadline:     # a zombie until it is waited for
        time.sleep(0.01)
    assert process_wait.pid_alive(pid) is False
    os.waitpid(pid, 0)
    assert process_wait.pid_alive(pid) is False


def test_a_background_process_slow_to_die_is_gone_when_the_evaluation_returns(tmp_path, monkeypatch):
    """bwrap returns the launcher's exit status as soon as the launcher ends, while its pid namespace's init is
    still killing what the launcher left running; a process holding much memory takes a while to die. The
    evaluation waits for the init, so nothing of the launcher runs once it has returned."""
    marker = "%s-slow" % TAG
    co = tmp_path / "co"
    co.mkdir()
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\n"
        "%s -c 'import os, time; b = b\"x\" * (1 << 30); open(\"/tmp/held\", \"w\").close(); time.sleep(600)' "
        "%s >/dev/null 2>&1 &\n"
        "while [ ! -e /tmp/held ]; do :; done\n"
        "docker run -d --name dsv41-head -e NODE_RANK=0 img run\n" % (sys.executable, marker))
    waited, real_wait = [], S.Sandbox._wait_namespace_gone

    def wait(init_pid, *args):
        waited.append(init_pid)
        return real_wait(init_pid, *args)
    monkeypatch.setattr(S.Sandbox, "_wait_namespace_gone", staticmethod(wait))
    S.evaluate(str(co / "start.sh"), timeout=60, docker_client=False)
    assert _processes_named(marker) == []
    # the wait was on the namespace's init, which had ended by then
    assert len(waited) == 1 and waited[0] and not process_wait.pid_alive(waited[0])
