# -*- coding: utf-8 -*-
"""The launcher ``.env`` read as bash reads it (``set -a; source FILE; set +a``), without running it.

:func:`parse_env` returns what bash assigns; :func:`parse_text` also returns the commands read
(their spans and assignments), from which ``envfile_lines.parse_statements`` cuts the file into line
groups so a converge can keep what it does not manage byte for byte (``envfile_merge.py``).

Constructs read as bash does: assignments (``NAME=word``, ``NAME+=word``, several per line,
``export``), single and double quotes, ``$'...'`` (ANSI-C escapes), backslash escapes, line
continuations, ``#`` comments (only at the start of a word), ``$NAME``, ``${NAME}``,
``${NAME:-word}``, ``${NAME-word}``, ``${NAME:+word}``, ``${NAME+word}``, tilde (``~``, ``~/x``,
after ``:``), ``;`` between assignments, CRLF line ends (bash keeps the ``\\r`` in the value), a
lone backslash at the end of the file (kept, except on a line that continues a multi-line
single-quoted string, where bash drops it). Refused with :class:`EnvSyntaxError` naming the file
and line: whatever would run code or whose value only bash knows (command substitution, arithmetic,
a command word, pipes and redirections, ``$"..."``, special parameters, other ``${...}``
operators, ``~user``, the shell's own variables, NUL bytes, ``$'...'`` escapes whose bytes depend on
the locale). The expansions (``$``, ``${...}``, tilde) are read by ``envfile_expand.Expansions``,
which the reader extends. Every loop consumes input, so any text gives an answer in time linear
in its length.
tests/unit/module_utils/envfile/test_envfile_bash.py compares the parser with bash on generated files.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.envfile.expand import Expansions
from ansible.module_utils.envfile.shell import OPERATORS, EnvSyntaxError, ansi_c_text, is_shell_own

__metaclass__ = type

_BLANKS = " \t"


class _Parser(Expansions):
    def __init__(self, text, base, source):
        self.t = text
        self.n = len(text)
        self.i = 0
        self.known = dict(base or {})
        self.result = {}
        self.source = source
        self.last_sq_newline = -1       # position of the last newline read inside single quotes
        self.commands = []              # (start, end, [(name, value after the assignment)])
        self.assigns = None
        self.frozen = None              # the values export's arguments expand with (see lookup)
        # Every loop reads the current character through cur(); this budget turns any loop that
        # stops consuming input into a refusal instead of a hang (bounded time whatever the text).
        self.budget = 64 * (self.n + 16)

    # -- positions -------------------------------------------------------------------------
    def fail(self, message, at=None):
        at = self.i if at is None else at
        raise EnvSyntaxError(message, self.t.count("\n", 0, min(at, self.n)) + 1, self.source)

    def cur(self):
        """Current character after removing line continuations (backslash-newline), as bash does
        everywhere outside single quotes and comments."""
        self.budget -= 1
        if self.budget < 0:
            raise EnvSyntaxError("the parser stopped making progress (a defect); refusing rather than guessing",
                                 self.t.count("\n", 0, min(self.i, self.n)) + 1, self.source)
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
                start, self.assigns = self.i, []
                self.command()
                self.commands.append((start, max(self.i, start + 1), self.assigns))

    def command(self):
        at = self.i
        exporting, args = self.command_words()
        self.frozen = None
        if exporting and not args:
            self.fail("'export' with no name prints every exported variable: a .env holds only assignments", at)

    def command_words(self):
        """Reads one command; returns (whether it is an export, how many names it has after the word)."""
        args = 0
        exporting = False
        first = True
        while True:
            self.skip_blanks()
            c = self.cur()
            if c == "" or c == "\n":
                return exporting, args
            if c == ";":
                self.i += 1
                self.skip_blanks()
                if self.cur() == ";":
                    self.fail("';;' is a bash syntax error")
                return exporting, args
            if c == "#":
                self.skip_comment()
                return exporting, args
            if c in OPERATORS:
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
                if is_shell_own(name):
                    self.fail("%s is the shell's own variable: assigning it changes the shell, not a setting"
                              % name, start)
                value = self.word(exporting)
                if op == "+=":
                    value = (self.known.get(name) or "") + value
                self.known[name] = value
                self.result[name] = value
                self.assigns.append((name, value))
                args += 1
            elif first and name == "export" and self.cur() in _BLANKS + "\n;":
                exporting = True
                self.frozen = dict(self.known)
            elif exporting and name and (self.cur() in _BLANKS + "\n;" or self.cur() == ""):
                args += 1               # `export NAME`: marks it exported; with set -a it already is
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
            if c == "" or c in _BLANKS + "\n;" or c in OPERATORS:
                return "".join(parts)
            colon = False
            if c == "\\":
                if self.i + 1 >= self.n:
                    # A lone backslash at the end of the file stays (bash), except on a line that
                    # continues a multi-line single-quoted string: bash drops it there.
                    if self.t.rfind("\n", 0, self.i) != self.last_sq_newline or self.last_sq_newline < 0:
                        parts.append("\\")
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
                parts.append(self.tilde("\n" + _BLANKS + ";" + OPERATORS))
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
        if "\n" in text:
            self.last_sq_newline = self.t.rfind("\n", self.i, end)
        self.i = end + 1
        return text

    def ansi_c(self):
        """``$'...'``: the body up to the first ``'`` not escaped by a backslash, decoded as bash does."""
        start = self.i
        j = self.i + 2
        while j < self.n and self.t[j] != "'":
            j += 2 if self.t[j] == "\\" else 1
        if j >= self.n:
            self.fail("unterminated $'...' quote", start)
        body = self.t[self.i + 2:j]
        if "\n" in body:
            self.last_sq_newline = self.t.rfind("\n", self.i, j)
        self.i = j + 1
        value, reason = ansi_c_text(body)
        if reason:
            self.fail(reason, start)
        return value

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


def parse_env(text, base=None, source=".env"):
    """What ``set -a; source FILE`` assigns: {NAME: value} in first-assignment order.

    ``base``: the environment bash starts with (e.g. ``{"HOME": "/home/mia"}``): ``$NAME`` of a
    name neither assigned earlier in the file nor in ``base`` is empty (unset). ``text``: str, or
    bytes that must be UTF-8. Raises :class:`EnvSyntaxError` (naming the line) for anything outside
    the data subset described in the module documentation.
    """
    return _Parser(_text_of(text, source), base, source).parse()


# A launcher .env is a few kilobytes; the parser is linear but not fast, and a file far beyond this is not
# a settings file (20 MB took half a minute). Refused before parsing, naming its size.
ENV_MAX_BYTES = 1 << 20


def _text_of(text, source):
    size = len(text) if isinstance(text, bytes) else len(str(text).encode("utf-8", "surrogatepass"))
    if size > ENV_MAX_BYTES:
        raise EnvSyntaxError("%d bytes, more than the %d a launcher .env may hold; not read (is this the "
                             "right file?)" % (size, ENV_MAX_BYTES), None, source)
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EnvSyntaxError("not valid UTF-8 (byte %d)" % exc.start, None, source)
    return str(text)


def parse_text(text, base=None, source=".env"):
    """``(env, text, commands)``: :func:`parse_env`'s mapping, the decoded text, and each command read
    as ``(start, end, [(NAME, value after the assignment)])`` (character offsets in ``text``)."""
    text = _text_of(text, source)
    parser = _Parser(text, base, source)
    return parser.parse(), text, parser.commands
