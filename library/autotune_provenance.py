#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: record where a rank's autotune cache came from; move aside one another image or kernel tuned."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: autotune_provenance
short_description: Keep a rank's FlashInfer autotune cache only for the image and kernel it was tuned under
description:
  - >-
    The retention adapter (stage B) reuses a rank's autotune cache while its launch fingerprint matches; the
    fingerprint does not cover the image or the kernel. This module keeps the cache's provenance beside it
    (C(<cache_root>/.dsv41-provenance.json): the image id and the kernel of the boot that last used it) and,
    before a restart, compares it with what the next boot runs.
  - >-
    C(state=current) (before a restart): when the recorded image id or kernel differs from the next boot's, the
    whole cache is moved to C(<cache_root>.invalidated/<UTC time>/) on this rank (kept, never deleted), so the
    next boot tunes from scratch. A cache without a record is kept (nothing says it is incompatible).
  - C(state=present) (after a boot) records the image id and kernel the boot ran and the cache's files.
  - The logic is in C(module_utils/adapters/autotune_provenance.py).
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  state:
    description:
      - C(current) checks the cache against the next boot and moves it aside when another image or kernel tuned
        it; C(present) records the provenance of the boot that just ran.
    type: str
    required: true
    choices: [current, present]
  cache_root:
    description:
      - The rank's autotune cache directory (the container sees it through the C(~/.cache) mount as
        C(/root/.cache/sglang/flashinfer/autotune)). C(~) is the remote user's home.
    type: path
    default: ~/.cache/sglang/flashinfer/autotune
  image:
    description:
      - The image reference the next boot runs (C(state=current)) or ran (C(state=present)), resolved to its id
        with C(docker image inspect) on this rank. One of I(image) and I(image_id) is required.
    type: str
  image_id:
    description: The image id itself (C(sha256:...)), e.g. the running container's C(.Image).
    type: str
  kernel:
    description: The kernel to compare or record (default this rank's running kernel, C(uname -r)).
    type: str
  force:
    description:
      - >-
        With C(state=current), move the cache aside even when this rank's is not stale, because another rank's is
        (I(why) says which): every rank retunes together, since a hit on one rank and a retune on another
        desynchronises the collectives.
    type: bool
    default: false
  why:
    description: With I(force), the reason the play gives (which rank is stale and why); shown in I(msg).
    type: str
  stamp:
    description:
      - Name of the directory an invalidated cache moves to (default the UTC time, C(20261204T041500Z)); letters,
        digits, C(.), C(_) and C(-) only.
    type: str
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode; C(state=current) then reports what it would move, C(state=present) what it would record.
  - A provenance record that cannot be read fails the task naming the file (nothing is moved).
"""

EXAMPLES = r"""
- name: Move aside an autotune cache another image or kernel tuned (before a restart)
  autotune_provenance:
    state: current
    image: dsv41-sglang:tp3

- name: Record the provenance of the boot that just ran
  autotune_provenance:
    state: present
    image_id: "{{ (running.stdout | from_json | first).Image }}"
"""

RETURN = r"""
cache_root: {description: The cache directory, returned: always, type: str}
image_id: {description: The image id compared or recorded, returned: always, type: str}
kernel: {description: The kernel compared or recorded, returned: always, type: str}
entries: {description: The cache's files (relative paths) before any move, returned: always, type: list, elements: str}
recorded: {description: The provenance record found (null when none), returned: always, type: dict}
stale: {description: Whether another image or kernel tuned this rank's cache, returned: always, type: bool}
reasons: {description: Why the cache is stale, one line each, returned: always, type: list, elements: str}
moved_to: {description: Where the stale cache was (or, in check mode, would be) moved; null when kept, returned: always, type: str}
msg: {description: One line for the play output, returned: always, type: str}
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.adapters import autotune_provenance as prov
from ansible.module_utils.base.host_label import host_label


def image_id_of(module, image, who):
    rc, out, err = module.run_command(["docker", "image", "inspect", image])
    try:
        found = json.loads(out)[0]["Id"] if rc == 0 else None
    except (ValueError, IndexError, KeyError, TypeError):
        found = None
    if not found:
        module.fail_json(msg="%s: image %s cannot be inspected (rc %s: %s): its autotune cache cannot be checked "
                             "against it" % (who, image, rc, (err or out).strip()[:300]), changed=False)
    return found


def run(params, check_mode, resolve_image):
    """The module's work on plain parameters; returns the result dict (``failed`` with ``msg`` on bad input)."""
    who = host_label(params.get("host_label"))
    cache_root = os.path.expanduser(params["cache_root"])
    if params.get("stamp") and not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", params["stamp"]):
        return {"failed": True, "changed": False, "msg": "%s: stamp %r is not a plain directory name" % (who, params["stamp"])}
    image_id = params.get("image_id") or resolve_image(params["image"], who)
    kernel = params.get("kernel") or os.uname().release
    result = {"cache_root": cache_root, "image_id": image_id, "kernel": kernel, "entries": [], "recorded": None,
              "stale": False, "reasons": [], "moved_to": None, "changed": False}
    try:
        state = prov.check(cache_root, image_id, kernel)
    except (prov.ProvenanceError, OSError) as exc:
        return dict(result, failed=True, msg="%s: %s" % (who, exc))
    result.update(entries=state["entries"], recorded=state["recorded"], reasons=state["reasons"],
                  stale=state["stale"])
    if params["state"] == "current":
        forced = bool(params.get("force")) and bool(state["entries"]) and not state["stale"]
        if not state["stale"] and not forced:
            return dict(result, msg="%s: autotune cache %s: %s" % (who, cache_root, state["note"]))
        if forced:
            state["note"] = "kept by itself, moved with the others: %s" % (params.get("why") or "another rank's cache is stale")
        dest = prov.invalidated_dir(cache_root, params.get("stamp"))
        result.update(moved_to=dest, changed=True)
        if not check_mode:
            try:
                prov.invalidate(cache_root, dest)
            except (prov.ProvenanceError, OSError) as exc:
                return dict(result, failed=True, changed=False,
                            msg="%s: the stale autotune cache %s could not be moved to %s: %s" % (who, cache_root, dest, exc))
        return dict(result, msg="%s: autotune cache %s %s to %s, so the next boot tunes from scratch (%s)" % (
            who, cache_root, "would be moved" if check_mode else "moved", dest, state["note"]))
    if not state["entries"]:
        return dict(result, msg="%s: no autotune cache under %s: nothing to record" % (who, cache_root))
    doc = prov.document(image_id, kernel, params.get("image"), state["entries"])
    if prov.same_record(state["recorded"], doc):
        return dict(result, msg="%s: autotune cache provenance already recorded (%s, kernel %s)"
                                % (who, prov.short_id(image_id), kernel))
    if not check_mode:
        try:
            prov.write(cache_root, doc)
        except OSError as exc:
            return dict(result, failed=True, msg="%s: cannot write %s: %s" % (who, prov.provenance_path(cache_root), exc))
    return dict(result, changed=True, msg="%s: autotune cache provenance %s: %d file(s) tuned under %s, kernel %s" % (
        who, "would be recorded" if check_mode else "recorded", len(state["entries"]), prov.short_id(image_id), kernel))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["current", "present"]),
            cache_root=dict(type="path", default="~/.cache/sglang/flashinfer/autotune"),
            force=dict(type="bool", default=False),
            why=dict(type="str"),
            image=dict(type="str"),
            image_id=dict(type="str"),
            kernel=dict(type="str"),
            stamp=dict(type="str"),
            host_label=dict(type="str"),
        ),
        required_one_of=[["image", "image_id"]],
        supports_check_mode=True,
    )
    result = run(module.params, module.check_mode, lambda image, who: image_id_of(module, image, who))
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
