"""The sandbox's docker stand-in (module_utils/launcher/docker*.py): read-only queries answered from the head's
daemon (here a recording stand-in for the real client), or from what the module assumes when there is no
daemon, with docker's own --format templates; what changes state recorded, never run."""
import json
import os
import re
import stat
import sys

import pytest

from ansible.module_utils.launcher import effective as R
from ansible.module_utils.launcher import sandbox as S
from ansible.module_utils.launcher.docker_format import FORMAT

import launcher_effective
from modrun import run_module

ARCH = "$(docker image inspect -f '{{.Architecture}}' \"$IMAGE\")"
ARM64_CHECK = '[ "%s" = arm64 ] || { echo "expected arm64 image, got %s"; exit 1; }\n' % (ARCH, ARCH)
HEAD_RUN = 'docker run -d --name dsv41-head --network host -e NODE_RANK=0 "$IMAGE" run >/dev/null\n'

# What a daemon holds, as docker prints it (image inspect, container inspect, ps and images in {{json .}}).
IMAGE_DOC = {"Id": "sha256:" + "ab" * 32, "RepoTags": ["dsv41-sglang:tp3"], "Architecture": "arm64", "Os": "linux",
             "Config": {"Env": ["PATH=/usr/bin"], "Labels": {"dsv41.flashinfer.version": "0.6.18"}}}
OLD_HEAD = {"Id": "c0ffee" + "0" * 58, "Name": "/dsv41-head", "State": {"Status": "running", "Running": True},
            "Config": {"Image": "dsv41-sglang:tp3", "Labels": {}}}
EXPORTER = {"Id": "be" * 32, "Name": "/dsv41-nfs", "State": {"Status": "running", "Running": True},
            "Config": {"Image": "nfs-server:12", "Labels": {}}}
DAEMON = {
    "images": {"dsv41-sglang:tp3": IMAGE_DOC},
    "containers": {"dsv41-head": OLD_HEAD, "dsv41-nfs": EXPORTER},
    "ps": [{"ID": OLD_HEAD["Id"], "Names": "dsv41-head", "Image": "dsv41-sglang:tp3", "State": "running",
            "Status": "Up 3 days", "Command": "\"python3 -m sglang.launch_server\"", "Labels": ""},
           {"ID": EXPORTER["Id"], "Names": "dsv41-nfs", "Image": "nfs-server:12", "State": "running",
            "Status": "Up 3 days", "Command": "\"/entry.sh\"", "Labels": ""}],
    "image_rows": [{"Repository": "dsv41-sglang", "Tag": "tp3", "ID": IMAGE_DOC["Id"], "CreatedSince": "2 weeks ago",
                    "Size": "41.2GB"}],
    "version": {"Client": {"Version": "28.3.3", "Os": "linux", "Arch": "arm64"},
                "Server": {"Version": "28.3.3", "Os": "linux", "Arch": "arm64"}},
    "info": {"ServerVersion": "28.3.3", "OSType": "linux", "Architecture": "aarch64", "ServerErrors": None},
}

FAKE_CLIENT = r'''#!%(python)s
"""Stand-in for the real docker client: logs its argv, answers from daemon.json."""
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "client.log"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
d = json.load(open(os.path.join(here, "daemon.json")))
a = sys.argv[1:]
def no_such(kind, name):
    sys.stderr.write("Error response from daemon: No such %%s: %%s\n" %% (kind, name))
    sys.exit(1)
if a[:2] == ["image", "inspect"]:
    doc = d["images"].get(a[2]) or no_such("image", a[2])
    print(json.dumps([doc]))
elif a[:2] == ["container", "inspect"]:
    doc = d["containers"].get(a[2]) or no_such("container", a[2])
    print(json.dumps([doc]))
elif a == ["ps", "--all", "--no-trunc", "--format", "{{json .}}"]:
    print("\n".join(json.dumps(r) for r in d["ps"]))
elif a[:4] == ["images", "--no-trunc", "--format", "{{json .}}"]:
    print("\n".join(json.dumps(r) for r in d["image_rows"]))
elif a == ["version", "--format", "{{json .}}"]:
    print(json.dumps(d["version"]))
elif a == ["info", "--format", "{{json .}}"]:
    print(json.dumps(d["info"]))
elif a == ["--version"]:
    print("Docker version 28.3.3, build 980b856")
else:
    sys.stderr.write("unexpected: %%r\n" %% a)
    sys.exit(125)
'''


@pytest.fixture
def daemon(tmp_path):
    """``(client path, daemon dict to edit before the run, calls made of the client)``."""
    d = tmp_path / "client"
    d.mkdir()
    client = d / "docker"
    client.write_text(FAKE_CLIENT % {"python": sys.executable})
    client.chmod(client.stat().st_mode | stat.S_IXUSR)
    data = json.loads(json.dumps(DAEMON))

    def calls():
        log = d / "client.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def write():
        (d / "daemon.json").write_text(json.dumps(data))
    write()
    return str(client), data, write, calls


def _launcher(tmp_path, body, image="dsv41-sglang:tp3"):
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text("#!/usr/bin/env bash\nset -euo pipefail\nIMAGE=%s\n%s" % (image, body))
    return str(co / "start.sh"), str(home)


def evaluate(tmp_path, body, client=False, **kw):
    script, home = _launcher(tmp_path, body)
    return R.effective_launch(script, head="spark1", home=home, docker_client=client, **kw)


def test_the_arm64_check_passes_from_the_daemon(tmp_path, daemon):
    client, _, _, calls = daemon
    got = evaluate(tmp_path, ARM64_CHECK + HEAD_RUN, client)
    assert [c["name"] for c in got["containers"]] == ["dsv41-head"]
    assert got["assumed"] == [] and got["warnings"] == []
    assert calls() == [["image", "inspect", "dsv41-sglang:tp3"]]      # asked once, cached for the evaluation


def test_the_arm64_check_reads_what_the_daemon_says(tmp_path, daemon):
    client, data, write, _ = daemon
    data["images"]["dsv41-sglang:tp3"]["Architecture"] = "amd64"
    write()
    with pytest.raises(S.LaunchError) as err:
        evaluate(tmp_path, ARM64_CHECK + HEAD_RUN, client)
    assert "expected arm64 image, got amd64" in str(err.value)


def test_without_a_daemon_the_fleet_image_is_assumed_and_said(tmp_path):
    got = evaluate(tmp_path, ARM64_CHECK + HEAD_RUN, client=False)
    assert [c["name"] for c in got["containers"]] == ["dsv41-head"]
    assert [c["argv"] for c in got["assumed"]] == [["image", "inspect", "-f", "{{.Architecture}}",
                                                    "dsv41-sglang:tp3"]]
    assert "assumed an image of this fleet (arm64, linux)" in got["assumed"][0]["reasons"][0]
    assert "docker_client: false" in got["warnings"][0]
    # a real client whose daemon cannot be reached counts the same (this host may have one or none)
    got = evaluate(tmp_path / "b", ARM64_CHECK + HEAD_RUN, client="/nonexistent/docker")
    assert got["assumed"] and "no docker client" in got["assumed"][0]["reasons"][0]


def test_an_image_the_daemon_does_not_have_is_missing_unless_built_in_the_sandbox(tmp_path, daemon):
    client = daemon[0]
    body = ('if ! docker image inspect dsv41-sglang:canary >/dev/null 2>&1; then echo missing; '
            'docker build -t dsv41-sglang:canary .; fi\n'
            'echo "arch=$(docker image inspect -f \'{{.Architecture}}\' dsv41-sglang:canary)"\n' + HEAD_RUN)
    got = evaluate(tmp_path, body, client)
    assert got["stdout"].splitlines() == ["missing", "arch=arm64"]
    assert ("docker", ["build", "-t", "dsv41-sglang:canary", "."]) in [(c["command"], c["argv"]) for c in got["calls"]]
    assert "exists only in the sandbox" in got["assumed"][-1]["reasons"][0]


def test_ps_and_inspect_see_the_daemon_and_what_the_sandbox_changed(tmp_path, daemon):
    client, _, _, calls = daemon
    body = ('echo "before=$(docker ps --format \'{{.Names}}\' | sort | paste -sd,)"\n'
            'echo "old=$(docker inspect -f \'{{.State.Running}} {{.Config.Image}}\' dsv41-head)"\n'
            'docker rm -f dsv41-head\n'
            'docker inspect -f \'{{.State.Running}}\' dsv41-head || echo "gone"\n'
            + HEAD_RUN +
            'echo "after=$(docker ps --format \'{{.Names}}\' | sort | paste -sd,)"\n'
            'echo "new=$(docker inspect -f \'{{.State.Running}} {{.Config.Image}} {{json .Config.Env}}\' dsv41-head)"\n'
            'echo "label=[$(docker inspect -f \'{{index .Config.Labels "x"}}\' dsv41-nfs)]"\n'
            'echo "nolabel=$(docker inspect -f \'{{.Config.Labels.nope}}\' dsv41-nfs)"\n'
            'docker stop dsv41-nfs\n'
            'echo "stopped=$(docker ps --format \'{{.Names}}\' | paste -sd,) all=$(docker ps -aq | wc -l)"\n'
            'echo "ids=$(docker ps -q --filter name=^/dsv41-head$)"\n')
    got = evaluate(tmp_path, body, client)
    out = got["stdout"].splitlines()
    assert "before=dsv41-head,dsv41-nfs" in out
    assert "old=true dsv41-sglang:tp3" in out and "gone" in out
    assert "after=dsv41-head,dsv41-nfs" in out
    assert 'new=true dsv41-sglang:tp3 ["NODE_RANK=0"]' in out
    assert "label=[]" in out and "nolabel=<no value>" in out      # docker's map semantics on its own objects
    assert "stopped=dsv41-head all=2" in out
    new_id = [l for l in out if l.startswith("ids=")][0][4:]
    assert re.match(r"^[0-9a-f]{12}$", new_id) and not OLD_HEAD["Id"].startswith(new_id)
    # the real client was asked read-only questions only, each with the stand-in's own fixed arguments
    asked = calls()
    assert all(a[0] in ("ps", "container", "image", "images") for a in asked), asked
    assert not any(w in ("rm", "stop", "run", "-f", "--format=") for a in asked for w in a[:2])
    assert got["assumed"] == []


def test_version_info_and_images(tmp_path, daemon):
    client = daemon[0]
    body = ('echo "server=$(docker version --format \'{{.Server.Version}}\')"\n'
            'echo "os=$(docker info --format \'{{.OSType}}/{{.Architecture}}\')"\n'
            'echo "img=$(docker images -q dsv41-sglang:tp3) none=[$(docker images -q dsv41-sglang:tp9)]"\n'
            'docker images --format \'table {{.Repository}}\\t{{.Tag}}\'\n'
            'docker --version\n' + HEAD_RUN)
    got = evaluate(tmp_path, body, client)
    out = got["stdout"].splitlines()
    assert out[:3] == ["server=28.3.3", "os=linux/aarch64", "img=%s none=[]" % IMAGE_DOC["Id"][7:19]]
    assert out[3].split() == ["REPOSITORY", "TAG"] and out[4].split() == ["dsv41-sglang", "tp3"]
    assert out[5] == "Docker version 28.3.3, build 980b856"


def test_a_template_the_sandbox_cannot_render_fails_naming_it(tmp_path, daemon):
    for i, template in enumerate(["{{range .RepoTags}}{{.}}{{end}}", "{{.Config}}", "{{printf \"%s\" .Os}}"]):
        body = "docker image inspect -f '%s' \"$IMAGE\"\n%s" % (template, HEAD_RUN)
        with pytest.raises(S.LaunchError) as err:
            evaluate(tmp_path / str(i), body, daemon[0])
        assert "cannot render the template %r" % template in str(err.value), str(err.value)
        assert "cannot be evaluated" in str(err.value)
    # an assumed image holds only what the module knows: any other field fails rather than being made up
    with pytest.raises(S.LaunchError) as err:
        evaluate(tmp_path / "x", "docker image inspect -f '{{.Id}}' \"$IMAGE\"\n" + HEAD_RUN, client=False)
    assert "'{{.Id}}'" in str(err.value) and "no field .Id" in str(err.value)


def test_the_launcher_cannot_steer_the_real_client(tmp_path, daemon):
    client, _, _, calls = daemon
    for i, body in enumerate(["docker -H tcp://10.0.0.9:2375 ps\n", "docker --context other image inspect x\n",
                              "docker ps --filter network=host\n", "docker inspect --type volume data\n",
                              "docker images --digests\n"]):
        with pytest.raises(S.LaunchError) as err:
            evaluate(tmp_path / str(i), body + HEAD_RUN, client)
        assert "cannot be evaluated" in str(err.value)
    got = evaluate(tmp_path / "names", "docker inspect 'x;touch /tmp/p' || true\n"
                   "docker image inspect -- --help || true\n" + HEAD_RUN, client)
    assert calls() == [] and got["containers"]
    assert not os.path.exists("/tmp/p")


def test_state_changes_are_recorded_never_run(tmp_path, daemon):
    client, _, _, calls = daemon
    body = ("docker pull dsv41-sglang:tp3\ndocker rm -f dsv41-head\ndocker stop dsv41-nfs\n"
            "docker rmi old:1\ndocker network create x\n" + HEAD_RUN)
    got = evaluate(tmp_path, body, client)
    assert calls() == []
    assert [c["argv"][0] for c in got["calls"]] == ["pull", "rm", "stop", "rmi", "network", "run"]


def test_global_options_before_the_subcommand_are_read_as_docker_reads_them(tmp_path):
    got = evaluate(tmp_path, 'docker --log-level warn run -d --name dsv41-head -e NODE_RANK=0 "$IMAGE" run\n'
                             'docker -D ps --format "{{.Names}} {{.Image}}"\n')
    assert [(c["name"], c["image"], c["rank"]) for c in got["containers"]] == [("dsv41-head", "dsv41-sglang:tp3", 0)]
    assert got["stdout"].splitlines()[-1] == "dsv41-head dsv41-sglang:tp3"


def test_worker_queries_are_answered_by_the_head_and_said(tmp_path, daemon):
    body = ('ssh zurih@spark2 "docker image inspect -f \'{{.Os}}\' $IMAGE; docker ps -q | wc -l"\n' + HEAD_RUN)
    got = evaluate(tmp_path, body, daemon[0])
    assert got["stdout"].split() == ["linux", "0"]
    reasons = [r for c in got["assumed"] for r in c["reasons"]]
    assert "spark2's images answered by the head's daemon" in reasons
    assert "spark2's containers are not visible from the head: only the sandbox's" in reasons


def test_module_returns_and_warns_what_was_assumed(tmp_path):
    script, home = _launcher(tmp_path, ARM64_CHECK + HEAD_RUN)
    res = run_module(launcher_effective.main, {"launcher": script, "home": home, "head_host": "spark1"})
    assert not res.get("failed"), res.get("msg")
    assert res["assumed"] and res["auxiliary"] == []
    assert "answered from what the module assumes" in json.dumps(res["warnings"])


# ---- the --format renderer itself (the text the stand-in runs), on docker's data -------------------------

@pytest.fixture(scope="module")
def fmt():
    ns = {"re": re, "json": json}
    exec(compile(FORMAT, "launch_docker_format", "exec"), ns)
    return ns


@pytest.mark.parametrize("template,want", [
    ("{{.Architecture}}", "arm64"),
    ("{{.Os}}/{{.Architecture}}", "linux/arm64"),
    ("{{json .Config.Labels}}", '{"dsv41.flashinfer.version":"0.6.18"}'),
    ('{{index .Config.Labels "dsv41.flashinfer.version"}}', "0.6.18"),
    ('{{index .Config.Labels "absent"}}', ""),
    ("{{index .RepoTags 0}}", "dsv41-sglang:tp3"),
    ("{{.RepoTags}}", "[dsv41-sglang:tp3]"),
    ("{{.Config.Labels | json}}", '{"dsv41.flashinfer.version":"0.6.18"}'),
    ('{{join .Config.Env ","}}', "PATH=/usr/bin"),
    ("{{upper .Os}}", "LINUX"),
    ("a {{- .Os -}} b", "alinuxb"),
    ("{{json .}}", json.dumps(IMAGE_DOC, separators=(",", ":"))),
])
def test_templates_render_as_docker_renders_them(fmt, template, want):
    assert fmt["render"](template, IMAGE_DOC) == want


@pytest.mark.parametrize("template", ["{{if .Os}}x{{end}}", "{{$x := .Os}}", "{{.Config}}", "{{.Nope}}",
                                      "{{len .RepoTags}}", "{{.Os", "{{index .RepoTags 3}}", "{{.Config.Nope.X}}"])
def test_templates_it_cannot_render_are_refused(fmt, template):
    with pytest.raises(fmt["Unrenderable"]) as err:
        fmt["render"](template, IMAGE_DOC)
    assert repr(template) in str(err.value)


def test_a_key_missing_from_a_daemon_map_is_no_value_as_docker_prints_it(fmt):
    assert fmt["render"]("{{.Config.Labels.absent}}", OLD_HEAD, lenient=True) == "<no value>"
    # a field docker leaves out of its JSON prints by its Go type (<nil>, "", []...): not guessed
    for template in ("{{.State.Health}}", "{{.Config.Labels.absent.x}}"):
        with pytest.raises(fmt["Unrenderable"]):
            fmt["render"](template, OLD_HEAD, lenient=True)


def test_tables_align_as_docker_aligns_them(fmt):
    rows = [{"Names": "dsv41-head", "Status": "Up 3 days"}, {"Names": "n", "Status": "Up"}]
    lines = fmt["render_rows"]("table {{.Names}}\\t{{.Status}}", rows, {"Names": "NAMES", "Status": "STATUS"})
    assert lines == ["NAMES        STATUS", "dsv41-head   Up 3 days", "n            Up"]   # width 10 at least, 3 apart
