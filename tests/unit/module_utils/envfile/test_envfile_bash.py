"""module_utils/envfile/parse.py against bash itself on generated .env files.

Each generated file is read by the parser (under a per-case alarm: a hang is a failure) and sourced
by the real bash (``set -a; source FILE; set +a`` in ``env -i``, under a per-case timeout). For every
case the parser either returns exactly the variables bash assigned, or refuses with an
:class:`EnvSyntaxError` naming the file and a line of it. A file bash cannot source cleanly (an
error message, a non-zero status, the shell exiting) must be refused. The fragments cover every
construct the parser knows and many it refuses: quotes of all kinds, ``$'...'``, escapes,
continuations, a lone backslash at the end, CRLF, comments, ``export``, references to earlier keys
and to the environment (HOME), defaults, tilde, command substitution, operators.
"""
import random
import signal
import subprocess

import pytest

from ansible.module_utils.envfile import parse as P
from ansible.module_utils.envfile.shell import EnvSyntaxError

BASE = {"HOME": "/home/mia", "PATH": "/usr/bin:/bin"}
CASES = 1000                        # generated files per seed
SEEDS = (1, 2, 3, 4)
PARSE_SECONDS = 2                   # per case: the parser's bound (it is linear; a hang fails)
BASH_SECONDS = 10                   # per case: bash's bound (a generated file never loops in bash)
# env -0 before and after sourcing; the sourced file's own output goes to /dev/null so a command
# that prints cannot be mistaken for the environment.
PROBE = r'''
env -0
printf '\0--sourced--\0'
set -a
source "$1" >/dev/null
__rc=$?
set +a
env -0
printf '\0--rc=%s--\0' "$__rc"
'''

FRAGMENTS = [
    # plain text, blanks, separators
    "x", "y z", "/srv/m", "0.95", " ", "\t", ";", "; ", "=", "+=", ":", ",", "@", "%", "é", "🚀",
    # quotes
    "'", '"', "'q r'", "''", '""', '"s $A t"', '"\\$"', '"\\\\"', '"a\\"b"', '"\\a"', "'\\'", "\\'", '\\"',
    "'m\nn'", '"d\ne"',
    # ANSI-C quoting
    "$'a\\tb'", "$'", "$'\\x41\\101\\q\\''", "$'\\u41'", "$'x\ny'", "$'\\x'", "$'\\e[0m'", "$'\\7'",
    # escapes, continuations, line ends
    "\\", "\\\\", "\\ ", "\\#", "\\$", "\\\n", "a\\\nb", "\n", "\r\n", "\r", "\\\r\n",
    # comments and export
    "#", " # c", "#x", "export ", "export", "export -n ",
    # references and defaults
    "$", "$A", "$B", "${A}", "$HOME", "${HOME}", "$UNSET", "${U:-d}", "${U-q}", "${A:+p}", "${A+w}",
    "${U:-a b}", "${U:-'s q'}", "${U:-\"d q\"}", "${U:-\\}}", "${U:-$A}", "${U:-${HOME}/x}", "${", "}",
    '"${U:-$\'z\'}"', "${U:-$'z'}", "${U:-'m\nn'}",
    # tilde, globbing, history, brace expansion
    "~", "~/", "*", "?", "[ab]", "{a,b}", "!", "!!",
]
# Rarer: what bash would run, or only bash knows (each is refused; a few per file are enough).
CODE = ["$(", "$(true)", "$((1+2))", "`", "`true`", "|", "&", ">", "<", "(", ")", "&&", "~root", "$1", "$$",
        "$RANDOM", "${#A}", "${A%x}", "${U:=v}", "$[ab]", "$[1+2]", "$'\\0'", "$'\\u00e9'", "$'\\cA'", "$'\\xff'", " cmd"]
NAMES = ["A", "B", "C", "A", "export A", "export B C", "D", "HOME", "x1"]
RARE_NAMES = ["PS4", "_", "export", "1A"]


def generate(rng):
    lines = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.08:
            lines.append(rng.choice(["# comment", "", "   ", "\t# indented"]))
            continue
        value = "".join(rng.choice(CODE if rng.random() < 0.03 else FRAGMENTS) for _ in range(rng.randint(0, 6)))
        name = rng.choice(RARE_NAMES if rng.random() < 0.03 else NAMES)
        lines.append(name + rng.choice(["=", "=", "=", "+="]) + value)
    return rng.choice(["\n", "\r\n", "\n"]).join(lines) + rng.choice(["", "\n", "\\", "\r\n", "\\\n"])


def bash_source(tmp_path, text):
    """(assigned or None when bash failed, bash stderr)."""
    path = tmp_path / "case.env"
    path.write_bytes(text.encode("utf-8"))
    res = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in BASE.items()] + ["bash", "-c", PROBE, "probe",
                                                                                 str(path)],
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=BASH_SECONDS)
    out = res.stdout.decode("utf-8", "surrogateescape")
    before_text, _, rest = out.partition("\0--sourced--\0")
    after_text, _, tail = rest.partition("\0--rc=")
    err = res.stderr.decode("utf-8", "replace")
    if not tail or tail.split("--")[0] != "0" or err or res.returncode != 0:
        return None, err

    def env_map(text):
        return dict(item.partition("=")[::2] for item in text.split("\0") if item)

    before, after = env_map(before_text), env_map(after_text)
    return dict((k, v) for k, v in after.items() if before.get(k) != v and k not in ("_", "__rc")), err


class _Hang(Exception):
    pass


def parse_bounded(text):
    """The parser's answer (a dict or the EnvSyntaxError), failing the case if it takes too long."""
    def alarm(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(PARSE_SECONDS)
    try:
        return P.parse_env(text, BASE, source="/gen/.env")
    except EnvSyntaxError as exc:
        return exc
    except _Hang:
        pytest.fail("the parser did not answer within %d s on %r" % (PARSE_SECONDS, text))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("seed", SEEDS)
def test_parser_equals_bash_or_refuses_on_generated_files(tmp_path, seed):
    rng = random.Random(seed)
    counts = {"equal": 0, "refused": 0}
    for _ in range(CASES):
        text = generate(rng)
        got = parse_bounded(text)
        if isinstance(got, EnvSyntaxError):
            assert str(got).startswith("/gen/.env: line ") and 1 <= got.line <= text.count("\n") + 1, str(got)
            counts["refused"] += 1
            continue
        want, err = bash_source(tmp_path, text)
        assert want is not None, "the parser accepted %r but bash fails on it: %s" % (text, err)
        # bash's side lists what changed: a name set to the value it already had (HOME=$HOME) is not there
        changed = dict((k, v) for k, v in got.items() if BASE.get(k) != v)
        assert changed == want, "parser and bash disagree on %r" % (text,)
        counts["equal"] += 1
    # the generator must exercise both outcomes, or the comparison proves little
    assert counts["equal"] >= CASES // 10 and counts["refused"] >= CASES // 10, counts
