# -*- coding: utf-8 -*-
"""The record's section on pinned images: where each was found and the three checks it was judged on before
any change (module_utils/adapters/engine_source.py), as Markdown tables. Standard library only."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

_CHECK_TITLES = (("hook_signatures", "engine symbols the adapters touch (hook signatures)",
                  ("adapter", "target", "how", "reference", "candidate", "verdict")),
                 ("g4_guard", "small-row dispatch guards (G=4)", ("where", "function", "weights", "why", "verdict")),
                 ("vocab_padding", "vocab padding", ("image", "padding", "rows_per_rank")))


def _cell(value):
    return "-" if value is None else str(value).replace("|", "\\|")


def markdown_tables(images):
    """Lines of Markdown for ``images`` ({ref: {"present", "problems", "checks", "image_id"}}); [] for none."""
    out = []
    for ref, seen in sorted((images or {}).items()):
        present = seen.get("present") or {}
        out += ["", "## Image %s" % ref, "",
                "Image id %s; on %s%s." % (seen.get("image_id") or "(unknown)",
                                            ", ".join(h for h, there in sorted(present.items()) if there) or "no rank",
                                            "; missing on " + ", ".join(h for h, there in sorted(present.items())
                                                                         if not there)
                                            if not all(present.values()) else ""),
                "", "Verdict before any change: **%s**" % ("refused" if seen.get("problems") else "may run")]
        out += ["- %s" % p for p in seen.get("problems") or []]
        for name, title, cols in _CHECK_TITLES:
            rows = ((seen.get("checks") or {}).get(name) or {}).get("rows") or []
            if not rows:
                continue
            out += ["", "### %s" % title, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out
