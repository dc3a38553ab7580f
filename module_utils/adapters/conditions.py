# -*- coding: utf-8 -*-
"""The conditions of the launcher checkout's import hook (``adapter/sitecustomize.py``), read and evaluated.

A gate in a hook of this family is an ``if`` on the environment (``os.environ.get("DSV41_X", "0") not in
("0", "", "off", "false")``, ``os.getenv``, ``"X" in os.environ``), on the launcher (``DSV41_LAUNCHER=tp4``,
directly or through a one-expression helper such as ``def _tp4(): return ...``) or on the name of the engine
module being loaded (``module.__name__``, also through a local such as ``name = module.__name__``).

* :class:`GateEnv` evaluates one such expression against an environment and a module name, or says it cannot
  (:data:`UNKNOWN`); :func:`all_true` does so for every condition around a node;
* :func:`enclosing_conditions` gives the conditions around a node, :func:`env_vars` the variables a condition
  reads;
* the small readers they share: module-level and function-local single assignments, a scope's own nodes,
  string constants and literal collections of them.

Parsed with :mod:`ast`, never executed. The finder is read in ``import_hook_finder``, the install calls in
``import_hook``. Standard library only: Ansible ships this file to the target host next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast
import re

__metaclass__ = type

SWITCH_RE = re.compile(r"^(?:DSV41|SGLANG|DSPARK)_[A-Z0-9_]+$")
LAUNCHER_VAR = "DSV41_LAUNCHER"
# what a gate condition evaluates to when the text alone cannot say
UNKNOWN = object()
# the two launchers an answer is given for: TP3 (the variable unset) and TP4
LAUNCHERS = (("tp3", {}), ("tp4", {LAUNCHER_VAR: "tp4"}))

# the nodes that open a scope of their own
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def string_constant(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def string_list(node):
    """The string constants of a tuple/list/set/frozenset(...) literal, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("frozenset", "set", "tuple") \
            and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out = [string_constant(e) for e in node.elts]
        if all(s is not None for s in out):
            return out
    return None


def module_assigns(tree):
    """Module-level ``NAME = value`` (the last one wins, as at import)."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = stmt.value
    return out


def local_assigns(fn):
    """``NAME = value`` assigned exactly once in a function's own body (nested scopes excluded)."""
    seen, out = {}, {}
    for node in walk_scope(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    seen[t.id] = seen.get(t.id, 0) + 1
                    out[t.id] = node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            targets = [node.target] if hasattr(node, "target") else [i.optional_vars for i in node.items]
            for t in (n for target in targets if target is not None for n in ast.walk(target)):
                if isinstance(t, ast.Name):
                    seen[t.id] = seen.get(t.id, 0) + 2      # rebound: no single value
    return dict((k, v) for k, v in out.items() if seen.get(k) == 1)


def walk_scope(fn):
    """The nodes of a function's body, not descending into nested functions or classes."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def env_key(node):
    """``X`` for ``os.environ.get("X"...)``, ``os.getenv("X"...)``, ``os.environ["X"]``, ``environ.get("X")``."""
    if isinstance(node, ast.Call) and node.args:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(f.value):
            return string_constant(node.args[0])
        if isinstance(f, ast.Attribute) and f.attr == "getenv":
            return string_constant(node.args[0])
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        sl = node.slice
        if type(sl).__name__ == "Index":       # Python < 3.9
            sl = sl.value
        return string_constant(sl)
    return None


def _is_environ(node):
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def _helper_return(fn):
    """The returned expression of a one-statement helper (a leading docstring allowed), else None."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and string_constant(body[0].value) is not None:
        body = body[1:]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


class GateEnv:
    """Evaluates a gate condition against an environment, or says it cannot (returns UNKNOWN).

    ``env``: the variables set. A variable not in ``env`` reads as unset (its default applies), unless
    ``open_env``: then it is UNKNOWN, except the ones in ``closed``. ``modname``: the name of the engine
    module being loaded (what ``<name>.__name__`` reads; None: UNKNOWN). ``local``: the enclosing function's
    single assignments, ``bound``: names with a fixed value (a helper's parameters, find_spec's name).
    """

    def __init__(self, env, assigns, funcs=None, bound=None, open_env=False, closed=(), modname=None,
                 local=None):
        self.env = env
        self.assigns = assigns
        self.funcs = funcs or {}
        self.bound = bound or {}
        self.open_env = open_env
        self.closed = closed
        self.modname = modname
        self.local = local or {}

    def _lookup(self, key):
        if key in self.env:
            return True, self.env[key]
        if self.open_env and key not in self.closed:
            return True, UNKNOWN
        return False, None

    def _call_helper(self, node, depth):
        """A one-expression helper such as ``def _on(v): return os.environ.get(v, "0") not in (...)``."""
        fn = self.funcs.get(node.func.id)
        params = [a.arg for a in fn.args.args]
        expr = _helper_return(fn)
        if len(node.args) > len(params) or node.keywords or expr is None:
            return UNKNOWN
        bound = dict(zip(params, (self.value(a, depth + 1) for a in node.args)))
        defaults = fn.args.defaults
        for name, default in zip(params[len(params) - len(defaults):], defaults):
            bound.setdefault(name, self.value(default, depth + 1))
        if any(v is UNKNOWN for v in bound.values()) or len(bound) != len(params):
            return UNKNOWN
        return GateEnv(self.env, self.assigns, self.funcs, bound, self.open_env, self.closed,
                       self.modname).value(expr, depth + 1)

    def value(self, node, depth=0):
        if depth > 30:
            return UNKNOWN
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id in self.local:
                return self.value(self.local[node.id], depth + 1)
        if isinstance(node, ast.Attribute) and node.attr == "__name__" and isinstance(node.value, ast.Name):
            return UNKNOWN if self.modname is None else self.modname
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.funcs:
            return self._call_helper(node, depth)
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) \
                and (node.func.attr == "getenv" or (node.func.attr == "get" and _is_environ(node.func.value))):
            key = self.value(node.args[0], depth + 1)
            if not isinstance(key, str):
                return UNKNOWN
            found, val = self._lookup(key)
            if found:
                return val
            return self.value(node.args[1], depth + 1) if len(node.args) > 1 else None
        key = env_key(node)            # os.environ["X"]
        if key is not None:
            return self._lookup(key)[1]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.assigns:
            return self.value(self.assigns[node.id], depth + 1)
        seq = string_list(node)
        if seq is not None:
            return tuple(seq)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords:
            return self._str_method(node, depth)
        if isinstance(node, ast.BoolOp):
            vals = [self.truth(v, depth + 1) for v in node.values]
            if isinstance(node.op, ast.And):
                return False if False in vals else (UNKNOWN if UNKNOWN in vals else True)
            return True if True in vals else (UNKNOWN if UNKNOWN in vals else False)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            t = self.truth(node.operand, depth + 1)
            return UNKNOWN if t is UNKNOWN else not t
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node, depth)
        return UNKNOWN

    def _str_method(self, node, depth):
        meth, args = node.func.attr, node.args
        if meth not in ("strip", "lower", "upper", "startswith", "endswith"):
            return UNKNOWN
        inner = self.value(node.func.value, depth + 1)
        if not isinstance(inner, str):
            return UNKNOWN
        if meth in ("strip", "lower", "upper"):
            return getattr(inner, meth)() if not args else UNKNOWN
        if len(args) != 1:
            return UNKNOWN
        arg = self.value(args[0], depth + 1)
        if isinstance(arg, str) or (isinstance(arg, tuple) and all(isinstance(a, str) for a in arg)):
            return getattr(inner, meth)(arg)
        return UNKNOWN

    def _compare(self, node, depth):
        op, right_node = node.ops[0], node.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)) and _is_environ(right_node):     # "X" in os.environ
            key = self.value(node.left, depth + 1)
            if not isinstance(key, str):
                return UNKNOWN
            found, val = self._lookup(key)
            if val is UNKNOWN:
                return UNKNOWN
            return found == isinstance(op, ast.In)
        left, right = self.value(node.left, depth + 1), self.value(right_node, depth + 1)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        try:
            if isinstance(op, ast.Eq):
                return left == right
            if isinstance(op, ast.NotEq):
                return left != right
            if isinstance(op, ast.In):
                return left in right
            if isinstance(op, ast.NotIn):
                return left not in right
            if isinstance(op, ast.Is):
                return left is right if right is None or left is None else UNKNOWN
            if isinstance(op, ast.IsNot):
                return left is not right if right is None or left is None else UNKNOWN
        except TypeError:
            return UNKNOWN
        return UNKNOWN

    def truth(self, node, depth=0):
        v = self.value(node, depth)
        return v if v is UNKNOWN else bool(v)


def all_true(ev, conds):
    """AND of ``[(test, positive), ...]`` under ``ev``: True, False or UNKNOWN."""
    out = True
    for cond in conds:
        t = ev.truth(cond[0])
        if t is not UNKNOWN and not cond[1]:
            t = not t
        if t is False:
            return False
        if t is UNKNOWN:
            out = UNKNOWN
    return out


def env_vars(node, assigns, funcs=None, depth=0):
    """Environment variables a condition reads (through module-level names and helpers too)."""
    out = []
    funcs = funcs or {}

    def add(keys):
        out.extend(k for k in keys if k not in out)

    for sub in ast.walk(node):
        key = env_key(sub)
        if key is not None:
            add([key])
        elif isinstance(sub, ast.Name) and sub.id in assigns and depth < 5:
            add(env_vars(assigns[sub.id], assigns, funcs, depth + 1))
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            s = string_constant(sub.args[0]) if sub.args else None     # a helper such as _on("DSV41_X")
            if s and SWITCH_RE.match(s):
                add([s])
            fn = funcs.get(sub.func.id)
            if fn is not None and depth < 5:
                expr = _helper_return(fn)
                if expr is not None:
                    add(env_vars(expr, assigns, funcs, depth + 1))
    return out


def parent_map(tree):
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def enclosing_conditions(node, parents, owners=False):
    """``[(test, positive)]`` of every enclosing ``if`` (positive: the node is in its body, not its else);
    with ``owners``, ``[(test, positive, if_node)]``."""
    out = []
    child, cur = node, parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.If) and child is not cur.test:
            out.append((cur.test, child in cur.body, cur))
        elif isinstance(cur, ast.IfExp) and child is not cur.test:
            out.append((cur.test, child is cur.body, cur))
        child, cur = cur, parents.get(cur)
    out = out[::-1]
    return out if owners else [c[:2] for c in out]
