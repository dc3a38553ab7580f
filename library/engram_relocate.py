#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engram_relocate: move foreign Engram shards to another volume or host, back, or delete them."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engram_relocate
short_description: Relocate, restore or delete foreign (other TP size) Engram shards to make room for packing
description:
  - Opt-in room making for stage A. spark2 holds about 101.38 GB of old TP2 shards
    (C(engram-l1-r1of2.bin), C(engram-l14-r1of2.bin)) on the filesystem its TP3 shards must go to. This
    module moves named foreign shards to another volume of the same host or to another host with room
    (C(action=move)), moves them back (C(action=restore), for rollback), or deletes files the operator
    names with their sha256 (C(action=delete)). The project never does any of this on its own.
  - Runs on the head (C(delegate_to) the head), since only the head reaches the workers, by ssh with the
    launcher's key, and workers cannot reach each other, so the head runs a small Python program on the
    source host (sender) and on the destination host (receiver) with C(ssh ... python3 -c) and relays
    the data between them. The workers need only C(python3); nothing is installed on them.
  - Only packed Engram shards of another TP size than I(tp_size) are ever moved or deleted, identified by
    name (C(engram-l{layer}-r{rank}of{tp}.bin)), header (magic, layer, the rank's row range of N, 264 row
    bytes, zero padding) and exact size; never a symlink, never a file in I(active_dir), never a shard of
    the fleet's own TP size. Every check (identification, I(active_dir), destination directory, room on
    the destination by its C(statvfs)) is made for every file before anything moves; one refusal and
    nothing is changed. Messages name the host, the file and the value.
  - Each file is copied hole-aware (sparse files stay sparse) into a temporary name
    C(.NAME.dsv41-relocate.partial) in the destination directory, fsynced and read back; it is published
    under its final name only when the sha256 the sender computed over what it read (holes as zeros)
    equals the one the receiver computes over its copy, and never over an existing file. The copy
    keeps the source's mode and mtime. It is then recorded in I(manifest), and only then the source is
    removed, if it is still the very file that was sent (inode, size and mtime). A failure at any point
    leaves the source in place and no file under the final name; the temporary copy is removed (a
    receiver killed outright can leave it; the next run removes it).
  - Read and written pages are dropped from the page cache on both hosts as it goes (unified memory).
    The data crosses the head's network twice (in and out); run it in a maintenance window.
  - Check mode computes every verdict (C(plan)) on the hosts, read-only, without writing anything (not
    even the manifest); it fails, like the real run would, when something is refused.
options:
  action:
    description:
      - C(move) relocates I(files) from I(src_host) into I(dest_dir) on I(dst_host).
      - C(restore) moves the files I(manifest) records as moved back to where they came from, byte-identical
        by the manifest's sha256, with their mode and mtime (all of them, or those named in I(files) by
        file name or original path). Deleted files cannot be restored and are listed in C(plan.not_restorable).
      - C(delete) deletes I(files) on I(src_host), each given with its C(sha256); every file is hashed first
        and nothing is deleted unless all of them match.
    type: str
    choices: [move, restore, delete]
    default: move
  files:
    description:
      - Absolute paths on I(src_host), or dicts C({path, sha256}). C(sha256) is required for C(action=delete)
        (the lowercase hex sha256 of the file's content; a sparse file's holes count as zeros, like
        C(sha256sum)).
      - For C(action=restore), optional file names or original paths to restore; all moved files when omitted.
    type: list
    elements: raw
  src_host:
    description:
      - ssh target (C(user@host) or C(host)) holding I(files); omitted for the head itself.
      - For C(action=restore), restores only the files the manifest records as moved from this ssh target
        (every source host when omitted), so that I(active_dir) is that host's.
    type: str
  dst_host:
    description:
      - ssh target (C(user@host) or C(host)) of I(dest_dir); omitted for the head itself. The same host as
        I(src_host) moves to another volume of that host (a destination on the source's own filesystem is
        refused, as it frees nothing).
    type: str
  dest_dir:
    description:
      - Existing directory on I(dst_host) to move I(files) into (not a symlink, not inside I(active_dir)).
        Required for C(action=move).
      - An absolute path as the destination host sees it (not expanded on the head).
    type: str
  active_dir:
    description:
      - The active Engram directory (the source of the containers' C(/engram), for example
        C(/home/zurih/dsv41-3x-spark/engram)), resolved on each host involved. Files inside it are never
        moved or deleted, and nothing is moved into it. It must exist on those hosts.
      - An absolute path as the hosts see it (not expanded on the head).
    type: str
    required: true
  dst_active_dir:
    description:
      - The active Engram directory on I(dst_host), when it differs from I(active_dir) (the head's
        C(/home/mia/dsv41-engram) beside a worker's). Default I(active_dir). For C(action=move) only.
    type: str
  tp_size:
    description:
      - Tensor-parallel size of the fleet. Shards named C(of{tp_size}) are never touched. Required for
        C(action=move) and C(action=delete).
    type: int
  manifest:
    description:
      - JSON file on the head recording every file moved, restored or deleted (C(entries)), rewritten
        atomically after each step; C(action=restore) reads it. A flock on C(MANIFEST.lock) keeps two runs apart.
    type: path
    required: true
  margin_bytes:
    description:
      - Free space that must remain on each destination filesystem after the copies. Set it to what that
        host still needs for its own shards (for example spark3's own TP3 pack) plus headroom.
      - The copies are counted at what a hole-aware copy can allocate (the data extents rounded out to whole
        blocks, plus 0.1% for block maps); for a file without holes, its size plus 0.1%.
    type: int
    default: 0
  ssh_options:
    description:
      - Options for ssh, before the host, for example C([-i, /home/mia/.ssh/id_ed25519_shared]). C(-T) is
        always added. The default is C([-o, BatchMode=yes, -o, ConnectTimeout=15, -o, ServerAliveInterval=15,
        -o, ServerAliveCountMax=4]); a given list replaces it.
    type: list
    elements: str
  ssh_executable:
    description: ssh client to run on the head.
    type: str
    default: ssh
  remote_python:
    description: Python 3 interpreter on the remote hosts.
    type: str
    default: python3
  host_label:
    description: Name of I(src_host) in messages (for example C(spark2)); default the ssh target without its user.
    type: str
  create_dirs:
    description:
      - Create I(dest_dir) on I(dst_host) and the directory of I(manifest) on the head when they are missing
        (mode 0755), once every check has passed. Room, rights and the active directory are then judged on
        the nearest existing parent; check mode reports the directory as to be created
        (C(plan.destination.created)) and creates nothing.
    type: bool
    default: false
  bandwidth_limit:
    description:
      - Cap on the data each copy sends, in bytes per second (0, the default, means no cap). The data crosses
        the head's network twice; a cap keeps a relocation from saturating it while the fleet serves. Holes of
        sparse files are not sent and are not paced.
    type: int
    default: 0
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: What relocating spark2's TP2 shards to spark3 would do (nothing is written)
  engram_relocate:
    action: move
    files:
      - /home/zurih/dsv41-engram/engram-l1-r1of2.bin
      - /home/zurih/dsv41-engram/engram-l14-r1of2.bin
    src_host: zurih@spark2
    dst_host: zurih@spark3
    dest_dir: /data/dsv41-tp2-archive
    active_dir: /home/zurih/dsv41-3x-spark/engram
    tp_size: 3
    margin_bytes: "{{ 70 * 1024 ** 3 }}"
    manifest: /home/mia/dsv41-records/engram-relocate.json
    ssh_options: [-i, /home/mia/.ssh/id_ed25519_shared, -o, BatchMode=yes]
    host_label: spark2
  delegate_to: spark1
  check_mode: true
  register: relocate_plan

- name: Move them (opt-in, maintenance window)
  engram_relocate:
    action: move
    files:
      - /home/zurih/dsv41-engram/engram-l1-r1of2.bin
      - /home/zurih/dsv41-engram/engram-l14-r1of2.bin
    src_host: zurih@spark2
    dst_host: zurih@spark3
    dest_dir: /data/dsv41-tp2-archive
    active_dir: /home/zurih/dsv41-3x-spark/engram
    tp_size: 3
    margin_bytes: "{{ 70 * 1024 ** 3 }}"
    manifest: /home/mia/dsv41-records/engram-relocate.json
    ssh_options: [-i, /home/mia/.ssh/id_ed25519_shared, -o, BatchMode=yes]
    create_dirs: true                          # the archive directory and the manifest's, when missing
    bandwidth_limit: "{{ 200 * 1024 ** 2 }}"   # 200 MiB/s: the head's network keeps room for serving
  delegate_to: spark1
  async: 7200
  poll: 30

- name: Rollback - bring them back to spark2
  engram_relocate:
    action: restore
    active_dir: /home/zurih/dsv41-3x-spark/engram
    manifest: /home/mia/dsv41-records/engram-relocate.json
    ssh_options: [-i, /home/mia/.ssh/id_ed25519_shared, -o, BatchMode=yes]
  delegate_to: spark1

- name: Delete one, confirmed disposable, by its sha256
  engram_relocate:
    action: delete
    files:
      - path: /home/zurih/dsv41-engram/engram-l14-r1of2.bin
        sha256: "{{ tp2_l14_sha256 }}"
    src_host: zurih@spark2
    active_dir: /home/zurih/dsv41-3x-spark/engram
    tp_size: 3
    manifest: /home/mia/dsv41-records/engram-relocate.json
  delegate_to: spark1
"""

RETURN = r"""
changed:
  description: Whether files were (in check mode, would be) moved, restored or deleted.
  returned: always
  type: bool
action:
  description: The action run.
  returned: always
  type: str
plan:
  description:
    - Every verdict, computed before anything moved (in check mode, all there is). C(files) (per file
      C(file), C(src_path), C(dst_path), C(size), C(allocated_bytes), C(verdict) move, restore, delete,
      already_moved, already_restored, already_deleted or refused, C(reason), C(shard), C(need_bytes)),
      C(refusals), C(ok), for move C(destination) (C(free_bytes), C(need_bytes), C(margin_bytes), C(fits),
      C(deficit_bytes), C(free_after_bytes), C(dev), C(created) (the directory is to be created) and after a real
      run C(created_dirs)) and C(src_filesystems) (C(dev), C(free_bytes), C(freed_bytes), C(free_after_bytes),
      what moving or deleting leaves free on each source filesystem), for restore
      C(destinations) and C(not_restorable).
  returned: when the checks ran
  type: dict
entries:
  description:
    - The manifest entries this run wrote. Each has C(file), C(src_host), C(src_path), C(dst_host),
      C(dst_path), C(size), C(sha256), C(mode), C(mtime_ns), C(state) (copied, moved, restored or
      deleted) and C(moved_at), C(restored_at) or C(deleted_at).
    - Also returned on failure, for what happened before it.
  returned: always
  type: list
  elements: dict
manifest:
  description: The manifest file.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engram.packer import stop_signals_unwind
from ansible.module_utils.engram.relocate import delete_disposable, relocate, restore
from ansible.module_utils.engram.relocate_plan import ANY_HOST, plan_delete, plan_move, plan_restore
from ansible.module_utils.engram.relocate_runner import Manifest, Runner
from ansible.module_utils.engram.shard_format import EngramError


def file_items(files):
    """``files`` as [{path, sha256}]; ValueError naming the bad element."""
    items = []
    for item in files or []:
        if isinstance(item, str):
            items.append({"path": item, "sha256": None})
        elif isinstance(item, dict) and isinstance(item.get("path"), str) and not set(item) - {"path", "sha256"}:
            items.append({"path": item["path"], "sha256": item.get("sha256")})
        else:
            raise ValueError("files: %r is neither a path nor a {path, sha256} dict" % (item,))
    return items


def public(plan):
    """The plan without the private keys the run carries along (``_entry``, ``_copy``)."""
    if plan is None:
        return None
    return dict(plan, files=[{k: v for k, v in f.items() if not k.startswith("_")} for f in plan["files"]])


def run(module, runner, manifest, items):
    params, check = module.params, module.check_mode
    paths = [i["path"] for i in items]
    common = dict(runner=runner, active_dir=params["active_dir"])
    if params["action"] == "move":
        args = (params["src_host"], params["dst_host"], params["dest_dir"])
        extra = dict(common, tp_size=params["tp_size"], margin_bytes=params["margin_bytes"], manifest=manifest,
                     create_dest=params["create_dirs"], dst_active_dir=params["dst_active_dir"])
        if check:
            return plan_move(paths, *args, **extra), "move"
        return relocate(paths, *args, bandwidth_limit=params["bandwidth_limit"], **extra)
    if params["action"] == "restore":
        extra = dict(common, margin_bytes=params["margin_bytes"], only=paths or None,
                     from_host=params["src_host"] if params["src_host"] else ANY_HOST)
        if check:
            return plan_restore(manifest, **extra), "restore"
        return restore(manifest, bandwidth_limit=params["bandwidth_limit"], **extra)
    extra = dict(common, tp_size=params["tp_size"], manifest=manifest)
    if check:
        return plan_delete(items, params["src_host"], **extra), "delete"
    return delete_disposable(items, params["src_host"], **extra)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", choices=["move", "restore", "delete"], default="move"),
            files=dict(type="list", elements="raw"),
            src_host=dict(type="str"),
            dst_host=dict(type="str"),
            dest_dir=dict(type="str"),
            active_dir=dict(type="str", required=True),
            dst_active_dir=dict(type="str"),
            tp_size=dict(type="int"),
            manifest=dict(type="path", required=True),
            margin_bytes=dict(type="int", default=0),
            ssh_options=dict(type="list", elements="str"),
            ssh_executable=dict(type="str", default="ssh"),
            remote_python=dict(type="str", default="python3"),
            host_label=dict(type="str"),
            create_dirs=dict(type="bool", default=False),
            bandwidth_limit=dict(type="int", default=0),
        ),
        required_if=[("action", "move", ("files", "dest_dir", "tp_size")),
                     ("action", "delete", ("files", "tp_size"))],
        supports_check_mode=True,
    )
    params = module.params
    for name in ("margin_bytes", "bandwidth_limit"):
        if params[name] < 0:
            module.fail_json(msg="%s must be >= 0, got %d" % (name, params[name]), entries=[])
    try:
        items = file_items(params["files"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), entries=[])
    labels = {params["src_host"]: params["host_label"]} if params["host_label"] else None
    runner = Runner(params["ssh_executable"], params["ssh_options"], params["remote_python"], labels=labels)
    manifest = Manifest(params["manifest"], create_dir=params["create_dirs"])
    result = {"action": params["action"], "manifest": params["manifest"], "entries": manifest.recorded}
    try:
        if module.check_mode:
            manifest.load(must_exist=params["action"] == "restore")
            plan, verb = run(module, runner, manifest, items)
            result["plan"] = public(plan)
            if not plan["ok"]:
                module.fail_json(msg="; ".join(plan["refusals"]) + "; nothing would be done", changed=False,
                                 **result)
            result["changed"] = any(f["verdict"] == verb for f in plan["files"])
        else:
            with stop_signals_unwind(), manifest.locked(must_exist=params["action"] == "restore"):
                plan, _done = run(module, runner, manifest, items)
            result.update(plan=public(plan), changed=bool(manifest.recorded))
    except EngramError as exc:
        module.fail_json(msg=str(exc), changed=bool(manifest.recorded), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
