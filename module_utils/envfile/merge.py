# -*- coding: utf-8 -*-
"""The converge of an existing ``.env``: declared keys set, everything else kept byte for byte.

A fleet's ``.env`` holds many keys the inventory does not declare (addresses, HCAs, NFS, NCCL, ssh
identity, ports). Rendering the whole file from the declared keys would drop them, and the next
serve would run on the launcher's defaults. :func:`merge_env` edits the file in place instead:

* the file is cut into line groups (``envfile_parse.parse_statements``); a group none of whose
  assignments is declared with another value, or listed for removal, is kept verbatim (comments,
  quoting, ``export``, references and order included);
* a declared key whose value differs is written (by the one writer, ``envfile_render``) where bash
  last assigns it, so every earlier reference keeps the value it had; a group that assigns other
  names too is rewritten as one line per name, each with the value bash held right after it;
* a declared key the file lacks is added after the last assignment (before trailing comments);
* a key listed for removal (``remove_keys``, or declared as None) loses every assignment;
* the managed header is added at the top when the file does not start with it; a note is appended
  when its comment lines are not in the file yet (comments are never removed).

The result is checked by parsing it again: every declared key must hold its declared value, and an
undeclared key whose value changes (its line refers to a key that changed) is reported by the
caller's key-level diff, never silently. What cannot be done as data is refused naming the key.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.envfile.lines import parse_statements
from ansible.module_utils.envfile.parse import parse_env
from ansible.module_utils.envfile.render import (
    DEFAULT_HEADER, comment_lines, declared_env, key_problem, quote_value, render_env, settings_problems,
    value_problem)
from ansible.module_utils.envfile.shell import EnvError

__metaclass__ = type


def _lines_text(lines):
    return "".join(line + "\n" for line in lines)


def removal_keys(settings, remove_keys=()):
    """Names to remove: ``remove_keys`` plus every setting declared as None. Refuses bad names and a
    name both declared with a value and listed for removal."""
    out = []
    problems = []
    for key in list(remove_keys or ()) + [k for k, v in (settings or {}).items() if v is None]:
        problem = key_problem(key)
        if problem:
            problems.append("remove_keys: " + problem)
        elif (settings or {}).get(key) is not None:
            problems.append("%s is both declared and listed for removal; keep one" % key)
        elif key not in out:
            out.append(key)
    if problems:
        raise EnvError("; ".join(problems))
    return out


def _owners(groups):
    """{NAME: index of the last group that assigns it}."""
    owner = {}
    for index, group in enumerate(groups):
        for name, _value in group["assigns"]:
            owner[name] = index
    return owner


def _rewrite(group, index, owner, declared, remove, source):
    """Lines replacing a group one of whose names changes or goes: one NAME=value line per name."""
    values = {}
    order = []
    for name, value in group["assigns"]:
        if name not in values:
            order.append(name)
        values[name] = value
    lines = []
    for name in order:
        if name in remove:
            continue
        if name in declared and owner[name] == index:
            text = declared[name]
        else:
            text = values[name]
            problem = value_problem(name, text)
            if problem:
                raise EnvError("%s: line %d: %s; %s shares that line with a key this run changes or removes, "
                               "so the line would be rewritten: put the changed key on a line of its own first"
                               % (source, group["first"], problem, name))
        lines.append("%s=%s" % (name, quote_value(text)))
    return _lines_text(lines)


def _build(groups, owner, declared, force, remove, header_text, notes, source):
    out = [] if "".join(g["text"] for g in groups).startswith(header_text) else [header_text]
    last_assign = max([i for i, g in enumerate(groups) if g["assigns"]] or [-1])
    added = _lines_text("%s=%s" % (k, quote_value(v)) for k, v in declared.items() if k not in owner)
    if last_assign < 0:
        out.append(added)
    for index, group in enumerate(groups):
        names = set(n for n, _v in group["assigns"])
        touched = names & remove or any(n in force and owner[n] == index for n in names)
        text = _rewrite(group, index, owner, declared, remove, source) if touched else group["text"]
        if index == last_assign and added and not text.endswith("\n"):
            text += "\n"
        out.append(text)
        if index == last_assign:
            out.append(added)
    body = "".join(out)
    for note in notes or ():
        lines = _lines_text(comment_lines(note))
        if not (body.startswith(lines) or ("\n" + lines) in body):
            body += ("" if not body or body.endswith("\n") else "\n") + lines
    return body


def merge_env(old_text, settings, api_key=None, notes=(), remove_keys=(), header=DEFAULT_HEADER, base=None,
              source=".env"):
    """The new ``.env`` text for ``old_text`` (None: no file yet) and the declared settings.

    Returns ``{"text", "kept", "removed", "rewritten", "added"}``: ``kept`` the names the file
    assigns that are neither declared nor removed (kept as they are), ``removed`` the names whose
    assignments went, ``rewritten`` the declared names written by this run, ``added`` those new to
    the file. Raises :class:`EnvError` for settings that cannot be written as data and
    :class:`EnvSyntaxError` when ``old_text`` is not data (nothing can be kept safely then).
    """
    problems = settings_problems(dict((k, v) for k, v in (settings or {}).items() if v is not None), api_key, notes)
    if problems:
        raise EnvError("; ".join(problems))
    remove = removal_keys(settings, remove_keys)
    declared = declared_env(settings, api_key)
    if old_text is None:
        text = render_env(dict((k, v) for k, v in (settings or {}).items() if v is not None), api_key, notes, header)
        return {"text": text, "kept": [], "removed": [], "rewritten": list(declared), "added": list(declared)}
    old_env, groups = parse_statements(old_text, base, source)
    owner = _owners(groups)
    header_text = _lines_text(line for h in header or () for line in comment_lines(h))
    force = set(k for k, v in declared.items() if old_env.get(k) != v)
    for _round in range(len(declared) + 2):
        text = _build(groups, owner, declared, force, set(remove), header_text, notes, source)
        new_env = parse_env(text, base, source)
        wrong = set(k for k, v in declared.items() if new_env.get(k) != v)
        if not wrong:
            break
        if wrong <= force:
            raise EnvError("%s: the merged file would not give bash the declared values of %s"
                           % (source, ", ".join(sorted(wrong))))
        force |= wrong
    else:  # pragma: no cover - each round forces at least one more key, so the loop ends before
        raise EnvError("%s: could not merge the declared settings" % source)
    kept = [k for k in old_env if k not in declared and k not in remove]
    return {"text": text, "kept": kept, "removed": [k for k in remove if k in old_env],
            "rewritten": [k for k in declared if k in force], "added": [k for k in declared if k not in owner]}
