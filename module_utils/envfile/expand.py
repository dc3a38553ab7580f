# -*- coding: utf-8 -*-
"""The expansions of a ``.env`` word, read as bash expands them: ``$NAME``, ``${NAME}``, the four
``${NAME<op>word}`` forms, ``$'...'`` and tilde; everything else a ``$`` can start is refused.

:class:`Expansions` is the part of the ``.env`` reader (``envfile_parse._Parser``) that turns an
expansion into its value; the reader supplies the cursor it works on: ``t`` (the text), ``i`` (the
position), ``n``, ``known`` and ``frozen`` (the values a lookup sees), and the methods ``cur``,
``nxt``, ``advance``, ``fail``, ``read_name``, ``single``, ``double`` and ``ansi_c``.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.envfile.shell import OPERATORS, SPECIAL_PARAMS, is_shell_own

__metaclass__ = type


class Expansions(object):
    """Mixin of the ``.env`` reader: each method reads one expansion at the cursor and returns its value."""

    def tilde(self, enders):
        after = self.nxt()
        if after == "" or after in "/:" or after in enders:
            self.advance()
            if "HOME" not in self.known:
                self.fail("'~' needs HOME, which is not known here")
            return self.known["HOME"]
        self.fail("'~%s...': a user's home or the directory stack is only known to bash on that host" % after)

    def lookup(self, name, at):
        if is_shell_own(name):
            self.fail("$%s is the shell's own variable: only bash knows its value" % name, at)
        # export's arguments are all expanded before it assigns any: they see the values of before
        return (self.known if self.frozen is None else self.frozen).get(name)

    def dollar(self, quoted, exporting):
        at = self.i
        after = self.nxt()
        if after == "(":
            self.fail("$( ... ) runs a command (command substitution or arithmetic)")
        if after == "[":
            self.fail("$[ ... ] is arithmetic expansion: only bash knows its value")
        if after == "{":
            self.advance()
            self.advance()
            return self.brace(quoted, exporting, at)
        if after == "'" and not quoted:
            if self.i + 1 < self.n and self.t[self.i + 1] == "'":
                return self.ansi_c()
            self.fail("$ and ' separated by a line continuation: refused (write $'...' on one line)")
        if after == '"' and not quoted:
            self.fail('$"..." (translated string) is not supported')
        if after != "" and after.isascii() and (after.isalpha() or after == "_"):
            self.advance()
            name = self.read_name()
            return self.lookup(name, at) or ""
        if after != "" and after in SPECIAL_PARAMS:
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
                if quoted and self.nxt() == "'":
                    self.fail("$'...' inside \"${...}\": refused (bash's extquote option decides its value)")
                parts.append(self.dollar(quoted, exporting))
            elif c == "`":
                self.fail("backquote command substitution: bash would run it")
            elif c == "~" and tilde_ok:
                if exporting:
                    self.fail("'~' in an export argument: refused (bash expands it differently there)")
                parts.append(self.tilde("}"))
            elif c == "\n" or c in ";" + OPERATORS:
                self.fail("%r inside ${...} is not supported" % c)
            elif exporting and c == "{":
                self.fail("'{' in an export argument: bash applies brace expansion there")
            else:
                parts.append(c)
                colon = c == ":"
                self.i += 1
            tilde_ok = colon and not quoted
