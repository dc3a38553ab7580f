# -*- coding: utf-8 -*-
"""The finder of the launcher checkout's import hook (``adapter/sitecustomize.py``): which engine modules it
wraps, under which environment, and what its insertion into ``sys.meta_path`` depends on.

The finder is the first class defining ``find_spec``; the modules it can wrap are the names ``find_spec``
tests its name argument against (a collection, directly or through a module-level name, or single names).
Whether it wraps one of them is decided by walking ``find_spec``'s body with that name bound (conditions
evaluated by ``import_hook_conditions.GateEnv``): a way through it that returns something other than None,
or falls off the end, wraps the module. A finder may wrap some modules only on the TP4 launcher
(``DSV41_LAUNCHER=tp4``).

* :func:`read_finder`: the ``finder`` part of ``import_hook.read_hook``'s structure;
* :func:`finder_wraps`: does the finder wrap a module with a given environment (True, False or UNKNOWN).

Parsed with :mod:`ast`, never executed. Standard library only: Ansible ships this file to the target host
next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast

from ansible.module_utils.adapters.conditions import (LAUNCHER_VAR, LAUNCHERS, UNKNOWN, GateEnv,
                                                         enclosing_conditions, env_key, env_vars, string_constant,
                                                         string_list)

__metaclass__ = type


def _find_spec(tree):
    """``(class name, find_spec FunctionDef)`` of the first class defining ``find_spec`` (None, None)."""
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "find_spec":
                    return cls.name, fn
    return None, None


def _name_param(fn):
    params = [a.arg for a in fn.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    return params[0] if params else None


def _finder_candidates(fn, assigns):
    """Module names ``find_spec`` tests its name against: collections first, single names after."""
    param = _name_param(fn)
    many, single = [], []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Name)
                and node.left.id == param):
            continue
        target = node.comparators[0]
        if isinstance(target, ast.Name) and target.id in assigns:
            target = assigns[target.id]
        if isinstance(node.ops[0], (ast.In, ast.NotIn)):
            names = string_list(target)
            if names is not None:
                many.extend(n for n in names if n not in many)
        elif isinstance(node.ops[0], (ast.Eq, ast.NotEq)) and string_constant(target):
            single.append(string_constant(target))
    return many + [n for n in single if n not in many]


def _runtime_only(test, ev):
    """A condition on the finder's own run-time values (``spec is not None``, ``finder is self``): it reads
    no variable, no module-level name or helper and not the module name."""
    for n in ast.walk(test):
        if env_key(n) is not None:
            return False
        if isinstance(n, ast.Name) and (n.id in ev.bound or n.id in ev.assigns or n.id in ev.funcs):
            return False
    return True


def _paths(stmts, ev, certain=True, budget=None):
    """The ways through ``stmts``: ``{(outcome, certain)}``, outcome "wrap" (a non-None return), "skip" (an
    explicit ``return None`` or a raise) or "through" (it falls off the end); ``certain`` is False once a
    branch was taken on a condition the text cannot decide (one on run-time values alone does not count:
    such a branch is one the finder takes for some module)."""
    budget = budget if budget is not None else [512]
    budget[0] -= 1
    if budget[0] < 0:
        return {("wrap", False), ("skip", False)}
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):
            none = stmt.value is None or (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
            return {("skip" if none else "wrap", certain)}
        if isinstance(stmt, ast.Raise):
            return {("skip", certain)}
        if isinstance(stmt, (ast.Continue, ast.Break)):
            return {("through", certain)}
        if isinstance(stmt, ast.If):
            t = ev.truth(stmt.test)
            if t is UNKNOWN:
                sure = certain and _runtime_only(stmt.test, ev)
                branches = [(stmt.body, sure), (stmt.orelse, sure)]
            else:
                branches = [(stmt.body if t else stmt.orelse, certain)]
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
            branches = [(getattr(stmt, f, None) or [], certain) for f in ("body", "orelse", "finalbody")]
            branches += [(h.body, certain) for h in getattr(stmt, "handlers", None) or []]
            if not isinstance(stmt, (ast.With, ast.AsyncWith)):
                branches.append(([], certain))          # the body may not run (or not to the end)
        else:
            continue
        out = set()
        for body, sure in branches:
            for outcome, c in _paths(body, ev, sure, budget):
                if outcome == "through":
                    out |= _paths(stmts[i + 1:], ev, c, budget)
                else:
                    out.add((outcome, c))
        return out
    return {("through", certain)}


def finder_wraps(hook, module, env, open_env=False):
    """Does the finder wrap ``module`` with ``env`` (True, False or UNKNOWN)? ``open_env``: variables other
    than the launcher are unknown instead of unset. It does when a way through ``find_spec`` returns
    something other than None (falling off the end counts: a finder written as a filter); UNKNOWN when every
    such way depends on a condition the text cannot decide. True when the hook has no finder."""
    fn = hook.get("_finder_fn")
    if fn is None:
        return True
    if module not in hook["_candidates"]:
        return False
    ev = GateEnv(env, hook["_assigns"], hook["_funcs"], bound={_name_param(fn): module}, open_env=open_env,
                 closed=(LAUNCHER_VAR,))
    ways = [c for outcome, c in _paths(fn.body, ev) if outcome in ("wrap", "through")]
    if any(ways):
        return True
    return UNKNOWN if ways else False


def _finder_gate(tree, assigns, funcs, parents):
    """Variables gating the ``sys.meta_path.insert/append(...)`` of the finder (None: no insert found)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("insert", "append") and isinstance(node.func.value, ast.Attribute) \
                and node.func.value.attr == "meta_path":
            gate = []
            for test, _positive in enclosing_conditions(node, parents):
                gate.extend(v for v in env_vars(test, assigns, funcs) if v not in gate)
            return gate
    return None


def read_finder(tree, assigns, funcs, parents):
    """The hook's finder, as the first fields of ``import_hook.read_hook``'s structure: ``finder`` (``class``,
    ``modules`` wrapped on the TP3 launcher, ``tp4_only``, ``gate``) and the private ``_assigns``, ``_funcs``,
    ``_finder_fn`` and ``_candidates`` that :func:`finder_wraps` reads."""
    cls, fn = _find_spec(tree)
    candidates = _finder_candidates(fn, assigns) if fn is not None else []
    hook = {"_assigns": assigns, "_funcs": funcs, "_finder_fn": fn if candidates else None,
            "_candidates": candidates}
    on = dict((launcher, [m for m in candidates if finder_wraps(hook, m, env, open_env=True) is not False])
              for launcher, env in LAUNCHERS)
    hook["finder"] = {"class": cls, "modules": on["tp3"], "tp4_only": [m for m in on["tp4"] if m not in on["tp3"]],
                      "gate": _finder_gate(tree, assigns, funcs, parents)}
    return hook
