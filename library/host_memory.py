#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read a host's memory state in one module run: /proc/meminfo, memory pressure (PSI) and the kernel."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_memory
short_description: Read a rank's memory state in one run (MemAvailable, memory pressure stalls, kernel)
description:
  - Reads C(/proc/meminfo) and the kernel's memory pressure (PSI, C(/proc/pressure/memory)) and names the running
    kernel, read-only, so an experiment records MemAvailable and pressure stalls at load, capture and measurement
    on every rank with one module run per reading (the report asks for both, beside the load and capture peaks).
  - A kernel without PSI (the file missing) gives C(pressure=null) and says so in C(notes); a meminfo that cannot
    be read fails, naming the host and the file.
version_added: "1.0.0"
options:
  meminfo_path:
    description: The meminfo file.
    type: path
    default: /proc/meminfo
  pressure_path:
    description: The memory pressure (PSI) file.
    type: path
    default: /proc/pressure/memory
  host_label:
    description: Name of this host in messages (the inventory name).
    type: str
notes:
  - Supports check mode (it only reads).
author:
  - DSV41 fleet operators
"""

EXAMPLES = r"""
- name: Read MemAvailable and the pressure stalls before the restart
  host_memory:
    host_label: "{{ inventory_hostname }}"
  register: memory_before
"""

RETURN = r"""
meminfo_text:
  description: The meminfo file as read (the memory ledger parses it).
  returned: always
  type: str
mem_available_bytes:
  description: MemAvailable in bytes (null when the line is missing).
  returned: always
  type: int
mem_total_bytes:
  description: MemTotal in bytes (null when the line is missing).
  returned: always
  type: int
pressure:
  description: PSI of memory, C(some) and C(full) each with avg10, avg60, avg300 (percent) and total_us; null without PSI.
  returned: always
  type: dict
  sample: {"some": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total_us": 1658964}}
kernel:
  description: The running kernel's release (uname -r).
  returned: always
  type: str
notes:
  description: What could not be read and why (a kernel without PSI).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.host.meminfo import parse_meminfo, parse_pressure


def read_memory(meminfo_path="/proc/meminfo", pressure_path="/proc/pressure/memory", who="this host"):
    """The module's result without ``changed``; raises OSError naming the meminfo file when it cannot be read."""
    try:
        with open(meminfo_path, encoding="ascii", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError as exc:
        raise OSError("%s: cannot read %s: %s" % (who, meminfo_path, exc.strerror or exc))
    values = parse_meminfo(text)
    notes, pressure = [], None
    try:
        with open(pressure_path, encoding="ascii", errors="replace") as fh:
            pressure = parse_pressure(fh.read(1 << 16)) or None
        if pressure is None:
            notes.append("%s: %s holds no pressure line" % (who, pressure_path))
    except OSError as exc:
        notes.append("%s: no memory pressure figures (%s: %s; a kernel without PSI)"
                     % (who, pressure_path, exc.strerror or exc))
    return {"meminfo_text": text, "mem_available_bytes": values.get("MemAvailable"),
            "mem_total_bytes": values.get("MemTotal"), "pressure": pressure, "kernel": os.uname().release,
            "notes": notes}


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            meminfo_path=dict(type="path", default="/proc/meminfo"),
            pressure_path=dict(type="path", default="/proc/pressure/memory"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    who = host_label(module.params["host_label"])
    try:
        result = read_memory(module.params["meminfo_path"], module.params["pressure_path"], who)
    except OSError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(changed=False, **result)


def main():
    run_module()


if __name__ == "__main__":
    main()
