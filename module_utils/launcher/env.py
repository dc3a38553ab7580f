# -*- coding: utf-8 -*-
"""The launcher ``.env`` as data: converge it in place, roll it back, say what changes as bash sees it.

The launcher runs ``set -a; source "$ENV_FILE"; set +a``: bash executes the file. Everything here
exists so that the file stays data. The subjects live in their own files (callers import each name
from the file that defines it):

* ``envfile/shell.py``: bash's own variables, the errors, ``$'...'``;
* ``envfile/parse.py``: :func:`parse_env` (its statements: ``envfile/lines.py``), the file read with bash's rules
  (unit tests compare it with bash itself), or a refusal naming the line; the expansions inside a
  word (``$NAME``, ``${NAME:-word}``, tilde) are ``envfile/expand.py``;
* ``envfile/render.py``: :func:`render_env`, the one writer (every value bare or single-quoted so bash
  holds exactly the declared string), and the refusals naming the key;
* ``envfile/merge.py``: :func:`merge_env`, the in-place converge that keeps every undeclared key
  verbatim unless it is listed for removal;
* ``envfile/store.py``: atomic 0600 writes, the run's named snapshot and the record of "befores".

Here: :func:`converge_env` / :func:`rollback_env` (the file's history kept exact: each run that
changes the file first saves it in a snapshot named for the run; a rollback restores the recorded
"before" of one run, content, mode and owner, and adds nothing to the record, so twice equals once),
:func:`env_changes` (what changes, key by key, as bash sees it, secrets redacted with
``module_utils/base/secrets.py``) and :func:`effective_engram_dir`.
"""
from __future__ import absolute_import, division, print_function

import errno
import os
import re
import stat

from ansible.module_utils.base.secrets import SECRET_MASK, is_secret_name, redact_text
from ansible.module_utils.envfile.shell import EnvError, EnvSyntaxError
from ansible.module_utils.envfile.parse import parse_env
from ansible.module_utils.envfile.render import API_KEY, DEFAULT_HEADER, ENV_MODE, quote_value, render_env
from ansible.module_utils.envfile.merge import merge_env
from ansible.module_utils.envfile.store import (
    BACKUP_INFIX, REPLACED_INFIX, create_private, fsync_dir, load_record, read_env_file, record_entry, record_path,
    save_record, sha256_hex, utc_stamp, write_atomic)

__metaclass__ = type

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


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


_CONTROL_RE = re.compile(u"[\x00-\x08\x0a-\x1f\x7f]")  # what the writer refuses (a tab it writes)


def shown_word(text):
    """``text`` as a bash word for a report: as the writer writes it, or ``$'...'`` with escapes when it
    holds control characters (a CRLF file gives every value a ``\\r``), so no raw control character
    reaches the terminal."""
    if not _CONTROL_RE.search(text):
        return quote_value(text)
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif _CONTROL_RE.match(char):
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, "\\x%02x" % ord(char)))
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def shown_value(key, value, secrets):
    """A value for a diff line: ``(unset)``, ``(secret)``, or the bash word that yields it."""
    if value is None:
        return "(unset)"
    if is_secret_name(key):
        return "(secret)"
    return shown_word(redact_text(value, secrets))


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
        shown = SECRET_MASK if is_secret_name(key) else shown_word(redact_text(value, secrets))
        lines.append("%s=%s\n" % (key, shown))
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# Converge and rollback
# ---------------------------------------------------------------------------------------------

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


def _digest(value):
    """What the record keeps of a value the role wrote (never the value: it may be a secret)."""
    return sha256_hex(value.encode("utf-8"))


def _converged(path, old, record, settings, api_key, notes, remove_keys, header, base):
    """What a converge writes for the file ``old`` (bytes or None) at ``path``: ``{old_env, declared, managed,
    stale, merged}`` (``merged``: :func:`merge_env`'s result).

    A key this role wrote itself (an override of an earlier run, recorded as ``managed`` in ``record``)
    that is no longer declared and still holds the value it wrote is the project's, not the operator's:
    it goes (``stale``). Every other undeclared key was set by hand (or adopted) and is kept. Raises
    :class:`EnvSyntaxError` when ``old`` is not data.
    """
    managed = record.get("managed") or {}
    declared = set(k for k, v in (settings or {}).items() if v is not None) | set([API_KEY] if api_key is not None
                                                                                 else [])
    old_env = parse_env(old, base, path) if old is not None else {}
    stale = [k for k, digest in managed.items() if k in old_env and k not in declared
             and k not in (remove_keys or ()) and _digest(old_env[k]) == digest]
    merged = merge_env(old, settings, api_key, notes, list(remove_keys or ()) + stale, header, base, path)
    return {"old_env": old_env, "declared": declared, "managed": managed, "stale": stale, "merged": merged}


def converge_env(path, settings, api_key=None, notes=(), run_id=None, header=DEFAULT_HEADER, mode=ENV_MODE,
                 base=None, check_mode=False, now=None, remove_keys=()):
    """Converge the .env to ``settings`` in place (:func:`merge_env`); keep its "before" for ``run_id``.

    Returns ``{changed, path, changes, diff, backup, backup_created, record, run_id, kept_undeclared,
    removed, removed_stale, added}``. ``changes``: key-level lines as bash sees the old and the new file (secrets
    redacted), undeclared keys included when their value changes; ``kept_undeclared``: the keys the
    file sets that the settings do not declare, kept as they are; ``removed_stale``: keys an earlier
    converge wrote (recorded as ``managed`` in the record, by digest) that are no longer declared and
    still hold the value written: the project's own overrides, removed (a key set or changed by hand
    is kept). A current file that is not data
    is refused (rewriting it would drop what it sets). When the file changes (content, mode), the
    first time in a run its previous state is saved in a 0600 snapshot named for the run and
    recorded (:func:`load_record`); later changes in the same run keep that first "before". Check
    mode computes everything and writes nothing.
    """
    if not run_id or not RUN_ID_RE.fullmatch(str(run_id)):
        raise EnvError("run_id %r must be 1-80 characters of letters, digits, '.', '_' or '-'" % (run_id,))
    old, st = read_env_file(path)
    secrets = [api_key] if api_key else []
    record = load_record(path)
    try:
        plan = _converged(path, old, record, settings, api_key, notes, remove_keys, header, base)
    except EnvSyntaxError as exc:
        raise EnvError("%s; nothing written: a file that is not data cannot be converged without losing what it "
                       "sets (fix that line, or restore a backup)" % redact_text(str(exc), secrets))
    old_env, declared, managed, stale, merged = (plan[k] for k in ("old_env", "declared", "managed", "stale", "merged"))
    data = merged["text"].encode("utf-8")
    new_env = parse_env(merged["text"], base, path)
    written = set(merged["rewritten"]) | set(merged["added"])
    record["managed"] = dict((k, _digest(v)) for k, v in new_env.items() if k in declared and (
        k in written or managed.get(k) == _digest(v)))
    result = {"path": path, "run_id": run_id, "record": record_path(path), "backup": None,
              "backup_created": False, "kept_undeclared": merged["kept"],
              "removed": [k for k in merged["removed"] if k not in stale], "removed_stale": stale,
              "added": merged["added"]}
    same = old is not None and old == data and stat.S_IMODE(st.st_mode) == mode
    changes = env_changes(old_env, new_env, secrets)
    if not same and not changes:
        changes = ["(same values for bash; %s)" % (
            "the managed header is added" if old is not None and stat.S_IMODE(st.st_mode) == mode else
            "the file is created" if old is None else
            "mode %04o -> %04o" % (stat.S_IMODE(st.st_mode), mode))]
    result.update(changed=not same, changes=changes if not same else [],
                  diff=_diff(path, old_env, None, new_env, secrets))
    entry = record_entry(record, run_id)
    if entry is not None:
        result["backup"] = entry.get("backup")
    if same or check_mode:
        return result
    if entry is None:
        entry = {"run_id": run_id, "recorded": utc_stamp(now), "existed": old is not None}
        if old is not None:
            base_name = "%s%s%s-%s" % (os.path.basename(path), BACKUP_INFIX, utc_stamp(now), run_id)
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
            entry.update(backup=name, sha256=sha256_hex(old), size=len(old), mode="%04o" % stat.S_IMODE(st.st_mode),
                         uid=st.st_uid, gid=st.st_gid)
            result.update(backup=name, backup_created=True)
        record["runs"].append(entry)
    save_record(path, record)           # the run's "before" (first change) and the keys written now
    try:
        write_atomic(path, data, mode, st.st_uid if st else None, st.st_gid if st else None)
    except OSError as exc:
        raise EnvError("%s: cannot write: %s" % (path, exc.strerror))
    return result


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_MODE_RE = re.compile(r"^0?[0-7]{3}$")


def _check_entry(path, entry):
    """Restore only what the writer itself recorded: a backup beside the .env under the writer's own name
    (``<.env>.dsv41-backup-...``, no directory part), with its size, sha256 and a plain permission mode
    (no setuid, setgid or sticky bit). A record edited by hand (``../outside``, no sha256, mode 4755) is
    refused naming the record, the run and the value."""
    where = "%s (run %s)" % (record_path(path), entry.get("run_id"))
    name = entry.get("backup")
    prefix = os.path.basename(path) + BACKUP_INFIX
    if not isinstance(name, str) or not name:
        raise EnvError("%s names no backup" % where)
    if name != os.path.basename(name) or name in (".", "..") or "\0" in name or not name.startswith(prefix):
        raise EnvError("%s: backup %r is not a backup this tool wrote (a file name %s..., beside the .env); "
                       "not restoring it" % (where, name[:200], prefix))
    if not isinstance(entry.get("sha256"), str) or not _SHA256_RE.match(entry["sha256"]):
        raise EnvError("%s: backup %s has no recorded sha256 (got %r); not restoring it"
                       % (where, name, str(entry.get("sha256"))[:80]))
    if not isinstance(entry.get("size"), int) or isinstance(entry.get("size"), bool) or entry["size"] < 0:
        raise EnvError("%s: backup %s has no recorded size (got %r); not restoring it"
                       % (where, name, str(entry.get("size"))[:80]))
    if not isinstance(entry.get("mode"), str) or not _MODE_RE.match(entry["mode"]):
        raise EnvError("%s: backup %s records mode %r, not a plain permission mode (0000-0777: no setuid, setgid "
                       "or sticky bit); not restoring it" % (where, name, str(entry.get("mode"))[:20]))
    for key in ("uid", "gid"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise EnvError("%s: backup %s records %s %r; not restoring it" % (where, name, key, str(value)[:20]))


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
        entry = record_entry(record, run_id)
        if entry is None:
            raise EnvError("%s: no recorded run %r (recorded: %s)" % (path, run_id,
                                                                      ", ".join(r["run_id"] for r in runs)))
    else:
        entry = record["runs"][-1]
    directory = os.path.dirname(os.path.abspath(path))
    result.update(restored_run=entry["run_id"], backup=entry.get("backup"))
    if entry.get("existed", True):
        _check_entry(path, entry)
        bpath = os.path.join(directory, entry["backup"])
        target, _bst = read_env_file(bpath)
        if target is None:
            raise EnvError("%s: the backup %s of run %s is missing" % (path, entry["backup"], entry["run_id"]))
        if len(target) != entry["size"] or sha256_hex(target) != entry["sha256"]:
            raise EnvError("%s: the backup %s changed since it was recorded (%s differs); not restoring it"
                           % (path, entry["backup"], "size" if len(target) != entry["size"] else "sha256"))
        mode = int(entry["mode"], 8)
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
        name = "%s%s%s" % (os.path.basename(path), REPLACED_INFIX, sha256_hex(current)[:16])
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
                fsync_dir(directory)
        else:
            write_atomic(path, target, mode, uid, gid)
    except OSError as exc:
        raise EnvError("%s: cannot restore: %s" % (path, exc.strerror))
    return result


def proposed_env(settings, path, api_key=None, remove_keys=()):
    """The ``.env`` text the next serve reads once ``settings`` are converged into the file at ``path``
    (merged by the same code as :func:`converge_env`: keys the settings do not declare are kept), or the
    settings alone when there is no file. Nothing is written. ``API_KEY`` in ``settings`` counts as the key."""
    plain = dict((k, v) for k, v in (settings or {}).items() if k != API_KEY)
    key = api_key or (settings or {}).get(API_KEY) or None
    old, _st = read_env_file(path) if path else (None, None)
    if old is None:
        return render_env(dict((k, v) for k, v in plain.items() if v is not None), key)
    # the converge's own merge (the role's stale overrides removed as it removes them)
    return _converged(path, old, load_record(path), plain, key, (), remove_keys, DEFAULT_HEADER, None)["merged"]["text"]
