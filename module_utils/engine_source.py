# -*- coding: utf-8 -*-
"""An engine image's Python source, read by its structure, and what the local adapters need of it.

A canary image (SPEC section 4, stage I) may only be timed once three things hold, each judged here from
source text read out of the images (never executed):

* **hook signatures**: every engine symbol a registered adapter touches (reads, wraps or assigns) exists in
  the candidate image with the parameter list it has in the running image, where the adapter is known to
  work; and every module the import hook's finder wraps exists (a missing one silently never arms);
* **the G=4 guard**: a shape guard in the model's dispatch that admits only another group count (the pinned
  canary's small-row path wants ``(2, 1024, 4096)`` weights; TP3 has G=4 local groups) must be replaced by an
  adapter in the image, or TP3 never takes the fast path;
* **vocab padding**: the candidate pads the vocabulary like the running image, so every rank keeps the
  same number of vocab rows (129,280 padded for TP3 to 43,136 rows a rank with the padding of 64).

Targets are ``(module, (attr, ...))`` pairs; ``from pkg import name`` is resolved against the image's files
(a submodule when ``pkg/name.py`` exists, else a symbol of ``pkg``). Standard library only: Ansible ships
this file to the target host next to the module.
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
        while attrs and self.module(module + "." + attrs[0]) is not None:
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


def _qualname(parents, node):
    names = []
    cur = parents.get(node)
    while cur is not None:
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(cur.name)
        cur = parents.get(cur)
    return tuple(reversed(names))


def _is_shape(node):
    """``x.shape`` or ``tuple(x.shape)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tuple" and node.args:
        node = node.args[0]
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def shape_guards(tree):
    """[(qualname, line, dims)]: every ``<x>.shape == (int, int, int)`` comparison (either side)."""
    parents = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            parents[c] = p
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.In)) for op in node.ops):
            continue
        sides = [node.left] + list(node.comparators)
        if not any(_is_shape(s) for s in sides):
            continue
        for s in sides:
            if isinstance(s, ast.Tuple) and len(s.elts) == 3 \
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in s.elts):
                out.append((_qualname(parents, node), node.lineno, tuple(e.value for e in s.elts)))
    return out


def g4_guard(candidate, guard_module, local_groups, patched):
    """Problems and rows: each 3-dim weight-shape guard in ``guard_module`` of the candidate whose group count
    is not ``local_groups`` must sit in a function some adapter of the image replaces (``patched``: dotted
    names, however the adapter imported the module)."""
    got = candidate.module(guard_module)
    if got is None:
        return ["%s has no %s: the G=%d dispatch cannot be judged" % (candidate.label, guard_module, local_groups)], []
    tree, _pkg, rel = got
    problems, rows = [], []
    for qual, line, dims in shape_guards(tree):
        replaced = bool(qual) and dotted((guard_module, qual)) in patched
        ok = dims[0] == local_groups or replaced
        rows.append({"where": "%s:%d" % (rel, line), "function": ".".join(qual) or "(module)",
                     "weights": "(%s)" % ", ".join(str(d) for d in dims),
                     "verdict": "ok" if ok else "FAIL",
                     "why": "admits G=%d" % local_groups if dims[0] == local_groups
                     else ("replaced by an adapter" if replaced else "admits only G=%d" % dims[0])})
        if not ok:
            problems.append(
                "%s %s:%d: %s enters its small-row path only for weights (%s); TP3 has G=%d local groups and no "
                "adapter in the image replaces %s (carry a G=%d dispatch)" % (
                    candidate.label, rel, line, ".".join(qual) or "the module", ", ".join(str(d) for d in dims),
                    local_groups, dotted((guard_module, qual)), local_groups))
    return problems, rows


def rows_per_rank(vocab_size, padding, tp_size):
    """Vocab rows a rank holds when the vocabulary is padded so that it splits evenly in ``padding`` steps."""
    step = padding * tp_size
    return -(-vocab_size // step) * step // tp_size


def vocab_padding_size(engine, vocab_module):
    """The image's DEFAULT_VOCAB_PADDING_SIZE (an int) or a reason it cannot be read (a str)."""
    node, where = engine.find((vocab_module, (VOCAB_PADDING_NAME,)))
    if node is None:
        return "%s: %s" % (engine.label, where)
    value = getattr(node, "value", None)
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and value.value > 0:
        return value.value
    return "%s: %s is not a positive int literal (%s)" % (engine.label, VOCAB_PADDING_NAME, where)


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
                 tp_size):
    """Every check of a candidate image: {check: {"problems": [...], "rows": [...]}}.

    ``hook`` is :func:`import_hook.read_hook` of the candidate's ``sitecustomize.py``; ``adapter_texts``
    {adapter: text or None} the files of the adapters it installs on TP3 (None: missing from the image).
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
    patched = set(dotted(t) for per in targets.values() for t, how in per.items() if how == "patched")
    guard, guard_rows = g4_guard(candidate, guard_module, local_groups, patched)
    vocab, vocab_rows = vocab_padding(candidate, reference, vocab_module, vocab_size, tp_size)
    return {"hook_signatures": {"problems": problems + hooks, "rows": hook_rows},
            "g4_guard": {"problems": guard, "rows": guard_rows},
            "vocab_padding": {"problems": vocab, "rows": vocab_rows}}
