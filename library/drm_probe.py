#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Probe one rank for the DRM-backed Engram cache, read-only: driver, render node, container access, modeset."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: drm_probe
short_description: Read-only driver compatibility probe of the DRM-backed Engram cache on one rank
description:
  - The isolated probe the report asks for before the DRM cache (stage I) is tried; it changes nothing and runs in
    check mode too. It reads the GPU driver version (C(nvidia-smi --query-gpu=driver_version)), whether the render
    node named by O(node) is a character device on the host, whether the running serving container O(container)
    has that node (C(docker inspect) of its C(HostConfig), its C(Devices) or C(Privileged); the running container is
    the truth, not the launcher's text), and the nvidia_drm module's C(modeset) parameter.
  - Returns the figures and, in RV(problems), what stands in the way, each naming the host. The experiment role
    refuses the DRM arm on any problem before a host is changed. Whether the driver is the qualified one is the
    arm's C(driver_version) requirement; this module only reports the version.
version_added: "1.0.0"
options:
  node:
    description: The DRM render node the arm names (its C(DSV41_ENGRAM_DRM_NODE)), a path the container sees.
    type: path
    required: true
  container:
    description: The running serving container on this rank (C(dsv41-head) or C(dsv41-worker)).
    type: str
    required: true
  want_modeset:
    description: The C(modeset) value the DRM cache needs (C(Y), kernel modesetting on).
    type: str
    default: "Y"
  sysfs_root:
    description:
      - Where sysfs is mounted; the parameter is read from C(<sysfs_root>/module/nvidia_drm/parameters/modeset).
      - Only a test fleet that cannot write C(/sys) sets another root.
    type: path
    default: /sys
  host_label:
    description: Name of this host in messages (the inventory name).
    type: str
notes:
  - Supports check mode (it only reads).
author:
  - DSV41 fleet operators
"""

EXAMPLES = r"""
- name: Probe the DRM node before the DRM cache arm (read-only, check mode too)
  drm_probe:
    node: /dev/dri/renderD128
    container: "{{ preflight_container_name }}"
    host_label: "{{ inventory_hostname }}"
  check_mode: false
  register: drm
"""

RETURN = r"""
driver_version:
  description: nvidia-smi's driver version (null when it did not answer).
  returned: always
  type: str
  sample: "580.173.02"
node:
  description: The render node on the host, C(kind) char, missing or another file type, with C(major) and C(minor).
  returned: always
  type: dict
  sample: {"path": "/dev/dri/renderD128", "kind": "char", "major": 226, "minor": 128}
container_has_node:
  description: Whether the running serving container has the node (a device entry at it or above it, or privileged).
  returned: always
  type: bool
container_devices:
  description: The container's device entries as docker inspect shows them.
  returned: always
  type: list
  elements: dict
modeset:
  description: The nvidia_drm C(modeset) parameter (C(Y) or C(N)); null when the module is not loaded.
  returned: always
  type: str
problems:
  description: What stands in the way of the DRM cache on this host, each message naming the host (empty = nothing).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.drm_probe import problems, read
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.base.probe import make_runner


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="path", required=True),
            container=dict(type="str", required=True),
            want_modeset=dict(type="str", default="Y"),
            sysfs_root=dict(type="path", default="/sys"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    who = host_label(p["host_label"])

    # the project's probe runner: a missing nvidia-smi or docker is a finding (rc None), not a module failure, and
    # a docker daemon that stops answering ends within its bound instead of hanging the probe
    result = read(p["node"], p["container"], p["sysfs_root"], make_runner(module))
    result["problems"] = ["%s: %s" % (who, msg) for msg in problems(result, p["want_modeset"])]
    module.exit_json(changed=False, **result)


def main():
    run_module()


if __name__ == "__main__":
    main()
