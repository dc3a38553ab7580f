# -*- coding: utf-8 -*-
"""Adding a forward to the launcher as a managed edit that fits the script (``launcher_forward``).

Where a launch path builds its container environment is not guessed from names: every block of the
script that could hold ``-e NAME=value`` arguments - a multi-line array (``_a+=( ... )``, the head's
argument builder or a worker argument array printed with ``printf %q``) or an expanding heredoc of
``-e NAME=$NAME \\`` lines (the worker command string) - gets a probe variable in a scratch copy, the
launch is evaluated in the sandbox (``module_utils/launcher/effective.py``), and the containers that receive
each probe tell which block feeds which rank. A forward is then added only to blocks that feed a rank
missing it, in the block's own form:

* array: ``${KEY+-e "KEY=$KEY"}  # dsv41-fleet managed forward`` (nothing when KEY is unset, so unset
  stays unset: ``SGLANG_DSPARK_FOLDED_SAMPLING`` unset means AUTO, not off);
* heredoc: ``${KEY+-e $(printf '%q' "KEY=$KEY")} \\\\`` before its first ``-e`` line (a continuation
  line either way), with a marker comment above the heredoc's command.

The edited script is evaluated again before anything is written: every key must reach every rank with
its value and nothing else may change; otherwise nothing is written and the reason is given. Writing
keeps a timestamped copy beside the script; rollback copies it back. Standard library only.
"""
from __future__ import absolute_import, division, print_function

import difflib
import os
import re
import shutil
import tempfile
import time

from ansible.module_utils.launcher.effective import effective_launch
from ansible.module_utils.launcher.sandbox import LaunchError

__metaclass__ = type

MARKER = "dsv41-fleet managed forward"
BACKUP_INFIX = ".dsv41-forward-backup-"
PROBE = "DSV41_FORWARD_PROBE_%d"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARRAY_OPEN = re.compile(r"^(\s*)(?:(?:local|declare)\s+-a\s+)?([A-Za-z_]\w*)\+?=\(\s*(?:#.*)?$")
_ARRAY_CLOSE = re.compile(r"^\s*\)\s*(?:#.*)?$")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_]\w*)\2")
_ENV_ITEM = re.compile(r"""^\s*(?:-e|--env)[\s=]+["']?[A-Za-z_]\w*=""")
_HEREDOC_ITEM = re.compile(r"^(\s*)-e\s+\S.*\\$")


class EditRefused(Exception):
    """The script's shape is not one this edit can change safely; nothing was written."""


def find_blocks(text):
    """Candidate blocks: dicts (kind "array"|"heredoc", line = index of the line to insert before,
    indent, opener = index of the block's first line, name)."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _ARRAY_OPEN.match(line)
        if m:
            j = i + 1
            while j < len(lines) and not _ARRAY_CLOSE.match(lines[j]):
                j += 1
            body = lines[i + 1:j]
            if j < len(lines) and any(_ENV_ITEM.match(b) for b in body):
                items = [b for b in body if b.strip() and not b.strip().startswith("#")]
                indent = re.match(r"^(\s*)", items[-1]).group(1) if items else m.group(1) + "  "
                blocks.append({"kind": "array", "line": j, "indent": indent, "opener": i, "name": m.group(2)})
            i = j + 1 if j < len(lines) else i + 1
            continue
        h = _HEREDOC.search(line)
        if h and not line.lstrip().startswith("#"):
            strip_tabs, quoted, delim = h.group(1) == "-", h.group(2), h.group(3)
            j = i + 1
            while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]) != delim:
                j += 1
            first = next((k for k in range(i + 1, j) if _HEREDOC_ITEM.match(lines[k])), None)
            if first is not None and not quoted:
                blocks.append({"kind": "heredoc", "line": first, "indent": _HEREDOC_ITEM.match(lines[first]).group(1),
                               "opener": i, "name": delim})
            i = j + 1
            continue
        i += 1
    return blocks


def _item(block, key, value=None):
    """The line that forwards ``key`` in ``block`` (a fixed ``value``: the probe)."""
    if block["kind"] == "array":
        if value is not None:
            return '%s-e "%s=%s"' % (block["indent"], key, value)
        return '%s${%s+-e "%s=$%s"}  # %s' % (block["indent"], key, key, key, MARKER)
    if value is not None:
        return "%s-e %s=%s \\\\" % (block["indent"], key, value)
    return "%s${%s+-e $(printf '%%q' \"%s=$%s\")} \\\\" % (block["indent"], key, key, key)


def insert(text, additions):
    """``text`` with ``additions`` ({block index into find_blocks: [lines]}) inserted; heredoc blocks get a
    marker comment above their command (when that line starts a command)."""
    lines = text.split("\n")
    blocks = find_blocks(text)
    edits = []
    for index, new in additions.items():
        b = blocks[index]
        edits.append((b["line"], new))
        if b["kind"] == "heredoc":
            opener = lines[b["opener"]]
            prev = lines[b["opener"] - 1] if b["opener"] else ""
            if not prev.rstrip().endswith(("\\", "|", "&&", "||")) and not opener.lstrip().startswith(("-", "$")):
                keys = " ".join(re.findall(r"\$\{([A-Za-z_]\w*)\+", "\n".join(new)))
                if keys:
                    indent = re.match(r"^(\s*)", opener).group(1)
                    edits.append((b["opener"], ["%s# %s(s) in the heredoc below: %s" % (indent, MARKER, keys)]))
    for at, new in sorted(edits, key=lambda e: -e[0]):
        lines[at:at] = new
    return "\n".join(lines)


def coverage(launcher, text, env_text, **kw):
    """{block index: set of ranks whose container receives the block's probe}, from one evaluation."""
    blocks = find_blocks(text)
    probes = dict((i, [_item(b, PROBE % i, "1")]) for i, b in enumerate(blocks))
    launch = effective_launch(launcher, env_text=env_text, script_text=insert(text, probes), **kw)
    out = {}
    for i in range(len(blocks)):
        ranks = set(c["rank"] for c in launch["containers"] if c["env"].get(PROBE % i) == "1")
        if ranks:
            out[i] = ranks
    return out


def _missing(launch, values):
    return dict((k, set(c["rank"] for c in launch["containers"] if c["env"].get(k) != v)) for k, v in values.items())


def _hosts(launch, ranks):
    return ", ".join("%s (rank %s)" % (c["host"], c["rank"]) for c in launch["containers"] if c["rank"] in ranks)


def plan(launcher, values, env_text, **kw):
    """What adding forwards of ``values`` ({KEY: value}) takes: ``{"text", "new_text", "added", "diff"}``.

    ``env_text``: the .env the launch is evaluated with; ``values`` are appended to it, so a key counts
    as forwarded when the containers receive that value. Raises :class:`EditRefused` (nothing written).
    """
    bad = [k for k in values if not NAME_RE.match(k)]
    if bad:
        raise EditRefused("%s: not variable names: %s" % (launcher, ", ".join(sorted(bad))))
    with open(launcher) as fh:
        text = fh.read()
    env = (env_text or "")
    env = env + ("" if env.endswith("\n") or not env else "\n")
    from ansible.module_utils.envfile.render import quote_value
    env += "".join("%s=%s\n" % (k, quote_value("%s" % v)) for k, v in sorted(values.items()))
    before = effective_launch(launcher, env_text=env, **kw)
    missing = dict((k, r) for k, r in _missing(before, values).items() if r)
    result = {"text": text, "new_text": text, "added": {}, "diff": ""}
    if not missing:
        return result
    blocks = find_blocks(text)
    if not blocks:
        raise EditRefused("%s has no argument builder (a multi-line array of -e arguments) and no heredoc of "
                          "-e lines: it cannot be edited safely; add %s by hand"
                          % (launcher, ", ".join(sorted(missing))))
    feeds = coverage(launcher, text, env, **kw)
    additions = {}
    for key, need in sorted(missing.items()):
        left = set(need)
        for i, ranks in sorted(feeds.items(), key=lambda f: (not f[1] <= need, -len(f[1] & need))):
            if ranks & left:
                additions.setdefault(i, []).append(_item(blocks[i], key))
                left -= ranks
        if left:
            raise EditRefused("%s: no block of -e arguments in the script reaches %s, which do not receive %s; "
                              "nothing was written" % (launcher, _hosts(before, left), key))
        result["added"][key] = _hosts(before, need)
    new_text = insert(text, additions)
    after = effective_launch(launcher, env_text=env, script_text=new_text, **kw)
    still = dict((k, r) for k, r in _missing(after, values).items() if r)
    if still:
        raise EditRefused("%s: after the edit %s still do not receive %s; nothing was written"
                          % (launcher, _hosts(after, set().union(*still.values())), ", ".join(sorted(still))))
    for b, a in zip(before["containers"], after["containers"]):
        other = dict((k, v) for k, v in a["env"].items() if k not in values)
        if (b["host"], b["name"]) != (a["host"], a["name"]) or other != dict(
                (k, v) for k, v in b["env"].items() if k not in values) or b["mounts"] != a["mounts"]:
            raise EditRefused("%s: the edit would change more than the forwards on %s; nothing was written"
                              % (launcher, _hosts(after, {a["rank"]})))
    result["new_text"] = new_text
    result["diff"] = "".join(difflib.unified_diff(text.splitlines(True), new_text.splitlines(True),
                                                  launcher, launcher + " (with the forwards)"))
    return result


def backups(launcher):
    """Backups beside the launcher, oldest first."""
    directory, name = os.path.split(os.path.abspath(launcher))
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(name + BACKUP_INFIX))


def write(launcher, new_text):
    """Keep a timestamped copy beside the launcher, then replace it atomically (same mode); the copy's path."""
    launcher = os.path.abspath(launcher)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup = launcher + BACKUP_INFIX + stamp
    n = 1
    while os.path.exists(backup):
        n += 1
        backup = "%s%s%s.%d" % (launcher, BACKUP_INFIX, stamp, n)
    shutil.copy2(launcher, backup)
    _replace(launcher, new_text)
    return backup


def _replace(path, text):
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
        try:
            os.chown(tmp, st.st_uid, st.st_gid)
        except OSError:
            pass            # not root: the file stays ours, as the launcher was
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rollback(launcher, backup=None, check_mode=False, env_path=None):
    """Restore ``backup`` (default the newest managed backup of the launcher or of ``env_path``) over the
    file it was taken from: ``(changed, backup, diff)``."""
    found = sorted(backups(launcher) + (backups(env_path) if env_path and os.path.exists(env_path) else []),
                   key=lambda b: (b.split(BACKUP_INFIX)[-1], b))
    backup = backup or (found[-1] if found else None)
    if not backup or not os.path.isfile(backup) or BACKUP_INFIX not in os.path.basename(backup):
        raise EditRefused("%s: no forward backup to restore (looked for %s%s*)" % (launcher, launcher, BACKUP_INFIX))
    target = backup[:backup.rindex(BACKUP_INFIX)]
    with open(backup) as fh:
        old = fh.read()
    with open(target) as fh:
        cur = fh.read()
    if old == cur:
        return False, backup, ""
    diff = "".join(difflib.unified_diff(cur.splitlines(True), old.splitlines(True), target, backup))
    if not check_mode:
        _replace(target, old)
    return True, backup, diff


# ---------------------------------------------------------------------------------------------
# EXTRA_CONTAINER_ENV: where that is the launcher's way, a forward is an .env edit
# ---------------------------------------------------------------------------------------------

EXTRA = "EXTRA_CONTAINER_ENV"
_EXTRA_LINE = re.compile(r"^\s*(?:export\s+)?%s=" % EXTRA)


def _with(env_text, line):
    env = env_text or ""
    return env + ("" if env.endswith("\n") or not env else "\n") + line + "\n"


def extra_env_passthrough(launcher, env_text, **kw):
    """True when every container receives what ``EXTRA_CONTAINER_ENV`` lists (evaluated with a probe)."""
    probe = PROBE % 0
    try:
        launch = effective_launch(launcher, env_text=_with(env_text, "%s=%s=1" % (EXTRA, probe)), **kw)
    except LaunchError:
        return False
    return bool(launch["containers"]) and all(c["env"].get(probe) == "1" for c in launch["containers"])


def plan_env(launcher, values, env_path, **kw):
    """Like :func:`plan`, for an .env edit of ``EXTRA_CONTAINER_ENV``: its ``KEY=value`` entries (an unquoted
    loop in the launcher splits them on blanks) gain or update each key. Raises :class:`EditRefused`."""
    from ansible.module_utils.envfile.shell import EnvError
    from ansible.module_utils.envfile.parse import parse_env
    from ansible.module_utils.envfile.render import quote_value
    if not os.path.isfile(env_path):
        raise EditRefused("%s: no .env to edit (%s passes the switches through %s)" % (env_path, launcher, EXTRA))
    with open(env_path) as fh:
        text = fh.read()
    spaced = sorted(k for k, v in values.items() if not NAME_RE.match(k) or re.search(r"\s", v) or not v)
    if spaced:
        raise EditRefused("%s: %s cannot carry %s (not a name, or a value that is empty or holds blanks)"
                          % (env_path, EXTRA, ", ".join(spaced)))
    before = effective_launch(launcher, env_text=text, **kw)
    missing = dict((k, r) for k, r in _missing(before, values).items() if r)
    result = {"text": text, "new_text": text, "added": {}, "diff": ""}
    if not missing:
        return result
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if _EXTRA_LINE.match(line)]
    try:
        current = parse_env(text, {"HOME": kw.get("home") or os.path.expanduser("~")}).get(EXTRA, "")
        if at and parse_env(lines[at[0]]).get(EXTRA) != current:
            raise EnvError("assigned over several lines or from other variables")
    except EnvError as exc:
        raise EditRefused("%s: %s cannot be edited safely (%s); nothing was written" % (env_path, EXTRA, exc))
    if len(at) > 1:
        raise EditRefused("%s: %s is assigned on %d lines; nothing was written" % (env_path, EXTRA, len(at)))
    tokens = [t for t in current.split() if t.split("=", 1)[0] not in values]
    tokens += ["%s=%s" % (k, values[k]) for k in sorted(values)]
    line = "%s=%s" % (EXTRA, quote_value(" ".join(tokens)))
    note = "# %s(s) through %s: %s" % (MARKER, EXTRA, " ".join(sorted(values)))
    if at:
        lines[at[0]] = line
        if at[0] == 0 or lines[at[0] - 1] != note:
            lines[at[0]:at[0]] = [note]
    else:
        while lines and lines[-1] == "":
            lines.pop()
        lines += [note, line, ""]
    new_text = "\n".join(lines)
    after = effective_launch(launcher, env_text=new_text, **kw)
    still = dict((k, r) for k, r in _missing(after, values).items() if r)
    if still:
        raise EditRefused("%s: with the edited %s, %s still do not receive %s; nothing was written"
                          % (env_path, EXTRA, _hosts(after, set().union(*still.values())), ", ".join(sorted(still))))
    for key, need in missing.items():
        result["added"][key] = _hosts(before, need)
    result["new_text"] = new_text
    result["diff"] = "".join(difflib.unified_diff(text.splitlines(True), new_text.splitlines(True),
                                                  env_path, env_path + " (with the forwards)"))
    return result


__all__ = ["EditRefused", "LaunchError", "find_blocks", "plan", "plan_env", "extra_env_passthrough", "write",
           "rollback", "backups", "coverage"]
