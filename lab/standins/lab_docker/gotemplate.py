"""--format: the templates the project uses, nothing more.

What the roles, modules, lab scripts and tests ask of docker: ``{{json .}}`` (ps, stats:
module_utils/host/docker_ps.py) and field paths with literal text between them (``{{.State.Status}}``,
``{{.Names}} {{.State}}``, ``{{.Name}} {{.State.Status}} {{.State.StartedAt}} {{.Id}}``); ``{{json
.Path}}`` reads one part of ``docker inspect`` whole. The default outputs are ``table`` formats.
Any other action (range, if, index, functions) is refused naming the format, so a new use is
added here on purpose instead of being half-supported."""
import json
import re

from .base import DockerError


class TemplateError(DockerError):
    pass


_ACTION_RE = re.compile(r"\{\{(.*?)\}\}", re.S)
_PATH_RE = re.compile(r"\.|(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def go_str(v):
    """Go's fmt %v for the values a field path can reach."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(go_str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join("%s:%s" % (k, go_str(v[k])) for k in sorted(v)) + "]"
    return str(v)


def go_json(v):
    """json.Marshal: compact, keys sorted (docker's contexts marshal as maps), HTML-escaped like Go."""
    s = json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _lookup(obj, path, fmt):
    value = obj
    for name in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or name not in value:
            raise TemplateError('template parsing error: template: :1: executing "" at <%s>: can\'t evaluate '
                                'field %s (lab docker stand-in, format %r)' % (path, name, fmt))
        value = value[name]
    return value


def render(fmt, obj):
    """``fmt`` (literal text, ``{{.A.B}}`` and ``{{json .A}}`` actions) executed against ``obj``."""
    out, pos = [], 0
    for m in _ACTION_RE.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        words = m.group(1).split()
        if len(words) == 1 and _PATH_RE.fullmatch(words[0]):
            out.append(go_str(_lookup(obj, words[0], fmt)))
        elif len(words) == 2 and words[0] == "json" and _PATH_RE.fullmatch(words[1]):
            out.append(go_json(_lookup(obj, words[1], fmt)))
        else:
            raise TemplateError("template: %r: the lab docker stand-in supports only {{.Field.Path}} and "
                                "{{json .Field.Path}} actions" % m.group(0))
    tail = fmt[pos:]
    if "{{" in tail or "}}" in tail:
        raise TemplateError("template: %r: unclosed action" % fmt)
    return "".join(out) + tail


def tabwrite(text, minwidth=10, padding=3):
    """text/tabwriter as docker configures it (minwidth 10, padding 3, pad with spaces)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = [ln.split("\t") for ln in lines]
    ncols = max((len(r) - 1 for r in rows), default=0)
    widths = []
    for c in range(ncols):
        w = minwidth
        for r in rows:
            if c < len(r) - 1:
                w = max(w, len(r[c]) + padding)
        widths.append(w)
    out = []
    for r in rows:
        cells = [r[c].ljust(widths[c]) for c in range(len(r) - 1)]
        out.append("".join(cells) + r[-1])
    return "\n".join(out) + ("\n" if out else "")


def render_list(fmt, rows, header):
    """docker's formatter.Context: a ``table`` prefix (header row, aligned columns), \\t/\\n escapes,
    one row per line."""
    table = fmt.startswith("table")
    if table:
        fmt = fmt[len("table"):]
    fmt = fmt.strip(" ").replace("\\t", "\t").replace("\\n", "\n")
    buf = [render(fmt, header) + "\n"] if table else []
    buf += [render(fmt, r) + "\n" for r in rows]
    text = "".join(buf)
    return tabwrite(text) if table else text
