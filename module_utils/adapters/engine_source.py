# -*- coding: utf-8 -*-
"""An engine image's Python source, read by its structure (never executed), and what an adapter touches in it.

:func:`adapter_targets` lists the engine symbols an adapter file reads, wraps or assigns, as ``(module,
(attr, ...))`` pairs (``from pkg import name`` is resolved against the image's files: a submodule when
``pkg/name.py`` exists, else a symbol of ``pkg``); :class:`Engine` finds a symbol's definition in one image
(through package re-exports) and :func:`describe` gives its parameter list; :func:`shape_guards` the
weight-shape guards of a module; :func:`vocab_padding_size` the image's vocab padding. The checks a pinned
image must pass are in :mod:`engine_image_checks`. Standard library only: Ansible ships this file to the
target host next to the module.
"""
from __future__ import absolute_import, division, print_function

import ast

__metaclass__ = type

ENGINE_PACKAGE = "sglang"
VOCAB_PADDING_NAME = "DEFAULT_VOCAB_PADDING_SIZE"


class SourceError(Exception):
    """A file that is not Python."""


def parse(text, source):
    try:
        return ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise SourceError("%s: not valid Python (line %s: %s)" % (source, exc.lineno, exc.msg))


def module_files(module):
    """Relative paths a module may live at: ``a/b.py`` or ``a/b/__init__.py``."""
    rel = module.replace(".", "/")
    return [rel + ".py", rel + "/__init__.py"]


def dotted(target):
    """``module.attr.attr`` (how a reader names it; where the module ends is the image's business)."""
    module, attrs = target
    return ".".join((module,) + tuple(attrs))


# --- what an adapter touches ---------------------------------------------------------------------------

class _Touches(ast.NodeVisitor):
    """Engine targets reached through imported names and their aliases (flow-insensitive, per file)."""

    def __init__(self):
        self.alias = {}             # local name -> (module, attrs)
        self.found = {}             # (module, attrs) -> "patched" | "read"

    def _resolve(self, node):
        if isinstance(node, ast.Name):
            return self.alias.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            if base is not None:
                return (base[0], base[1] + (node.attr,))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self._resolve(node.args[0])
            if base is not None:
                return (base[0], base[1] + (node.args[1].value,))
        return None

    def _note(self, target, how):
        if target is not None and target[0].split(".")[0] == ENGINE_PACKAGE:
            if self.found.get(target) != "patched":
                self.found[target] = how

    def visit_Import(self, node):
        for a in node.names:
            if a.asname:
                self.alias[a.asname] = (a.name, ())

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module and node.module.split(".")[0] == ENGINE_PACKAGE:
            for a in node.names:
                if a.name != "*":
                    self.alias[a.asname or a.name] = (node.module, (a.name,))
                    self._note((node.module, (a.name,)), "read")

    def visit_Assign(self, node):
        value = self._resolve(node.value)
        for t in node.targets:
            if isinstance(t, ast.Name) and value is not None:
                self.alias[t.id] = value
            elif isinstance(t, ast.Attribute):
                self._note(self._resolve(t), "patched")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load):
            self._note(self._resolve(node), "read")
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            self._note(self._resolve(node), "patched" if node.func.id == "setattr" else "read")
        self.generic_visit(node)


def adapter_targets(text, source):
    """{(module, attrs): "patched" | "read"}: the engine symbols an adapter file touches, leaves only (a
    class reached on the way to its method is implied by the method)."""
    visitor = _Touches()
    tree = parse(text, source)
    for _ in range(2):              # aliases assigned after their first use inside nested functions
        visitor.visit(tree)
    found = visitor.found
    leaves = {}
    for t, how in found.items():
        longer = any(o[0] == t[0] and len(o[1]) > len(t[1]) and o[1][:len(t[1])] == t[1] for o in found)
        if how == "patched" or not longer:
            leaves[t] = how
    return leaves


# --- the engine side -----------------------------------------------------------------------------------

def _params(args):
    """A parameter list as text without default values: ``self, x, *args, y=…, **kw``."""
    out = []
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    first_default = len(positional) - len(args.defaults)
    for i, a in enumerate(positional):
        out.append(a.arg + ("=…" if i >= first_default else ""))
        if getattr(args, "posonlyargs", None) and i == len(args.posonlyargs) - 1:
            out.append("/")
    if args.vararg:
        out.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        out.append("*")
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(a.arg + ("=…" if d is not None else ""))
    if args.kwarg:
        out.append("**" + args.kwarg.arg)
    return ", ".join(out)


def describe(node):
    """What a definition looks like to a caller: ``def (self, x)``, ``class``, ``value``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "def (%s)" % _params(node.args)
    if isinstance(node, ast.ClassDef):
        return "class"
    return "value"


def _defined(body, name):
    """The last statement of ``body`` defining ``name`` (def, class, assignment), else None."""
    hit = None
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            hit = stmt
        elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            hit = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            hit = stmt
    return hit


def _reexports(tree, module, is_package, name):
    """Modules ``name`` may come from through ``from .x import name`` / ``from .x import *``: [(module, name)]."""
    out = []
    package = module if is_package else module.rpartition(".")[0]
    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom):
            continue
        if stmt.level:
            base = package.rsplit(".", stmt.level - 1)[0] if stmt.level > 1 else package
            src = base + ("." + stmt.module if stmt.module else "")
        else:
            src = stmt.module or ""
        for a in stmt.names:
            if a.name == "*" or (a.asname or a.name) == name:
                out.append((src, name if a.name == "*" else a.name))
    return out


class Engine:
    """One image's engine source: ``read(relpath)`` gives a file's text or None."""

    def __init__(self, read, label):
        self.read, self.label, self._trees = read, label, {}

    def module(self, module):
        """(tree, is_package, relpath) of a module, or None when the image has no such file."""
        if module not in self._trees:
            self._trees[module] = None
            for i, rel in enumerate(module_files(module)):
                text = self.read(rel)
                if text is not None:
                    self._trees[module] = (parse(text, "%s:%s" % (self.label, rel)), i == 1, rel)
                    break
        return self._trees[module]

    def find(self, target, depth=0):
        """The definition of ``(module, attrs)`` as (node, where) or (None, why)."""
        module, attrs = target
        # descend into submodules while the name can be one: a plain module file has none, so a class or
        # function under it is never looked for as a file (each look is a one-off container on the node)
        while attrs and (self.module(module) or (None, True))[1] and self.module(module + "." + attrs[0]) is not None:
            module, attrs = module + "." + attrs[0], attrs[1:]
        got = self.module(module)
        if got is None:
            return None, "no module %s" % module
        tree, is_package, rel = got
        if not attrs:
            return tree, rel
        node = _defined(tree.body, attrs[0])
        if node is None and depth < 4:
            for src, name in _reexports(tree, module, is_package, attrs[0]):
                hit, where = self.find((src, (name,) + attrs[1:]), depth + 1)
                if hit is not None:
                    return hit, where
        if node is None:
            return None, "%s has no %s" % (rel, attrs[0])
        for i, name in enumerate(attrs[1:], 1):
            inner = _defined(node.body, name) if isinstance(node, ast.ClassDef) else None
            if inner is None:
                return None, "%s has no %s" % (rel, ".".join(attrs[:i + 1]))
            node = inner
        return node, "%s:%s" % (rel, getattr(node, "lineno", "?"))


def _qualname(parents, node):
    names = []
    cur = parents.get(node)
    while cur is not None:
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(cur.name)
        cur = parents.get(cur)
    return tuple(reversed(names))


def _unwrap(node, names):
    """The argument of ``name(arg)`` (``tuple``, ``list``, ``torch.Size``...) when ``node`` is such a call."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in names:
            return node.args[0]
    return node


def _is_shape(node):
    """``x.shape``, ``x.size()``, or either through ``tuple()`` / ``list()``."""
    node = _unwrap(node, ("tuple", "list"))
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) and node.func.attr == "size":
        return True
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _three_dims(node):
    """The 3-int shapes a literal side names: ``(2, 1024, 4096)``, a list, ``torch.Size(...)``, or a tuple /
    list / set of such shapes (an ``in`` guard admitting several)."""
    node = _unwrap(node, ("Size",))
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return []
    if len(node.elts) == 3 and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
        return [tuple(e.value for e in node.elts)]
    if isinstance(node, ast.Set) or any(isinstance(_unwrap(e, ("Size",)), (ast.Tuple, ast.List)) for e in node.elts):
        return [d for e in node.elts for d in _three_dims(e)]
    return []


def shape_guards(tree):
    """[(qualname, line, [dims, ...])]: every comparison of a shape with 3-int literal shapes (``==``, ``!=``,
    ``in``, ``not in``, either side); a guard admitting several shapes lists them all."""
    parents = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            parents[c] = p
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) \
                or not any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        sides = [node.left] + list(node.comparators)
        if not any(_is_shape(s) for s in sides):
            continue
        dims = [d for s in sides for d in _three_dims(s)]
        if dims:
            out.append((_qualname(parents, node), node.lineno, dims))
    return out


def vocab_padding_size(engine, vocab_module):
    """The image's DEFAULT_VOCAB_PADDING_SIZE (an int) or a reason it cannot be read (a str)."""
    node, where = engine.find((vocab_module, (VOCAB_PADDING_NAME,)))
    if node is None:
        return "%s: %s" % (engine.label, where)
    value = getattr(node, "value", None)
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and value.value > 0:
        return value.value
    return "%s: %s is not a positive int literal (%s)" % (engine.label, VOCAB_PADDING_NAME, where)
