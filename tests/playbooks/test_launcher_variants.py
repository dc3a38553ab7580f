"""Each lab launcher variant serves on the lab: the containers `docker inspect` shows get the .env's values.

The variant is installed as start.sh with `labctl.py launcher` (DSV41_LAB_LAUNCHER_VARIANT), the head's
launcher serves as the operator would, and the running containers' Config.Env and /engram mounts are read
back on every host. Lab output only.
"""
import json

import pytest

from labhelpers import DEFAULT_LAUNCHER, install_launcher, lab, sh

VARIANTS = ("explicit", "extra_env", "printf_array", "indirect", "family")
DIR = "/home/mia/dsv41-3x-spark"
CONTAINER = {"spark1": "dsv41-head", "spark2": "dsv41-worker", "spark3": "dsv41-worker"}
ENGRAM = {"spark1": "/home/mia/dsv41-engram", "spark2": "/home/zurih/dsv41-3x-spark/engram",
          "spark3": "/home/zurih/dsv41-3x-spark/engram"}



@pytest.fixture(scope="module", autouse=True)
def lab_up():
    # from the report's state, whatever an earlier module on this lab left (packed shards of another
    # checkpoint make every variant's serve fail on its first Engram layer)
    lab("reset")
    sh("spark1", f"cp -p {DIR}/.env /tmp/variants.env.saved", user="mia")
    yield
    sh("spark1", f"cp -p /tmp/variants.env.saved {DIR}/.env && rm /tmp/variants.env.saved", user="mia")
    install_launcher(DEFAULT_LAUNCHER)


@pytest.fixture(autouse=True)
def seeded_env():
    sh("spark1", f"cp -p /tmp/variants.env.saved {DIR}/.env", user="mia")


def inspect(host):
    data = json.loads(sh(host, f"docker inspect {CONTAINER[host]}"))[0]
    env = dict(e.split("=", 1) for e in data["Config"]["Env"])
    mounts = {m["Destination"]: m["Source"] for m in data["Mounts"]}
    return data["State"]["Status"], env, mounts


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_serves_and_the_containers_get_the_env(variant):
    install_launcher(variant)
    assert sh("spark2", "cat /etc/dsv41-lab/launcher.variant").strip() == variant
    extra = "EXTRA_CONTAINER_ENV='DSV41_AUTOTUNE_KEEP=1 DSV41_FOLDED_FENCE=1'" if variant == "extra_env" else \
        "DSV41_AUTOTUNE_KEEP=1\nDSV41_FOLDED_FENCE=1"
    sh("spark1", f"printf '%s\\n' \"{extra}\" >> {DIR}/.env", user="mia")
    out = sh("spark1", f"cd {DIR} && ./start.sh serve", user="mia")
    assert "[start.sh] ready: http://spark1:8888" in out
    for rank, host in enumerate(("spark1", "spark2", "spark3")):
        state, env, mounts = inspect(host)
        assert state == "running", host
        assert env["NODE_RANK"] == str(rank) and env["API_KEY"] == "sk-lab-0000000000000000000000000000"
        assert env["DSV41_AUTOTUNE_KEEP"] == "1" and env["DSV41_FOLDED_FENCE"] == "1", (variant, host)
        assert env["DSPARK_SPS_TABLE"] == "/state/dspark_sps.json", "not in the .env: the launcher's own default"
        assert env["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "0" and env["MAX_TOTAL_TOKENS"] == "750000"
        assert env["DSV41_SOURCE"] == "/sgl-workspace"
        assert "SGLANG_DSPARK_FOLDED_SAMPLING" not in env and "DSV41_ENGRAM_PREFETCH_CHECK" not in env
        assert mounts["/engram"] == ENGRAM[host]
    # the engine read its settings from that environment: the fence adapter (in every image) is armed, the
    # retention adapter only where the image carries it and its hook installs it (after stage B), else ignored
    for host in ("spark1", "spark2", "spark3"):
        logs = sh(host, f"docker logs {CONTAINER[host]} 2>&1")
        boot = logs[logs.rfind("server_args="):]
        image = sh(host, "docker run --rm --entrypoint ls dsv41-sglang:tp3 /sgl-workspace/adapter").split()
        hook = sh(host, "docker run --rm --entrypoint cat dsv41-sglang:tp3 /sgl-workspace/adapter/sitecustomize.py")
        keep = "autotune_keep.py" in image and "install_autotune_keep(module)" in hook
        assert ("[autotune_keep] armed" in boot) is keep, (host, keep)
        assert "[folded_fence] folded DSpark results cloned off the persistent verify buffers" in boot, host
