# -*- coding: utf-8 -*-
"""Whether the import hook arms an adapter, judged from the structure ``import_hook.read_hook`` gives.

:func:`arming` says whether a declared switch (and value) arms an adapter on the TP3 launcher,
evaluating the conditions around each way the hook installs it with only that switch set; :func:`installs`
and :func:`wrapped` say what the hook installs, and which engine modules its finder wraps, with a whole
environment;
:func:`hook_problems` gives one message per expected adapter the hook would not arm;
:func:`reads_switch` / :func:`adapter_reads` say whether an adapter's own file reads its switch (an
adapter installed on every boot is controlled only that way). Never executes the hook. Standard
library only: Ansible ships this file to the target host next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast
import os

from ansible.module_utils.adapters.conditions import LAUNCHER_VAR, UNKNOWN, GateEnv, all_true, string_constant
from ansible.module_utils.adapters.finder import finder_wraps
from ansible.module_utils.base.probe_read import read_text as _read_regular

__metaclass__ = type


def _runs(hook, inst, role, env):
    """Does this way of reaching an install run with exactly ``env`` set (True, False or UNKNOWN)? It runs
    when, for one of its modules, the finder wraps that module and every condition around it holds."""
    out = False
    for module in role["modules"]:
        ev = GateEnv(env, hook.get("_assigns", {}), hook.get("_funcs", {}), modname=module,
                     local=inst.get("_local"))
        t = all_true(ev, role["conds"])
        if t is not False:
            w = finder_wraps(hook, module, env)
            t = False if w is False else (UNKNOWN if UNKNOWN in (t, w) else True)
        if t is True:
            return True
        if t is UNKNOWN:
            out = UNKNOWN
    return out


def installs(hook, env):
    """``{adapter: {module: True|None}}``: what the hook installs, and for which wrapped module, when it runs
    (its finder inserted) with exactly ``env`` set (the launcher included: ``DSV41_LAUNCHER=tp4`` for TP4).
    None: a condition cannot be read from the text."""
    out = {}
    for inst in hook["installs"]:
        for name, roles in inst["_roles"].items():
            for role in roles:
                for module in role["modules"]:
                    one = dict(role, modules=[module])
                    t = _runs(hook, inst, one, env)
                    if t is False:
                        continue
                    seen = out.setdefault(name, {})
                    seen[module] = True if (t is True or seen.get(module)) else None
    return out


def wrapped(hook, env):
    """``{module: True|None}``: the engine modules the finder wraps with exactly ``env`` set."""
    out = {}
    for module in hook["finder"]["modules"] + hook["finder"].get("tp4_only", []):
        w = finder_wraps(hook, module, env)
        if w is not False:
            out[module] = True if w is True else None
    return out


def arming(hook, adapter, switch, value="1", launcher="tp3", adapter_reads_switch=None):
    """``{"arms": True|False|None, "reason": str}``: does ``switch=value`` arm ``adapter`` at install time?

    Evaluates, per wrapped module, the conditions of each way the hook installs ``adapter`` (every install
    function of it, every import that can reach the call) with only ``switch`` set (and
    ``DSV41_LAUNCHER=tp4`` when ``launcher`` is ``tp4``); the finder must wrap that module too. An ungated
    way installs on every boot: the switch then works only if the adapter reads it itself
    (``adapter_reads_switch``; None = not known). ``arms`` is None when a condition cannot be evaluated
    from the text.
    """
    info = hook["adapters"].get(adapter)
    if info is None:
        return {"arms": False, "reason": "no install_%s call in the loader of any wrapped module" % adapter}
    env = {switch: str(value)}
    if launcher == "tp4":
        env[LAUNCHER_VAR] = "tp4"
    verdicts = []
    for inst in hook["installs"]:
        for role in inst["_roles"].get(adapter, []):
            t = _runs(hook, inst, role, env)
            verdicts.append((None if t is UNKNOWN else t, role))
    if any(ok is True and not role["gate"] for ok, role in verdicts):
        if adapter_reads_switch is False:
            return {"arms": False, "reason": "install_%s runs on every boot and %s.py never reads %s: the switch "
                                             "does not control it" % (adapter, adapter, switch)}
        if adapter_reads_switch is None:
            return {"arms": None, "reason": "install_%s runs on every boot; whether %s controls it is up to %s.py, "
                                            "which was not read" % (adapter, switch, adapter)}
        return {"arms": True, "reason": "installed on every boot; the adapter reads %s itself" % switch}
    if any(ok is True for ok, _ in verdicts):
        return {"arms": True, "reason": "install_%s runs when %s=%s" % (adapter, switch, value)}
    if any(ok is None for ok, _ in verdicts):
        return {"arms": None, "reason": "a condition around install_%s cannot be read from the text" % adapter}
    if info["tp4_only"] and launcher != "tp4":
        return {"arms": False, "reason": "install_%s runs only on the TP4 launcher (%s=tp4)" % (adapter, LAUNCHER_VAR)}
    if not any(finder_wraps(hook, m, env) is not False for _, role in verdicts for m in role["modules"]):
        return {"arms": False, "reason": "install_%s runs only for %s, which the finder does not wrap"
                % (adapter, ", ".join(info["modules"]) or "no module")}
    others = [g for g in info["gates"] if g != switch]
    return {"arms": False, "reason": "install_%s is gated by %s, not armed by %s=%s"
            % (adapter, ", ".join(others or info["gates"]) or "a condition", switch, value)}


def hook_problems(hook, expected, values=None, source="sitecustomize.py", reads_switch=None):
    """Messages for each expected ``{adapter: switch}`` the hook would not arm on the TP3 launcher.

    ``values``: declared value per switch (default ``1``: the switch on). ``reads_switch``: adapter ->
    whether its own file reads its switch (None when unknown).
    """
    out = []
    finder = hook["finder"]
    if expected and not finder["modules"]:
        out.append("%s: no finder with a module list (find_spec testing the module name against a list)" % source)
    if expected and finder["gate"] is None:
        out.append("%s: the finder is never inserted into sys.meta_path" % source)
    for adapter, switch in sorted((expected or {}).items()):
        info = hook["adapters"].get(adapter)
        if info is None:
            out.append("%s: adapter %s is not registered (no install_%s call in the loader of any wrapped module)"
                       % (source, adapter, adapter))
            continue
        if info["unwrapped"]:
            out.append("%s: install_%s is called for %s, which the finder does not wrap"
                       % (source, adapter, ", ".join(info["unwrapped"])))
        value = (values or {}).get(switch, "1")
        verdict = arming(hook, adapter, switch, value, adapter_reads_switch=(reads_switch or {}).get(adapter))
        if verdict["arms"] is not True:
            out.append("%s: adapter %s: %s" % (source, adapter, verdict["reason"]))
    return out


def reads_switch(adapter_text, switch):
    """Whether an adapter's source names ``switch`` as a string (None when the text is not Python)."""
    try:
        tree = ast.parse(adapter_text)
    except (SyntaxError, ValueError):
        return None
    return any(string_constant(n) == switch for n in ast.walk(tree))


def adapter_modules(hook, adapter):
    """The module names whose files hold ``adapter``: the modules its install functions are imported from
    (``installs[].sources``: ``from folded_result_fence import install as install_folded_fence``), else the
    adapter's own name (an ``install_<x>`` the hook defines itself, or no hook given)."""
    names = []
    for inst in (hook or {}).get("installs") or []:
        if inst.get("adapter") == adapter:
            names.extend(m for m in inst.get("sources") or [] if m not in names)
    return names or [adapter]


def adapter_reads(adapter_dir, expected, hook=None):
    """adapter -> whether its file in ``adapter_dir`` reads its switch (None when no file is readable).
    The file is the module its installs come from (:func:`adapter_modules`; ``<adapter>.py`` without
    ``hook``); when several modules install it, one that reads the switch is enough."""
    out = {}
    for adapter, switch in (expected or {}).items():
        answers = []
        for module in adapter_modules(hook, adapter):
            try:    # never through a symlink, never a FIFO or device (the drift probe runs as root)
                text = _read_regular(os.path.join(adapter_dir, module + ".py"))
            except (OSError, UnicodeDecodeError):
                continue
            if text is not None:
                answers.append(reads_switch(text, switch))
        out[adapter] = True if True in answers else (answers[0] if answers and None not in answers else None)
    return out
