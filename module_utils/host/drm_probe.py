# -*- coding: utf-8 -*-
"""The isolated driver compatibility probe of the DRM-backed Engram cache (stage I): read-only, one rank.

One subject: what a rank shows about the DRM node before the DRM cache may be tried, and what stands in the
way. The report: the copied display-reservation feature is qualified on driver 580.173.02 only, needs DRM build
headers and container access, and host headless/modeset changes and a reboot make it a later experiment with
"an isolated driver compatibility probe first". So, before any host is changed, each rank is read for:

- the GPU driver version (``nvidia-smi --query-gpu=driver_version``; parsed by ``nvidia_smi.parse_driver_version``);
  whether it is the qualified one is the arm's ``driver_version`` requirement;
- the DRM render node the arm names (``DSV41_ENGRAM_DRM_NODE``) as a character device on the host (``stat``);
- whether the running serving container has it: ``docker inspect`` of the container's ``HostConfig`` (its
  ``Devices``, or ``Privileged``), since the running containers are the truth, not the launcher's text;
- the nvidia_drm module's ``modeset`` parameter (``/sys/module/nvidia_drm/parameters/modeset``: ``Y`` or ``N``;
  absent when the module is not loaded). The DRM node allocates through kernel modesetting, so ``Y`` is what
  the probe asks by default (the arm may name another value once the port's documentation says otherwise).

:func:`read` gathers (with an injected command runner, so the unit tests need no GPU or docker) and
:func:`problems` judges; nothing here writes anything.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import stat

from ansible.module_utils.host.nvidia_smi import parse_driver_version

__metaclass__ = type

MODESET_ON = "Y"
MODESET_PARAM = "module/nvidia_drm/parameters/modeset"
DRM_MAJOR = 226          # the Linux DRM subsystem's character major (render nodes are minors 128..)


def node_state(path):
    """{"path", "kind": char|missing|<other file type>, "major", "minor"} of the node on this host (stat follows
    a symlink, as the container runtime does when it passes the device)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"path": path, "kind": "missing", "major": None, "minor": None,
                "error": exc.strerror or str(exc)}
    if stat.S_ISCHR(st.st_mode):
        return {"path": path, "kind": "char", "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}
    kind = ("directory" if stat.S_ISDIR(st.st_mode) else "block device" if stat.S_ISBLK(st.st_mode)
            else "regular file" if stat.S_ISREG(st.st_mode) else "special file")
    return {"path": path, "kind": kind, "major": None, "minor": None}


def container_devices(inspect_text):
    """``docker inspect --format '{{json .HostConfig}}' NAME`` -> (devices, privileged): the device entries
    ({"PathOnHost", "PathInContainer", "CgroupPermissions"}; a plain "host[:container[:perms]]" string, as an
    older client stores it, is read the same way) and whether the container is privileged (it sees every node).
    (None, None) when the text is not a JSON object."""
    try:
        hc = json.loads(inspect_text or "")
    except ValueError:
        return None, None
    if not isinstance(hc, dict):
        return None, None
    out = []
    for d in hc.get("Devices") or []:
        if isinstance(d, str):
            parts = d.split(":")
            d = {"PathOnHost": parts[0], "PathInContainer": parts[1] if len(parts) > 1 and parts[1] else parts[0],
                 "CgroupPermissions": parts[2] if len(parts) > 2 else "rwm"}
        if isinstance(d, dict):
            out.append({"PathOnHost": d.get("PathOnHost") or "", "PathInContainer": d.get("PathInContainer") or "",
                        "CgroupPermissions": d.get("CgroupPermissions") or ""})
    return out, bool(hc.get("Privileged"))


def container_has(node, devices, privileged):
    """The container sees ``node`` (a container path): privileged, or a device entry at that path or at a
    directory above it (``--device /dev/dri``)."""
    if privileged:
        return True
    for d in devices or []:
        where = d.get("PathInContainer", "").rstrip("/")
        if where and (node == where or node.startswith(where + "/")):
            return True
    return False


def read(node, container, sysfs_root="/sys", run=None):
    """One rank's probe. ``run(argv) -> (rc, stdout, stderr)`` runs a read-only command (the module passes
    AnsibleModule.run_command). Returns the figures; :func:`problems` judges them."""
    rc, out, err = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    driver = parse_driver_version(out) if rc == 0 else None
    rc_i, out_i, err_i = run(["docker", "inspect", "--format", "{{json .HostConfig}}", container])
    devices, privileged = container_devices(out_i) if rc_i == 0 else (None, None)
    modeset_path = os.path.join(sysfs_root or "/sys", MODESET_PARAM)
    try:
        with open(modeset_path, encoding="ascii", errors="replace") as fh:
            modeset = fh.read(64).strip() or None
    except OSError:
        modeset = None
    return {
        "driver_version": driver,
        "driver_error": None if driver else ((err or out or "").strip().splitlines() or ["no answer"])[0][:200],
        "node": node_state(node),
        "container": container,
        "container_found": rc_i == 0 and devices is not None,
        "container_error": None if rc_i == 0 else ((err_i or out_i or "").strip().splitlines() or ["no answer"])[0][:200],
        "container_devices": devices or [],
        "container_privileged": bool(privileged),
        "container_has_node": container_has(node, devices, privileged) if devices is not None else False,
        "modeset_path": modeset_path,
        "modeset": modeset,
    }


def problems(result, want_modeset=MODESET_ON):
    """What in one rank's probe stands in the way of the DRM cache, as messages (empty = nothing)."""
    out = []
    r = result or {}
    if not r:
        return ["not probed"]
    if r.get("failed") or "node" not in r:
        return ["the probe did not run (%s)" % (r.get("msg") or "no result")]
    if not r.get("driver_version"):
        out.append("nvidia-smi gave no driver version (%s)" % (r.get("driver_error") or "no answer"))
    node = r.get("node") or {}
    path = node.get("path") or "(no node named)"
    if node.get("kind") != "char":
        out.append("render node %s is not a character device on the host (%s)" % (
            path, "absent" if node.get("kind") == "missing" else node.get("kind") or "not read"))
    elif node.get("major") != DRM_MAJOR:
        out.append("render node %s is character device %s:%s, not a DRM node (major %d)"
                   % (path, node.get("major"), node.get("minor"), DRM_MAJOR))
    if not r.get("container_found"):
        out.append("serving container %s could not be inspected (%s)" % (r.get("container"), r.get("container_error")))
    elif not r.get("container_has_node"):
        out.append("serving container %s has no device %s (docker inspect: Devices %s); pass it on both launch "
                   "paths (docker run --device) and restart before the DRM cache can be tried"
                   % (r.get("container"), path, ", ".join(d["PathOnHost"] + ":" + d["PathInContainer"]
                                                           for d in r.get("container_devices") or []) or "none"))
    if r.get("modeset") is None:
        out.append("nvidia_drm is not loaded (no %s)" % r.get("modeset_path"))
    elif r.get("modeset") != want_modeset:
        out.append("nvidia_drm modeset is %s (%s), %s needed; changing it needs a host change and a reboot, a later "
                   "experiment" % (r.get("modeset"), r.get("modeset_path"), want_modeset))
    return out
