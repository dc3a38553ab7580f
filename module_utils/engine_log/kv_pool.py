# -*- coding: utf-8 -*-
"""The KV pool one rank's engine allocated, judged from the facts of its latest boot (standard library only).

The engine allocates whole pages of ``page_size`` tokens (``server_args``, 256 by default), so a request of
3,000,000 allocated as 2,999,808 is page rounding, not a clamp; only a pool smaller than the request rounded
down to a page is clamped (the report's 750,000 -> 491,520). The allocated pool is ``full=`` of the last
``DSV4 pool sizes:`` line of the boot (the line is printed twice; the last one is what was allocated), else
``max_total_num_tokens=`` (rank 0 only). The facts are :class:`boot_facts.BootFacts` as the one engine-log
reader gathers them (``engine_log/source.py``).
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.engine_log import boot_facts
from ansible.module_utils.engine_log.lines import EngineLogError, KIND_MEMORY, KIND_SERVER_ARGS

__metaclass__ = type

KINDS = frozenset([KIND_MEMORY, KIND_SERVER_ARGS])   # the lines the judgement reads
DEFAULT_PAGE_SIZE = 256   # SGLang's page size when the boot marker does not print one


def _int_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _first(*values):
    for v in values:
        if v is not None:
            return v
    return None


def page_size_of(server_args):
    """(page size, "server_args" or "default"): the boot marker's page_size when it is a positive integer,
    else SGLang's default."""
    page_size = _int_or_none((server_args or {}).get("page_size"))
    if page_size is None or page_size < 1:
        return DEFAULT_PAGE_SIZE, "default"
    return page_size, "server_args"


def clamp_of(allocated, requested, page_size):
    """(the request rounded down to a page, whether the pool is clamped); (None, None) when either token count
    is unknown. The engine allocates whole pages: a request of 3,000,000 gives 2,999,808, which is rounding;
    only a pool smaller than the rounded request is a clamp (the report's 750,000 -> 491,520)."""
    allocated, requested = _int_or_none(allocated), _int_or_none(requested)
    if allocated is None or requested is None:
        return None, None
    rounded = requested // page_size * page_size
    return rounded, allocated < rounded


def evaluate(facts, requested_tokens=None):
    """Turn :class:`boot_facts.BootFacts` into the ``kv_pool`` module result (without ``changed``).

    Raises :class:`EngineLogError` when the boot marker, the memory line, or both the pool and
    max_total lines are missing from the latest boot, or when a value on them is malformed.
    """
    facts.require_marker()
    mem = facts.require_memory()
    max_total = facts.max_total or {}
    if facts.pool_sizes:
        allocated, allocated_from = int(facts.require_pool()["full"]), "pool_sizes"
    elif facts.max_total is not None:
        allocated, allocated_from = int(facts.require_max_total()["max_total_num_tokens"]), "max_total_num_tokens"
    else:
        raise EngineLogError(facts.source, "'DSV4 pool sizes: full=' or 'max_total_num_tokens='",
                             "memory calculation found (available_bytes=%s) but no pool was allocated"
                             % mem.get("available_bytes"), facts.boots_seen)
    sargs = facts.server_args or {}
    if requested_tokens is not None:
        requested, requested_from = int(requested_tokens), "parameter"
    elif _int_or_none(sargs.get("max_total_tokens")) is not None:
        requested, requested_from = int(sargs["max_total_tokens"]), "server_args"
    else:
        requested, requested_from = None, None
    page_size, page_from = page_size_of(sargs)
    rounded, clamped = clamp_of(allocated, requested, page_size)
    return {
        "source": facts.source,
        "boots_seen": facts.boots_seen,
        "allocated_tokens": allocated,
        "allocated_from": allocated_from,
        "max_total_num_tokens": _int_or_none(max_total.get("max_total_num_tokens")),
        "requested_tokens": requested,
        "requested_from": requested_from,
        "page_size": page_size,
        "page_size_from": page_from,
        "requested_rounded_tokens": rounded,
        "page_rounded": None if rounded is None else (rounded != requested and allocated == rounded),
        "clamped": clamped,
        "clamped_by_tokens": None if rounded is None else max(0, rounded - allocated),
        "available_bytes_printed": mem.get("available_bytes"),
        "available_bytes": mem.get("available_bytes_bytes"),
        "bytes_per_full_token": mem.get("bytes_per_full_token"),
        "max_running_requests": _int_or_none(_first(max_total.get("max_running_requests"),
                                                    sargs.get("max_running_requests"))),
        "context_len": _int_or_none(_first(max_total.get("context_len"), sargs.get("context_length"))),
        "chunked_prefill_size": _int_or_none(_first(max_total.get("chunked_prefill_size"),
                                                    sargs.get("chunked_prefill_size"))),
        "available_gpu_mem_printed": max_total.get("available_gpu_mem_printed"),
        "pool": boot_facts.public_fields(facts.pool),
        "pool_lines": facts.pool_count,
        "memory": boot_facts.public_fields(mem),
        "rank": facts.rank,
        "partial_last_line": facts.partial_last_line,
    }


def below_min_message(who, result, min_tokens):
    """The refusal of a pool smaller than ``min_tokens`` (``result``: :func:`evaluate`'s)."""
    req = result["requested_tokens"]
    return ("%s: KV pool %s tokens < min_tokens %s (requested %s, available_bytes=%s)"
            % (who, "{:,}".format(result["allocated_tokens"]), "{:,}".format(min_tokens),
               "{:,}".format(req) if req is not None else "unknown", result["available_bytes_printed"]))
