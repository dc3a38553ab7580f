"""module_utils/launcher/env.py: the .env writer and parser against bash itself, backups and rollbacks.

Every parser case is sourced by the real bash (``set -a; source FILE``) in a temporary directory and
the variables it assigned are compared with what the parser returns; every writer case checks that
bash holds exactly the declared string and ran nothing.
"""
import json
import os
import random
import signal
import stat
import subprocess

import pytest

from ansible.module_utils.launcher import env as E
from ansible.module_utils.envfile import parse, render, shell
from ansible.module_utils.base.secrets import SECRET_MASK

import launcher_env as launcher_env_module
from modrun import run_module

BASH = "/bin/bash"
BASE = {"HOME": "/home/mia", "PATH": "/usr/bin:/bin"}
# Prints the environment before and after sourcing the file, NUL-separated, and bash's status.
PROBE = r'''
env -0
printf '\0--dsv41-sourced--\0'
set -a
source "$1"
__dsv41_rc=$?
set +a
env -0
printf '\0--dsv41-rc=%s--\0' "$__dsv41_rc"
'''


def bash_source(tmp_path, data, base=BASE, name="probe.env"):
    """(assigned, stderr, rc): the variables ``set -a; source FILE`` assigned or changed, as bash holds them."""
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    res = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in base.items()] + [BASH, "-c", PROBE, "probe",
                                                                                 str(path)],
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    out = res.stdout.decode("utf-8", "surrogateescape")
    before_text, _, rest = out.partition("\0--dsv41-sourced--\0")
    after_text, _, tail = rest.partition("\0--dsv41-rc=")

    def env_map(text):
        pairs = (item.partition("=") for item in text.split("\0") if item)
        return dict((k, v) for k, _, v in pairs)

    before, after = env_map(before_text), env_map(after_text)
    assigned = dict((k, v) for k, v in after.items() if before.get(k) != v and k not in ("_", "__dsv41_rc"))
    return assigned, res.stderr.decode("utf-8", "replace"), int(tail.split("--")[0])


# --------------------------------------------------------------------------- parser == bash

ACCEPTED = [
    ("plain", "A=1\nB=/srv/models/x\n"),
    ("single quotes", "A='literal $HOME `x` \\ \" !'\n"),
    ("double quotes", 'A="x y"\nB="say \\"hi\\" \\$HOME \\\\ \\` \\a !!"\n'),
    ("concatenation", "A=a\"b c\"'d'e\n"),
    ("unquoted escapes", "A=a\\ b\nB=a\\$b\nC=x\\\\y\nD=\\~\n"),
    ("references", "A=x\nB=$A\nC=${A}y\nD=\"$A z\"\nE=$HOME/e\nF=$UNSET_THING.f\n"),
    ("defaults", "E=\nA=${U:-x}\nB=${U-x}\nC=${E:-x}\nD=${E-x}\nF=${HOME:-x}\nG=${HOME:+y}\nH=${U+z}\n"
                 "I=${E+w}\nJ=${U:-${HOME}/j}\n"),
    ("defaults with quotes and blanks", "A=${U:-'a b'}\nB=${U:-\"a b\"}\nC=${U:-a b c}\nD=${U:-\\}}\n"),
    ("defaults inside double quotes", "A=\"${U:-'x'}\"\nB=\"${U:-'}'}\"\nC=\"${U:-\\}}\"\nD=\"${U:-\\a}\"\n"
                                      "E=\"${U:-~}\"\n"),
    ("comments", "# full line\n  # indented\nA=1 # trailing\nB=x#y\nC='q'#z\n"),
    ("export", "export A=1\nexport B=2 C=3\nexport A\n  export   D=4   \n"),
    ("crlf", "A=1\r\nB='x'\r\n# note\r\nC=\"y\"\r\n"),
    ("continuations", "A=abc\\\nB=2\nC=$HO\\\nME\nD=\"a\\\nb\"\nE='a\\\nb'\n# c \\\nF=1\nG=${HOME:-\\\nx}\n"),
    ("escaped backslash before newline", "A=x\\\\\nB=2\n"),
    ("trailing lone backslash", "A=abc\\"),
    ("trailing continuation at end of file", "A=x\\\n"),
    ("append", "A=x\nA+=y\nB+=z\n"),
    ("semicolons", "A=1; B=2;C=3\n"),
    ("several assignments on a line", "A=1 B=$A C=\"$B\"2\n"),
    ("tilde", "A=~\nB=~/x\nC=a:~/b:~\nD=x~\nE=x=~\nF=\"~\"\nG=${U:-~}\nH=:~/\nI=${U:-a:~}\n"),
    ("literal dollars", "A=$\nB=a$\nC=\"$\"\nD=$/x\nE=$%\nF=a$.b\n"),
    ("no globbing or brace expansion", "A=*\nB={a,b}\nC=[ab]*\nD=?\n"),
    ("history characters", "A=!x\nB=\"!!\"\nC='!$'\n"),
    ("unicode", "A=Grüße\nB='🚀 ∂'\nC=\"é~\"\n"),
    ("empty values", "A=\nB=''\nC=\"\"\nD= E=1\n"),
    ("escaped blanks and hashes", "A=x\\ \nB=\\#y\nC=a\\\tb\n"),
    ("reassignment keeps the last value", "A=1\nB=$A\nA=2\n"),
    ("multi-line single quote", "A='a\nb'\n"),
    ("tab inside quotes", "A='a\tb'\nB=\"c\td\"\n"),
    ("unicode line separators are not line ends", "A='a\u2028b'\nB=c\u2029d\nC=\x85e\n"),
    ("carriage return inside a value", "A=x\\\r\nB='y\r'\n"),
    ("ansi-c quoting", "A=$'x\\ty\\'z'\nB=$'\\x41\\101\\q'\nC=$'a\nb'\nD=x$'\\e'y\nE=${U:-$'\\t'}\n"),
    ("export expands its arguments before assigning", "A=1\nexport A=2 B=$A C=${A:-u}\n"),
    ("trailing backslash after a multi-line single quote (bash drops it)", "A='x\ny'\\"),
    ("trailing backslash after a multi-line double quote (bash keeps it)", 'A="x\ny"\\'),
]


@pytest.mark.parametrize("text", [t for _, t in ACCEPTED], ids=[n for n, _ in ACCEPTED])
def test_parser_equals_bash(tmp_path, text):
    for name in ("zz1", "zz2", "a", "b"):        # files a glob would match
        (tmp_path / name).write_text("")
    assigned, err, rc = bash_source(tmp_path, text)
    assert rc == 0 and err == "", err
    assert parse.parse_env(text, BASE) == assigned


REFUSED = [
    ("command substitution", "A=$(touch MARK)\n", "$( ... ) runs a command"),
    ("command substitution in double quotes", 'A="$(touch MARK)"\n', "$( ... ) runs a command"),
    ("backquotes", "A=`touch MARK`\n", "backquote command substitution"),
    ("backquotes in double quotes", 'A="x`touch MARK`"\n', "backquote command substitution"),
    ("arithmetic", "A=$((1+2))\n", "$( ... ) runs a command"),
    ("a command", "touch MARK\n", "a command word, not NAME=value"),
    ("command after assignments", "A=1 touch MARK\n", "a command word after an assignment"),
    ("command after a semicolon", "A=x; touch MARK\n", "a command word, not NAME=value"),
    ("and-list", "A=x && touch MARK\n", "'&' is a shell operator"),
    ("pipe", "A=x | touch MARK\n", "'|' is a shell operator"),
    ("redirection", "A=x >MARK\n", "'>' is a shell operator"),
    ("subshell", "(touch MARK)\n", "'(' is a shell operator"),
    ("the old template's double-quoted payload", 'IMAGE="x" ; touch MARK ; ""\n', "a command word"),
    ("ansi-c NUL", "A=$'x\\0y'\n", "a NUL byte (bash ends the value there)"),
    ("ansi-c beyond ascii", "A=$'\\u00e9'\n", "depend on bash's locale"),
    ("ansi-c control escape", "A=$'\\cA'\n", "\\c control escape"),
    ("ansi-c inside a quoted default", "A=\"${U:-$'x'}\"\n", "extquote"),
    ("legacy arithmetic", "A=$[1+2]\n", "$[ ... ] is arithmetic expansion"),
    ("bare export prints", "export\n", "'export' with no name prints"),
    ("positional parameter", "A=$1\n", "$1 is a special parameter"),
    ("pid", "A=$$\n", "$$ is a special parameter"),
    ("shell variable", "A=$RANDOM\n", "$RANDOM is the shell's own variable"),
    ("length", "A=${#HOME}\n", "${...} is only supported as"),
    ("pattern removal", "A=${HOME%/*}\n", "${HOME%...} is not supported"),
    ("assigning default", "A=${U:=x}\n", "${U:=...} is not supported"),
    ("user's home", "A=~root\n", "'~r...': a user's home"),
    ("assigning the shell's own variable", "PS4=x\n", "PS4 is the shell's own variable"),
    ("IFS", "IFS=:\n", "IFS is the shell's own variable"),
    ("unterminated single quote", "A='x\n", "unterminated single quote"),
    ("unterminated double quote", 'A="x\n', "unterminated double quote"),
    ("unterminated brace", "A=${U:-x\n", "'\\n' inside ${...} is not supported"),
    ("NUL byte", "A=1\x00B=2\n", "NUL byte"),
    ("byte order mark", "\ufeffA=1\n", "a command word"),
    ("array", "A=(a b)\n", "'(' is a shell operator"),
    ("declare", "declare A=1\n", "a command word"),
    ("export option", "export -n A\n", "a command word after an assignment"),
    ("brace expansion in export", "export A={a,b}\n", "brace expansion"),
    ("empty command", "; A=1\n", "';' with no command"),
]


@pytest.mark.parametrize("text,needle", [(t, n) for _, t, n in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_parser_refuses_what_is_not_data(text, needle):
    with pytest.raises(shell.EnvSyntaxError) as exc:
        parse.parse_env(text, BASE, source="/x/.env")
    assert needle in str(exc.value) and str(exc.value).startswith("/x/.env: line ")


@pytest.mark.parametrize("text", [t for n, t, _ in REFUSED if "MARK" in t],
                         ids=[n for n, t, _ in REFUSED if "MARK" in t])
def test_refused_constructs_are_code_to_bash(tmp_path, text):
    """What the parser refuses with a touch in it really runs in bash: refusing is the only safe reading."""
    bash_source(tmp_path, text)
    assert (tmp_path / "MARK").exists()


def test_parser_error_names_the_line_and_not_the_secret():
    with pytest.raises(shell.EnvSyntaxError) as exc:
        parse.parse_env("A=1\nB=2\nAPI_KEY=sk-abc def-secret-part\n")
    assert exc.value.line == 3 and "def-secret-part" not in str(exc.value)


def test_trailing_backslash_ends_in_bounded_time():
    """The old parser looped forever on a lone trailing backslash; the alarm bounds the test."""
    def timeout(*_):
        raise AssertionError("parse_env did not return within 5 s")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(5)
    try:
        for text in ("A=abc\\", "A=\\", "A='x'\\", "A=${U:-x}\\", "\\"):
            try:
                parse.parse_env(text)
            except shell.EnvSyntaxError:
                pass
        assert parse.parse_env("A=abc\\") == {"A": "abc\\"}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_bytes_must_be_utf8():
    assert parse.parse_env("A=é\n".encode("utf-8")) == {"A": "é"}
    with pytest.raises(shell.EnvSyntaxError, match="not valid UTF-8"):
        parse.parse_env(b"A=\xff\n")


# --------------------------------------------------------------------------- writer == bash

HOSTILE_VALUES = [
    "$(touch MARK)", "`touch MARK`", 'x" ; touch MARK ; "', "'", "it's '; touch MARK; '", "\\", "trailing\\",
    "http://h/?a=1&b=2", "$HOME", "${HOME:-x}", "a b", "*", "~", "~/x", "a:~", "!", "!!", "Grüße 🚀 ∂",
    "#not a comment", "a;b|c&d>e<f (g)", "  leading and trailing  ", "", "a\tb", "x\u2028y", "'\"'\"'",
    "\\'", "$'x'", "{a,b}", "a=b", "-e", "--", "%s%n", "\u00a0", "\\\\\\", "${U:=x}", "<<EOF",
]


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
def test_writer_gives_bash_exactly_the_declared_value(tmp_path, value):
    settings = {"MODEL_PATH": value, "WORKER_ENGRAM_DIR_X": value + value}
    text = render.render_env(settings, api_key=value + "-key", notes=[value])
    assigned, err, rc = bash_source(tmp_path, text)
    assert rc == 0 and err == ""
    assert assigned == {"MODEL_PATH": value, "WORKER_ENGRAM_DIR_X": value + value, "API_KEY": value + "-key"}
    assert parse.parse_env(text, BASE) == assigned
    assert not (tmp_path / "MARK").exists()


def test_writer_on_random_printable_strings(tmp_path):
    rng = random.Random(20260924)
    alphabet = [chr(c) for c in range(32, 127)] + ["\t", "é", "🚀", "\u2028", "\u00a0"]
    settings = dict(("K%d" % i, "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))) for i in range(300))
    text = render.render_env(settings)
    assigned, err, rc = bash_source(tmp_path, text)
    assert rc == 0 and err == ""
    assert assigned == settings == parse.parse_env(text, BASE)


def test_writer_keeps_safe_values_bare_and_the_baseline_shape():
    text = render.render_env({"TP_SIZE": 3, "MEM_FRACTION_STATIC": "0.95", "SWITCH": True, "OFF": False,
                         "FLOAT": 5.0, "WORKER_HOSTS": "spark2 spark3", "UNSET": None, "EMPTY": ""},
                        api_key="sk-lab-0000", notes=["tried 0.98"], header=("Ansible managed",))
    assert text == ("# Ansible managed\nTP_SIZE=3\nMEM_FRACTION_STATIC=0.95\nSWITCH=1\nOFF=0\nFLOAT=5\n"
                    "WORKER_HOSTS='spark2 spark3'\nEMPTY=''\nAPI_KEY=sk-lab-0000\n# tried 0.98\n")


def test_notes_cannot_break_out(tmp_path):
    notes = ["ok", "line one\ntouch MARK\r\nA=1\rB=2", "", "$(touch MARK)"]
    text = render.render_env({"X": "1"}, notes=notes)
    assert text.endswith("# ok\n# line one\n# touch MARK\n# A=1\n# B=2\n#\n# $(touch MARK)\n")
    assigned, err, rc = bash_source(tmp_path, text)
    assert assigned == {"X": "1"} and rc == 0 and err == ""
    assert not (tmp_path / "MARK").exists()


BAD_KEYS = ["FOO;touch MARK", "1ABC", "A B", "ÄBC", "", "A-B", "A\n", "a.b", "BASH_ENV", "PS4", "IFS", "PATH",
            "LD_PRELOAD", "HOME", "SHELLOPTS", "BASH_FUNC_x", "PROMPT_COMMAND", 7]


@pytest.mark.parametrize("key", BAD_KEYS, ids=range(len(BAD_KEYS)))
def test_writer_refuses_keys_that_are_not_plain_names(key):
    with pytest.raises(shell.EnvError) as exc:
        render.render_env({key: "1", "OK": "2"})
    msg = str(exc.value)
    assert msg.startswith(repr(key) + (": a variable name must be a string" if key == 7 else
                                       " is not a shell variable name")) \
        or msg.startswith("%s is a variable of the shell or the program loader" % key)
    assert render.key_problem(key) and render.key_problem("OK_1") is None and render.key_problem("_x") is None


BAD_VALUES = [("a\ntouch MARK", "a newline"), ("a\x00b", "a NUL byte"), ("a\rb", "a carriage return"),
              ("\x1b[2J", "the control character U+001B"), ("\x7f", "the control character U+007F"),
              ("bad\udcff", "not valid UTF-8"), (b"\xff\xfe", "not valid UTF-8"), (["a"], "a list, not a string")]


@pytest.mark.parametrize("value,needle", BAD_VALUES, ids=range(len(BAD_VALUES)))
def test_writer_refuses_values_it_cannot_write_naming_the_key(value, needle):
    with pytest.raises(shell.EnvError) as exc:
        render.render_env({"GOOD": "1", "MODEL_PATH": value})
    assert str(exc.value).startswith("MODEL_PATH: ") and needle in str(exc.value)
    with pytest.raises(shell.EnvError) as exc:
        render.render_env({}, api_key="sk-secret-%s" % value if isinstance(value, str) else value)
    assert str(exc.value).startswith("API_KEY: ") and "sk-secret" not in str(exc.value)


def test_api_key_is_not_a_setting():
    with pytest.raises(shell.EnvError, match="API_KEY is written from the API key option"):
        render.render_env({"API_KEY": "sk-x"})


# --------------------------------------------------------------------------- diff

def test_changes_compare_what_bash_sees_with_secrets_redacted():
    before = parse.parse_env('A="1"\nB=x\nhf_token=hf_old_value\nAPI_KEY=sk-old-key\nURL=http://u:sk-new-key@h\n')
    after = {"A": "1", "B": "y z", "hf_token": "hf_new_value", "C": "3", "API_KEY": "sk-new-key",
             "URL": "http://u:sk-new-key@h"}
    changes = E.env_changes(before, after)
    assert changes == ["B: x -> 'y z'", "hf_token: (secret changed)", "API_KEY: (secret changed)",
                       "C: (unset) -> 3"]
    listing = E.env_listing(after)
    assert "hf_token=***" in listing and "API_KEY=***" in listing and "URL='http://u:***@h'" in listing
    for secret in ("hf_old_value", "hf_new_value", "sk-old-key", "sk-new-key"):
        assert secret not in "".join(changes) + listing


# --------------------------------------------------------------------------- files

SETTINGS = {"MODEL_PATH": "/srv/models/x", "DSPARK_BLOCK_SIZE": 3}


def files(directory):
    return sorted(os.listdir(str(directory)))


def state(path):
    """(bytes, mode, uid, gid) of a file, or None."""
    if not os.path.lexists(str(path)):
        return None
    st = os.lstat(str(path))
    return (path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def test_first_backup_is_private_and_recorded(tmp_path):
    env = tmp_path / ".env"
    env.write_text("MODEL_PATH=/old\nAPI_KEY=sk-old-secret\n")
    os.chmod(str(env), 0o644)
    res = E.converge_env(str(env), SETTINGS, api_key="sk-new", run_id="run1", now=0)
    assert res["changed"] and res["backup_created"] and res["backup"] == ".env.dsv41-backup-19700101T000000Z-run1"
    backup = tmp_path / res["backup"]
    assert stat.S_IMODE(os.stat(str(backup)).st_mode) == 0o600          # the first backup too
    assert backup.read_text() == "MODEL_PATH=/old\nAPI_KEY=sk-old-secret\n"
    assert stat.S_IMODE(os.stat(str(env)).st_mode) == 0o600
    record = json.loads((tmp_path / ".env.dsv41-backups.json").read_text())
    assert [r["run_id"] for r in record["runs"]] == ["run1"] and record["runs"][0]["mode"] == "0644"
    assert stat.S_IMODE(os.stat(str(tmp_path / ".env.dsv41-backups.json")).st_mode) == 0o600
    assert res["changes"] == ["MODEL_PATH: /old -> /srv/models/x", "API_KEY: (secret changed)",
                              "DSPARK_BLOCK_SIZE: (unset) -> 3"]
    assert "sk-old-secret" not in json.dumps(res) and "sk-new" not in json.dumps(res)


def test_backup_is_private_whatever_the_umask(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=1\n")
    old = os.umask(0)
    try:
        res = E.converge_env(str(env), {"A": "2"}, run_id="r", now=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(str(tmp_path / res["backup"])).st_mode) == 0o600


def test_one_before_per_run_and_idempotent_converge(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    first = E.converge_env(str(env), {"A": "1"}, run_id="stage", now=0)
    second = E.converge_env(str(env), {"A": "2"}, run_id="stage", now=1)
    assert first["backup_created"] and second["changed"] and not second["backup_created"]
    assert second["backup"] == first["backup"]
    again = E.converge_env(str(env), {"A": "2"}, run_id="other", now=2)
    assert not again["changed"] and again["changes"] == [] and not again["backup_created"]
    assert len([f for f in files(tmp_path) if ".dsv41-backup-" in f]) == 1
    assert E.rollback_env(str(env))["restored_run"] == "stage" and env.read_text() == "A=0\n"


def test_check_mode_writes_nothing(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    before = files(tmp_path)
    res = E.converge_env(str(env), {"A": "$(touch MARK)"}, run_id="r", check_mode=True)
    assert res["changed"] and res["changes"] == ["A: 0 -> '$(touch MARK)'"] and not res["backup_created"]
    assert files(tmp_path) == before and env.read_text() == "A=0\n"
    assert res["diff"]["after"] == "A='$(touch MARK)'\n"


def test_rollback_twice_equals_once_and_restores_bytes_mode(tmp_path):
    env = tmp_path / ".env"
    env.write_bytes(b"# hand-written\r\nMODEL_PATH=\"/old\" # was\r\nAPI_KEY=sk-0000\r\n")
    os.chmod(str(env), 0o640)
    original = state(env)
    E.converge_env(str(env), SETTINGS, api_key="sk-1111", run_id="r1")
    after_r1 = env.read_bytes()
    # in place: the managed header added, the comment kept, the changed keys written where they were
    assert after_r1 == (render.render_env({}, header=render.DEFAULT_HEADER)
                        + "# hand-written\r\nMODEL_PATH=/srv/models/x\n"
                        "API_KEY=sk-1111\nDSPARK_BLOCK_SIZE=3\n").encode()
    E.converge_env(str(env), dict(SETTINGS, DSPARK_BLOCK_SIZE=5), api_key="sk-1111", run_id="r2")
    listing = files(tmp_path)
    record = (tmp_path / ".env.dsv41-backups.json").read_bytes()

    check = E.rollback_env(str(env), check_mode=True)
    assert check["changed"] and check["changes"] == ["DSPARK_BLOCK_SIZE: 5 -> 3"] and files(tmp_path) == listing
    once = E.rollback_env(str(env))
    assert once["changed"] and once["restored_run"] == "r2" and env.read_bytes() == after_r1
    twice = E.rollback_env(str(env))
    assert not twice["changed"] and twice["restored_run"] == "r2" and env.read_bytes() == after_r1
    assert (tmp_path / ".env.dsv41-backups.json").read_bytes() == record      # nothing added to the pool

    first = E.rollback_env(str(env), run_id="r1")
    assert first["changed"] and state(env) == original
    assert not E.rollback_env(str(env), run_id="r1")["changed"] and state(env) == original
    assert (tmp_path / ".env.dsv41-backups.json").read_bytes() == record
    kept = [f for f in files(tmp_path) if ".dsv41-replaced-" in f]
    assert kept and all(stat.S_IMODE(os.stat(str(tmp_path / f)).st_mode) == 0o600 for f in kept)


def test_rollback_does_not_depend_on_mtimes(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    E.converge_env(str(env), {"A": "1"}, run_id="r1", now=0)
    E.converge_env(str(env), {"A": "2"}, run_id="r2", now=1)
    for name in files(tmp_path):                 # an old copy's mtime says nothing
        os.utime(str(tmp_path / name), (0, 0) if "r2" in name else (2e9, 2e9))
    E.rollback_env(str(env))
    assert env.read_text() == render.render_env({"A": "1"})


def test_rollback_of_a_run_that_created_the_file_removes_it(tmp_path):
    env = tmp_path / ".env"
    E.converge_env(str(env), {"A": "1"}, run_id="new")
    assert env.exists()
    assert E.rollback_env(str(env))["changed"] and not env.exists()
    assert not E.rollback_env(str(env))["changed"] and not env.exists()


def test_rollback_refuses_a_changed_backup_and_unknown_runs(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    res = E.converge_env(str(env), {"A": "1"}, run_id="r1")
    with pytest.raises(shell.EnvError, match="no recorded run 'nope' \\(recorded: r1\\)"):
        E.rollback_env(str(env), run_id="nope")
    (tmp_path / res["backup"]).write_text("A=evil\n")
    with pytest.raises(shell.EnvError, match="changed since it was recorded"):
        E.rollback_env(str(env))
    assert env.read_text() == render.render_env({"A": "1"})


def test_nothing_recorded_nothing_restored(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    res = E.rollback_env(str(env))
    assert not res["changed"] and "nothing to restore" in res["msg"] and env.read_text() == "A=0\n"


def test_symlinked_env_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("A=0\n")
    os.symlink(str(target), str(tmp_path / ".env"))
    with pytest.raises(shell.EnvError, match="is a symbolic link"):
        E.converge_env(str(tmp_path / ".env"), {"A": "1"}, run_id="r")
    assert target.read_text() == "A=0\n"


def test_current_file_that_is_code_is_refused_without_secrets(tmp_path):
    """Rewriting a file that is not data would drop what it sets: refused, naming the line, nothing written."""
    env = tmp_path / ".env"
    env.write_text("A=1\nAPI_KEY=sk-live-key $(curl evil)\n")
    for check in (True, False):
        with pytest.raises(shell.EnvError) as exc:
            E.converge_env(str(env), {"A": "1"}, api_key="sk-live-key", run_id="r", check_mode=check)
        assert "line 2" in str(exc.value) and "nothing written" in str(exc.value)
        assert "sk-live-key" not in str(exc.value)
    assert files(tmp_path) == [".env"]


def test_bad_run_id_is_refused(tmp_path):
    with pytest.raises(shell.EnvError, match="run_id"):
        E.converge_env(str(tmp_path / ".env"), {"A": "1"}, run_id="../x")
    assert files(tmp_path) == []


# --------------------------------------------------------------------------- the module

def module(monkeypatch, capsys, **args):
    out = run_module(launcher_env_module.main, args)
    out["_json"] = json.dumps(out)
    return out


def test_module_writes_and_rolls_back(monkeypatch, capsys, tmp_path):
    env = tmp_path / ".env"
    env.write_text("MODEL_PATH=/old\n")
    original = state(env)
    res = module(monkeypatch, capsys, path=str(env), settings={"MODEL_PATH": "$(touch MARK)", "OPENAI_APIKEY": "sk-o\"pen\\ai"},
                 api_key="sk-the-api-key", notes=["n1\n$(touch MARK)"], run_id="r1", host_label="spark1")
    assert res["changed"] and not res.get("failed")
    assert res["changes"] == ["MODEL_PATH: /old -> '$(touch MARK)'", "OPENAI_APIKEY: (unset) -> (secret)",
                              "API_KEY: (unset) -> (secret)"]
    for secret in ("sk-the-api-key", "sk-o\"pen\\ai", json.dumps("sk-o\"pen\\ai")[1:-1]):
        assert secret not in res["_json"]
    assigned, err, rc = bash_source(tmp_path, env.read_bytes(), name="copy.env")
    assert assigned == {"MODEL_PATH": "$(touch MARK)", "OPENAI_APIKEY": "sk-o\"pen\\ai", "API_KEY": "sk-the-api-key"}
    assert not (tmp_path / "MARK").exists()
    back = module(monkeypatch, capsys, path=str(env), state="rollback", api_key="sk-the-api-key")
    assert back["changed"] and back["restored_run"] == "r1" and state(env) == original
    again = module(monkeypatch, capsys, path=str(env), state="rollback")
    assert not again["changed"] and state(env) == original


def test_module_refuses_naming_the_key_and_writes_nothing(monkeypatch, capsys, tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    before = files(tmp_path)
    res = module(monkeypatch, capsys, path=str(env), settings={"FOO;touch MARK": "1", "B": "x\ny"}, run_id="r",
                 host_label="spark1")
    assert res["failed"] and res["msg"].startswith("spark1: 'FOO;touch MARK' is not a shell variable name")
    assert "B: the value holds a newline" in res["msg"]
    assert files(tmp_path) == before and env.read_text() == "A=0\n"


def test_module_requires_settings_and_run_id(monkeypatch, capsys, tmp_path):
    res = module(monkeypatch, capsys, path=str(tmp_path / ".env"))
    assert res["failed"] and "settings" in res["msg"] and "run_id" in res["msg"]


def test_module_check_mode(monkeypatch, capsys, tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    res = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, run_id="r", _ansible_check_mode=True,
                 _ansible_diff=True)
    assert res["changed"] and res["diff"]["before"] == "A=0\n" and res["diff"]["after"] == "A=1\n"
    assert files(tmp_path) == [".env"] and env.read_text() == "A=0\n"
    assert SECRET_MASK not in res["diff"]["after"]


def test_module_keeps_undeclared_keys_and_removes_only_listed_ones(monkeypatch, capsys, tmp_path):
    env = tmp_path / ".env"
    original = "# site\nexport HEAD_IP=\"10.0.0.1\"  # data plane\nA=0\nNCCL_SOCKET_IFNAME=enp1s0\n"
    env.write_text(original)
    res = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, run_id="r1", _ansible_check_mode=True)
    assert res["changed"] and res["kept_undeclared"] == ["HEAD_IP", "NCCL_SOCKET_IFNAME"] and env.read_text() == original
    res = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, run_id="r1")
    assert res["changes"] == ["A: 0 -> 1"] and res["kept_undeclared"] == ["HEAD_IP", "NCCL_SOCKET_IFNAME"]
    assert env.read_text() == render.render_env({}) + original.replace("A=0", "A=1")
    res = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, remove_keys=["NCCL_SOCKET_IFNAME"],
                 run_id="r2")
    assert res["changes"] == ["NCCL_SOCKET_IFNAME: enp1s0 -> (unset)"] and res["removed"] == ["NCCL_SOCKET_IFNAME"]
    assert "NCCL_SOCKET_IFNAME" not in env.read_text() and 'export HEAD_IP="10.0.0.1"  # data plane' in env.read_text()
    again = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, remove_keys=["NCCL_SOCKET_IFNAME"],
                   run_id="r3")
    assert not again["changed"] and again["kept_undeclared"] == ["HEAD_IP"]
    res = module(monkeypatch, capsys, path=str(env), settings={"A": "1"}, remove_keys=["A"], run_id="r4")
    assert res["failed"] and "A is both declared and listed for removal" in res["msg"]


def test_changes_show_control_characters_escaped(tmp_path):
    """A CRLF file gives every value a carriage return (bash keeps it): the report shows it as $'...\\r',
    which bash reads back as the same value, never as a raw control character."""
    env = tmp_path / ".env"
    env.write_bytes(b"A=1\r\nB=x\r\n")
    res = E.converge_env(str(env), {"A": "1"}, run_id="r", check_mode=True)
    assert res["changes"] == ["A: $'1\\r' -> 1"] and res["kept_undeclared"] == ["B"]
    assert "B=$'x\\r'\n" in res["diff"]["after"]
    assert parse.parse_env("A=" + E.shown_word("x'\\\n\x1b\r\t")) == {"A": "x'\\\n\x1b\r\t"}


def test_an_override_the_role_wrote_goes_when_no_longer_declared_a_hand_set_key_stays(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\nHAND=1\n")
    first = E.converge_env(str(env), {"A": "0", "KEEP": "1", "EDITED": "1"}, run_id="boot1")
    assert first["added"] == ["KEEP", "EDITED"] and first["kept_undeclared"] == ["HAND"]
    record = json.loads((tmp_path / ".env.dsv41-backups.json").read_text())
    assert sorted(record["managed"]) == ["EDITED", "KEEP"]            # A was the file's own line
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in record["managed"].values())   # digests, never values
    env.write_text(env.read_text().replace("EDITED=1", "EDITED=2"))     # changed by hand since
    back = E.converge_env(str(env), {"A": "0"}, run_id="baseline")
    assert back["removed_stale"] == ["KEEP"] and back["removed"] == []
    assert back["changes"] == ["KEEP: 1 -> (unset)"] and back["kept_undeclared"] == ["HAND", "EDITED"]
    assert env.read_text() == render.render_env({}) + "A=0\nHAND=1\nEDITED=2\n"
    again = E.converge_env(str(env), {"A": "0"}, run_id="again")
    assert not again["changed"] and again["removed_stale"] == []


@pytest.mark.parametrize("field,value,needle", [
    ("backup", "../outside", "is not a backup this tool wrote"),
    ("backup", "/etc/shadow", "is not a backup this tool wrote"),
    ("backup", "other.dsv41-backup-x", "is not a backup this tool wrote"),
    ("sha256", None, "has no recorded sha256"),
    ("sha256", "abc", "has no recorded sha256"),
    ("size", None, "has no recorded size"),
    ("mode", "4755", "not a plain permission mode"),
    ("mode", "2644", "not a plain permission mode"),
    ("uid", -1, "records uid"),
])
def test_rollback_restores_only_a_backup_the_writer_recorded_itself(tmp_path, field, value, needle):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    E.converge_env(str(env), {"A": "1"}, run_id="r1")
    (tmp_path.parent / "outside").write_text("A=outside\n")
    rpath = tmp_path / ".env.dsv41-backups.json"
    record = json.loads(rpath.read_text())
    if value is None:
        record["runs"][0].pop(field)
    else:
        record["runs"][0][field] = value
    rpath.write_text(json.dumps(record))
    before = files(tmp_path), env.read_bytes(), stat.S_IMODE(os.stat(str(env)).st_mode)
    with pytest.raises(shell.EnvError, match=needle) as err:
        E.rollback_env(str(env))
    assert str(rpath) in str(err.value) and "run r1" in str(err.value)
    assert (files(tmp_path), env.read_bytes(), stat.S_IMODE(os.stat(str(env)).st_mode)) == before


def test_a_backup_record_that_is_a_symlink_or_huge_is_refused(tmp_path):
    env = tmp_path / ".env"
    env.write_text("A=0\n")
    E.converge_env(str(env), {"A": "1"}, run_id="r1")
    rpath = tmp_path / ".env.dsv41-backups.json"
    real = tmp_path / "elsewhere.json"
    rpath.rename(real)
    rpath.symlink_to(real)
    with pytest.raises(shell.EnvError, match="is a symlink; the record is never read through one"):
        E.rollback_env(str(env))
    rpath.unlink()
    rpath.write_bytes(b" " * (5 << 20))
    with pytest.raises(shell.EnvError, match="larger than 4194304 bytes"):
        E.rollback_env(str(env))


def test_an_env_over_one_mebibyte_is_refused_before_parsing(tmp_path):
    import time
    env = tmp_path / ".env"
    env.write_bytes(b"A=" + b"x" * (20 << 20) + b"\n")
    started = time.monotonic()
    with pytest.raises(shell.EnvError, match="larger than the 1048576 a launcher .env may hold"):
        E.converge_env(str(env), {"A": "1"}, run_id="r1")
    with pytest.raises(shell.EnvError, match="more than the 1048576 a launcher .env may hold"):
        parse.parse_env("A=" + "x" * (2 << 20) + "\n")
    assert time.monotonic() - started < 2
