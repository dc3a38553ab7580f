# -*- coding: utf-8 -*-
"""The launcher checkout's import hook (``adapter/sitecustomize.py``), read by its structure: its install calls.

Real hooks of this family (SPEC section 3, "Launcher and containers") insert a finder into
``sys.meta_path`` only when a variable such as ``DSV41_SOURCE`` is set; the finder wraps a list of engine
module names, and the loader of each wrapped module calls install functions after the engine module has
executed: some inside a switch gate (``if os.environ.get("DSV41_X", "0") not in ("0", "", "off", "false"):``),
some unconditionally (the adapter then reads its switch itself), some only on the TP4 launcher
(``DSV41_LAUNCHER=tp4``). One adapter may hook several modules, through several install functions. Parsed
with :mod:`ast`, never executed, so formatting does not matter. The conditions are read and evaluated in
``import_hook_conditions``, the finder in ``import_hook_finder``; this file finds the install calls and
assembles the structure (:func:`read_hook`).

What an install call registers: a call of ``install_<x>(...)`` or of a function imported from an adapter
module as ``install`` / ``install_<y>``. Its adapter names are

* the adapter module it was imported from (``from verify_cap import install_gate as ...``: ``verify_cap``;
  each import that can reach the call counts, with the conditions around that import);
* the hook's own name for it when it imported the function under an ``install_<name>`` alias, less the
  imported function's own suffix (``install_gate as install_verify_cap_gate``: ``verify_cap``;
  ``install as install_folded_fence``: ``folded_fence``);
* for a function the hook defines itself (or one it does not import), ``<x>`` of ``install_<x>``.

Whether a call runs is decided per wrapped module: every condition around it is evaluated with the
module's name and the environment, and the finder must wrap that module under the same environment.

:func:`read_hook` gives the structure; whether a declared switch arms an adapter is judged from it in
``import_hook_arming`` (:func:`arming`, :func:`hook_problems`, :func:`installs`).
Standard library only: Ansible ships this file to the target host next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast

from ansible.module_utils.adapters.conditions import (LAUNCHER_VAR, LAUNCHERS, SCOPES, UNKNOWN, GateEnv, all_true,
                                                         enclosing_conditions, env_vars, local_assigns,
                                                         module_assigns, parent_map, string_constant,
                                                         string_list, walk_scope)
from ansible.module_utils.adapters.finder import finder_wraps, read_finder

__metaclass__ = type

INSTALL_PREFIX = "install_"


class HookError(Exception):
    """The import hook cannot be read (not Python)."""


def _callee(call):
    f = call.func
    if isinstance(f, ast.Name):
        return f.id, True
    if isinstance(f, ast.Attribute):
        return f.attr, False
    return None, False


def _binds(stmt, name):
    """Bindings of ``name`` made directly by ``stmt``: ``[("import", module, function)]``, ``[("def",)]``,
    ``[("other",)]`` or []."""
    if isinstance(stmt, ast.ImportFrom):
        return [("import", (stmt.module or "").rsplit(".", 1)[-1] or None, a.name)
                for a in stmt.names if (a.asname or a.name) == name]
    if isinstance(stmt, ast.Import):
        return [("other",) for a in stmt.names if (a.asname or a.name.split(".")[0]) == name]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
        return [("def",)]
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
        return [("other",)]
    return []


def _bindings_within(stmt, name):
    """``[(binding, statement)]`` made anywhere inside ``stmt`` (nested scopes excluded), latest first."""
    out, todo = [], [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.stmt):
            out.extend((b, node) for b in _binds(node, name))
        if node is stmt or not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))
    out.sort(key=lambda bs: (bs[1].lineno, bs[1].col_offset), reverse=True)
    return out


def _statement_lists(node):
    for field in ("body", "orelse", "finalbody"):
        lst = getattr(node, field, None)
        if isinstance(lst, list):
            yield lst
    for handler in getattr(node, "handlers", None) or []:
        yield handler.body


def _reaching(call, name, parents, tree):
    """The bindings of ``name`` that can reach ``call``: ``[(binding, statement)]``, latest first. A binding
    made directly in a statement list before the call's own statement hides the earlier ones; bindings
    inside a preceding if/try may or may not run, so the search goes on past them."""
    found, cur = [], call
    while not isinstance(cur, ast.stmt):
        cur = parents.get(cur)
        if cur is None:
            return found
    while True:
        par = parents.get(cur)
        if par is None:
            break
        if not isinstance(par, ast.ClassDef):
            for lst in _statement_lists(par):
                idx = next((i for i, s in enumerate(lst) if s is cur), None)
                if idx is None:
                    continue
                for prev in reversed(lst[:idx]):
                    direct = _binds(prev, name)
                    if direct:
                        return found + [(b, prev) for b in direct]
                    found.extend(_bindings_within(prev, name))
        if isinstance(par, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if found or any(_binds(n, name) for n in walk_scope(par) if isinstance(n, ast.stmt)):
                return found
            return found + _module_bindings(tree, name)
        cur = par
    return found


def _module_bindings(tree, name):
    """Module-level bindings of ``name`` as seen once the module has run (latest direct one and later)."""
    out = []
    for stmt in reversed(tree.body):
        direct = _binds(stmt, name)
        if direct:
            return out + [(b, stmt) for b in direct]
        out.extend(_bindings_within(stmt, name))
    return out


def _alias_name(alias, function):
    """The hook's name for an adapter imported as ``function`` under ``alias`` (None: no such name)."""
    if alias == function or not alias.startswith(INSTALL_PREFIX) or len(alias) <= len(INSTALL_PREFIX):
        return None
    name = alias[len(INSTALL_PREFIX):]
    own = function[len(INSTALL_PREFIX):] if function.startswith(INSTALL_PREFIX) else ""
    if own and name.endswith("_" + own) and len(name) > len(own) + 1:
        name = name[:-(len(own) + 1)]
    return name


def _is_install_function(function):
    return function == "install" or (function.startswith(INSTALL_PREFIX) and len(function) > len(INSTALL_PREFIX))


def _install_site(call, parents, tree):
    """``(function, ways)`` for an install call, else None; one way per import of the called function that
    can reach the call (one way when it is not imported): ``names`` (adapter names), ``source`` (the adapter
    module, or None) and ``conds`` (the conditions around that import, beyond the call's own)."""
    name, plain = _callee(call)
    if name is None:
        return None
    cur = parents.get(call)
    while cur is not None and not (isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)) and cur.name == name):
        cur = parents.get(cur)
    if cur is not None:     # a call inside its own definition is not an install site
        return None
    reaching = _reaching(call, name, parents, tree) if plain else []
    imports = sorted(((b, s) for b, s in reaching if b[0] == "import" and _is_install_function(b[2])),
                     key=lambda bs: (bs[1].lineno, bs[1].col_offset))
    own = name[len(INSTALL_PREFIX):] if name.startswith(INSTALL_PREFIX) and len(name) > len(INSTALL_PREFIX) \
        else None
    if not imports:
        return (name, [{"names": [own], "source": None, "conds": []}]) if own else None
    call_ifs = set(id(c[2]) for c in enclosing_conditions(call, parents, owners=True))
    ways = []
    for binding, stmt in imports:
        module, function = binding[1], binding[2]
        names = _dedupe(n for n in (_alias_name(name, function), module) if n) or ([own] if own else [])
        if not names:
            continue
        conds = [c[:2] for c in enclosing_conditions(stmt, parents, owners=True) if id(c[2]) not in call_ifs]
        ways.append({"names": names, "source": module, "conds": conds})
    return (name, ways) if ways else None


def _module_name_refs(tree):
    """Local names bound to ``<x>.__name__`` and the dotted strings compared against the module's name."""
    local_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "__name__":
            local_names.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def is_name(n):
        return (isinstance(n, ast.Attribute) and n.attr == "__name__") or \
            (isinstance(n, ast.Name) and n.id in local_names)

    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and (is_name(node.left)
                                                                   or is_name(node.comparators[0])):
            other = node.comparators[0] if is_name(node.left) else node.left
            for s in (string_list(other) or [string_constant(other)]):
                if s and "." in s and s not in names:
                    names.append(s)
    return local_names, names


def _mentions_module(conds, local_names):
    for test, _positive in conds:
        for n in ast.walk(test):
            if (isinstance(n, ast.Attribute) and n.attr == "__name__") or \
                    (isinstance(n, ast.Name) and n.id in local_names):
                return True
    return False


def _enclosing_function(node, parents):
    cur = parents.get(node)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = parents.get(cur)
    return cur


def _role(hook, conds, local, named):
    """Where and when one way of reaching an install runs: ``modules`` (those it can run for), ``gate``
    (switch variables of the conditions that decide it for one of them, the launcher excluded),
    ``tp4_only`` (it can run on the TP4 launcher and never on TP3)."""
    assigns, funcs = hook["_assigns"], hook["_funcs"]
    wrapped = hook["finder"]["modules"] + hook["finder"]["tp4_only"]
    candidates = wrapped + [m for m in hook["_named"] if m not in wrapped] if named else list(wrapped)
    modules, gate, on = [], [], {"tp3": False, "tp4": False}
    for m in candidates:
        if all_true(GateEnv({}, assigns, funcs, open_env=True, modname=m, local=local), conds) is False:
            continue
        modules.append(m)
        for test, positive in conds:
            t = GateEnv({}, assigns, funcs, open_env=True, modname=m, local=local).truth(test)
            if t is UNKNOWN:
                gate.extend(v for v in env_vars(test, assigns, funcs) if v != LAUNCHER_VAR and v not in gate)
        for launcher, env in LAUNCHERS:
            ev = GateEnv(env, assigns, funcs, open_env=True, closed=(LAUNCHER_VAR,), modname=m, local=local)
            if all_true(ev, conds) is not False and finder_wraps(hook, m, env, open_env=True) is not False:
                on[launcher] = True
    return {"conds": conds, "modules": modules, "gate": gate, "tp4_only": on["tp4"] and not on["tp3"]}


def read_hook(text, source="sitecustomize.py"):
    """The hook's structure (raises :class:`HookError` when the text is not Python).

    ``finder``: ``class``, ``modules`` (engine modules it wraps on the TP3 launcher, some perhaps only
    under a switch, in order), ``tp4_only`` (the ones it wraps only on the TP4 launcher), ``gate``
    (variables its insertion into sys.meta_path depends on; None: never inserted). ``installs``: per install
    call, ``function``, ``adapter`` (its first name), ``sources`` (the adapter modules it is imported from),
    ``line``, ``modules`` (the wrapped modules it can run for), ``module_named`` (a module test encloses
    it), ``gate`` (switch variables around it, DSV41_LAUNCHER excluded), ``tp4_only``.
    ``adapters``: per adapter name, ``modules``, ``gates``, ``ungated`` (some way of installing it has no
    switch gate), ``tp4_only`` (every one is), ``unwrapped`` (modules its branches name that the finder never
    wraps), ``lines``.
    """
    try:
        tree = ast.parse(str(text), filename=source)
    except SyntaxError as exc:
        raise HookError("%s: not valid Python (line %s: %s)" % (source, exc.lineno, exc.msg))
    assigns = module_assigns(tree)
    funcs = dict((d.name, d) for d in tree.body if isinstance(d, ast.FunctionDef))
    parents = parent_map(tree)
    hook = read_finder(tree, assigns, funcs, parents)
    finder = hook["finder"]
    local_names, named_modules = _module_name_refs(tree)
    hook["_named"] = named_modules
    wrapped = set(finder["modules"] + finder["tp4_only"])
    installs = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        site = _install_site(node, parents, tree)
        if site is None:
            continue
        function, ways = site
        fn_node = _enclosing_function(node, parents)
        local = local_assigns(fn_node) if fn_node is not None else {}
        call_conds = enclosing_conditions(node, parents)
        named = _mentions_module(call_conds, local_names)
        call_role = _role(hook, call_conds, local, named)
        roles = {}
        for way in ways:
            for n in way["names"]:
                # a name every way gives runs whichever import reached the call: the call's conditions
                everywhere = all(n in other["names"] for other in ways)
                role = call_role if everywhere or not way["conds"] else \
                    _role(hook, call_conds + way["conds"], local, named)
                if role not in roles.setdefault(n, []):
                    roles[n].append(role)
        installs.append({"function": function, "adapter": ways[0]["names"][0],
                         "sources": _dedupe(w["source"] for w in ways if w["source"]), "line": node.lineno,
                         "modules": call_role["modules"], "module_named": named, "gate": call_role["gate"],
                         "tp4_only": call_role["tp4_only"], "_conds": call_conds, "_local": local, "_roles": roles})
    installs.sort(key=lambda i: i["line"])
    adapters = {}
    for inst in installs:
        for name, roles in inst["_roles"].items():
            a = adapters.setdefault(name, {"modules": [], "gates": [], "ungated": False, "tp4_only": True,
                                           "unwrapped": [], "lines": []})
            for role in roles:
                for m in role["modules"]:
                    if m not in a["modules"]:
                        a["modules"].append(m)
                    if m not in wrapped and m not in a["unwrapped"]:
                        a["unwrapped"].append(m)
                a["gates"].extend(g for g in role["gate"] if g not in a["gates"])
                a["ungated"] = a["ungated"] or not role["gate"]
                a["tp4_only"] = a["tp4_only"] and role["tp4_only"]
            if inst["line"] not in a["lines"]:
                a["lines"].append(inst["line"])
    hook.update(installs=installs, adapters=adapters)
    return hook


def _dedupe(seq):
    out = []
    for s in seq:
        if s not in out:
            out.append(s)
    return out


def public(hook):
    """The hook as plain data (for a module result): the parser's private fields removed."""
    return {"finder": hook["finder"],
            "installs": [{k: v for k, v in i.items() if not k.startswith("_")} for i in hook["installs"]],
            "adapters": dict((k, dict(v)) for k, v in hook["adapters"].items())}
