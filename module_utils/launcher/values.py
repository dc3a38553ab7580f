# -*- coding: utf-8 -*-
"""Launcher settings values as bash will hold them, and how messages show them (secrets masked).

Shared by ``module_utils/launcher/rules.py`` and ``module_utils/launcher/check.py``. A settings value may be
str, int, float, bool or None (a rendered YAML mapping): None and the empty string mean "unset";
True/False mean "1"/"0"; strings are kept exactly as bash will hold them (no stripping), converted as
the ``.env`` writer converts them (``launcher_env.env_text``).
"""
from __future__ import absolute_import, division, print_function

import math
import re

from ansible.module_utils.envfile.render import env_text
from ansible.module_utils.base.secrets import SECRET_MASK, is_secret_name, is_secret_value, mask_mapping, redact_text

__metaclass__ = type

def is_secret(key, value=None):
    """The one secret rule (``module_utils/base/secrets.py``): case-insensitive KEY/TOKEN/SECRET/PASSWORD/
    PASSWD/CREDENTIAL/PAT/PASS/AUTH/DSN words of the name (``*_TOKENS``, a count such as MAX_TOTAL_TOKENS,
    is not), or a ``value`` shaped like a secret (``hf_...``, ``sk-...``, a URL's password...)."""
    return is_secret_name(key) or is_secret_value(value)


def norm_value(value):
    """A settings value as the string bash would hold, or None when unset (None or "").

    Same conversion as the ``.env`` writer (``launcher_env.env_text``), so the rules judge exactly
    what bash will see; a value the writer refuses is reported by the ``env_writable`` rule and is
    judged here as its ``str()``.
    """
    try:
        text = env_text(value)
    except (TypeError, UnicodeDecodeError):
        text = "%s" % (value,)
    return text if text != "" else None


def normalize_settings(settings):
    """{KEY: str} of the set keys (None/empty dropped)."""
    out = {}
    for key, value in (settings or {}).items():
        v = norm_value(value)
        if v is not None:
            out[str(key)] = v
    return out


def shown(key, value):
    """``KEY='value'`` for messages, the value masked for secret keys."""
    if value is None:
        return "%s (unset)" % key
    return "%s=%r" % (key, SECRET_MASK if is_secret_name(key) else redact_text(value, ()))


def mask_settings(settings):
    """Copy of ``settings`` with secret values replaced by ``***``."""
    return mask_mapping(settings)


def _switch_on(value):
    """The import hook's test: installed unless unset, empty or "0"."""
    return value is not None and value != "0"


def _as_int(value):
    try:
        if value is None or not re.match(r"^[+-]?\d+$", value):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_float(value):
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
