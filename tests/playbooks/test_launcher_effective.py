"""launcher_effective on the lab: on each lab launcher variant, the effective launch equals what the lab's
containers really received when its launcher served (docker inspect), key for key and mount for mount, and
evaluating changes nothing."""
import json
import subprocess

import pytest

from labhelpers import DEFAULT_LAUNCHER, install_launcher, LAB_INVENTORY, ROOT, env, lab, sh, snapshot

LAUNCHER = "/home/mia/dsv41-3x-spark/start.sh"
HOSTS = {"spark1": ("dsv41-head", "mia"), "spark2": ("dsv41-worker", "zurih"), "spark3": ("dsv41-worker", "zurih")}
# Set by the image itself (docker adds the image's ENV to every container), not by the launcher.
IMAGE_ENV = ("PATH",)


def effective(**args):
    arg = " ".join("%s=%s" % (k, v) for k, v in dict({"launcher": LAUNCHER, "head_host": "spark1"}, **args).items())
    res = subprocess.run(["ansible", "spark1", "-i", str(LAB_INVENTORY), "-m", "launcher_effective", "-a", arg, "-o"],
                         cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert res.returncode == 0, res.stdout
    return json.loads(res.stdout.split("=> ", 1)[1])


def inspect(host):
    name, user = HOSTS[host]
    data = json.loads(sh(host, "docker inspect %s" % name, user=user))[0]
    env_items = dict(item.split("=", 1) for item in data["Config"]["Env"])
    return ({k: v for k, v in env_items.items() if k not in IMAGE_ENV},
            [m["Source"] for m in data["Mounts"] if m["Destination"] == "/engram"])


VARIANTS = ("explicit", "extra_env", "printf_array", "indirect", "family")



@pytest.fixture(scope="module", autouse=True)
def lab_up():
    lab("reset")   # from the report's state, whatever an earlier module on this lab left
    yield
    install_launcher(DEFAULT_LAUNCHER)


@pytest.mark.parametrize("variant", VARIANTS)
def test_effective_launch_equals_the_running_containers_and_changes_nothing(variant):
    install_launcher(variant)
    sh("spark1", "cd /home/mia/dsv41-3x-spark && ./start.sh serve >/dev/null", user="mia")
    roots = {"spark1": ["/home/mia"], "spark2": ["/home/zurih"], "spark3": ["/home/zurih"]}
    before = snapshot(roots)
    res = effective()
    assert snapshot(roots) == before
    assert res["order"] == ["spark2/dsv41-worker", "spark3/dsv41-worker", "spark1/dsv41-head"]
    for c in res["containers"]:
        got_env, got_engram = inspect(c["host"])
        masked = {k: ("***" if k == "API_KEY" else v) for k, v in got_env.items()}
        assert c["env"] == masked, (variant, c["host"])
        assert [c["engram_source"]] == got_engram, c["host"]
