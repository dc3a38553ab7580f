#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: read the launcher .env (read-only) and propose the inventory that declares it."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_adopt
short_description: Propose the inventory that declares a fleet's current launcher .env (read-only)
description:
  - Runs on the head and only reads the launcher C(.env), with bash's rules
    (C(module_utils/envfile/parse.py)); it never writes on the host.
  - Returns the text of a group_vars proposal declaring every key the file sets as bash sees it
    (C(dsv41_launcher_settings), the trailing comment lines as C(dsv41_launcher_notes)), with every
    secret (the one rule, C(module_utils/base/secrets.py)) replaced by a reference to a vault
    variable, and the text of the vault file holding those values
    (C(module_utils/envfile/adopt.py)). Converged with the C(container_env) role, the proposal leaves
    the file as it is.
  - The vault text holds secret values, so the task calling this module must set C(no_log); the
    other results hold no secret value.
  - Keys the writer cannot declare (the shell's or the loader's own variables, values with a
    carriage return or another control character) are listed in C(undeclarable); the converge keeps
    their lines as they are.
  - A file that is not data (it would run code) is refused naming the line.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  path:
    description: The launcher C(.env) on the head.
    type: path
    required: true
  origin:
    description: How the proposal names the file it was read from (default C(<host label>:<path>)).
    type: str
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode (it only reads).
"""

EXAMPLES = r"""
- name: Read the .env and propose the inventory that declares it
  launcher_adopt:
    path: /home/mia/dsv41-3x-spark/.env
    host_label: spark1
  register: adopted
  no_log: true  # the vault text holds the secret values
"""

RETURN = r"""
proposal:
  description: The group_vars proposal (YAML text); secrets are references to vault variables.
  returned: success
  type: str
vault:
  description: The vault file (YAML text) with the secret values; to be encrypted before use.
  returned: success
  type: str
key_count:
  description: How many keys the file sets.
  returned: success
  type: int
declared:
  description: Keys the proposal declares in dsv41_launcher_settings (file order).
  returned: success
  type: list
  elements: str
secret_keys:
  description: Keys whose values moved to the vault file (names only).
  returned: success
  type: list
  elements: str
undeclarable:
  description: Keys left out of the proposal, each with the reason (the converge keeps their lines).
  returned: success
  type: list
  elements: dict
notes:
  description: Trailing comment lines proposed as notes.
  returned: success
  type: list
  elements: str
sha256:
  description: sha256 of the file read.
  returned: success
  type: str
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.envfile.adopt import adopt_env, proposal_yaml, vault_yaml
from ansible.module_utils.envfile.shell import EnvError
from ansible.module_utils.envfile.store import read_env_file


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            origin=dict(type="str"),
            host_label=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    who = host_label(p["host_label"])
    try:
        data, _st = read_env_file(p["path"])
        if data is None:
            module.fail_json(msg="%s: %s does not exist; nothing to adopt" % (who, p["path"]), changed=False)
        # The environment the launcher's bash starts with on this host (HOME, USER, ...), for $NAME in the file.
        adopted = adopt_env(data, dict(os.environ), p["path"])
    except EnvError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False, path=p["path"])
    digest = hashlib.sha256(data).hexdigest()
    origin = p["origin"] or "%s:%s" % (who, p["path"])
    origin = "%s (sha256 %s)" % (origin, digest[:16])
    module.exit_json(changed=False, proposal=proposal_yaml(adopted, origin), vault=vault_yaml(adopted, origin),
                     key_count=adopted["keys"], declared=list(adopted["settings"]), secret_keys=adopted["secret_keys"],
                     undeclarable=adopted["undeclarable"], notes=adopted["notes"], sha256=digest)


def main():
    run_module()


if __name__ == "__main__":
    main()
