# -*- coding: utf-8 -*-
"""The launcher ``.env`` as data: the one writer, a parser that reads it as bash does, and its backups.

The launcher runs ``set -a; source "$ENV_FILE"; set +a``: bash executes the file. Everything here
exists so that the file stays data.

* :func:`render_env` is the only writer. Every value is written so that bash's ``source`` yields
  exactly the declared string: bare when it holds only characters bash never interprets
  (``[A-Za-z0-9_@%+=:,./-]``), otherwise in single quotes with ``'`` written as ``'\\''``. What
  cannot be written as data is refused naming the key (:func:`key_problem`, :func:`value_problem`):
  names that are not shell identifiers or that are the shell's own or the loader's variables
  (``BASH_ENV``, ``PS4``, ``IFS``, ``PATH``, ``LD_PRELOAD`` ...: assigning them changes what runs),
  values with a newline, carriage return, NUL or other control character, or that are not UTF-8.
  Notes become ``#`` comment lines; a newline in a note starts another comment line, never code.
* :func:`parse_env` reads a ``.env`` with bash's rules for the constructs a settings file uses:
  assignments (``NAME=word``, ``NAME+=word``, several per line, ``export``), single and double
  quotes, backslash escapes, line continuations, ``#`` comments (only at the start of a word),
  ``$NAME``, ``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, ``${NAME:+word}``, ``${NAME+word}``,
  tilde (``~``, ``~/x``, after ``:``), ``;`` between assignments, CRLF line ends (the ``\\r`` is part
  of the value, as in bash). Anything that would run code or whose value bash alone decides is
  refused with :class:`EnvSyntaxError` naming the line: command substitution (``$(...)``, backquotes),
  arithmetic, a command word (``A=1 cmd`` runs ``cmd``), pipes and redirections, ``$'...'``,
  special parameters, other ``${...}`` operators, ``~user``, the shell's own variables
  (``$RANDOM``, ``$PWD``), NUL bytes. Unit tests compare it with bash itself.
* :func:`converge_env` / :func:`rollback_env` write the file atomically (mode 0600, owner kept) and
  keep its history exact: each run that changes the file first saves the file as it was in a named
  snapshot ``<.env>.dsv41-backup-<UTC>-<run id>`` (created 0600 with ``O_EXCL``) and records it in
  ``<.env>.dsv41-backups.json`` beside it (the run's id, the snapshot, its sha256, the file's mode and
  owner). A rollback restores the recorded "before" of one run (the latest by default): content,
  mode and owner. It adds nothing to that record, so running it twice equals once.
* :func:`env_changes`: what changes, key by key, as bash sees it, secrets redacted
  (``module_utils/secret_rule.py``).
"""
from __future__ import absolute_import, division, print_function

import binascii
import errno
import hashlib
import json
import os
import re
import stat
import time

from ansible.module_utils.secret_rule import SECRET_MASK, is_secret_name, redact_text

__metaclass__ = type

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SAFE_BARE_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_CONTROL_RE = re.compile(u"[\x00-\x08\x0a-\x1f\x7f]")
_NOTE_BREAK_RE = re.compile(r"\r\n|\r|\n")

DEFAULT_HEADER = (
    "Ansible managed",
    "dsv41 launcher settings, sourced by start.sh (bash). Rendered from the inventory baseline",
    "(inventory/common/launcher_baseline.yml) and this run's overrides; change those, not this file.",
)
API_KEY = "API_KEY"
ENV_MODE = 0o600
BACKUP_INFIX = ".dsv41-backup-"
REPLACED_INFIX = ".dsv41-replaced-"
RECORD_SUFFIX = ".dsv41-backups.json"
RECORD_FORMAT = 1

# Variables bash sets or reads itself: their value is the shell's (a reference cannot be predicted
# from the file), and assigning them changes how the shell behaves.
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
# Never written by the role: besides the shell's own, variables that change which programs run or
# what they load once exported to every command start.sh starts (``set -a``).
RESERVED_KEYS = SHELL_OWN_VARS | frozenset(["PATH", "HOME", "ENV", "CDPATH", "TMPDIR", "LANG", "LC_ALL"])
RESERVED_PREFIXES = ("BASH_", "COMP_", "LD_")


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


def _is_own(name):
    return name in SHELL_OWN_VARS or name.startswith(("BASH_", "COMP_"))


# ---------------------------------------------------------------------------------------------
# Values and the writer
# ---------------------------------------------------------------------------------------------

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
        return "%s: the value holds %s, which a .env line cannot hold as data" % (key, name)
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


# ---------------------------------------------------------------------------------------------
# The parser (bash's rules)
# ---------------------------------------------------------------------------------------------

_BLANKS = " \t"
_OPERATORS = "&|<>()"       # control and redirection operators: code, never data
_SPECIAL_PARAMS = "0123456789@*#?-$!"


class _Parser(object):
    def __init__(self, text, base, source):
        self.t = text
        self.n = len(text)
        self.i = 0
        self.known = dict(base or {})
        self.result = {}
        self.source = source

    # -- positions -------------------------------------------------------------------------
    def fail(self, message, at=None):
        at = self.i if at is None else at
        raise EnvSyntaxError(message, self.t.count("\n", 0, min(at, self.n)) + 1, self.source)

    def cur(self):
        """Current character after removing line continuations (backslash-newline), as bash does
        everywhere outside single quotes and comments."""
        while self.t.startswith("\\\n", self.i):
            self.i += 2
        return self.t[self.i] if self.i < self.n else ""

    def nxt(self):
        """The character after the current one (continuations skipped)."""
        j = self.i + 1
        while self.t.startswith("\\\n", j):
            j += 2
        return self.t[j] if j < self.n else ""

    def advance(self):
        self.cur()
        self.i += 1

    def skip_blanks(self):
        while self.cur() in _BLANKS and self.cur() != "":
            self.i += 1

    def skip_comment(self):
        nl = self.t.find("\n", self.i)
        self.i = self.n if nl == -1 else nl

    def read_name(self):
        """A name starting at the current character (continuations inside it removed), or ""."""
        c = self.cur()
        if not (c.isascii() and (c.isalpha() or c == "_")):
            return ""
        out = []
        while True:
            c = self.cur()
            if c != "" and c.isascii() and (c.isalnum() or c == "_"):
                out.append(c)
                self.i += 1
            else:
                return "".join(out)

    # -- structure -------------------------------------------------------------------------
    def parse(self):
        if "\x00" in self.t:
            self.fail("the file holds a NUL byte (bash drops it and joins what follows)", self.t.index("\x00"))
        while True:
            self.skip_blanks()
            c = self.cur()
            if c == "":
                return self.result
            if c == "\n":
                self.i += 1
            elif c == "#":
                self.skip_comment()
            elif c == ";":
                self.fail("';' with no command before it (a bash syntax error)")
            else:
                self.command()

    def command(self):
        exporting = False
        first = True
        while True:
            self.skip_blanks()
            c = self.cur()
            if c == "" or c == "\n":
                return
            if c == ";":
                self.i += 1
                self.skip_blanks()
                if self.cur() == ";":
                    self.fail("';;' is a bash syntax error")
                return
            if c == "#":
                self.skip_comment()
                return
            if c in _OPERATORS:
                self.fail("'%s' is a shell operator (pipe, background, redirection or subshell): "
                          "a .env holds only assignments" % c)
            start = self.i
            name = self.read_name()
            op = None
            if name:
                if self.cur() == "=":
                    op = "="
                    self.i += 1
                elif self.cur() == "+" and self.nxt() == "=":
                    op = "+="
                    self.advance()
                    self.advance()
            if op:
                if _is_own(name):
                    self.fail("%s is the shell's own variable: assigning it changes the shell, not a setting"
                              % name, start)
                value = self.word(exporting)
                if op == "+=":
                    value = (self.known.get(name) or "") + value
                self.known[name] = value
                self.result[name] = value
            elif first and name == "export" and self.cur() in _BLANKS + "\n;":
                exporting = True
            elif exporting and name and (self.cur() in _BLANKS + "\n;" or self.cur() == ""):
                pass                    # `export NAME`: marks it exported; with set -a it already is
            else:
                # The word itself is not quoted in the message: the line may hold a secret.
                if first:
                    self.fail("a command word, not NAME=value: bash would run it (a .env holds only "
                              "assignments)", start)
                self.fail("a command word after an assignment: bash would run it with the assignments as "
                          "its environment", start)
            first = False

    # -- words -----------------------------------------------------------------------------
    def word(self, exporting):
        """An assignment value in unquoted context, expanded as bash expands it."""
        parts = []
        tilde_ok = True                 # at the start of the value and after an unquoted ':'
        while True:
            c = self.cur()
            if c == "" or c in _BLANKS + "\n;" or c in _OPERATORS:
                return "".join(parts)
            colon = False
            if c == "\\":
                if self.i + 1 >= self.n:
                    parts.append("\\")  # a lone backslash at the end of the file stays (bash)
                    self.i += 1
                else:
                    parts.append(self.t[self.i + 1])
                    self.i += 2
            elif c == "'":
                parts.append(self.single())
            elif c == '"':
                parts.append(self.double())
            elif c == "$":
                parts.append(self.dollar(False, exporting))
            elif c == "`":
                self.fail("backquote command substitution: bash would run it")
            elif c == "~" and tilde_ok:
                if exporting:
                    self.fail("'~' in an export argument: refused (bash expands it differently there)")
                parts.append(self.tilde("\n" + _BLANKS + ";" + _OPERATORS))
            elif exporting and c in "{}":
                self.fail("'%s' in an export argument: bash applies brace expansion there" % c)
            else:
                parts.append(c)
                colon = c == ":"
                self.i += 1
            tilde_ok = colon

    def single(self):
        end = self.t.find("'", self.i + 1)
        if end == -1:
            self.fail("unterminated single quote")
        text = self.t[self.i + 1:end]
        self.i = end + 1
        return text

    def double(self):
        start = self.i
        self.i += 1
        parts = []
        while True:
            c = self.cur()
            if c == "":
                self.fail("unterminated double quote", start)
            if c == '"':
                self.i += 1
                return "".join(parts)
            if c == "\\":
                after = self.t[self.i + 1:self.i + 2]
                if after in ("$", "`", '"', "\\"):
                    parts.append(after)
                    self.i += 2
                else:
                    parts.append("\\")
                    self.i += 1
            elif c == "$":
                parts.append(self.dollar(True, False))
            elif c == "`":
                self.fail("backquote command substitution: bash would run it")
            else:
                parts.append(c)
                self.i += 1

    def tilde(self, enders):
        after = self.nxt()
        if after == "" or after in "/:" or after in enders:
            self.advance()
            if "HOME" not in self.known:
                self.fail("'~' needs HOME, which is not known here")
            return self.known["HOME"]
        self.fail("'~%s...': a user's home or the directory stack is only known to bash on that host" % after)

    def lookup(self, name, at):
        if _is_own(name):
            self.fail("$%s is the shell's own variable: only bash knows its value" % name, at)
        return self.known.get(name)

    def dollar(self, quoted, exporting):
        at = self.i
        after = self.nxt()
        if after == "(":
            self.fail("$( ... ) runs a command (command substitution or arithmetic)")
        if after == "{":
            self.advance()
            self.advance()
            return self.brace(quoted, exporting, at)
        if after == "'" and not quoted:
            self.fail("$'...' quoting is not supported; write the value in single quotes")
        if after == '"' and not quoted:
            self.fail('$"..." (translated string) is not supported')
        if after != "" and after.isascii() and (after.isalpha() or after == "_"):
            self.advance()
            name = self.read_name()
            return self.lookup(name, at) or ""
        if after != "" and after in _SPECIAL_PARAMS:
            self.fail("$%s is a special parameter: only bash knows its value" % after)
        self.advance()
        return "$"                      # a '$' that starts no expansion is literal

    def brace(self, quoted, exporting, at):
        name = self.read_name()
        if not name:
            self.fail("${...} is only supported as ${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:+word} "
                      "or ${NAME+word}", at)
        c = self.cur()
        if c == "}":
            self.i += 1
            return self.lookup(name, at) or ""
        op = ""
        if c == ":":
            self.i += 1
            op = ":"
            c = self.cur()
        if c not in ("-", "+"):
            self.fail("${%s%s%s...} is not supported (only ${NAME}, ${NAME:-word}, ${NAME-word}, "
                      "${NAME:+word}, ${NAME+word})" % (name, op, c), at)
        self.i += 1
        op += c
        word = self.brace_word(quoted, exporting, at)
        value = self.lookup(name, at)
        if op == ":-":
            return value if value else word
        if op == "-":
            return value if value is not None else word
        if op == ":+":
            return word if value else ""
        return word if value is not None else ""

    def brace_word(self, quoted, exporting, at):
        """The word of ${NAME<op>word} up to its closing brace."""
        parts = []
        tilde_ok = not quoted
        while True:
            c = self.cur()
            if c == "":
                self.fail("unterminated ${", at)
            if c == "}":
                self.i += 1
                return "".join(parts)
            colon = False
            if c == "\\":
                after = self.t[self.i + 1:self.i + 2]
                if not quoted:
                    if after == "":
                        self.fail("unterminated ${", at)
                    parts.append(after)
                    self.i += 2
                elif after in ("$", "`", '"', "\\", "}"):
                    parts.append(after)
                    self.i += 2
                else:
                    parts.append("\\")
                    self.i += 1
            elif c == "'":
                text = self.single()
                # Inside "${...}" single quotes protect the brace but stay in the value (bash).
                parts.append("'%s'" % text if quoted else text)
            elif c == '"':
                if quoted:
                    self.fail('double quotes nested inside "${...}" are not supported')
                parts.append(self.double())
            elif c == "$":
                parts.append(self.dollar(quoted, exporting))
            elif c == "`":
                self.fail("backquote command substitution: bash would run it")
            elif c == "~" and tilde_ok:
                if exporting:
                    self.fail("'~' in an export argument: refused (bash expands it differently there)")
                parts.append(self.tilde("}"))
            elif c == "\n" or c in ";" + _OPERATORS:
                self.fail("%r inside ${...} is not supported" % c)
            elif exporting and c == "{":
                self.fail("'{' in an export argument: bash applies brace expansion there")
            else:
                parts.append(c)
                colon = c == ":"
                self.i += 1
            tilde_ok = colon and not quoted


def parse_env(text, base=None, source=".env"):
    """What ``set -a; source FILE`` assigns: {NAME: value} in first-assignment order.

    ``base``: the environment bash starts with (e.g. ``{"HOME": "/home/mia"}``): ``$NAME`` of a
    name neither assigned earlier in the file nor in ``base`` is empty (unset). ``text``: str, or
    bytes that must be UTF-8. Raises :class:`EnvSyntaxError` (naming the line) for anything outside
    the data subset described in the module documentation.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EnvSyntaxError("not valid UTF-8 (byte %d)" % exc.start, None, source)
    return _Parser(str(text), base, source).parse()


# ---------------------------------------------------------------------------------------------
# Key-level diff (secrets redacted)
# ---------------------------------------------------------------------------------------------

def _secrets_of(*envs, **kw):
    values = list(kw.get("extra") or ())
    for env in envs:
        for key, value in (env or {}).items():
            if is_secret_name(key) and value:
                values.append(value)
    return values


def shown_value(key, value, secrets):
    """A value for a diff line: ``(unset)``, ``(secret)``, or the bash word that yields it."""
    if value is None:
        return "(unset)"
    if is_secret_name(key):
        return "(secret)"
    return quote_value(redact_text(value, secrets))


def env_changes(before, after, extra_secrets=()):
    """``KEY: old -> new`` per key whose value bash would see differently (``(unset)`` when absent).

    ``before``/``after``: parsed mappings. A secret-named key shows ``KEY: (secret changed)``;
    secret values (and ``extra_secrets``) are replaced in every other value.
    """
    before = before or {}
    secrets = _secrets_of(before, after, extra=extra_secrets)
    out = []
    for key in list(before) + [k for k in after if k not in before]:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if is_secret_name(key) and old is not None and new is not None:
            out.append("%s: (secret changed)" % key)
        else:
            out.append("%s: %s -> %s" % (key, shown_value(key, old, secrets), shown_value(key, new, secrets)))
    return out


def env_listing(env, extra_secrets=()):
    """``KEY=value`` lines of a parsed mapping for Ansible's --diff (secrets shown as ***)."""
    secrets = _secrets_of(env, extra=extra_secrets)
    lines = []
    for key, value in (env or {}).items():
        shown = SECRET_MASK if is_secret_name(key) else quote_value(redact_text(value, secrets))
        lines.append("%s=%s\n" % (key, shown))
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# Files: atomic writes, snapshots, the record of "befores"
# ---------------------------------------------------------------------------------------------

def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _utc(now=None):
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def record_path(path):
    return path + RECORD_SUFFIX


def read_env_file(path):
    """(bytes, os.stat_result) of the .env, or (None, None) when it does not exist.

    Refuses a symlink or anything but a regular file: writing through it would change another file.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None
        raise EnvError("%s: cannot read: %s" % (path, exc.strerror))
    if stat.S_ISLNK(st.st_mode):
        raise EnvError("%s is a symbolic link; refusing to write through it (replace it with the file)" % path)
    if not stat.S_ISREG(st.st_mode):
        raise EnvError("%s is not a regular file" % path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise EnvError("%s: cannot read: %s" % (path, exc.strerror))
    return b"".join(chunks), st


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_fd(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def create_private(path, data):
    """Create ``path`` holding ``data`` with mode 0600 from the first byte (O_EXCL, no symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)            # whatever the umask
        _write_fd(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def write_atomic(path, data, mode, uid=None, gid=None):
    """Replace ``path`` with ``data`` (temporary file in the same directory, 0600 until renamed,
    fsync, owner and mode set, rename, fsync of the directory). Never leaves a partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.dsv41-tmp-%d-%s" % (os.path.basename(path), os.getpid(),
                                                           binascii.hexlify(os.urandom(4)).decode()))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            _write_fd(fd, data)
            st = os.fstat(fd)
            if (uid is not None and uid != st.st_uid) or (gid is not None and gid != st.st_gid):
                os.fchown(fd, st.st_uid if uid is None else uid, st.st_gid if gid is None else gid)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def load_record(path):
    """The record of befores kept beside the .env: {"format", "file", "runs": [...]} (empty when absent)."""
    rpath = record_path(path)
    try:
        with open(rpath, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"))
    except IOError as exc:
        if exc.errno == errno.ENOENT:
            return {"format": RECORD_FORMAT, "file": os.path.basename(path), "runs": []}
        raise EnvError("%s: cannot read: %s" % (rpath, exc.strerror))
    except ValueError as exc:
        raise EnvError("%s is not a valid backup record (%s); fix or remove it" % (rpath, exc))
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or not all(
            isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in data["runs"]):
        raise EnvError("%s is not a valid backup record (expected {\"runs\": [{\"run_id\": ...}]}); fix or "
                       "remove it" % rpath)
    return data


def _save_record(path, record):
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    write_atomic(record_path(path), text.encode("utf-8"), 0o600)


def _entry(record, run_id):
    for run in record["runs"]:
        if run["run_id"] == run_id:
            return run
    return None


def _parse_quiet(data, base, source):
    """(parsed mapping, None) or (None, reason) for the diff of a file that may not be data."""
    if data is None:
        return {}, None
    try:
        return parse_env(data, base, source), None
    except EnvSyntaxError as exc:
        return None, str(exc)


def _diff(path, old_env, old_error, new_env, extra_secrets):
    before = ("# cannot be read as data: %s\n" % old_error) if old_error else env_listing(old_env, extra_secrets)
    return {"before": before, "after": env_listing(new_env, extra_secrets),
            "before_header": path + " (as bash sees it)", "after_header": path + " (as bash will see it)"}


def converge_env(path, settings, api_key=None, notes=(), run_id=None, header=DEFAULT_HEADER, mode=ENV_MODE,
                 base=None, check_mode=False, now=None):
    """Write the .env for ``settings`` (see :func:`render_env`); keep its "before" for ``run_id``.

    Returns ``{changed, path, changes, diff, backup, backup_created, record, run_id, refused_before}``.
    ``changes``: key-level lines as bash sees the old and the new file (secrets redacted). When the
    file changes (content, mode), the first time in a run its previous state is saved in a 0600
    snapshot named for the run and recorded (:func:`load_record`); later changes in the same run keep
    that first "before". Check mode computes everything and writes nothing.
    """
    if not run_id or not RUN_ID_RE.fullmatch(str(run_id)):
        raise EnvError("run_id %r must be 1-80 characters of letters, digits, '.', '_' or '-'" % (run_id,))
    text = render_env(settings, api_key, notes, header)
    new_env = declared_env(settings, api_key)
    if parse_env(text, {}, path) != new_env:   # the writer must round-trip; refuse rather than guess
        raise EnvError("%s: the rendered file would not give bash the declared values" % path)
    data = text.encode("utf-8")
    old, st = read_env_file(path)
    old_env, old_error = _parse_quiet(old, base, path)
    secrets = [api_key] if api_key else []
    old_error = old_error and redact_text(old_error, secrets)
    result = {"path": path, "run_id": run_id, "record": record_path(path), "backup": None,
              "backup_created": False, "refused_before": old_error}
    same = old is not None and old == data and stat.S_IMODE(st.st_mode) == mode
    if old_error:
        changes = ["the current file cannot be read as data (%s); it is replaced by the declared settings"
                   % old_error]
    else:
        changes = env_changes(old_env, new_env, secrets)
    if not same and not changes:
        changes = ["(same values for bash; the file is rewritten in the canonical form%s)"
                   % ("" if old is None or stat.S_IMODE(st.st_mode) == mode else
                      ", mode %04o -> %04o" % (stat.S_IMODE(st.st_mode), mode))]
    result.update(changed=not same, changes=changes if not same else [],
                  diff=_diff(path, old_env, old_error, new_env, secrets))
    record = load_record(path)
    entry = _entry(record, run_id)
    if entry is not None:
        result["backup"] = entry.get("backup")
    if same or check_mode:
        return result
    if entry is None:
        entry = {"run_id": run_id, "recorded": _utc(now), "existed": old is not None}
        if old is not None:
            base_name = "%s%s%s-%s" % (os.path.basename(path), BACKUP_INFIX, _utc(now), run_id)
            directory = os.path.dirname(os.path.abspath(path))
            name, n = base_name, 1
            while True:
                try:
                    create_private(os.path.join(directory, name), old)
                    break
                except OSError as exc:
                    if exc.errno != errno.EEXIST or n > 99:
                        raise EnvError("%s: cannot create the backup %s: %s" % (path, name, exc.strerror))
                    n += 1
                    name = "%s.%d" % (base_name, n)
            entry.update(backup=name, sha256=_sha256(old), size=len(old), mode="%04o" % stat.S_IMODE(st.st_mode),
                         uid=st.st_uid, gid=st.st_gid)
            result.update(backup=name, backup_created=True)
        record["runs"].append(entry)
        _save_record(path, record)
    try:
        write_atomic(path, data, mode, st.st_uid if st else None, st.st_gid if st else None)
    except OSError as exc:
        raise EnvError("%s: cannot write: %s" % (path, exc.strerror))
    return result


def rollback_env(path, run_id=None, base=None, check_mode=False, extra_secrets=()):
    """Restore the recorded "before" of ``run_id`` (default: the latest recorded run) exactly:
    content, mode and owner (or remove the file if it did not exist before that run).

    Returns ``{changed, path, restored_run, backup, changes, diff, runs, replaced}``. Adds nothing to
    the record, so a second rollback finds the file already restored and changes nothing. The file
    it replaces is kept as ``<.env>.dsv41-replaced-<sha256 prefix>`` (0600, outside the record).
    """
    record = load_record(path)
    runs = [{"run_id": r["run_id"], "recorded": r.get("recorded"), "backup": r.get("backup")}
            for r in record["runs"]]
    result = {"path": path, "runs": runs, "restored_run": None, "backup": None, "replaced": None,
              "changed": False, "changes": []}
    if not record["runs"]:
        result["msg"] = "no recorded run changed %s; nothing to restore" % path
        return result
    if run_id:
        entry = _entry(record, run_id)
        if entry is None:
            raise EnvError("%s: no recorded run %r (recorded: %s)" % (path, run_id,
                                                                      ", ".join(r["run_id"] for r in runs)))
    else:
        entry = record["runs"][-1]
    directory = os.path.dirname(os.path.abspath(path))
    result.update(restored_run=entry["run_id"], backup=entry.get("backup"))
    if entry.get("existed", True):
        if not entry.get("backup"):
            raise EnvError("%s: the record of run %s names no backup" % (record_path(path), entry["run_id"]))
        bpath = os.path.join(directory, entry["backup"])
        target, _bst = read_env_file(bpath)
        if target is None:
            raise EnvError("%s: the backup %s of run %s is missing" % (path, entry["backup"], entry["run_id"]))
        if entry.get("sha256") and _sha256(target) != entry["sha256"]:
            raise EnvError("%s: the backup %s changed since it was recorded (sha256 differs); not restoring it"
                           % (path, entry["backup"]))
        mode = int(entry.get("mode", "0600"), 8)
        uid, gid = entry.get("uid"), entry.get("gid")
    else:
        target, mode, uid, gid = None, None, None, None
    current, st = read_env_file(path)
    same = (current == target and (target is None or (
        stat.S_IMODE(st.st_mode) == mode and (uid is None or st.st_uid == uid) and (gid is None or st.st_gid == gid))))
    cur_env, cur_error = _parse_quiet(current, base, path)
    tgt_env, tgt_error = _parse_quiet(target, base, entry.get("backup") or path)
    secrets = list(extra_secrets or ())
    for env in (cur_env, tgt_env):
        if env and env.get(API_KEY):
            secrets.append(env[API_KEY])
    if cur_error or tgt_error:
        changes = ["(the %s file cannot be read as data: %s)" % ("current" if cur_error else "recorded",
                                                                 redact_text(cur_error or tgt_error, secrets))]
    else:
        changes = env_changes(cur_env, tgt_env, secrets)
    if not same and not changes:
        changes = ["(same values for bash; bytes, mode or owner are restored)"]
    if target is None and current is not None:
        changes = ["%s did not exist before run %s: it is removed" % (path, entry["run_id"])] + changes
    result.update(changed=not same, changes=[] if same else changes,
                  diff={"before": env_listing(cur_env, secrets) if cur_env is not None else "",
                        "after": env_listing(tgt_env, secrets) if tgt_env is not None else "",
                        "before_header": path, "after_header": "%s (before run %s)" % (path, entry["run_id"])})
    if same or check_mode:
        return result
    if current is not None:
        name = "%s%s%s" % (os.path.basename(path), REPLACED_INFIX, _sha256(current)[:16])
        kept, _kst = read_env_file(os.path.join(directory, name))
        if kept != current:
            if kept is not None:
                os.unlink(os.path.join(directory, name))
            create_private(os.path.join(directory, name), current)
        result["replaced"] = name
    try:
        if target is None:
            if current is not None:
                os.unlink(path)
                _fsync_dir(directory)
        else:
            write_atomic(path, target, mode, uid, gid)
    except OSError as exc:
        raise EnvError("%s: cannot restore: %s" % (path, exc.strerror))
    return result
