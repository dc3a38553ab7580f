#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module fleet_snapshot: one host's whole declared-state snapshot for the drift check."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_snapshot
short_description: Gather everything the drift check compares, on one host, in one module run
description:
  - Read-only; runs the same in check mode. One round trip per host gathers the clock-lock unit and the
    journal's verdict on the lock, the launcher C(.env) (head only), the adapter files and their
    registration in the import hook, the adapters inside the image, the serving container and its image
    id and digests, the engine's latest boot (packed per layer, KV pool, autotune, Ready), the shards on
    disk, MemAvailable, every container, and the default target and display manager.
  - The comparison with the inventory is done on the control node (C(bin/fleet-drift)); this module only
    reports. A probe that fails is listed in C(snapshot.errors) and the others still run.
  - Secrets never leave the host. C(.env) values under a secret name come back as C((secret)) when they
    equal the declared value and C((secret changed)) otherwise; declared secret values are masked
    (C(***)) inside every other returned string.
  - Logic in C(module_utils/drift/snapshot.py), on the project's parsers (clock_lock, engine_log_source,
    pack_plan, docker_ps, contention, meminfo, import_hook, launcher_env, secret_rule).
options:
  host_label:
    description: Name of this host in the result and messages.
    type: str
    required: true
  rank:
    description: Tensor-parallel rank of this host.
    type: int
    required: true
  tp_size:
    description: Tensor-parallel size of the fleet.
    type: int
    required: true
  container:
    description: This host's serving container (C(dsv41-head) or C(dsv41-worker)).
    type: str
    required: true
  serving_prefix:
    description: Containers whose name starts with this are serving containers.
    type: str
    default: dsv41-
  docker_bin:
    description: The docker command.
    type: str
    default: docker
  image:
    description: The declared engine image (used when no container runs).
    type: str
    default: dsv41-sglang:tp3
  clock_unit:
    description: The clock-lock unit.
    type: str
    default: nvidia-clock-lock.service
  clock_reset_unit:
    description: The clocks experiment's reset unit (its file must not be installed).
    type: str
    default: nvidia-clock-reset.service
  clock_min_mhz:
    description: Declared lower bound of the lock, MHz.
    type: int
    default: 0
  clock_max_mhz:
    description: Declared upper bound of the lock, MHz.
    type: int
    default: 2200
  nvidia_smi:
    description: The nvidia-smi binary the unit runs.
    type: path
    default: /usr/bin/nvidia-smi
  env_path:
    description: The launcher C(.env) (on the head; empty on workers, where no C(.env) is read).
    type: str
    default: ""
  env_settings:
    description: Declared non-secret C(.env) settings.
    type: dict
    default: {}
  env_secrets:
    description: Declared secret C(.env) values (the API key); compared here, never returned.
    type: dict
    default: {}
    no_log: true
  launcher_dir:
    description: The launcher checkout on this host (adapters in its C(adapter/)).
    type: path
    required: true
  adapters_enabled:
    description: Adapter module name to the switch gating it in the import hook.
    type: dict
    default: {}
  adapters_hook:
    description: The import hook file name.
    type: str
    default: sitecustomize.py
  adapters_image_dir:
    description: Where the adapters live inside the engine image.
    type: str
    default: /sgl-workspace/adapter
  checkpoint:
    description: The checkpoint directory the shards are checked against.
    type: path
    required: true
  engram_dir:
    description: Declared Engram directory (used when the container has no C(/engram) mount).
    type: path
    required: true
  layers:
    description: Engram layers.
    type: list
    elements: int
    default: [1, 14]
  shards_verified:
    description:
      - Shards whose whole content an earlier drift run already hashed and found equal to the hash recorded
        when they were packed, as {shard path - identity} (C(shards[].content.identity) of that run, size:mtime:ctime:inode:device). Every
        complete shard is read in full unless its identity now is the one given here, so a shard is read
        once per change, not once per run.
    type: dict
    default: {}
  meminfo:
    description: The meminfo file.
    type: path
    default: /proc/meminfo
  declared:
    description:
      - What the inventory declares for this host that is compared on the control node (adapter manifest,
        expected clock command, MemAvailable floor, contention inventory, desktop, accepted findings).
        Returned unchanged as C(declared), so one result carries both sides of the comparison.
    type: dict
    default: {}
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Snapshot this host
  fleet_snapshot:
    host_label: "{{ inventory_hostname }}"
    rank: "{{ dsv41_rank }}"
    tp_size: 3
    container: dsv41-head
    launcher_dir: "{{ dsv41_launcher_dir }}"
    checkpoint: "{{ dsv41_checkpoint_dir }}"
    engram_dir: "{{ dsv41_engram_dir }}"
    env_path: /home/mia/dsv41-3x-spark/.env
    env_settings: {MAX_RUNNING_REQUESTS: "4"}
    env_secrets: {API_KEY: "{{ dsv41_api_key }}"}
  become: true
  register: drift_snapshot
"""

RETURN = r"""
snapshot:
  description:
    - C(host), C(errors) (list of {area, message}), C(clock), C(env) (head only, declared and actual, masked),
      C(adapters), C(image_adapters), C(container), C(image), C(boot), C(shards), C(memory), C(containers),
      C(desktop). A failed probe's key is null and its error is in C(errors).
  returned: always
  type: dict
declared:
  description: The I(declared) option, unchanged.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base import probe
from ansible.module_utils.drift import snapshot as drift_snapshot


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_label=dict(type="str", required=True),
            rank=dict(type="int", required=True),
            tp_size=dict(type="int", required=True),
            container=dict(type="str", required=True),
            serving_prefix=dict(type="str", default="dsv41-"),
            docker_bin=dict(type="str", default="docker"),
            image=dict(type="str", default="dsv41-sglang:tp3"),
            clock_unit=dict(type="str", default="nvidia-clock-lock.service"),
            clock_reset_unit=dict(type="str", default="nvidia-clock-reset.service"),
            clock_min_mhz=dict(type="int", default=0),
            clock_max_mhz=dict(type="int", default=2200),
            nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"),
            env_path=dict(type="str", default=""),
            env_settings=dict(type="dict", default={}),
            env_secrets=dict(type="dict", default={}, no_log=True),
            launcher_dir=dict(type="path", required=True),
            adapters_enabled=dict(type="dict", default={}),
            adapters_hook=dict(type="str", default="sitecustomize.py"),
            adapters_image_dir=dict(type="str", default="/sgl-workspace/adapter"),
            checkpoint=dict(type="path", required=True),
            engram_dir=dict(type="path", required=True),
            layers=dict(type="list", elements="int", default=[1, 14]),
            shards_verified=dict(type="dict", default={}),
            meminfo=dict(type="path", default="/proc/meminfo"),
            declared=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["tp_size"] < 1 or not 0 <= p["rank"] < p["tp_size"]:
        module.fail_json(msg="%s: rank %d is outside 0..%d for tp_size %d"
                         % (p["host_label"], p["rank"], p["tp_size"] - 1, p["tp_size"]))
    snap = drift_snapshot.snapshot(p, probe.make_runner(module), module.run_command)
    module.exit_json(changed=False, snapshot=snap, declared=p["declared"])


if __name__ == "__main__":
    main()
