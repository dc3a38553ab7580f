#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: write the launcher .env as data, with recorded backups; or restore a recorded "before"."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: launcher_env
short_description: Write the launcher .env as data (never code), keep each run's "before", restore it exactly
description:
  - Runs on the head, where the launcher sources its C(.env) with C(set -a; source .env). With
    I(state=present) it converges the file in place (C(module_utils/envfile/merge.py)); every line
    that sets only keys the settings do not declare is kept verbatim, in place and order, unless
    one of them is listed in I(remove_keys) (or declared as null); those keys are returned as
    C(kept_undeclared). A key this module wrote in an earlier run (recorded by digest in the record
    beside the file) that is no longer declared and still holds that value is removed
    (C(removed_stale)), so overrides stay temporary. A declared key whose value differs is written
    where bash last assigns it, a new one after the last assignment; the managed header is added
    when missing. A current file that is not data is refused (rewriting it would drop what it
    sets). Values are written with the project's one writer (C(module_utils/envfile/render.py));
    each value is bare when nothing in it is special to bash, else
    single-quoted, so bash sees exactly the declared string and runs nothing; notes become C(#)
    comment lines; C(API_KEY) is written the same way. Keys that are not shell identifiers or are
    the shell's or the loader's own variables (C(BASH_ENV), C(PS4), C(IFS), C(PATH), C(LD_PRELOAD)
    ...), and values holding a newline, carriage return, NUL or other control character, are refused
    naming the key; nothing is written then.
  - The reported changes compare what bash sees in the current file (parsed with bash's rules)
    with what it will see in the new one, key by key (an undeclared key whose line refers to a
    changed key is reported too), secrets
    redacted (C(module_utils/base/secrets.py)). The same comparison is returned as C(diff) for
    C(--diff).
  - The file is replaced atomically with mode I(mode) and its owner kept. The first time a run
    (I(run_id)) changes it, the previous file is saved as C(<path>.dsv41-backup-<UTC>-<run_id>),
    created with mode 0600, and recorded with its sha256, mode and owner in
    C(<path>.dsv41-backups.json) beside it.
  - With I(state=rollback) it restores the recorded "before" of I(rollback_run) (default the
    latest recorded run), that is the same bytes, mode and owner, or no file when there was none. It adds
    nothing to the record, so running it twice equals running it once. The file it replaces is kept
    as C(<path>.dsv41-replaced-<sha256 prefix>) (0600).
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  path:
    description: The launcher C(.env) on the head.
    type: path
    required: true
  state:
    description: C(present) writes the settings; C(rollback) restores a recorded "before".
    type: str
    choices: [present, rollback]
    default: present
  settings:
    description:
      - The settings to write (KEY -> value), in order. None removes a key; booleans are 1/0.
        Required with I(state=present). C(API_KEY) is not allowed here (see I(api_key)).
    type: dict
  remove_keys:
    description:
      - Keys whose assignments are removed from the C(.env) (a key the settings do not declare is
        otherwise kept as it is). Must not also be declared with a value.
    type: list
    elements: str
    default: []
  api_key:
    description: The value written as C(API_KEY). Never shown; its value is redacted wherever it appears.
    type: str
  notes:
    description: Comment lines written at the end (a newline in a note starts another comment line).
    type: list
    elements: str
    default: []
  run_id:
    description:
      - Identifier of this run (letters, digits, C(.), C(_), C(-); at most 80). Every change made
        under the same id keeps the state before the first one as the run's "before".
        Required with I(state=present).
    type: str
  rollback_run:
    description: With I(state=rollback), the run whose "before" is restored (default the latest recorded run).
    type: str
  mode:
    description: Mode of the written C(.env) (it holds the API key).
    type: str
    default: "0600"
  host_label:
    description: Name used in messages (default the node's hostname).
    type: str
notes:
  - Supports check mode (computes the changes and the diff, writes nothing) and diff mode.
"""

EXAMPLES = r"""
- name: Write the launcher settings (previous file kept as this run's recorded backup)
  launcher_env:
    path: /home/mia/dsv41-3x-spark/.env
    settings: "{{ container_env_settings }}"
    remove_keys: [OLD_NFS_SERVER]
    api_key: "{{ dsv41_api_key }}"
    notes: "{{ dsv41_launcher_notes }}"
    run_id: "{{ dsv41_run_id }}"

- name: Restore the .env as it was before the latest recorded run
  launcher_env:
    path: /home/mia/dsv41-3x-spark/.env
    state: rollback
"""

RETURN = r"""
path:
  description: The C(.env).
  returned: always
  type: str
changes:
  description: One line per key whose value bash sees differently (C(KEY old -> new), secrets as C((secret changed))).
  returned: always
  type: list
  elements: str
diff:
  description: What bash sees before and after (secrets as C(***)), for C(--diff).
  returned: always
  type: dict
run_id:
  description: The run the change was recorded under (I(state=present)).
  returned: when state is present
  type: str
backup:
  description: The snapshot holding this run's "before" (present), or the one restored (rollback); null when none.
  returned: always
  type: str
backup_created:
  description: Whether this call created the snapshot (false when the run already had one, or nothing changed).
  returned: when state is present
  type: bool
record:
  description: The record of befores beside the C(.env).
  returned: when state is present
  type: str
kept_undeclared:
  description: Keys the C(.env) sets that the settings do not declare, kept as they are (in file order).
  returned: when state is present
  type: list
  elements: str
removed:
  description: Keys of I(remove_keys) (or declared null) whose assignments were removed.
  returned: when state is present
  type: list
  elements: str
removed_stale:
  description:
    - Keys an earlier run of this module wrote that are no longer declared and still hold the value it
      wrote (an override of an earlier run), removed. A key set or changed by hand is kept instead.
  returned: when state is present
  type: list
  elements: str
added:
  description: Declared keys the C(.env) did not set before.
  returned: when state is present
  type: list
  elements: str
restored_run:
  description: The run whose "before" was restored (rollback); null when nothing was recorded.
  returned: when state is rollback
  type: str
runs:
  description: The recorded runs (run_id, recorded UTC time, backup), oldest first.
  returned: when state is rollback
  type: list
  elements: dict
replaced:
  description: Where the replaced file was kept (rollback), or null.
  returned: when state is rollback
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.base.host_label import host_label
from ansible.module_utils.launcher.env import converge_env, rollback_env
from ansible.module_utils.envfile import shell
from ansible.module_utils.base.secrets import secret_values


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "rollback"], default="present"),
            settings=dict(type="dict"),
            remove_keys=dict(type="list", elements="str", default=[], no_log=False),
            api_key=dict(type="str", no_log=True),
            notes=dict(type="list", elements="str", default=[]),
            run_id=dict(type="str"),
            rollback_run=dict(type="str"),
            mode=dict(type="str", default="0600"),
            host_label=dict(type="str"),
        ),
        required_if=[("state", "present", ("settings", "run_id"))],
        supports_check_mode=True,
    )
    p = module.params
    who = host_label(p["host_label"])
    # Values of secret names must not come back through Ansible's echo of the arguments either.
    # (secret by name, or shaped like a secret under any name: the one rule's secret_values)
    module.no_log_values.update(secret_values(p["settings"] or {}))
    try:
        mode = int(p["mode"], 8)
        if not 0 <= mode <= 0o7777:
            raise ValueError(p["mode"])
    except ValueError:
        module.fail_json(msg="%s: mode %r is not an octal file mode" % (who, p["mode"]), changed=False)
    # The environment the launcher's bash starts with on this host (HOME, USER, ...), for $NAME in the file.
    base = dict(os.environ)
    try:
        if p["state"] == "present":
            result = converge_env(p["path"], p["settings"], api_key=p["api_key"], notes=p["notes"],
                                  run_id=p["run_id"], mode=mode, base=base, check_mode=module.check_mode,
                                  remove_keys=p["remove_keys"])
        else:
            result = rollback_env(p["path"], run_id=p["rollback_run"], base=base, check_mode=module.check_mode,
                                  extra_secrets=[p["api_key"]] if p["api_key"] else ())
    except shell.EnvError as exc:
        module.fail_json(msg="%s: %s" % (who, exc), changed=False, path=p["path"])
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
