"""drm_probe: the isolated driver compatibility probe of the DRM cache, one rank, read-only (module and logic)."""
import json
import os
import stat

import pytest

import drm_probe
from ansible.module_utils.host import drm_probe as dp
from modrun import run_module

NODE = "/dev/dri/renderD128"
DEVICES = [{"PathOnHost": NODE, "PathInContainer": NODE, "CgroupPermissions": "rwm"}]


def answers(driver="580.173.02\n", devices=DEVICES, privileged=False, docker_rc=0):
    def run(cmd):
        if cmd[0] == "nvidia-smi":
            return (0, driver, "") if driver is not None else (127, "", "nvidia-smi: not found")
        if cmd[:2] == ["docker", "inspect"]:
            if docker_rc:
                return docker_rc, "", "Error: No such object: %s" % cmd[-1]
            return 0, json.dumps({"Devices": devices, "Privileged": privileged}) + "\n", ""
        raise AssertionError("unexpected command %r" % (cmd,))
    return run


@pytest.fixture()
def host(tmp_path, monkeypatch):
    """A sysfs root with nvidia_drm's modeset parameter, and a character device standing in for the node:
    /dev/null (1:3) is one, whose major is checked apart (a DRM node is major 226)."""
    param = tmp_path / "sys" / "module" / "nvidia_drm" / "parameters"
    param.mkdir(parents=True)
    (param / "modeset").write_text("Y\n")
    real_stat = os.stat

    def fake_stat(path, *a, **kw):
        if path == NODE:
            st = real_stat("/dev/null")
            return os.stat_result((stat.S_IFCHR | 0o666,) + tuple(st[1:]))
        return real_stat(path, *a, **kw)
    monkeypatch.setattr(dp.os, "stat", fake_stat)
    monkeypatch.setattr(dp.os, "major", lambda dev: 226)
    monkeypatch.setattr(dp.os, "minor", lambda dev: 128)
    return tmp_path


def probe(host, **kw):
    return run_module(drm_probe.main, {"node": NODE, "container": "dsv41-worker", "sysfs_root": str(host / "sys"),
                                       "host_label": "spark2"}, check_mode=kw.pop("check_mode", False),
                      run_command=answers(**kw))


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_ready_rank_reports_its_figures_and_no_problem(host, check_mode):
    res = probe(host, check_mode=check_mode)
    assert res["changed"] is False and "failed" not in res
    assert res["driver_version"] == "580.173.02"
    assert res["node"] == {"path": NODE, "kind": "char", "major": 226, "minor": 128}
    assert res["container_has_node"] is True and res["modeset"] == "Y"
    assert res["problems"] == []
    assert res["_calls"] == [["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             ["docker", "inspect", "--format", "{{json .HostConfig}}", "dsv41-worker"]]


def test_each_failure_is_named_with_the_host(host, monkeypatch):
    (host / "sys" / "module" / "nvidia_drm" / "parameters" / "modeset").write_text("N\n")
    res = probe(host, devices=[], driver="NVIDIA-SMI has failed\n")
    assert res["problems"] == [
        "spark2: nvidia-smi gave no driver version (NVIDIA-SMI has failed)",
        "spark2: serving container dsv41-worker has no device /dev/dri/renderD128 (docker inspect: Devices none); "
        "pass it on both launch paths (docker run --device) and restart before the DRM cache can be tried",
        "spark2: nvidia_drm modeset is N (%s), Y needed; changing it needs a host change and a reboot, a later "
        "experiment" % (host / "sys" / "module" / "nvidia_drm" / "parameters" / "modeset")]
    monkeypatch.undo()
    res = run_module(drm_probe.main, {"node": str(host / "renderD128"), "container": "dsv41-head",
                                      "sysfs_root": str(host / "nosys"), "host_label": "spark1"},
                     run_command=answers(docker_rc=1))
    assert "spark1: render node %s is not a character device on the host (absent)" % (host / "renderD128") \
        in res["problems"]
    assert ("spark1: serving container dsv41-head could not be inspected (Error: No such object: dsv41-head)"
            in res["problems"])
    assert "spark1: nvidia_drm is not loaded (no %s)" % (host / "nosys" / dp.MODESET_PARAM) in res["problems"]


def test_a_regular_file_or_another_major_is_not_a_drm_node(tmp_path):
    f = tmp_path / "renderD128"
    f.write_text("")
    assert dp.node_state(str(f))["kind"] == "regular file"
    null = dp.node_state("/dev/null")
    assert null["kind"] == "char" and null["major"] == 1
    r = {"driver_version": "580.173.02", "node": null, "container": "c", "container_found": True,
         "container_has_node": True, "modeset": "Y", "modeset_path": "/sys/x"}
    assert dp.problems(r) == ["render node /dev/null is character device 1:3, not a DRM node (major 226)"]


@pytest.mark.parametrize("devices,privileged,seen", [
    ([{"PathOnHost": "/dev/dri", "PathInContainer": "/dev/dri", "CgroupPermissions": "rwm"}], False, True),
    (["/dev/dri/renderD128:/dev/dri/renderD128:rw"], False, True),      # an older client's plain string
    ([{"PathOnHost": NODE, "PathInContainer": "/dev/dri/renderD129"}], False, False),
    ([], True, True),                                                    # privileged: every node
    (None, False, False),
])
def test_container_access_read_from_the_running_containers_hostconfig(devices, privileged, seen):
    devs, priv = dp.container_devices(json.dumps({"Devices": devices, "Privileged": privileged}))
    assert dp.container_has(NODE, devs, priv) is seen
    assert dp.container_devices("not json") == (None, None)
