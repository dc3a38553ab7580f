# -*- coding: utf-8 -*-
"""May a candidate engine image (a pinned canary) be timed on TP3? Three checks over two images' source
(read by :mod:`engine_source`), each giving problems (empty: passes) and the rows it was judged on.

* ``hook_signatures``: every engine symbol a registered adapter touches (reads, wraps or assigns) exists in
  the candidate with the parameter list it has in the running image, where the adapter is known to work; and
  every module the import hook's finder wraps exists (a missing one silently never arms);
* ``g4_guard``: a shape guard in the model's dispatch that admits only another group count (the pinned
  canary's small-row path wants ``(2, 1024, 4096)`` weights; TP3 has G=4 local groups) must be replaced by an
  adapter in the image, or TP3 never takes the fast path; and, when the settings the image will boot with
  are given, the image's import hook must arm that adapter under them (a replacement whose switch is off
  never installs, and the canary would be timed on the G=2-only dispatch);
* ``vocab_padding``: the candidate pads the vocabulary like the running image, so every rank keeps the same
  number of vocab rows (129,280 padded for TP3 to 43,136 rows a rank with the padding of 64).

Standard library only: Ansible ships this file to the target host next to the module.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.adapters.engine_source import (SourceError, VOCAB_PADDING_NAME, adapter_targets, describe, dotted,
                                                shape_guards, vocab_padding_size)
from ansible.module_utils.adapters.arming import arming, installs, wrapped
from ansible.module_utils.adapters.conditions import LAUNCHER_VAR

__metaclass__ = type


def hook_signatures(candidate, reference, targets, wrapped):
    """Problems and table rows for every adapter target ({adapter: {target: how}}) and wrapped module.

    A symbol the adapter reads or replaces must exist in the candidate, with the reference's parameter list
    where the reference has it. One the adapter assigns that neither image defines is the adapter's own
    addition (a module attribute it keeps state in): only its owner must exist, and what the adapter reads
    under it is not the engine's.
    """
    problems, rows, added = [], [], []
    for module in wrapped:
        if candidate.module(module) is None:
            problems.append("the import hook wraps %s, which %s does not have (its adapters would never arm)"
                            % (module, candidate.label))
    for adapter in sorted(targets):
        for target, how in sorted(targets[adapter].items(), key=lambda kv: (kv[0][0], len(kv[0][1]), kv[0][1])):
            if any(a[0] == target[0] and target[1][:len(a[1])] == a[1] for a in added):
                continue
            new, new_where = candidate.find(target)
            old, old_where = reference.find(target)
            row = {"adapter": adapter, "target": dotted(target), "how": how,
                   "reference": describe(old) if old is not None else "(absent)",
                   "candidate": describe(new) if new is not None else "(absent)", "verdict": "ok"}
            if new is None and old is None and how == "patched" and len(target[1]) > 1 \
                    and candidate.find((target[0], target[1][:-1]))[0] is not None:
                added.append(target)
                row["candidate"] = row["reference"] = "(added by the adapter)"
            elif new is None and old is None:
                problems.append("%s: %s is found in neither image (%s; %s)" % (adapter, dotted(target), old_where, new_where))
                row["verdict"] = "FAIL"
            elif new is None:
                problems.append("%s: %s is gone in %s (%s)" % (adapter, dotted(target), candidate.label, new_where))
                row["verdict"] = "FAIL"
            elif old is not None and row["candidate"] != row["reference"]:
                problems.append("%s: %s changed: %s in %s, %s in %s" % (
                    adapter, dotted(target), row["reference"], reference.label, row["candidate"], candidate.label))
                row["verdict"] = "FAIL"
            rows.append(row)
    return problems, rows


def adapter_modules(hook):
    """The adapter files (module names, without ``.py``) of the adapters the hook can install on the TP3
    launcher, in the order of its install calls: each module an install function is imported from
    (``installs[].sources``: ``from folded_result_fence import install as install_folded_fence`` is
    ``folded_result_fence``), or ``<x>`` for an ``install_<x>`` the hook defines itself. Each is a name of the
    hook's ``adapters``, answering for every install of that module; one whose installs all run only on the TP4
    launcher is left out."""
    out = []
    for inst in hook["installs"]:
        for module in inst["sources"] or [inst["adapter"]]:
            info = hook["adapters"].get(module)
            if info is not None and not info["tp4_only"] and module not in out:
                out.append(module)
    return out


def boot_env(hook, settings):
    """The environment the image's hook sees on the TP3 launcher with ``settings``: each value as text, and
    every switch the hook's gates read that ``settings`` does not set (or sets to None) as ``0``, as the
    launcher passes ``${X:-0}``. ``DSV41_LAUNCHER`` is not set on TP3."""
    env = {}
    for info in hook["adapters"].values():
        env.update((gate, "0") for gate in info["gates"])
    env.update((key, "0" if value is None else str(value)) for key, value in (settings or {}).items())
    env.pop(LAUNCHER_VAR, None)
    return env


def _installed(hook, adapter, env):
    """True (the hook installs ``adapter`` for some wrapped module), None (only where a condition cannot be
    read) or False, with exactly ``env`` set (``import_hook_arming.installs``)."""
    runs = installs(hook, env).get(adapter) or {}
    return True if True in runs.values() else (None if runs else False)


def _switched_off(env, switches, off):
    """``env`` with ``switches`` set to ``off`` (None: unset)."""
    out = dict((k, v) for k, v in env.items() if k not in switches)
    if off is not None:
        out.update(dict.fromkeys(switches, off))
    return out


def adapter_armed(hook, adapter, settings):
    """``(True|False|None, why)``: does the image's import hook install ``adapter`` (a name of its
    ``adapters``: an adapter module, see :func:`adapter_modules`) when it boots with ``settings`` ({switch:
    value}; a switch not set is off, as the launcher passes ``${X:-0}``)?

    The reader's answer (``import_hook_arming.installs``) with the whole boot environment decides, for every
    install of the adapter's module, however the hook imports and names it. Armed: ``installed on every boot``
    when some way of installing it has no gate and it also installs with its switches ``0`` or unset, else
    ``armed by`` the switches that, alone ``0`` or unset, would stop it. None when a condition cannot be read
    from the text.
    """
    info = hook["adapters"].get(adapter)
    if info is None:
        return False, "the image's import hook never installs %s" % adapter
    env = boot_env(hook, settings)
    got = _installed(hook, adapter, env)
    if got is None:
        return None, "a condition around install_%s cannot be read from the text" % adapter
    if got:
        if info["ungated"] and all(_installed(hook, adapter, _switched_off(env, info["gates"], off)) is True
                                   for off in ("0", None)):
            return True, "installed on every boot"
        needed = [g for g in info["gates"] if any(_installed(hook, adapter, _switched_off(env, [g], off)) is not True
                                                  for off in ("0", None))]
        return True, "armed by %s" % ", ".join("%s=%s" % (g, env[g]) for g in needed or info["gates"])
    reasons = []
    for gate in info["gates"]:
        verdict = arming(hook, adapter, gate, env[gate])
        reasons.append(verdict["reason"] if verdict["arms"] is not True else
                       "install_%s does not run with the other settings" % adapter)
    unwrapped = [m for m in info["modules"] if m not in wrapped(hook, env)]
    if not reasons and info["tp4_only"]:
        reasons.append("install_%s runs only on the TP4 launcher (%s=tp4)" % (adapter, LAUNCHER_VAR))
    elif not reasons and unwrapped and len(unwrapped) == len(info["modules"]):
        reasons.append("install_%s runs only for %s, which the finder does not wrap with these settings"
                       % (adapter, ", ".join(unwrapped)))
    return False, "; ".join(reasons) or "no switch arms install_%s" % adapter


def g4_guard(candidate, guard_module, local_groups, patched, armed=None):
    """Problems and rows: each 3-dim weight-shape guard in ``guard_module`` of the candidate whose group count
    is not ``local_groups`` must sit in a function some adapter of the image replaces (``patched``: dotted
    name -> the adapters replacing it, however they imported the module) and, when ``armed`` is given
    ({adapter: (armed, why)} for the settings the image boots with), that adapter must be armed."""
    got = candidate.module(guard_module)
    if got is None:
        return ["%s has no %s: the G=%d dispatch cannot be judged" % (candidate.label, guard_module, local_groups)], []
    tree, _pkg, rel = got
    problems, rows = [], []
    for qual, line, shapes in shape_guards(tree):
        name = dotted((guard_module, qual))
        by = sorted(patched.get(name, ())) if qual else []
        admits = any(d[0] == local_groups for d in shapes)
        weights = " or ".join("(%s)" % ", ".join(str(x) for x in d) for d in shapes)
        row = {"where": "%s:%d" % (rel, line), "function": ".".join(qual) or "(module)", "weights": weights,
               "verdict": "ok", "why": "admits G=%d" % local_groups}
        rows.append(row)
        if admits:
            continue
        only = "/".join(sorted(set(str(d[0]) for d in shapes)))
        where = "%s %s:%d: %s enters its small-row path only for weights %s; TP3 has G=%d local groups" % (
            candidate.label, rel, line, ".".join(qual) or "the module", weights, local_groups)
        if not by:
            row.update(verdict="FAIL", why="admits only G=%s" % only)
            problems.append("%s and no adapter in the image replaces %s (carry a G=%d dispatch)"
                            % (where, name, local_groups))
            continue
        row["why"] = "replaced by an adapter (%s)" % ", ".join(by)
        if armed is None:
            continue
        # every adapter in ``by`` patched the function, so each has its verdict in ``armed``
        on = [a for a in by if armed[a][0] is True]
        if on:
            row["why"] = "replaced by an adapter (%s, %s)" % (on[0], armed[on[0]][1])
            continue
        whys = "; ".join("%s: %s" % (a, armed[a][1]) for a in by)
        row.update(verdict="FAIL", why="replaced by an adapter these settings do not arm (%s)" % ", ".join(by))
        problems.append("%s, and the adapter replacing %s is not armed by the settings it boots with (%s): the "
                        "run would time the G=%s dispatch" % (where, name, whys, only))
    return problems, rows


def rows_per_rank(vocab_size, padding, tp_size):
    """Vocab rows a rank holds when the vocabulary is padded so that it splits evenly in ``padding`` steps."""
    step = padding * tp_size
    return -(-vocab_size // step) * step // tp_size


def vocab_padding(candidate, reference, vocab_module, vocab_size, tp_size):
    """Problems and rows: the candidate's padding (and so each rank's vocab rows) equals the reference's."""
    rows, values = [], []
    for engine in (reference, candidate):
        pad = vocab_padding_size(engine, vocab_module)
        values.append(pad)
        rows.append({"image": engine.label, "padding": pad if isinstance(pad, int) else "(unreadable)",
                     "rows_per_rank": rows_per_rank(vocab_size, pad, tp_size) if isinstance(pad, int) else None})
    problems = [v for v in values if not isinstance(v, int)]
    if not problems and rows[0]["rows_per_rank"] != rows[1]["rows_per_rank"]:
        problems.append("%s pads the vocabulary of %d to %d rows a rank (%s %d), %s to %d (%s %d): the TP3 vocab "
                        "split changes" % (candidate.label, vocab_size, rows[1]["rows_per_rank"], VOCAB_PADDING_NAME,
                                           values[1], reference.label, rows[0]["rows_per_rank"], VOCAB_PADDING_NAME,
                                           values[0]))
    return problems, rows


CHECKS = ("hook_signatures", "g4_guard", "vocab_padding")


def image_checks(candidate, reference, hook, adapter_texts, guard_module, vocab_module, local_groups, vocab_size,
                 tp_size, settings=None):
    """Every check of a candidate image: {check: {"problems": [...], "rows": [...]}}.

    ``hook`` is :func:`import_hook.read_hook` of the candidate's ``sitecustomize.py``; ``adapter_texts``
    {adapter module: text or None} the files of the adapters it installs on TP3 (:func:`adapter_modules`; None:
    missing from the image);
    ``settings`` the launcher settings the image will boot with (None: whether a replacing adapter is armed
    is not judged).
    """
    targets, problems = {}, []
    for name, text in sorted(adapter_texts.items()):
        if text is None:
            problems.append("the import hook installs %s, but %s has no %s.py" % (name, candidate.label, name))
            continue
        try:
            targets[name] = adapter_targets(text, "%s:%s.py" % (candidate.label, name))
        except SourceError as exc:
            problems.append(str(exc))
    hooks, hook_rows = hook_signatures(candidate, reference, targets, hook["finder"]["modules"])
    patched = {}
    for adapter, per in targets.items():
        for target, how in per.items():
            if how == "patched":
                patched.setdefault(dotted(target), set()).add(adapter)
    armed = None if settings is None else dict((a, adapter_armed(hook, a, settings)) for a in targets)
    guard, guard_rows = g4_guard(candidate, guard_module, local_groups, patched, armed)
    vocab, vocab_rows = vocab_padding(candidate, reference, vocab_module, vocab_size, tp_size)
    return {"hook_signatures": {"problems": problems + hooks, "rows": hook_rows},
            "g4_guard": {"problems": guard, "rows": guard_rows},
            "vocab_padding": {"problems": vocab, "rows": vocab_rows}}
