#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: sample this rank's GPU (SM clock, power, temperature, clock event reasons) over a window."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_telemetry
short_description: Sample the GPU's clock, power, temperature and clock event reasons over a measured window
description:
  - C(state=started) starts C(timeout <max_seconds> nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,
    clocks_event_reasons.active --format=csv,noheader,nounits -lms <interval_ms>) in its own session, writing
    to I(path) (opened without following a symlink) and its pid to I(path).pid. A sampler left by an earlier
    run for the same file is stopped first. C(timeout) bounds it even when nobody stops it.
  - C(state=stopped) stops that sampler's process group (only a process whose command line is this sampler),
    reads the samples (a half-written last line is skipped) and returns their summary
    (C(module_utils/host/gpu_telemetry.py); the CSV parser is C(module_utils/host/nvidia_smi.py)).
  - A measurement, not a configuration change, so C(changed) is always false. In check mode nothing is
    started or stopped.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  state:
    description: Start the sampler, or stop it and summarize its samples.
    type: str
    choices: [started, stopped]
    required: true
  path:
    description: File the samples go to (its directory is created, mode 0700); C(<path>.pid) holds the pid.
    type: path
    required: true
  interval_ms:
    description: Milliseconds between samples (nvidia-smi C(-lms)).
    type: int
    default: 1000
  max_seconds:
    description: The sampler stops by itself after this many seconds (size it from the benchmark's timeout).
    type: int
    default: 7200
  nvidia_smi:
    description: The nvidia-smi executable.
    type: str
    default: nvidia-smi
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode (nothing runs).
"""

EXAMPLES = r"""
- name: Sample every rank's GPU while the benchmark runs
  gpu_telemetry:
    state: started
    path: "~/.cache/dsv41-telemetry/{{ run_id }}-unlocked.csv"
    max_seconds: 3600

- name: Stop the samplers and summarize
  gpu_telemetry:
    state: stopped
    path: "~/.cache/dsv41-telemetry/{{ run_id }}-unlocked.csv"
  register: telemetry
"""

RETURN = r"""
pid:
  description: The sampler's pid (C(state=started)).
  returned: when state is started and not in check mode
  type: int
stopped:
  description: A running sampler was stopped (C(state=stopped)); false when it had already ended.
  returned: when state is stopped
  type: bool
summary:
  description:
    - Samples, SM clock median/min/max (MHz), power median/max (W), temperature median/max (C) and each active
      clock event reason with the share of samples it was active in.
  returned: when state is stopped
  type: dict
  sample: {samples: 60, sm_mhz: {median: 2268, min: 2268, max: 2418}, power_w: {median: 43.9, max: 44.1},
           temp_c: {median: 85, max: 86}, reasons: {sw_thermal_slowdown: 0.8}}
"""

import os
import shutil
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.gpu_telemetry import read_summary, start, stop
from ansible.module_utils.base.host_label import host_label


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["started", "stopped"], required=True),
            path=dict(type="path", required=True),
            interval_ms=dict(type="int", default=1000),
            max_seconds=dict(type="int", default=7200),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    path = p["path"]
    if module.check_mode:
        module.exit_json(changed=False, msg="check mode: no sampler started or stopped")
    if p["state"] == "stopped":
        stopped = stop(path + ".pid")
        summary = read_summary(path)
        for name in (path, path + ".pid"):
            # only the sampler's own files: a symlink or FIFO someone put at the name is left alone
            try:
                if stat.S_ISREG(os.lstat(name).st_mode):
                    os.unlink(name)
            except OSError:
                pass
        module.exit_json(changed=False, stopped=stopped, summary=summary)
    if p["interval_ms"] < 100 or p["max_seconds"] < 1:
        module.fail_json(msg="%s: interval_ms must be at least 100 and max_seconds at least 1 (got %d, %d)"
                         % (label, p["interval_ms"], p["max_seconds"]), changed=False)
    smi = p["nvidia_smi"] if os.sep in p["nvidia_smi"] else shutil.which(p["nvidia_smi"])
    if not smi:
        module.fail_json(msg="%s: %s not found on PATH" % (label, p["nvidia_smi"]), changed=False)
    directory = os.path.dirname(path)
    try:
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        pid = start(path, smi, p["interval_ms"], p["max_seconds"])
    except OSError as exc:
        module.fail_json(msg="%s: cannot start the GPU sampler into %s: %s" % (label, path, exc), changed=False)
    module.exit_json(changed=False, pid=pid)


def main():
    run_module()


if __name__ == "__main__":
    main()
