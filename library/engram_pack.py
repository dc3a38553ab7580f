#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engram_pack: write one packed Engram shard for one tensor-parallel rank."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engram_pack
short_description: Pack one DeepSeek-V4.1 Engram layer for one tensor-parallel rank
description:
  - Computes this rank's rows from the checkpoint's safetensors headers and writes
    C(engram-l{layer}-r{rank}of{tp_size}.bin) into I(dest), a 4096-byte header followed by each
    row's 256 weight bytes and its 8 scale bytes.
  - Idempotent; a complete, valid shard is left alone (C(changed=false)). A missing, partial or
    stale shard is rewritten through C(.partial), fsync, rename and a directory fsync, so a
    final-named file is always complete. Any failure removes the C(.partial).
  - Takes an exclusive lock on C(dest/.engram-pack.lock) and re-checks free space before writing.
    Written and read pages are dropped from the page cache as it goes (unified-memory nodes).
  - Loads the disks and the checkpoint's NFS export; run it in a maintenance window, usually
    with C(async) and I(progress_file), followed by M(engram_pack_wait). I(max_mib_s) caps its
    transfer rate to spare the export and the disks.
  - SIGTERM or SIGINT stops it cleanly; it removes its C(.partial) and writes its error into
    I(progress_file). After a SIGKILL the C(.partial) stays until M(engram_pack_wait) or the next
    run removes it; the destination lock is released by the kernel in every case.
  - Never touches other files in I(dest), such as shards of another TP size.
  - Beside each shard it writes C(engram-l{layer}-r{rank}of{tp_size}.bin.meta.json) (published like
    the shard, after it), holding the checkpoint identity it was packed from (sha256 of the index, the
    source file's size and mtime_ns, both tensors' dtype, shape and data_offsets, a sha256 of 64
    rows sampled over the rank's range, the packer version). A shard whose checkpoint changed is
    C(stale) with the reason and is repacked. A shard without metadata (an older packer's) is
    trusted only if its sampled rows equal the checkpoint's; a real run then writes its metadata.
  - Refuses, naming host and path and changing nothing, a symlink, directory or FIFO at the
    shard's, C(.partial)'s, metadata's or lock's name, and a left-over C(.partial) owned by another
    uid. The C(.partial) is created with O_EXCL and O_NOFOLLOW. Every OS error is a failure naming
    host and path. Index entries naming files outside the checkpoint directory are refused.
options:
  checkpoint:
    description: Checkpoint directory holding C(model.safetensors.index.json) and the shards.
    type: path
    required: true
  dest:
    description: Engram directory of this node (the source of the container's C(/engram)). Must exist.
    type: path
    required: true
  layer:
    description: Engram layer to pack.
    type: int
    required: true
  rank:
    description: Tensor-parallel rank of this node.
    type: int
    required: true
  tp_size:
    description: Tensor-parallel size of the fleet.
    type: int
    required: true
  margin_bytes:
    description: Free space that must remain after packing; checked before anything is written.
    type: int
    default: 0
  chunk_rows:
    description: Rows read and written per chunk. Mutually exclusive with I(chunk_bytes).
    type: int
  chunk_bytes:
    description: Approximate output bytes per chunk (rounded down to whole rows); default 8 MiB.
    type: int
  lock_timeout:
    description: Seconds to wait for the destination lock; 0 refuses at once if another pack holds it.
    type: float
    default: 0
  progress_file:
    description:
      - Progress record, rewritten atomically from the packer's start to its end.
      - A JSON object with the packer's C(pid), C(run_id), C(layer), C(rank), C(state) (starting,
        waiting_lock, packing, done, failed), C(done_bytes), C(total_bytes), C(percent), C(mib_s),
        C(eta_s), C(path), C(partial_path) and C(message) (what it is doing, or its error).
    type: path
  run_id:
    description: Written into I(progress_file), so a follower can tell this run's record from an earlier one.
    type: str
  max_mib_s:
    description:
      - Cap on the transfer rate in MiB/s (every byte read from the checkpoint is written once, so
        it bounds both the NFS reads and the disk writes); 0 means no cap.
      - The average since writing began stays at or under the cap.
    type: float
    default: 0
  owner:
    description: Owner of the shard file (and of its metadata file).
    type: str
  group:
    description: Group of the shard file (and of its metadata file).
    type: str
  mode:
    description: Mode of the shard file and its metadata file (octal string or number).
    type: raw
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Pack both Engram layers for this rank
  engram_pack:
    checkpoint: /models/DeepSeek-V4.1-Flash
    dest: /home/zurih/dsv41-3x-spark/engram
    layer: "{{ item }}"
    rank: "{{ engram_rank }}"
    tp_size: 3
    margin_bytes: "{{ 2 * 1024 ** 3 }}"
    progress_file: /tmp/engram-pack-l{{ item }}.json
    owner: zurih
    mode: "0644"
  loop: [1, 14]
  async: 1800
  poll: 30

- name: Pack in the background at no more than 200 MiB/s, to be followed with engram_pack_wait
  engram_pack:
    checkpoint: /models/DeepSeek-V4.1-Flash
    dest: /home/zurih/dsv41-3x-spark/engram
    layer: 1
    rank: 1
    tp_size: 3
    max_mib_s: 200
    progress_file: /tmp/dsv41-engram-pack-1.json
    run_id: spark2-l1-20260924T101500
  async: 1800
  poll: 0
  register: pack_job
"""

RETURN = r"""
changed:
  description: Whether the shard was (or in check mode would be) written.
  returned: always
  type: bool
path:
  description: Final shard path.
  returned: success
  type: str
  sample: /engram/engram-l1-r1of3.bin
bytes:
  description: Shard size, 4096 + rows * 264.
  returned: success
  type: int
rows:
  description: Rows in the shard (hi - lo).
  returned: success
  type: int
lo:
  description: First row owned by this rank.
  returned: success
  type: int
hi:
  description: One past the last row owned by this rank.
  returned: success
  type: int
seconds:
  description: Wall time of the write (0 when nothing was written).
  returned: success
  type: float
throughput_mib_s:
  description: Written MiB per second (0 when nothing was written).
  returned: success
  type: float
state_before:
  description: complete, missing, partial or stale, before this run.
  returned: success
  type: str
max_mib_s:
  description: The rate cap that applied (0 for none).
  returned: success
  type: float
reclaimed_lock:
  description: The holder record a packer that died left in the lock file, described; null when there was none.
  returned: success
  type: str
stale_reason:
  description: Why the existing shard was stale (for example C(source size or mtime changed ...)); null otherwise.
  returned: success
  type: str
verified:
  description: C(verified by sampled rows, no metadata) for a complete shard an older packer wrote; null otherwise.
  returned: success
  type: str
meta_path:
  description: The shard's metadata file.
  returned: success
  type: str
  sample: /engram/engram-l1-r1of3.bin.meta.json
metadata_written:
  description: Whether this run wrote the metadata file (never in check mode).
  returned: success
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engram.packer import DEFAULT_CHUNK_BYTES, pack_layer, stop_signals_unwind
from ansible.module_utils.engram.shard_format import EngramError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            checkpoint=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            layer=dict(type="int", required=True),
            rank=dict(type="int", required=True),
            tp_size=dict(type="int", required=True),
            margin_bytes=dict(type="int", default=0),
            chunk_rows=dict(type="int"),
            chunk_bytes=dict(type="int"),
            lock_timeout=dict(type="float", default=0),
            progress_file=dict(type="path"),
            run_id=dict(type="str"),
            max_mib_s=dict(type="float", default=0),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="raw"),
        ),
        mutually_exclusive=[("chunk_rows", "chunk_bytes")],
        supports_check_mode=True,
    )
    params = module.params
    try:
        # A stop signal unwinds through the cleanup: .partial removed, error in the progress file.
        with stop_signals_unwind():
            result = pack_layer(
                params["checkpoint"], params["dest"], params["layer"], params["rank"], params["tp_size"],
                margin_bytes=params["margin_bytes"], check_mode=module.check_mode,
                progress_path=params["progress_file"],
                chunk_bytes=DEFAULT_CHUNK_BYTES if params["chunk_bytes"] is None else params["chunk_bytes"],
                chunk_rows=params["chunk_rows"], lock_timeout=params["lock_timeout"],
                max_mib_s=params["max_mib_s"], run_id=params["run_id"])
    except EngramError as exc:
        module.fail_json(msg=str(exc))
    # Ownership and mode apply to the final file once it exists (in check mode only if it
    # already does; the set_*_if_different helpers then only report).
    # The metadata file gets the shard's owner, group and mode so the two always travel together.
    changed = result["changed"]
    for path in (result["path"], result["meta_path"]):
        if os.path.isfile(path) and not os.path.islink(path):
            changed = module.set_owner_if_different(path, params["owner"], changed)
            changed = module.set_group_if_different(path, params["group"], changed)
            changed = module.set_mode_if_different(path, params["mode"], changed)
    result["changed"] = changed
    module.exit_json(**result)


if __name__ == "__main__":
    main()
