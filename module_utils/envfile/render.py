# -*- coding: utf-8 -*-
"""The one writer of the launcher ``.env``: values written so that bash's ``source`` yields them exactly.

Every value is written bare when it holds only characters bash never interprets
(``[A-Za-z0-9_@%+=:,./-]``), otherwise in single quotes with ``'`` written as ``'\\''``. What
cannot be written as data is refused naming the key (:func:`key_problem`, :func:`value_problem`):
names that are not shell identifiers or that are the shell's own or the loader's variables
(``BASH_ENV``, ``PS4``, ``IFS``, ``PATH``, ``LD_PRELOAD`` ...: assigning them changes what runs),
values with a newline, carriage return, NUL or other control character, or that are not UTF-8.
Notes become ``#`` comment lines; a newline in a note starts another comment line, never code.
"""
from __future__ import absolute_import, division, print_function

import re

from ansible.module_utils.envfile.shell import NAME_RE, SHELL_OWN_VARS, EnvError

__metaclass__ = type

SAFE_BARE_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_CONTROL_RE = re.compile(u"[\x00-\x08\x0a-\x1f\x7f]")
_NOTE_BREAK_RE = re.compile(r"\r\n|\r|\n")

DEFAULT_HEADER = (
    "Ansible managed",
    "dsv41 launcher settings, sourced by start.sh (bash). Rendered from the inventory baseline",
    "(inventory/common/launcher_baseline.yml) and this run's overrides; change those, not this file.",
)
API_KEY = "API_KEY"
ENV_MODE = 0o600
# Never written by the role: besides the shell's own, variables that change which programs run or
# what they load once exported to every command start.sh starts (``set -a``).
RESERVED_KEYS = SHELL_OWN_VARS | frozenset(["PATH", "HOME", "ENV", "CDPATH", "TMPDIR", "LANG", "LC_ALL"])
RESERVED_PREFIXES = ("BASH_", "COMP_", "LD_")


def env_text(value):
    """A settings value as the string written (and bash holds), or None when unset.

    None means unset; True/False are "1"/"0"; whole floats drop ".0" (5.0 -> "5"); strings are kept
    exactly (no stripping: bash keeps spaces inside quotes); bytes must be UTF-8.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") and "e" not in text else text
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    raise TypeError("a %s" % type(value).__name__)


def key_problem(key):
    """Why ``key`` cannot be a .env variable name, or None."""
    if not isinstance(key, str):
        return "%r: a variable name must be a string" % (key,)
    if not NAME_RE.fullmatch(key):
        return ("%r is not a shell variable name (ASCII letters, digits and _, not starting with a digit); "
                "bash would run it as a command" % (key,))
    if key in RESERVED_KEYS or key.startswith(RESERVED_PREFIXES):
        return ("%s is a variable of the shell or the program loader: set in the .env it changes how "
                "start.sh and every command it starts behave; it is never written" % key)
    return None


def value_problem(key, value):
    """Why the value of ``key`` cannot be written as data, or None. Never quotes the value."""
    try:
        text = env_text(value)
    except UnicodeDecodeError:
        return "%s: the value is not valid UTF-8" % key
    except TypeError as exc:
        return "%s: the value is %s, not a string or number" % (key, exc)
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "%s: the value is not valid UTF-8 (it holds an unpaired surrogate)" % key
    bad = _CONTROL_RE.search(text)
    if bad:
        char = bad.group(0)
        name = {"\x00": "a NUL byte", "\n": "a newline", "\r": "a carriage return"}.get(
            char, "the control character U+%04X" % ord(char))
        hint = " (a CRLF line end? bash keeps the \\r in the value)" if char == "\r" else ""
        return "%s: the value holds %s, which a .env line cannot hold as data%s" % (key, name, hint)
    return None


def quote_value(text):
    """``text`` as a bash word that yields exactly ``text``: bare when nothing in it is special to
    bash, else single-quoted (``'`` written as ``'\\''``)."""
    if SAFE_BARE_RE.fullmatch(text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def comment_lines(text):
    """``#`` lines for a note; each line of the note is its own comment (none can become code)."""
    return ["# " + line if line else "#" for line in _NOTE_BREAK_RE.split(text)]


def _note_problem(index, note):
    if not isinstance(note, str):
        return "note %d: a note must be a string, not %s" % (index, type(note).__name__)
    try:
        note.encode("utf-8")
    except UnicodeEncodeError:
        return "note %d: not valid UTF-8" % index
    if "\x00" in note:
        return "note %d: holds a NUL byte" % index
    return None


def settings_problems(settings, api_key=None, notes=()):
    """Every reason the writer would refuse these inputs (empty when it can write them)."""
    out = []
    for key, value in (settings or {}).items():
        problem = key_problem(key)
        if problem is None and key == API_KEY:
            problem = "API_KEY is written from the API key option (dsv41_api_key), not from the settings"
        out.append(problem or value_problem(key, value))
    if api_key is not None:
        out.append(value_problem(API_KEY, api_key))
    for i, note in enumerate(notes or (), 1):
        out.append(_note_problem(i, note))
    return [p for p in out if p]


def render_env(settings, api_key=None, notes=(), header=DEFAULT_HEADER):
    """The .env text: header comments, one ``KEY=value`` line per set key (in order), API_KEY, notes.

    Raises :class:`EnvError` listing every refused key (nothing is rendered then).
    """
    problems = settings_problems(settings, api_key, notes)
    for i, line in enumerate(header or (), 1):
        if _note_problem(i, line):
            problems.append("header " + _note_problem(i, line))
    if problems:
        raise EnvError("; ".join(problems))
    lines = []
    for line in header or ():
        lines.extend(comment_lines(line))
    for key, value in (settings or {}).items():
        text = env_text(value)
        if text is not None:
            lines.append("%s=%s" % (key, quote_value(text)))
    if api_key is not None:
        lines.append("%s=%s" % (API_KEY, quote_value(env_text(api_key))))
    for note in notes or ():
        lines.extend(comment_lines(note))
    return "".join(line + "\n" for line in lines)


def declared_env(settings, api_key=None):
    """What bash holds after sourcing :func:`render_env`'s output: {KEY: str}, in order."""
    out = {}
    for key, value in (settings or {}).items():
        text = env_text(value)
        if text is not None:
            out[key] = text
    if api_key is not None:
        out[API_KEY] = env_text(api_key)
    return out
