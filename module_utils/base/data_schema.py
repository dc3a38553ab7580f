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
SHOWN_CHARS = 200       # a value in a refusal is cut to this: a message stays a message, whatever the input


def shown(value, limit=SHOWN_CHARS):
    """``repr(value)`` cut to ``limit`` characters (with the count of the rest)."""
    text = repr(value)
    return text if len(text) <= limit else "%s... (%d more characters)" % (text[:limit], len(text) - limit)


def _str(where, value, ctx):
    if not isinstance(value, str) or not value.strip():
        ctx.fail(where, "must be a non-empty string, got %s" % shown(value))


def _name(where, value, ctx):
    if not isinstance(value, str) or not NAME_RE.match(value):
        ctx.fail(where, "must be a lower-case name (letters, digits, _), got %s" % shown(value))


def _int_at_least(low):
    def check(where, value, ctx):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            ctx.fail(where, "must be an integer >= %d, got %s" % (low, shown(value)))
    return check


def _number(where, value, ctx):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        ctx.fail(where, "must be a number >= 0, got %s" % shown(value))


def _bool(where, value, ctx):
    if not isinstance(value, bool):
        ctx.fail(where, "must be true or false, got %s" % shown(value))


def _one_of(choices):
    def check(where, value, ctx):
        if value not in choices:
            ctx.fail(where, "must be one of %s, got %s" % (", ".join(choices), shown(value)))
    return check


def _regex(where, value, ctx):
    _str(where, value, ctx)
    try:
        re.compile(value)
    except re.error as exc:
        ctx.fail(where, "is not a valid regular expression (%s): %s" % (exc, shown(value)))


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
        where = where or "(top level)"
        if len(where) > SHOWN_CHARS:
            where = where[:SHOWN_CHARS] + "..."
        if len(message) > 3 * SHOWN_CHARS:      # a value quoted in a check's own words (%r) is cut here
            message = "%s... (%d more characters)" % (message[:3 * SHOWN_CHARS], len(message) - 3 * SHOWN_CHARS)
        raise self.error("%s: %s: %s" % (self.source, where, message))


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
                    ctx.fail(_join(where, key), "labels are name: scalar")
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
    key = key if isinstance(key, str) and len(key) <= SHOWN_CHARS else shown(key)
    return "%s.%s" % (where, key) if where else key


def yaml_load_strict(text, source, error=ValueError, what="file"):
    """YAML -> data, refusing duplicate keys (PyYAML would keep the last one silently); every refusal is
    ``error("<source>: ...")``. PyYAML is only needed here (the data is read on the control node)."""
    try:
        import yaml
    except ImportError:
        raise error("%s: reading a %s needs PyYAML (it runs on the control node)" % (source, what))

    class Loader(yaml.SafeLoader):
        # An alias repeats what its anchor holds: nested, a 2 KB file becomes gigabytes (a "billion laughs").
        # Definitions and inventories are written out in full, so an alias is refused where it stands.
        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()
                raise error("%s: line %d: YAML alias *%s: anchors and aliases are not accepted here (write the "
                            "value out)" % (source, event.start_mark.line + 1, shown(event.anchor, 60)[1:-1]))
            return super(Loader, self).compose_node(parent, index)

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _value in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise error("%s: line %d: a %s as a key: keys are names" % (
                    source, line, "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"))
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise error("%s: line %d: key %s appears twice" % (source, line, shown(key)))
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error("%s: not valid YAML: %s" % (source, shown(str(exc), 600)[1:-1]))
    except RecursionError:
        raise error("%s: nested too deeply to be a definition" % source)
