# -*- coding: utf-8 -*-
"""``--format`` templates for the docker stand-in of the launch sandbox, as text (part of the stand-in
program written by ``module_utils/launcher/sandbox.py``; see ``module_utils/launcher/docker.py``).

The stand-in answers read-only queries (``inspect``, ``ps``, ``images``, ``version``, ``info``) with
docker's own data and renders ``-f``/``--format`` itself, because a sandboxed container or an image the
daemon could not be asked about has no daemon to render it. Supported: literal text; ``{{.}}`` and
field paths ``{{.A.B}}``; the functions ``json``, ``index`` (map key or list position), ``join``,
``lower``, ``upper``; pipelines (``{{.A | json}}``); trim markers (``{{-``, ``-}}``); the ``table``
prefix of list commands. Anything else (``range``, ``if``, variables, other functions), a field the
data does not hold (except a missing key of a map the daemon returned, ``Labels`` say, which docker prints
as ``<no value>``) or a value whose print depends on a Go type the JSON no longer shows (objects,
``null``) raises :class:`Unrenderable`, and the stand-in stops the evaluation naming the template:
an answer it cannot render faithfully is never given. Standard library only.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

FORMAT = r'''
# ---- docker --format (Go text/template, the part launchers use) -------------------------------
class Unrenderable(Exception):
    pass


NO_VALUE = "<no value>"
_ACTION_RE = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN_RE = re.compile(r'\s*(?:(\|)|("(?:[^"\\]|\\.)*")|(`[^`]*`)|(-?[0-9]+)(?![0-9A-Za-z_.])|'
                       r'(\.(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)?)|([A-Za-z_][A-Za-z0-9_]*)|(\S))')


# Objects that are maps in docker's own types: a key they lack prints <no value>, as text/template prints it.
MAPS = frozenset(["Labels", "Networks", "Volumes", "ExposedPorts", "Ports", "Options", "DriverOpts"])


class _Missing(object):
    """A key an object from the daemon does not hold: docker prints ``<no value>``."""


MISSING = _Missing()


def go_str(value, why):
    if value is MISSING:
        return NO_VALUE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, bool)) and v is not None for v in value):
        return "[" + " ".join(go_str(v, why) for v in value) + "]"
    raise Unrenderable("%s is %s, which docker prints by its Go type (use json)" % (why, json.dumps(value)[:80]))


def go_json(value):
    if value is MISSING:
        return "null"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _field(obj, path, lenient):
    value, parent = obj, None
    for name in [p for p in path.split(".") if p]:
        if isinstance(value, dict) and name in value:
            value, parent = value[name], name
        elif isinstance(value, dict) and lenient and parent in MAPS:
            value, lenient = MISSING, False     # a field of a missing key cannot be evaluated, by docker either
        else:
            raise Unrenderable("the data holds no field %s (docker prints a field it leaves out of its JSON by its "
                               "Go type)" % path)
    return value


def _index(value, *keys):
    for key in keys:
        if isinstance(value, dict) and isinstance(key, str) or value is None and isinstance(key, str):
            value = (value or {}).get(key, "")          # docker's maps are typed: a missing key is ""
        elif isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
            value = value[key]
        else:
            raise Unrenderable("index %r of %s" % (key, json.dumps(value)[:80]))
    return value


def _join(items, sep):
    if not isinstance(items, list) or not isinstance(sep, str):
        raise Unrenderable("join of %s" % json.dumps(items)[:80])
    return sep.join(go_str(i, "an item") for i in items)


def _case(fn):
    def f(value):
        return fn(go_str(value, "the argument"))
    return f


FUNCS = {"json": go_json, "index": _index, "join": _join, "lower": _case(str.lower), "upper": _case(str.upper)}


def _tokens(text):
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        pipe, dq, bq, num, path, ident, other = m.groups()
        if pipe:
            out.append(("|", None))
        elif dq is not None:
            out.append(("lit", json.loads(dq)))
        elif bq is not None:
            out.append(("lit", bq[1:-1]))
        elif num is not None:
            out.append(("lit", int(num)))
        elif path is not None:
            out.append(("path", path))
        elif ident is not None:
            out.append(("fn", ident))
        elif other is not None:
            raise Unrenderable("%r is not an action the sandbox renders" % other)
    return out


def _action(text, obj, lenient):
    value, started = None, False
    for command in _split_pipes(_tokens(text)):
        if not command:
            raise Unrenderable("an empty command")
        kind, head = command[0]
        if kind == "fn":
            if head not in FUNCS:
                raise Unrenderable("%r is not a function (or action) the sandbox renders" % head)
            args = [_operand(t, obj, lenient) for t in command[1:]] + ([value] if started else [])
            try:
                value = FUNCS[head](*args)
            except TypeError:
                raise Unrenderable("%s takes other arguments" % head)
        elif len(command) == 1 and not started:
            value = _operand(command[0], obj, lenient)
        else:
            raise Unrenderable("only a function takes arguments")
        started = True
    if not started:
        raise Unrenderable("an empty action")
    return value


def _split_pipes(tokens):
    commands = [[]]
    for tok in tokens:
        if tok[0] == "|":
            commands.append([])
        else:
            commands[-1].append(tok)
    return commands


def _operand(tok, obj, lenient):
    kind, value = tok
    if kind == "path":
        return _field(obj, value, lenient)
    if kind == "lit":
        return value
    raise Unrenderable("%r as an argument" % value)


def render(template, obj, lenient=False):
    """``template`` executed on ``obj``; ``lenient``: obj came from the daemon's inspect JSON, where a key
    missing from one of its maps prints ``<no value>`` as docker prints it. Raises :class:`Unrenderable`
    (naming the template)."""
    out, pos = [], 0
    try:
        for m in _ACTION_RE.finditer(template):
            text = template[pos:m.start()]
            out.append(text.rstrip() if m.group(1) else text)
            pos = m.end()
            value = _action(m.group(2), obj, lenient)
            out.append(value if isinstance(value, str) and value is not MISSING else go_str(value, m.group(0)))
            if m.group(3):
                rest = template[pos:]
                pos += len(rest) - len(rest.lstrip())
        tail = template[pos:]
        if "{{" in tail or "}}" in tail:
            raise Unrenderable("an unclosed action")
    except Unrenderable as exc:
        raise Unrenderable("%r: %s" % (template, exc))
    return "".join(out) + tail


def tabwrite(lines, minwidth=10, padding=3):
    """text/tabwriter as docker sets it up for tables (minimum width 10, padding 3, spaces)."""
    rows = [line.split("\t") for line in lines]
    widths = {}
    for r in rows:
        for c, cell in enumerate(r[:-1]):
            widths[c] = max(widths.get(c, minwidth), len(cell) + padding)
    return ["".join(cell.ljust(widths[c]) for c, cell in enumerate(r[:-1])) + r[-1] for r in rows]


def render_rows(template, rows, header):
    """A list command's output lines: ``table`` (a header row, aligned columns), ``\\t`` and ``\\n``."""
    table = template.startswith("table")
    if table:
        template = template[len("table"):].strip() or header["default"]
    template = template.replace("\\t", "\t").replace("\\n", "\n")
    lines = []
    for row in ([header] if table else []) + rows:
        lines.extend(render(template, row).split("\n"))
    return tabwrite(lines) if table else lines
'''
