#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module engine_image_check: may a candidate engine image (a pinned canary) be timed on TP3?"""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_image_check
short_description: Judge a candidate engine image against the running one before any boot (hooks, G=4, vocab)
description:
  - Reads Python source out of two engine images on this node with C(docker run --rm --network none
    --entrypoint cat IMAGE FILE) (no engine starts, nothing is written; each one-off container is removed)
    and parses it with C(ast), never executing it.
  - From the candidate's own import hook (C(sitecustomize.py) in I(adapter_dir)) it takes the adapters that
    hook installs on the TP3 launcher and, from each adapter file (the module the hook imports the install
    function from, or C(<name>.py) for an C(install_<name>) the hook defines itself), every engine symbol the
    adapter reads, wraps or assigns.
  - C(hook_signatures) - every such symbol exists in the candidate with the parameter list it has in
    I(reference_image), and every module the hook's finder wraps exists.
  - C(g4_guard) - every weight-shape guard C(<x>.shape == (G, N, K)) in I(guard_module) admits
    I(local_groups), or sits in a function an adapter of the candidate replaces; with I(settings), the
    candidate's import hook must also arm that adapter under them (a replacement whose switch is off never
    installs).
  - C(vocab_padding) - the candidate pads the vocabulary (C(DEFAULT_VOCAB_PADDING_SIZE) in I(vocab_module))
    so that each of I(tp_size) ranks holds the same number of vocab rows as in the reference.
  - Reports every problem of every check and fails only when the candidate image is not on the node or
    a file cannot be parsed; the caller decides what a failed check refuses. Runs the same in check mode.
options:
  image:
    description: The candidate, as an immutable reference (C(repo@sha256:...) or an image id C(sha256:...)).
    type: str
    required: true
  reference_image:
    description: The image the fleet runs now (where the adapters are known to work).
    type: str
    required: true
  source_root:
    description: Directory in both images that holds the engine's Python package (C(sglang/...)).
    type: str
    default: /sgl-workspace/sglang/python
  adapter_dir:
    description: Directory in the candidate image holding the launcher checkout's C(adapter/) files.
    type: str
    default: /sgl-workspace/adapter
  guard_module:
    description: The model module whose dispatch guards are judged.
    type: str
    default: sglang.srt.models.deepseek_v4
  vocab_module:
    description: The module defining C(DEFAULT_VOCAB_PADDING_SIZE).
    type: str
    default: sglang.srt.layers.vocab_parallel_embedding
  local_groups:
    description: The attention output groups a rank holds (TP3 G=4).
    type: int
    default: 4
  vocab_size:
    description: The model's vocabulary size before padding.
    type: int
    default: 129280
  tp_size:
    description: Tensor-parallel size.
    type: int
    default: 3
  docker:
    description: The docker command.
    type: str
    default: docker
  command_timeout:
    description: Seconds each docker command may take (a one-off container of a large image on a busy node
      is slow to create, but a daemon that stops answering must not hold the play).
    type: int
    default: 120
  settings:
    description:
      - The launcher settings the candidate will boot with, switch name to value. A switch not set is off, as
        the launcher passes C(${X:-0}).
      - Given, a guard replaced by an adapter passes only when the import hook installs that adapter with these
        values (on every boot, or armed by its switches); omitted, that is not judged.
    type: dict
  host_label:
    description: Name used in messages (defaults to the host name).
    type: str
author:
  - DSV41 fleet team
"""

EXAMPLES = r"""
- name: Judge the pinned canary against the running image
  engine_image_check:
    image: dsv41-sglang@sha256:3f0c0d5e2b8a4c1e9f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e
    reference_image: dsv41-sglang:tp3
    settings:
      DSV41_WO_A_W8: "1"
  register: canary_checks
"""

RETURN = r"""
image_id:
  description: The candidate's image id.
  returned: success
  type: str
checks:
  description: Per check (C(hook_signatures), C(g4_guard), C(vocab_padding)), C(problems) (list of messages,
    empty when it passes) and C(rows) (the table it was judged on).
  returned: success
  type: dict
problems:
  description: Every check's problems, each prefixed with the check's name.
  returned: always
  type: list
  elements: str
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.adapters.image_checks import CHECKS, adapter_modules, image_checks
from ansible.module_utils.adapters.engine_source import Engine, SourceError
from ansible.module_utils.adapters.hook import HookError, read_hook
from ansible.module_utils.base.probe import make_runner, tail_text
from ansible.module_utils.base.host_label import host_label


def image_reader(run, docker, image, root):
    """``read(relpath)`` of files under ``root`` in ``image`` (None when the file is not there: cat's exit 1),
    cached. Any other failure (docker's own 125-127, a timeout, no docker) raises ValueError saying so, rather
    than read as a missing file and blame the image."""
    cache = {}

    def read(rel):
        path = "%s/%s" % (root.rstrip("/"), rel) if rel else root
        if path not in cache:
            rc, out, err = run([docker, "run", "--rm", "--network", "none", "--entrypoint", "cat", image, path])
            if rc not in (0, 1):
                raise ValueError("could not be judged: reading %s in %s failed (%s)"
                                 % (path, image, tail_text(err) or "exit status %s" % rc))
            cache[path] = out if rc == 0 else None
        return cache[path]
    return read


def judge(run, p, label):
    """The module result (without ``changed``); raises ValueError saying what is missing (worded to follow
    "image <ref> "), SourceError or HookError for a file that is not Python."""
    rc, out, err = run([p["docker"], "image", "inspect", p["image"]])
    if rc != 0:
        said = (err or out).strip().splitlines()
        raise ValueError("is not on %s (docker image inspect: %s)" % (label, said[-1] if said else "no output"))
    image_id = json.loads(out)[0]["Id"]
    # messages are read after "image <candidate ref> ": the candidate needs no second name
    candidate = Engine(image_reader(run, p["docker"], p["image"], p["source_root"]), "the candidate")
    reference = Engine(image_reader(run, p["docker"], p["reference_image"], p["source_root"]),
                       "the running image %s" % p["reference_image"])
    adapters = image_reader(run, p["docker"], p["image"], p["adapter_dir"])
    hook_text = adapters("sitecustomize.py")
    if hook_text is None:
        raise ValueError("has no %s/sitecustomize.py (read on %s): no adapter would arm in it (where the image "
                         "keeps the launcher checkout's adapter/ elsewhere, set experiment_image_adapter_dir)"
                         % (p["adapter_dir"], label))
    hook = read_hook(hook_text, source="%s:%s/sitecustomize.py" % (p["image"], p["adapter_dir"]))
    # each adapter's file is the module its install functions are imported from, whatever the hook calls them
    texts = dict((name, adapters(name + ".py")) for name in adapter_modules(hook))
    checks = image_checks(candidate, reference, hook, texts, p["guard_module"], p["vocab_module"],
                          p["local_groups"], p["vocab_size"], p["tp_size"], settings=p["settings"])
    problems = ["%s: %s" % (name, msg) for name in CHECKS for msg in checks[name]["problems"]]
    return dict(image_id=image_id, checks=checks, problems=problems)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            reference_image=dict(type="str", required=True),
            source_root=dict(type="str", default="/sgl-workspace/sglang/python"),
            adapter_dir=dict(type="str", default="/sgl-workspace/adapter"),
            guard_module=dict(type="str", default="sglang.srt.models.deepseek_v4"),
            vocab_module=dict(type="str", default="sglang.srt.layers.vocab_parallel_embedding"),
            local_groups=dict(type="int", default=4),
            vocab_size=dict(type="int", default=129280),
            tp_size=dict(type="int", default=3),
            docker=dict(type="str", default="docker"),
            command_timeout=dict(type="int", default=120),
            settings=dict(type="dict"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    label = host_label(p["host_label"])
    try:
        result = judge(make_runner(module, timeout=p["command_timeout"]), p, label)
    except (ValueError, SourceError, HookError) as exc:
        module.fail_json(msg="%s: image %s %s" % (label, p["image"], exc), problems=[str(exc)])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
