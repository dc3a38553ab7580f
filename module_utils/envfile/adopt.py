# -*- coding: utf-8 -*-
"""Adoption: the inventory that declares a fleet's current ``.env``, so the repository starts from what runs.

:func:`adopt_env` reads the file with bash's rules (``envfile_parse``) and sorts every key it sets:

* settings: every key as bash sees it, in file order, for ``dsv41_launcher_settings``;
* secrets (the one rule, ``secret_rule.is_secret``: by name or by the value's shape): the value moves to a vault variable
  (``vault_dsv41_api_key`` for ``API_KEY``, ``vault_dsv41_launcher_<key in lower case>`` for the
  others) and the setting refers to it, so the proposal itself holds no secret;
* keys the writer cannot declare (the shell's or the loader's own variables, values holding a
  carriage return or other control character): left out of the settings, with the reason; the
  converge keeps their lines as they are, since it never drops an undeclared key;
* notes: the ``# `` comment lines after the last assignment (where the writer puts notes), so the
  converge finds them and adds none.

:func:`proposal_yaml` / :func:`vault_yaml` write the two files; values are JSON strings (valid YAML)
and a value holding a Jinja marker is tagged ``!unsafe`` so Ansible never templates it.
"""
from __future__ import absolute_import, division, print_function

import json
import re

from ansible.module_utils.envfile.lines import parse_statements
from ansible.module_utils.envfile.render import API_KEY, DEFAULT_HEADER, comment_lines, key_problem, value_problem
from ansible.module_utils.envfile.shell import EnvError
from ansible.module_utils.base.secrets import is_secret

__metaclass__ = type

_JINJA_RE = re.compile(r"\{\{|\{%|\{#")


def vault_name(key):
    """The vault variable holding the secret value of ``key``."""
    return "vault_dsv41_api_key" if key == API_KEY else "vault_dsv41_launcher_" + key.lower()


def adopt_env(text, base=None, source=".env", header=DEFAULT_HEADER):
    """What the inventory must declare so that the converge leaves ``text`` as it is.

    Returns ``{"settings": {KEY: value or "{{ vault_... }}"}, "secrets": {vault variable: value},
    "secret_keys": [...], "api_key_var": name or None, "notes": [...], "undeclarable":
    [{"key", "reason"}], "keys": n}``. ``settings`` holds neither ``API_KEY`` (the role writes it from
    ``dsv41_api_key``) nor the undeclarable keys. Raises ``EnvSyntaxError`` for a file that is not data.
    """
    env, groups = parse_statements(text, base, source)
    # Vault variables are named in lower case: HF_TOKEN and Hf_Token would share one, and the converge would
    # give one key the other's value. Such a file is refused, naming both keys.
    by_vault = {}
    for key, value in env.items():
        if is_secret(key, value):
            by_vault.setdefault(vault_name(key), []).append(key)
    clashes = [keys for keys in by_vault.values() if len(keys) > 1]
    if clashes:
        raise EnvError("%s: %s differ only in case; their secrets would share the vault variable %s. Rename one "
                       "of them in the .env (bash treats them as different variables) and adopt again"
                       % (source, " and ".join(clashes[0]), vault_name(clashes[0][0])))
    settings, secrets, secret_keys, undeclarable = {}, {}, [], []
    api_key_var = None
    for key, value in env.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            undeclarable.append({"key": key, "reason": problem if not is_secret(key, value) else
                                 problem.split(":")[0] + ": cannot be written as data"})
            continue
        if is_secret(key, value):
            secret_keys.append(key)
            secrets[vault_name(key)] = value
            if key == API_KEY:
                api_key_var = vault_name(key)
                continue
            settings[key] = "{{ %s }}" % vault_name(key)
        else:
            settings[key] = value
    header_lines = set(line for h in header or () for line in comment_lines(h))
    last = max([i for i, g in enumerate(groups) if g["assigns"]] or [-1])
    notes = []
    for group in groups[last + 1:]:
        line = group["text"].rstrip("\n")
        if line.startswith("# ") and line not in header_lines:
            notes.append(line[2:])
    return {"settings": settings, "secrets": secrets, "secret_keys": secret_keys, "api_key_var": api_key_var,
            "notes": notes, "undeclarable": undeclarable, "keys": len(env)}


def _scalar(value, templated=False):
    text = json.dumps(value, ensure_ascii=False)
    return text if templated or not _JINJA_RE.search(value) else "!unsafe " + text


def proposal_yaml(adopted, origin):
    """The group_vars proposal (no secret value in it). ``origin``: where the file was read, for the header."""
    lines = ["---",
             "# Proposed by playbooks/adopt.yml from %s." % origin,
             "# Every key the .env sets, as bash sees it; secrets refer to vault.yml beside this file.",
             "# Review it, then make it the inventory (group_vars/dsv41_ranks/) or pass it with -e @file:",
             "# converged, it leaves the .env as it is. Keys left out of dsv41_launcher_settings are kept",
             "# as they are by the converge unless listed in container_env_remove_keys."]
    for item in adopted["undeclarable"]:
        lines.append("# Not declarable, kept as it is: %s" % item["reason"].replace("\n", " "))
    lines.append("dsv41_launcher_settings:" + ("" if adopted["settings"] else " {}"))
    for key, value in adopted["settings"].items():
        lines.append("  %s: %s" % (key, _scalar(value, templated=value == "{{ %s }}" % vault_name(key))))
    lines.append("dsv41_launcher_overrides: {}")
    lines.append("dsv41_launcher_notes:" + ("" if adopted["notes"] else " []"))
    for note in adopted["notes"]:
        lines.append("  - %s" % _scalar(note))
    if adopted["api_key_var"]:
        lines.append('dsv41_api_key: "{{ %s }}"' % adopted["api_key_var"])
    else:
        lines.append("# The .env sets no API_KEY: the converge adds none (set dsv41_api_key and drop this line to add one).")
        lines.append("container_env_api_key: null")
    lines.append("container_env_remove_keys: []")
    return "\n".join(lines) + "\n"


def vault_yaml(adopted, origin):
    """The secret values, one vault variable each: to be encrypted with ansible-vault before use."""
    lines = ["---",
             "# Secret values read from %s by playbooks/adopt.yml." % origin,
             "# Plain text (mode 0600): encrypt it before committing: ansible-vault encrypt <this file>"]
    for name, value in adopted["secrets"].items():
        lines.append("%s: %s" % (name, _scalar(value)))
    if not adopted["secrets"]:
        lines.append("{}")
    return "\n".join(lines) + "\n"
