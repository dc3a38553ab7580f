# -*- coding: utf-8 -*-
"""The launcher checkout's import hook (``adapter/sitecustomize.py``), read by its structure.

Real hooks of this family (SPEC section 3, "Launcher and containers") insert a finder into
``sys.meta_path`` only when a variable such as ``DSV41_SOURCE`` is set; the finder wraps a fixed list
of engine module names, and the loader of each wrapped module calls ``install_<adapter>(module)``
functions after the engine module has executed: some inside a switch gate
(``if os.environ.get("DSV41_X", "0") not in ("0", "", "off", "false"):``), some unconditionally (the
adapter then reads its switch itself), some only on the TP4 launcher (``DSV41_LAUNCHER=tp4``). One
adapter may hook several modules. Parsed with :mod:`ast`, never executed, so formatting does not matter.

:func:`read_hook` gives the structure; whether a declared switch arms an adapter is judged from it in
``import_hook_arming`` (:func:`arming`, :func:`hook_problems`).
Standard library only: Ansible ships this file to the target host next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast
import re

__metaclass__ = type

SWITCH_RE = re.compile(r"^(?:DSV41|SGLANG|DSPARK)_[A-Z0-9_]+$")
LAUNCHER_VAR = "DSV41_LAUNCHER"
INSTALL_PREFIX = "install_"
# what a gate condition evaluates to when the text alone cannot say
UNKNOWN = object()


class HookError(Exception):
    """The import hook cannot be read (not Python)."""


def string_constant(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _strings(node):
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


def _module_assigns(tree):
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


def _env_key(node):
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


class GateEnv:
    """Evaluates a gate condition against an environment, or says it cannot (returns UNKNOWN)."""

    def __init__(self, env, assigns, funcs=None, bound=None):
        self.env = env
        self.assigns = assigns
        self.funcs = funcs or {}
        self.bound = bound or {}

    def _call_helper(self, node, depth):
        """A one-expression helper such as ``def _on(v): return os.environ.get(v, "0") not in (...)``."""
        fn = self.funcs.get(node.func.id)
        params = [a.arg for a in fn.args.args]
        if len(node.args) > len(params) or node.keywords or len(fn.body) != 1 \
                or not isinstance(fn.body[0], ast.Return) or fn.body[0].value is None:
            return UNKNOWN
        bound = dict(zip(params, (self.value(a, depth + 1) for a in node.args)))
        defaults = fn.args.defaults
        for name, default in zip(params[len(params) - len(defaults):], defaults):
            bound.setdefault(name, self.value(default, depth + 1))
        if UNKNOWN in bound.values() or len(bound) != len(params):
            return UNKNOWN
        return GateEnv(self.env, self.assigns, self.funcs, bound).value(fn.body[0].value, depth + 1)

    def value(self, node, depth=0):
        if depth > 20:
            return UNKNOWN
        if isinstance(node, ast.Name) and node.id in self.bound:
            return self.bound[node.id]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.funcs:
            return self._call_helper(node, depth)
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) \
                and (node.func.attr == "getenv" or (node.func.attr == "get" and _is_environ(node.func.value))):
            key = self.value(node.args[0], depth + 1)
            if not isinstance(key, str):
                return UNKNOWN
            if key in self.env:
                return self.env[key]
            return self.value(node.args[1], depth + 1) if len(node.args) > 1 else None
        key = _env_key(node)            # os.environ["X"]
        if key is not None:
            return self.env.get(key)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.assigns:
            return self.value(self.assigns[node.id], depth + 1)
        seq = _strings(node)
        if seq is not None:
            return tuple(seq)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args \
                and node.func.attr in ("strip", "lower", "upper"):
            inner = self.value(node.func.value, depth + 1)
            return getattr(inner, node.func.attr)() if isinstance(inner, str) else UNKNOWN
        if isinstance(node, ast.BoolOp):
            vals = [self.truth(v, depth + 1) for v in node.values]
            if isinstance(node.op, ast.And):
                return False if False in vals else (UNKNOWN if UNKNOWN in vals else True)
            return True if True in vals else (UNKNOWN if UNKNOWN in vals else False)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            t = self.truth(node.operand, depth + 1)
            return UNKNOWN if t is UNKNOWN else not t
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.value(node.left, depth + 1), self.value(node.comparators[0], depth + 1)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            op = node.ops[0]
            try:
                if isinstance(op, ast.Eq):
                    return left == right
                if isinstance(op, ast.NotEq):
                    return left != right
                if isinstance(op, ast.In):
                    return left in right
                if isinstance(op, ast.NotIn):
                    return left not in right
            except TypeError:
                return UNKNOWN
        return UNKNOWN

    def truth(self, node, depth=0):
        v = self.value(node, depth)
        return v if v is UNKNOWN else bool(v)


def _env_vars(node, assigns, depth=0):
    """Environment variables a condition reads (through module-level names too)."""
    out = []
    for sub in ast.walk(node):
        key = _env_key(sub)
        if key is not None and key not in out:
            out.append(key)
        elif isinstance(sub, ast.Name) and sub.id in assigns and depth < 5:
            out.extend(k for k in _env_vars(assigns[sub.id], assigns, depth + 1) if k not in out)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.args:
            s = string_constant(sub.args[0])          # a helper such as _on("DSV41_X")
            if s and SWITCH_RE.match(s) and s not in out:
                out.append(s)
    return out


def _finder_modules(tree, assigns):
    """The module names the finder wraps: the collection ``find_spec`` tests its ``fullname`` against."""
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "find_spec"):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                    target = node.comparators[0]
                    if isinstance(target, ast.Name) and target.id in assigns:
                        target = assigns[target.id]
                    names = _strings(target)
                    if names is not None:
                        return names, cls.name
    return None, None


def _finder_gate(tree, assigns, parents):
    """Variables gating the ``sys.meta_path.insert/append(...)`` of the finder (None: no insert found)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("insert", "append") and isinstance(node.func.value, ast.Attribute) \
                and node.func.value.attr == "meta_path":
            conds = _conditions(node, parents)
            gate = []
            for test, _positive in conds:
                gate.extend(v for v in _env_vars(test, assigns) if v not in gate)
            return gate
    return None


def _module_names(test, known):
    """Engine module names a condition tests (the loader's dispatch on the wrapped module's name)."""
    consts = [s for s in (string_constant(n) for n in ast.walk(test)) if s and "." in s and not SWITCH_RE.match(s)]
    return [s for s in consts if s in known or s.startswith("sglang.")]


def _parents(tree):
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def _conditions(node, parents):
    """``[(test, positive)]`` of every enclosing ``if`` (positive: the node is in its body, not its else)."""
    out = []
    child, cur = node, parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.If) and child is not cur.test:
            out.append((cur.test, child in cur.body))
        elif isinstance(cur, ast.IfExp) and child is not cur.test:
            out.append((cur.test, child is cur.body))
        child, cur = cur, parents.get(cur)
    return out[::-1]


def _install_name(call):
    f = call.func
    name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else None)
    if name and name.startswith(INSTALL_PREFIX) and len(name) > len(INSTALL_PREFIX):
        return name
    return None


def read_hook(text, source="sitecustomize.py"):
    """The hook's structure (raises :class:`HookError` when the text is not Python).

    ``finder``: ``class``, ``modules`` (wrapped engine modules, in order), ``gate`` (variables its insertion
    into sys.meta_path depends on; None: never inserted). ``installs``: per ``install_*`` call, ``function``,
    ``adapter``, ``line``, ``modules`` (the wrapped modules whose branch it is in; all when no module test
    encloses it), ``gate`` (switch variables around it, DSV41_LAUNCHER excluded), ``tp4_only``.
    ``adapters``: per adapter, ``modules``, ``gates``, ``ungated`` (some call has no switch gate),
    ``tp4_only`` (every call is), ``unwrapped`` (modules its branches name that the finder does not wrap).
    """
    try:
        tree = ast.parse(str(text), filename=source)
    except SyntaxError as exc:
        raise HookError("%s: not valid Python (line %s: %s)" % (source, exc.lineno, exc.msg))
    assigns = _module_assigns(tree)
    funcs = dict((d.name, d) for d in tree.body if isinstance(d, ast.FunctionDef))
    parents = _parents(tree)
    modules, cls = _finder_modules(tree, assigns)
    finder = {"class": cls, "modules": list(modules or []), "gate": _finder_gate(tree, assigns, parents)}
    known = set(finder["modules"])
    installs = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fname = _install_name(node)
        if fname is None:
            continue
        cur = parents.get(node)
        while cur is not None and not (isinstance(cur, ast.FunctionDef) and cur.name == fname):
            cur = parents.get(cur)
        if cur is not None:     # a call inside its own definition is not an install site
            continue
        named, gate, tp4, conds = [], [], False, []
        for test, positive in _conditions(node, parents):
            mods = _module_names(test, known)
            conds.append((test, positive, bool(mods)))
            if mods:
                if positive:
                    named = mods if not named else [m for m in named if m in mods]
                continue
            env = _env_vars(test, assigns)
            if LAUNCHER_VAR in env:
                on4 = GateEnv({LAUNCHER_VAR: "tp4"}, assigns, funcs).truth(test)
                on3 = GateEnv({}, assigns, funcs).truth(test)
                if not positive:
                    on4, on3 = [v if v is UNKNOWN else not v for v in (on4, on3)]
                if on4 is True and on3 is False:
                    tp4 = True
            gate.extend(v for v in env if v != LAUNCHER_VAR and v not in gate)
        installs.append({"function": fname, "adapter": fname[len(INSTALL_PREFIX):], "line": node.lineno,
                         "modules": named or list(finder["modules"]), "module_named": bool(named),
                         "gate": gate, "tp4_only": tp4, "_conds": conds})
    installs.sort(key=lambda i: i["line"])
    adapters = {}
    for inst in installs:
        a = adapters.setdefault(inst["adapter"], {"modules": [], "gates": [], "ungated": False, "tp4_only": True,
                                                  "unwrapped": [], "lines": []})
        for m in inst["modules"]:
            if m not in a["modules"]:
                a["modules"].append(m)
            if m not in known and m not in a["unwrapped"]:
                a["unwrapped"].append(m)
        a["gates"].extend(g for g in inst["gate"] if g not in a["gates"])
        a["ungated"] = a["ungated"] or not inst["gate"]
        a["tp4_only"] = a["tp4_only"] and inst["tp4_only"]
        a["lines"].append(inst["line"])
    hook = {"finder": finder, "installs": installs, "adapters": adapters, "_assigns": assigns, "_funcs": funcs}
    return hook


def public(hook):
    """The hook as plain data (for a module result): the parser's private fields removed."""
    return {"finder": hook["finder"],
            "installs": [{k: v for k, v in i.items() if not k.startswith("_")} for i in hook["installs"]],
            "adapters": dict((k, dict(v)) for k, v in hook["adapters"].items())}
