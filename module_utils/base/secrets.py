# -*- coding: utf-8 -*-
"""The one rule that decides what is secret, and the redaction built on it (standard library only).

Used by every module that returns or writes settings (``launcher_settings``, ``launcher_env``), the
``.env`` diff, the decode benchmark's raw output and error messages, and, through the
``dsv41_is_secret`` / ``dsv41_redact`` filters, run records and reports on the control node.

**Names.** A variable or field name is secret when one of its words is a secret word. Words come
from splitting the name on anything that is not a letter or digit, on lower-to-upper case changes
(``apiKey``) and between letters and digits (``DB_PASSWORD2``), compared upper-case, so the rule is
case-insensitive. A word is secret when it *ends* in KEY, KEYS, TOKEN, SECRET(S), PASSWORD(S), PASSWD,
PASSPHRASE, CREDENTIAL(S) (``OPENAI_APIKEY``, ``HF_ACCESSTOKEN``) or *is* PAT, PWD, PASS, AUTH, CREDS,
DSN, AUTHORIZATION or COOKIE (``GITHUB_PAT``, ``DB_PWD``, ``DB_PASS``, ``OPENAI_AUTH``, ``SENTRY_DSN``). Not secret: ``*_TOKENS`` (a count: ``MAX_TOTAL_TOKENS``,
``completion_tokens``), PATH, the shell's own ``PWD``/``OLDPWD`` (a directory), words that merely
contain a secret word (``TOKENIZER``, ``KEYBOARD``, ``DSV41_AUTOTUNE_KEEP``).

**Values.** The value of every secret name, and every value given explicitly (the API key), is
replaced wherever it appears in free text too, including its JSON-escaped form (a server that echoes
the key inside a JSON string it built itself). Values shorter than :data:`MIN_SECRET_CHARS` are
masked under their own name but not searched for in other text (a 1-character "secret" would turn
every such character into ``***``).

**Shapes.** A value is secret by its shape too, whatever its name (``HF_TOKENS=hf_...`` is a count by
name, a token by shape): OpenAI/Anthropic keys (``sk-...``), Hugging Face (``hf_...``), GitHub
(``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_...``), Slack (``xox[abposr]-...``), AWS access key
ids (``AKIA...``), JWTs (``eyJ....eyJ....sig``), the credential after ``Bearer``/``Basic``, the password of a
URL (``scheme://user:pass@host``) and PEM private key blocks. :func:`redact_text` masks every such match in
any text, before anything cuts the text (:func:`clip`), so half a token never shows.
"""
from __future__ import absolute_import, division, print_function

import json
import re

__metaclass__ = type

SECRET_MASK = "***"
MIN_SECRET_CHARS = 4

SECRET_SUFFIXES = ("KEY", "KEYS", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD",
                   "PASSPHRASE", "CREDENTIAL", "CREDENTIALS")
SECRET_WORDS = frozenset(["PAT", "PWD", "PASS", "AUTH", "CREDS", "DSN", "AUTHORIZATION", "COOKIE"])
# Names that hold a secret word but are plain shell state: the working directories.
NOT_SECRET_NAMES = frozenset(["PWD", "OLDPWD"])

# Secret shapes in free text. Each pattern's group "s" is the secret part replaced by ***; what is around it
# (the scheme and user of a URL, the word Bearer) stays, so the text still says what it was.
_B = r"(?<![A-Za-z0-9_-])"      # a token starts at a word edge (``task-sk-...`` is not a key)
SECRET_SHAPES = (
    ("openai/anthropic key", re.compile(_B + r"(?P<s>sk-[A-Za-z0-9_-]{16,})")),
    ("hugging face token", re.compile(_B + r"(?P<s>hf_[A-Za-z0-9]{16,})")),
    ("github token", re.compile(_B + r"(?P<s>(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}))")),
    ("slack token", re.compile(_B + r"(?P<s>xox[abposr]-[A-Za-z0-9-]{10,})")),
    ("aws access key id", re.compile(r"(?<![A-Z0-9])(?P<s>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Z0-9])")),
    ("jwt", re.compile(_B + r"(?P<s>eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,})")),
    # the credential after Bearer/Basic: 12 or more token characters with a digit ("basic arithmetic" is prose)
    ("authorization header", re.compile(r"(?i)\b(?:bearer|basic)[ \t]+"
                                        r"(?P<s>(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{12,})")),
    ("url password", re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@'\"]*:(?P<s>[^\s/@'\"]+)@")),
    ("private key", re.compile(r"(?P<s>-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$))")),
)
# Values in messages are cut to this many characters (after redaction).
CLIP_CHARS = 200

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


def shaped_secrets(text):
    """The secret parts of ``text`` by shape (see module doc), longest first."""
    text = _text(text)
    if not text:
        return []
    found = set()
    if not _SHAPE_HINT.search(text):
        return []
    for _name, pattern in SECRET_SHAPES:
        for match in pattern.finditer(text):
            found.add(match.group("s"))
    return sorted(found, key=lambda v: (-len(v), v))


def is_secret_value(value):
    """True when ``value`` holds something shaped like a secret (see module doc), whatever its name."""
    return bool(shaped_secrets(value))


def is_secret(name, value=None):
    """The one rule: secret by ``name`` or by the shape of ``value``."""
    return is_secret_name(name) or is_secret_value(value)


# One scan for anything a shape starts with: most text holds none, and then no shape is tried.
_SHAPE_HINT = re.compile(r"sk-|hf_|gh[pousr]_|github_pat_|xox|AKIA|ASIA|eyJ|(?i:bearer|basic)|://|PRIVATE KEY")


def _mask_shapes(text):
    if not _SHAPE_HINT.search(text):
        return text
    for _name, pattern in SECRET_SHAPES:
        text = pattern.sub(lambda m: m.group(0)[:m.start("s") - m.start(0)] + SECRET_MASK
                           + m.group(0)[m.end("s") - m.start(0):], text)
    return text


def clip(text, limit=CLIP_CHARS):
    """``text`` redacted by shape, then cut to ``limit`` characters (``...`` and the count of the rest):
    redaction first, so a cut never leaves half a token."""
    text = _mask_shapes("%s" % (text,))
    if len(text) <= limit:
        return text
    return "%s... (%d more characters)" % (text[:limit], len(text) - limit)


def clip_tail(text, limit=300):
    """The last ``limit`` characters of ``text`` (an error's end says most), redacted by shape first."""
    text = _mask_shapes("%s" % (text,))
    return text if len(text) <= limit else "..." + text[-limit:]


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
        if isinstance(node, (str, bytes)):
            for part in shaped_secrets(node):   # a token under an innocent name, hidden elsewhere too
                add(part)
            return
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
    """``text`` with every value in ``values`` (and its JSON-escaped form), and everything shaped like a
    secret, replaced by ``***``."""
    out = "%s" % (text,)
    for value in sorted((v for v in (_text(x) for x in values or ()) if v and len(v) >= MIN_SECRET_CHARS),
                        key=lambda v: (-len(v), v)):
        for form in _forms(value):
            out = out.replace(form, SECRET_MASK)
    return _mask_shapes(out)


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
    """Copy of a flat mapping with the values of secret names replaced by ``***`` (unset values kept), and
    the secret-shaped parts of every other string value too."""
    out = {}
    for key, value in (mapping or {}).items():
        if is_secret_name(key) and value is not None and not isinstance(value, bool) and str(value) != "":
            out[key] = SECRET_MASK
        elif isinstance(value, str) and is_secret_value(value):
            out[key] = _mask_shapes(value)
        else:
            out[key] = value
    return out
