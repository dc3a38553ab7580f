#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module adapter_registry: is every enabled adapter registered in sitecustomize.py?"""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: adapter_registry
short_description: Check that sitecustomize.py registers each enabled adapter
description:
  - Reads the launcher checkout's C(sitecustomize.py) import hook and reports, per adapter module, whether
    it has a finder entry and an install branch gated on its switch (parsed with the project's launcher
    code, not by pattern matching on lines).
  - With I(expected), fails listing every enabled adapter that is missing or registered with another switch.
  - Read-only; runs the same in check mode.
options:
  path:
    description: The C(sitecustomize.py) file.
    type: path
    required: true
  expected:
    description: Adapter module name to the switch that must gate it (e.g. C(autotune_keep) -> C(DSV41_AUTOTUNE_KEEP)).
    type: dict
    default: {}
  host_label:
    description: Name used in messages (defaults to the host name).
    type: str
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: The retention adapter is registered
  adapter_registry:
    path: /home/mia/dsv41-3x-spark/adapter/sitecustomize.py
    expected:
      autotune_keep: DSV41_AUTOTUNE_KEEP
"""

RETURN = r"""
registrations:
  description: Per adapter module, C(finder), C(install), C(switch), C(gate), C(ungated).
  returned: success
  type: dict
problems:
  description: One message per missing or inconsistent registration.
  returned: always
  type: list
  elements: str
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.launcher import LauncherError, registration_problems, sitecustomize_registrations


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            expected=dict(type="dict", default={}),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = p["host_label"] or socket.gethostname().split(".")[0]
    try:
        with open(p["path"], encoding="utf-8") as handle:
            text = handle.read()
        registrations = sitecustomize_registrations(text)
    except (OSError, UnicodeDecodeError, LauncherError, SyntaxError) as exc:
        module.fail_json(msg="%s: cannot read the import hook %s: %s" % (label, p["path"], exc), problems=[])
    problems = registration_problems(registrations, p["expected"], source=p["path"])
    missing = [name for name in p["expected"] if name not in registrations]
    result = dict(changed=False, registrations=registrations, problems=problems, missing=missing)
    if problems:
        module.fail_json(msg="%s: %s" % (label, "; ".join(problems)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
