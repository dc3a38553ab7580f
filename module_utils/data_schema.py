# -*- coding: utf-8 -*-
"""A small declarative schema for YAML data, and its walker (standard library only).

One subject: checking a parsed mapping against a spec ``{"type": dict|list, "keys": {...},
"required": (...), "items": spec, "free": bool, "min_items": n}`` whose leaves are check functions
``check(where, value, ctx)``; every refusal names the source and the dotted key path through
``ctx.fail``. ``experiment_schema.py`` holds the experiment definitions' spec on top of it.
"""
from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


def _str(where, value, ctx):
    if not isinstance(value, str) or not value.strip():
        ctx.fail(where, "must be a non-empty string, got %r" % (value,))


def _name(where, value, ctx):
    if not isinstance(value, str) or not NAME_RE.match(value):
        ctx.fail(where, "must be a lower-case name (letters, digits, _), got %r" % (value,))


def _int_at_least(low):
    def check(where, value, ctx):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            ctx.fail(where, "must be an integer >= %d, got %r" % (low, value))
    return check


def _number(where, value, ctx):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        ctx.fail(where, "must be a number >= 0, got %r" % (value,))


def _bool(where, value, ctx):
    if not isinstance(value, bool):
        ctx.fail(where, "must be true or false, got %r" % (value,))


def _one_of(choices):
    def check(where, value, ctx):
        if value not in choices:
            ctx.fail(where, "must be one of %s, got %r" % (", ".join(choices), value))
    return check


def _regex(where, value, ctx):
    _str(where, value, ctx)
    try:
        re.compile(value)
    except re.error as exc:
        ctx.fail(where, "is not a valid regular expression (%s): %r" % (exc, value))


def _list_of(fn):
    def check(where, value, ctx):
        if not isinstance(value, list):
            ctx.fail(where, "must be a list")
        for i, item in enumerate(value):
            fn("%s[%d]" % (where, i), item, ctx)
    return check


class Context(object):
    """Where a check is: the source (a file name) and the error class refusals raise."""

    def __init__(self, source, error=ValueError):
        self.source = source
        self.error = error

    def fail(self, where, message):
        raise self.error("%s: %s: %s" % (self.source, where or "(top level)", message))


def _walk(where, value, spec, ctx):
    if callable(spec):
        spec(where, value, ctx)
        return
    kind = spec["type"]
    if kind is dict:
        if not isinstance(value, dict):
            ctx.fail(where, "must be a mapping, got %s" % type(value).__name__)
        if spec.get("free"):
            for key, val in value.items():
                if not isinstance(key, str) or isinstance(val, (dict, list)):
                    ctx.fail("%s.%s" % (where, key), "labels are name: scalar")
            return
        keys = spec.get("keys", {})
        for key in value:
            if key not in keys:
                ctx.fail(_join(where, key), "unknown key (allowed: %s)" % ", ".join(sorted(keys)))
        for key in spec.get("required", ()):
            if key not in value:
                ctx.fail(_join(where, key), "is required")
        for key, val in value.items():
            _walk(_join(where, key), val, keys[key], ctx)
    elif kind is list:
        if not isinstance(value, list):
            ctx.fail(where, "must be a list, got %s" % type(value).__name__)
        if len(value) < spec.get("min_items", 0):
            ctx.fail(where, "needs at least %d item(s)" % spec["min_items"])
        for i, item in enumerate(value):
            _walk("%s[%d]" % (where, i), item, spec["items"], ctx)


def _join(where, key):
    return "%s.%s" % (where, key) if where else str(key)


def yaml_load_strict(text, source, error=ValueError, what="file"):
    """YAML -> data, refusing duplicate keys (PyYAML would keep the last one silently); every refusal is
    ``error("<source>: ...")``. PyYAML is only needed here (the data is read on the control node)."""
    try:
        import yaml
    except ImportError:
        raise error("%s: reading a %s needs PyYAML (it runs on the control node)" % (source, what))

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _value in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise error("%s: line %d: key %r appears twice" % (source, key_node.start_mark.line + 1, key))
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error("%s: not valid YAML: %s" % (source, exc))
