# -*- coding: utf-8 -*-
"""What bash itself decides about a ``.env`` it sources: its own variables, names, errors, ``$'...'``.

Shared by the ``.env`` parser (``envfile_parse.py``), the writer (``envfile_render.py``) and the
in-place converge (``envfile_merge.py``), so the three agree on what bash would do.

* :data:`SHELL_OWN_VARS`: variables bash sets or reads itself. Their value is the shell's (a
  reference cannot be predicted from the file) and assigning them changes how the shell behaves.
* :class:`EnvError` / :class:`EnvSyntaxError`: every refusal, naming the file and the line.
* :func:`ansi_c_text`: the value of a ``$'...'`` word as bash 5 gives it, or a refusal for what
  bash alone decides (a NUL, which ends the value; bytes that are not UTF-8; ``\\u`` escapes beyond
  ASCII, which depend on the locale; ``\\c`` control escapes).
"""
from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# control and redirection operators: code, never data, wherever a .env word could hold them
OPERATORS = "&|<>()"
# $0..$9, $@, $*, $#, $?, $-, $$, $!: only bash knows their values
SPECIAL_PARAMS = "0123456789@*#?-$!"

SHELL_OWN_VARS = frozenset("""
BASH BASHOPTS BASHPID BASH_ALIASES BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_CMDS BASH_COMMAND BASH_COMPAT
BASH_ENV BASH_EXECUTION_STRING BASH_LINENO BASH_LOADABLES_PATH BASH_REMATCH BASH_SOURCE BASH_SUBSHELL
BASH_VERSINFO BASH_VERSION BASH_XTRACEFD CHILD_MAX COLUMNS DIRSTACK EPOCHREALTIME EPOCHSECONDS EUID
FUNCNAME FUNCNEST GLOBIGNORE GLOBSORT GROUPS HISTCMD HISTCONTROL HISTFILE HISTFILESIZE HISTIGNORE
HISTSIZE HISTTIMEFORMAT HOSTFILE HOSTNAME HOSTTYPE IFS IGNOREEOF INPUTRC LINENO LINES MACHTYPE MAIL
MAILCHECK MAILPATH OLDPWD OPTARG OPTERR OPTIND OSTYPE PIPESTATUS POSIXLY_CORRECT PPID PROMPT_COMMAND
PROMPT_DIRTRIM PS0 PS1 PS2 PS3 PS4 PWD RANDOM READLINE_ARGUMENT READLINE_LINE READLINE_MARK
READLINE_POINT REPLY SECONDS SHELL SHELLOPTS SHLVL SRANDOM TIMEFORMAT TMOUT UID _
""".split())


def is_shell_own(name):
    """True for a variable bash sets or reads itself (its value is the shell's, not the file's)."""
    return name in SHELL_OWN_VARS or name.startswith(("BASH_", "COMP_"))


class EnvError(ValueError):
    """Settings the writer refuses, or a .env / backup file that cannot be used."""


class EnvSyntaxError(EnvError):
    """.env text that the parser cannot read as data (it would run code, or only bash knows its value)."""

    def __init__(self, message, line=None, source=".env"):
        self.line = line
        self.reason = message
        self.source = source
        where = "%s: line %d" % (source, line) if line else source
        super(EnvSyntaxError, self).__init__("%s: %s" % (where, message))


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_OCT = "01234567"
_HEX = "0123456789abcdefABCDEF"


def _digits(text, i, allowed, limit):
    j = i
    while j < len(text) and j - i < limit and text[j] in allowed:
        j += 1
    return text[i:j]


def ansi_c_text(body):
    """The value bash gives ``$'body'`` (body without the quotes; ``\\'`` already kept escaped).

    Returns ``(value, None)`` or ``(None, reason)`` when only bash (its locale, its C strings)
    decides the value.
    """
    out = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in _OCT:
            digits = e + _digits(body, i, _OCT, 2)
            i += len(digits) - 1
            code = int(digits, 8) & 0xFF
            if code == 0:
                return None, "$'...' holds \\%s, a NUL byte (bash ends the value there)" % digits
            if code > 0x7F:
                return None, "$'...' holds \\%s, a byte that is not UTF-8 text on its own" % digits
            out.append(chr(code))
        elif e in "xuU":
            digits = _digits(body, i, _HEX, {"x": 2, "u": 4, "U": 8}[e])
            if not digits:
                out.append("\\" + e)           # no digits: bash keeps the escape as it is
                continue
            i += len(digits)
            code = int(digits, 16)
            if code == 0:
                return None, "$'...' holds \\%s%s, a NUL byte (bash ends the value there)" % (e, digits)
            if code > 0x7F:
                return None, ("$'...' holds \\%s%s: beyond ASCII its bytes depend on bash's locale; write the "
                              "character itself in single quotes" % (e, digits))
            out.append(chr(code))
        elif e == "c":
            return None, "$'...' holds a \\c control escape; write the value in single quotes"
        else:
            out.append("\\" + e)               # unknown escape: kept, backslash included
    return "".join(out), None
