# -*- coding: utf-8 -*-
"""The one rule that decides what is secret, and the redaction built on it (standard library only).

Used by every module that returns or writes settings (``launcher_settings``, ``launcher_env``), the
``.env`` diff, the decode benchmark's raw output and error messages, and, through the
``dsv41_is_secret`` / ``dsv41_redact`` filters, run records and reports on the control node.

**Names.** A variable or field name is secret when one of its words is a secret word. Words come
from splitting the name on anything that is not a letter or digit, on lower-to-upper case changes
(``apiKey``) and between letters and digits (``DB_PASSWORD2``), compared upper-case, so the rule is
case-insensitive. A word is secret when it *ends* in KEY, KEYS, TOKEN, SECRET(S), PASSWORD(S), PASSWD,
PASSPHRASE, CREDENTIAL(S) (``OPENAI_APIKEY``, ``HF_ACCESSTOKEN``) or *is* PAT, PWD, AUTHORIZATION or
COOKIE (``GITHUB_PAT``, ``DB_PWD``). Not secret: ``*_TOKENS`` (a count: ``MAX_TOTAL_TOKENS``,
``completion_tokens``), PATH, the shell's own ``PWD``/``OLDPWD`` (a directory), words that merely
contain a secret word (``TOKENIZER``, ``KEYBOARD``, ``DSV41_AUTOTUNE_KEEP``).

**Values.** The value of every secret name, and every value given explicitly (the API key), is
replaced wherever it appears in free text too, including its JSON-escaped form (a server that echoes
the key inside a JSON string it built itself). Values shorter than :data:`MIN_SECRET_CHARS` are
masked under their own name but not searched for in other text (a 1-character "secret" would turn
every such character into ``***``).
"""
from __future__ import absolute_import, division, print_function

import json
import re

__metaclass__ = type

SECRET_MASK = "***"
MIN_SECRET_CHARS = 4

SECRET_SUFFIXES = ("KEY", "KEYS", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD",
                   "PASSPHRASE", "CREDENTIAL", "CREDENTIALS")
SECRET_WORDS = frozenset(["PAT", "PWD", "AUTHORIZATION", "COOKIE"])
# Names that hold a secret word but are plain shell state: the working directories.
NOT_SECRET_NAMES = frozenset(["PWD", "OLDPWD"])

_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_ENV_ITEM_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=", re.S)


def name_words(name):
    """Upper-case words of a name: ``openaiApiKey`` -> OPENAI, API, KEY; ``DB_PASSWORD2`` -> DB, PASSWORD, 2."""
    return [w.upper() for w in _WORD_RE.findall(re.sub(r"[^A-Za-z0-9]+", " ", str(name)))]


def is_secret_name(name):
    """True when ``name`` (a variable, setting or field name) holds a secret value (see module doc)."""
    if name is None:
        return False
    text = str(name)
    if text.upper() in NOT_SECRET_NAMES:
        return False
    for word in name_words(text):
        if word in SECRET_WORDS or word.endswith(SECRET_SUFFIXES):
            return True
    return False


def _text(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _env_item_name(item):
    """NAME of a ``NAME=value`` string (an environment list entry), else None."""
    if not isinstance(item, str):
        return None
    match = _ENV_ITEM_RE.match(item)
    return match.group(1) if match else None


def secret_values(data, extra=()):
    """Secret values to hide in free text: ``extra`` plus every value held under a secret name in
    ``data`` (mappings, lists and tuples searched recursively; ``KEY=value`` strings of a list such as
    ``docker inspect``'s ``Config.Env`` count as a mapping entry). Longest first, so a secret that
    contains another is replaced whole."""
    found = set()

    def add(value):
        text = _text(value)
        if text is not None and len(text) >= MIN_SECRET_CHARS:
            found.add(text)

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if is_secret_name(key) and not isinstance(value, (dict, list, tuple)):
                    add(value)
                walk(value)
        elif isinstance(node, (list, tuple)):
            for item in node:
                key = _env_item_name(item)
                if key is not None and is_secret_name(key):
                    add(item[len(key) + 1:])
                walk(item)

    for value in extra or ():
        add(value)
    walk(data)
    return sorted(found, key=lambda v: (-len(v), v))


def _forms(value):
    """The value as it may appear in text: as is, and JSON-escaped (``"`` -> ``\\"``, ``\\`` -> ``\\\\``)."""
    forms = [value]
    escaped = json.dumps(value)[1:-1]
    if escaped != value:
        forms.append(escaped)
    return forms


def redact_text(text, values):
    """``text`` with every value in ``values`` (and its JSON-escaped form) replaced by ``***``."""
    out = "%s" % (text,)
    for value in sorted((v for v in (_text(x) for x in values or ()) if v and len(v) >= MIN_SECRET_CHARS),
                        key=lambda v: (-len(v), v)):
        for form in _forms(value):
            out = out.replace(form, SECRET_MASK)
    return out


def redact(data, values=(), collect=True):
    """A copy of ``data`` that is safe to show or write.

    Under a secret name (mapping key, or ``KEY=value`` item of a list) a scalar value becomes ``***``
    (None, booleans and empty strings stay: they reveal nothing); every string anywhere (keys
    included) has the secret values replaced (:func:`redact_text`). ``values``: secrets known from
    elsewhere (the API key); with ``collect`` the values under secret names in ``data`` are added.
    Call it before encoding (JSON, YAML): a secret holding ``"`` or ``\\`` is then matched as it is,
    not in its escaped form.
    """
    hidden = secret_values(data if collect else None, values)

    def masked(value):
        if value is None or isinstance(value, bool) or value == "":
            return value
        return SECRET_MASK

    def walk(node):
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                new_key = redact_text(key, hidden) if isinstance(key, str) else key
                if is_secret_name(key) and not isinstance(value, (dict, list, tuple)):
                    out[new_key] = masked(value)
                else:
                    out[new_key] = walk(value)
            return out
        if isinstance(node, (list, tuple)):
            items = []
            for item in node:
                key = _env_item_name(item)
                if key is not None and is_secret_name(key):
                    items.append("%s=%s" % (key, masked(item[len(key) + 1:])))
                else:
                    items.append(walk(item))
            return type(node)(items) if isinstance(node, tuple) else items
        if isinstance(node, str):
            return redact_text(node, hidden)
        return node

    return walk(data)


def mask_mapping(mapping):
    """Copy of a flat mapping with the values of secret names replaced by ``***`` (unset values kept)."""
    out = {}
    for key, value in (mapping or {}).items():
        if is_secret_name(key) and value is not None and not isinstance(value, bool) and str(value) != "":
            out[key] = SECRET_MASK
        else:
            out[key] = value
    return out
