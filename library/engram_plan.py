#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engram_plan: read-only free-space verdict for packing Engram shards."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engram_plan
short_description: Plan packing of DeepSeek-V4.1 Engram shards for one tensor-parallel rank
description:
  - Reads the checkpoint index and safetensors headers (never table data) to find the Engram
    tables, computes the rows this rank owns, inspects the packed shards already in I(dest) and
    returns how many bytes packing needs and whether they fit.
  - Read-only; runs the same way in check mode. A shortfall is a verdict (C(fits=false)), not a
    failure. Malformed checkpoints fail with a message naming the file; index entries naming
    files outside the checkpoint directory are refused.
  - A shard is checked against the checkpoint through its metadata file (index digest, source
    size and mtime, tensor offsets, 64 sampled rows) and reported C(stale) with the reason when the
    checkpoint changed. A shard without metadata is complete only if its sampled rows equal the
    checkpoint's (C(verified)), otherwise stale.
  - A complete shard's content is then checked against the SHA-256 of every byte the packer wrote,
    recorded in its metadata with the file's identity (size, mtime, inode, device). With
    I(content_check=identity) (the default) an unchanged identity is trusted and the whole file is read
    only when the identity changed; with I(content_check=full) (stage A's C(verify) tag) every shard is
    read in full. A difference makes the shard C(stale) (C(content differs)), so the next pack rewrites it.
  - A symlink, directory or FIFO at a shard's, C(.partial)'s or metadata's name fails the plan,
    naming host and path.
  - With I(foreign_search), also lists the Engram files the project did not write on the destination's
    filesystem (C(foreign)), that is files named C(engram-*.bin) under those directories (symlinks never
    followed, other filesystems and I(dest) itself not entered), each identified exactly as M(engram_relocate) does
    before it moves a file (name, header, exact size, another TP size than I(tp_size)). Removing one frees
    its allocated bytes where the shards must go. A file named like a shard that is not identified is listed
    with the reason and is never offered for moving.
  - With I(rooms), measures the free space of other directories of this host (an archive directory, a spare
    volume), or of their nearest existing parent when they do not exist yet.
options:
  checkpoint:
    description: Checkpoint directory holding C(model.safetensors.index.json) and the shards.
    type: path
    required: true
  dest:
    description: Engram directory of this node (the source of the container's C(/engram)). Must exist.
    type: path
    required: true
  rank:
    description: Tensor-parallel rank of this node.
    type: int
    required: true
  tp_size:
    description: Tensor-parallel size of the fleet.
    type: int
    required: true
  layers:
    description: Engram layers to plan.
    type: list
    elements: int
    default: [1, 14]
  margin_bytes:
    description: Free space that must remain after packing.
    type: int
    default: 0
  foreign_search:
    description:
      - Directories to search for foreign Engram files on I(dest)'s filesystem (for example the login user's
        home). None by default.
    type: list
    elements: path
    default: []
  foreign_depth:
    description: Directory levels searched below each of I(foreign_search).
    type: int
    default: 4
  rooms:
    description: Other directories of this host whose free space is reported (C(rooms)).
    type: list
    elements: path
    default: []
  content_check:
    description:
      - How a complete shard's content is compared with the hash recorded when it was packed.
      - C(identity) reads the whole shard only when its size, mtime, inode or device changed since it
        was packed; C(full) reads every shard whole (about 34 GB per shard on the fleet, so minutes per rank).
    type: str
    choices: [identity, full]
    default: identity
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Free-space preflight for this rank
  engram_plan:
    checkpoint: /models/DeepSeek-V4.1-Flash
    dest: /home/zurih/dsv41-3x-spark/engram
    rank: "{{ engram_rank }}"
    tp_size: "{{ groups['ranks'] | length }}"
    margin_bytes: "{{ 2 * 1024 ** 3 }}"
  register: engram_plan

- name: The same, listing old shards of other TP sizes beside the destination and room elsewhere on the host
  engram_plan:
    checkpoint: /models/DeepSeek-V4.1-Flash
    dest: /home/zurih/dsv41-3x-spark/engram
    rank: 1
    tp_size: 3
    margin_bytes: "{{ 2 * 1024 ** 3 }}"
    foreign_search: ["~"]                                    # the login user's home, 4 levels deep
    rooms: [~/dsv41-engram-archive, /data/dsv41-engram-archive]
  register: engram_plan

- name: Refuse to pack when it cannot fit
  ansible.builtin.assert:
    that: engram_plan.fits
    fail_msg: "short by {{ engram_plan.deficit_gib }} GiB"
"""

RETURN = r"""
required_bytes:
  description: Bytes of all planned shards, headers included (sum of 4096 + rows * 264).
  returned: success
  type: int
  sample: 67586019080
shards:
  description: One entry per layer.
  returned: success
  type: list
  elements: dict
  contains:
    layer: {description: Engram layer., type: int}
    path: {description: Final shard path., type: str}
    lo: {description: First row owned by this rank., type: int}
    hi: {description: One past the last row owned by this rank., type: int}
    rows: {description: hi - lo., type: int}
    bytes: {description: Exact shard size., type: int}
    state: {description: complete, missing, partial (only a .partial exists) or stale., type: str}
    stale_reason:
      description:
        - Why the existing file is unusable (only when stale), for example C(index digest changed),
          C(source size or mtime changed), C(offsets changed), C(sampled rows differ) or a header mismatch.
      type: str
    verified:
      description:
        - How a complete shard was trusted beyond its metadata, when not the usual way, for example
          C(verified by sampled rows, no metadata) or C(content hash verified in full) after its mtime or
          inode changed.
      type: str
    meta_path: {description: The shard's metadata file., type: str}
    content:
      description:
        - What the content check found (complete shards with metadata) - C(recorded) (the SHA-256 recorded when
          packed, or null for an older shard), C(identity) (size:mtime_ns:ctime_ns:inode:device now, the key a full check is remembered by), C(hashed)
          (whether the whole file was read) and C(sha256) (what was read, when it was).
      type: dict
to_write_bytes:
  description: Bytes of the shards that are not complete.
  returned: success
  type: int
reclaimable_bytes:
  description: Space of .partial and stale files that packing replaces (allocated size, at most the file size).
  returned: success
  type: int
free_bytes:
  description: Free bytes of the destination filesystem (statvfs f_bavail * f_frsize).
  returned: success
  type: int
margin_bytes:
  description: The margin asked for.
  returned: success
  type: int
fits:
  description: free_bytes + reclaimable_bytes >= to_write_bytes + margin_bytes.
  returned: success
  type: bool
deficit_bytes:
  description: Bytes missing for the plan to fit; 0 when it fits.
  returned: success
  type: int
required_gib:
  description: required_bytes in GiB (2**30), three decimals.
  returned: success
  type: float
  sample: 62.944
to_write_gib:
  description: to_write_bytes in GiB.
  returned: success
  type: float
free_gib:
  description: free_bytes in GiB.
  returned: success
  type: float
deficit_gib:
  description: deficit_bytes in GiB.
  returned: success
  type: float
reclaimable_gib:
  description: reclaimable_bytes in GiB.
  returned: success
  type: float
foreign:
  description:
    - Engram files the project did not write on the destination's filesystem (empty without I(foreign_search)).
  returned: success
  type: list
  elements: dict
  contains:
    path: {description: The file., type: str}
    size: {description: Its size in bytes., type: int}
    allocated_bytes: {description: Bytes it occupies (what removing it frees)., type: int}
    data_bytes: {description: Bytes of its data extents (a copy sends these)., type: int}
    extents: {description: Number of its data extents., type: int}
    layer: {description: Layer, from its name or header., type: int}
    rank: {description: Rank, from its name or header., type: int}
    tp_size: {description: TP size, from its name or header., type: int}
    identified: {description: Whether it is a packed shard of another TP size that may be moved., type: bool}
    reason: {description: Why it is not identified (only then)., type: str}
foreign_search:
  description: Where the search looked (C(directories) with C(searched)), C(depth), C(max_entries), C(truncated).
  returned: success
  type: dict
rooms:
  description:
    - One per I(rooms) entry, in order. C(path), C(exists), C(free_bytes) and C(block) measured at C(measured_at)
      (the nearest existing parent when it does not exist), C(same_filesystem) as I(dest), C(problem) (why it
      cannot take files, or null).
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engram.foreign import survey
from ansible.module_utils.engram.plan import plan
from ansible.module_utils.engram.shard_format import ENGRAM_LAYERS, EngramError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            checkpoint=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            rank=dict(type="int", required=True),
            tp_size=dict(type="int", required=True),
            layers=dict(type="list", elements="int", default=list(ENGRAM_LAYERS)),
            margin_bytes=dict(type="int", default=0),
            foreign_search=dict(type="list", elements="path", default=[]),
            foreign_depth=dict(type="int", default=4),
            rooms=dict(type="list", elements="path", default=[]),
            content_check=dict(type="str", choices=["identity", "full"], default="identity"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["foreign_depth"] < 0:
        module.fail_json(msg="foreign_depth must be >= 0, got %d" % params["foreign_depth"])
    try:
        result = plan(params["checkpoint"], params["dest"], params["rank"], params["tp_size"],
                      layers=params["layers"], margin_bytes=params["margin_bytes"],
                      content_check=params["content_check"])
        result.update(survey(params["dest"], params["tp_size"], params["foreign_search"], params["rooms"],
                             depth=params["foreign_depth"]))
    except EngramError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
