# -*- coding: utf-8 -*-
"""The facts of one boot, gathered message by message from an engine log (standard library only).

:class:`BootFacts` is what every engine-log module reports from; every per-boot list is capped at
:data:`MAX_EVENTS` (counts keep counting).
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.engine_log.lines import (
    EngineLogError, KIND_AUTOTUNE, KIND_DECODE, KIND_ENGRAM, KIND_FATAL, KIND_GRAPH_SHAPES, KIND_MEMORY,
    KIND_READY, Malformed, MalformedLogLine, quote_line, malformed_keys,
)

__metaclass__ = type
MAX_EVENTS = 256              # cap of every per-boot list (counts keep counting)


class BootFacts(object):
    """Facts of the latest boot of one log.  ``to_dict()`` gives a JSON-safe view."""

    def __init__(self, source="<log>"):
        self.source = source
        self.boots_seen = None        # counted only on request (count_boots=True)
        self.marker_found = False
        self.marker_form = None       # 'dict' | 'ServerArgs'
        self.marker_complete = None
        self.server_args = {}
        self.tp_rank = None           # TP rank of the boot's prefixed lines (first seen)
        self.engram = {}              # layer -> fields of the Exact line (first of the boot)
        self.engram_order = []        # layers in the order they were attached
        self.periodic = {}            # layer -> {count, packed_true, packed_false, packed_other, first, last}
        self.memory = None            # last memory calculation
        self.memory_count = 0
        self.pool_sizes = []          # every pool line of the boot, in order (capped, latest kept)
        self.pool_count = 0
        self.max_total = None
        # load_weight_begin: the latest begin line (the draft's); first_load_weight_begin: the boot's
        # first (free memory before any weight was loaded, the start of the memory ledger)
        self.startup = {"load_weight": [], "load_weight_begin": None, "first_load_weight_begin": None,
                        "memory_pool_end": None}
        self.graphs = {}              # 'target'/'draft' -> {'begin': {...}, 'end': {...}}
        self.graph_shapes = {}        # 'target'/'draft' -> captured batch sizes
        self.autotune = {"disagree": 0, "runs": [], "run_count": 0, "completed": 0,
                         "armed": 0, "reused": [], "tuned_saved": [], "drift": []}
        self.decode = {"count": 0, "last": None, "accept_len": []}
        self.fatal = []
        self.ready = False
        self.ready_port = None
        self.partial_last_line = None
        self.read = None              # a container's read plan (engine_log_source.ContainerBoot), else None
        self.malformed = []           # {line, key, value, text} of lines with a non-number value

    # -- convenience --------------------------------------------------------------------------
    @property
    def pool(self):
        """The pool that was allocated: the last ``pool sizes`` line of the boot."""
        return self.pool_sizes[-1] if self.pool_sizes else None

    @property
    def rank(self):
        """The boot's rank: ``node_rank`` of its marker, else the TP tag of its prefixes."""
        r = self.server_args.get("node_rank")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
        return self.tp_rank

    def engram_layer(self, layer):
        return self.engram.get(int(layer))

    def periodic_packed(self, layer):
        """Last periodic ``packed=`` value for a layer, or None when no periodic line."""
        p = self.periodic.get(int(layer))
        return p["last"]["packed"] if p and p["last"] else None

    def _missing(self, kind, detail=None):
        return EngineLogError(self.source, kind, detail, self.boots_seen)

    def _check(self, fields, keys):
        for key in keys:
            if isinstance(fields.get(key), Malformed):
                raise MalformedLogLine(self.source, fields.get("_line"), key, fields[key].raw,
                                       fields.get("_text"), self.boots_seen)
        return fields

    def require_marker(self):
        if not self.marker_found:
            raise self._missing("boot marker ('server_args=')",
                                "the lines read cannot be tied to a boot (log rotated, or not an engine log)")

    def fatal_attributed(self, layers, rank=None):
        """The fatal Engram errors, each with ``layer`` (the first of ``layers`` not attached before
        it: the one being attached) and ``rank`` (the boot's, else ``rank``); they name no file."""
        out = []
        for f in self.fatal:
            entry = dict(f)
            entry["layer"] = next((layer for layer in layers if layer not in f["attached_layers"]), None)
            if entry["rank"] is None:
                entry["rank"] = rank
            out.append(entry)
        return out

    @staticmethod
    def fatal_text(attributed):
        """One sentence per fatal error: the layer being attached, or (every layer attached already:
        a failure while serving) the layers that were attached before it."""
        out = []
        for x in attributed:
            if x["layer"] is not None:
                out.append("fatal on rank %s while attaching layer %s: %s" % (x["rank"], x["layer"], x["line"]))
            else:
                out.append("fatal on rank %s after layers %s were attached: %s"
                           % (x["rank"], ", ".join(str(n) for n in x["attached_layers"]) or "none", x["line"]))
        return out

    def require_engram(self, layer, layers=None, rank=None):
        """The Exact line of ``layer``; when missing, the error names the layers attached, the fatal
        errors attributed among ``layers`` (default: this layer) and a line still being written."""
        f = self.engram.get(int(layer))
        if f is None:
            detail = "layers attached: %s" % (sorted(self.engram) or "none")
            fatal = self.fatal_text(self.fatal_attributed(layers or [int(layer)], rank))
            if fatal:
                detail += "; " + "; ".join(fatal)
            if self.partial_last_line:
                detail += "; last line still being written: %r" % quote_line(self.partial_last_line)
            raise self._missing("'Exact ... Engram layer=%d'" % int(layer), detail)
        return f

    def require_memory(self):
        if self.memory is None:
            raise self._missing("'DSV4 memory calculation:'")
        return self._check(self.memory, ("available_bytes", "bytes_per_full_token"))

    def require_pool(self):
        if not self.pool_sizes:
            raise self._missing("'DSV4 pool sizes:'")
        return self._check(self.pool, ("full",))

    def require_max_total(self):
        if self.max_total is None:
            raise self._missing("'max_total_num_tokens='")
        return self._check(self.max_total, ("max_total_num_tokens",))

    def require_ready(self):
        if not self.ready:
            raise self._missing("'Ready: API on port'")
        return self.ready_port

    def require_graph_shapes(self, pass_name="target"):
        """Captured CUDA-graph batch sizes of one pass (``'target'`` or ``'draft'``)."""
        shapes = self.graph_shapes.get(pass_name)
        if shapes is None:
            raise self._missing("'Capture %s verify CUDA graph begin'" % pass_name)
        return shapes

    def require_autotune(self):
        a = self.autotune
        if not (a["disagree"] or a["run_count"] or a["completed"] or a["armed"] or a["drift"]):
            raise self._missing("FlashInfer autotune / [autotune_keep]")
        return a

    def to_dict(self):
        clean = public_fields
        return {
            "source": self.source,
            "boots_seen": self.boots_seen,
            "marker_found": self.marker_found,
            "marker_form": self.marker_form,
            "marker_complete": self.marker_complete,
            "rank": self.rank,
            "server_args": dict(self.server_args),
            "engram": [clean(self.engram[k]) for k in sorted(self.engram)],
            "periodic": [dict(self.periodic[k], layer=k) for k in sorted(self.periodic)],
            "memory": clean(self.memory),
            "memory_count": self.memory_count,
            "pool": clean(self.pool),
            "pool_sizes": [clean(p) for p in self.pool_sizes],
            "pool_count": self.pool_count,
            "max_total": clean(self.max_total),
            "startup": {"load_weight_begin": clean(self.startup["load_weight_begin"]),
                        "first_load_weight_begin": clean(self.startup["first_load_weight_begin"]),
                        "load_weight": [clean(x) for x in self.startup["load_weight"]],
                        "memory_pool_end": clean(self.startup["memory_pool_end"])},
            "graphs": dict((p, dict((ph, clean(v)) for ph, v in g.items())) for p, g in self.graphs.items()),
            "graph_shapes": dict((k, list(v)) for k, v in self.graph_shapes.items()),
            "autotune": dict((k, (list(v) if isinstance(v, list) else v)) for k, v in self.autotune.items()),
            "decode": {"count": self.decode["count"], "last": clean(self.decode["last"]),
                       "accept_len": list(self.decode["accept_len"])},
            "fatal": [dict(f) for f in self.fatal],
            "ready": self.ready,
            "ready_port": self.ready_port,
            "read": self.read,
            "partial_last_line": self.partial_last_line,
            "malformed": [dict(m) for m in self.malformed],
        }


def public_fields(fields):
    """A fields dict as callers see it: without the reader's own ``_`` keys, malformed values as
    printed; None stays None."""
    if fields is None:
        return None
    return dict((k, (v.raw if isinstance(v, Malformed) else v)) for k, v in fields.items()
                if not k.startswith("_"))


def _capped_append(lst, item):
    if len(lst) < MAX_EVENTS:
        lst.append(item)


_EVENT_KIND = {
    "engram": KIND_ENGRAM, "engram_periodic": KIND_ENGRAM, "fatal_engram": KIND_FATAL,
    "memory": KIND_MEMORY, "pool": KIND_MEMORY, "max_total": KIND_MEMORY, "startup": KIND_MEMORY,
    "ready": KIND_READY, "graph": KIND_GRAPH_SHAPES, "decode": KIND_DECODE,
}


def _kind_of(kind):
    return KIND_AUTOTUNE if kind.startswith("autotune") else _EVENT_KIND.get(kind)


class BootState(object):
    """Applies events in order; a boot marker starts a new boot (facts reset)."""

    def __init__(self, source, kinds):
        self.source = source
        self.kinds = kinds
        self.facts = BootFacts(source)
        self.markers = 0

    def apply(self, msg, kind, f, line_no):
        facts = self.facts
        if kind == "boot":
            self.markers += 1
            facts = self.facts = BootFacts(self.source)
            facts.marker_found = True
            facts.marker_form = f["form"]
            facts.marker_complete = f["complete"]
            facts.server_args = f["server_args"]     # always kept: rank and page size come from it
            return
        if msg.tp_rank is not None and facts.tp_rank is None:
            facts.tp_rank = msg.tp_rank
        if kind is None or _kind_of(kind) not in self.kinds:
            return
        for key in malformed_keys(f):
            _capped_append(facts.malformed, {"line": line_no, "key": key, "value": f[key].raw,
                                             "text": quote_line(msg.text)})
        if isinstance(f, dict):
            f["_line"] = line_no
            f["_text"] = msg.text
        if kind == "engram":
            if f["layer"] not in facts.engram:
                facts.engram[f["layer"]] = f
                facts.engram_order.append(f["layer"])
        elif kind == "engram_periodic":
            p = facts.periodic.get(f["layer"])
            if p is None:
                p = facts.periodic[f["layer"]] = {"count": 0, "packed_true": 0, "packed_false": 0,
                                                  "packed_other": 0, "first": None, "last": None}
            p["count"] += 1
            key = "packed_true" if f["packed"] is True else "packed_false" if f["packed"] is False else "packed_other"
            p[key] += 1
            p["last"] = dict((k, v) for k, v in f.items() if not k.startswith("_"))
            if p["first"] is None:      # the row cache's state soonest after the boot (cold), beside the last
                p["first"] = p["last"]
        elif kind == "fatal_engram":
            fatal = {"reason": f["reason"], "line": f["line"], "errno": f["errno"], "line_no": line_no,
                     "rank": facts.rank if facts.rank is not None else msg.tp_rank,
                     "attached_layers": list(facts.engram_order)}
            _capped_append(facts.fatal, fatal)
        elif kind == "memory":
            facts.memory = f
            facts.memory_count += 1
        elif kind == "pool":
            facts.pool_count += 1
            if len(facts.pool_sizes) >= MAX_EVENTS:
                facts.pool_sizes.pop(0)          # keep the latest ones: the last one wins
            facts.pool_sizes.append(f)
        elif kind == "max_total":
            facts.max_total = f
        elif kind == "startup":
            step = f["step"]
            if step == "load_weight_end":
                _capped_append(facts.startup["load_weight"], f)
            else:
                if step == "load_weight_begin" and facts.startup["first_load_weight_begin"] is None:
                    facts.startup["first_load_weight_begin"] = f
                facts.startup[step] = f
        elif kind == "graph":
            facts.graphs.setdefault(f["pass"], {})[f["phase"]] = f
            if f["phase"] == "begin" and isinstance(f.get("bs"), list):
                facts.graph_shapes[f["pass"]] = f["bs"]
        elif kind == "autotune_disagree":
            facts.autotune["disagree"] += 1
        elif kind == "autotune_run":
            facts.autotune["run_count"] += 1
            _capped_append(facts.autotune["runs"], f["cache"])
        elif kind == "autotune_completed":
            facts.autotune["completed"] += 1
        elif kind == "autotune_armed":
            facts.autotune["armed"] += 1
        elif kind == "autotune_reused":
            _capped_append(facts.autotune["reused"], f["path"])
        elif kind == "autotune_tuned_saved":
            _capped_append(facts.autotune["tuned_saved"], f["path"])
        elif kind == "autotune_drift":
            _capped_append(facts.autotune["drift"], f["name"])
        elif kind == "decode":
            facts.decode["count"] += 1
            facts.decode["last"] = f
            if isinstance(f.get("accept_len"), (int, float)):
                _capped_append(facts.decode["accept_len"], f["accept_len"])
        elif kind == "ready":
            facts.ready = True
            facts.ready_port = f["port"]
