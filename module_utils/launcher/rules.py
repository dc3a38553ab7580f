# -*- coding: utf-8 -*-
"""The launcher settings rules of SPEC section 3 ("Adapters and switches" and its "Never" list), one rule set
per TP size.

Shared by ``launcher_settings`` (through ``module_utils/launcher/check.py``, which applies them to what each
container receives at the next serve) and anything else that judges launcher settings. Every rule is a
small named function in :data:`RULES` (rule id, level, summary, the TP sizes it belongs to), so tests can
enumerate them. :data:`RULE_SETS` holds the set each TP size is judged by, chosen from the inventory's TP
size (``tp_size``): TP3 (the report's fleet) never takes TP4's 16 slots, 8M-token pool, 0.80 fraction,
4 GiB row cache, shared-expert padding or ``DSV41_TP_PAD=0``; TP4 (the community's four-node profile, the
downstream TP4 repository's ``.env.tp4.example``) takes those and is judged by what its adapters need instead
(``DSV41_SHARED_PAD_K`` the padding adapter's 0/1 switch, expert parallel 4, 2 or 1). A TP size without a
rule set is refused (:class:`UnsupportedTPSize`), never judged by another size's rules.

Values of a settings dict may be str, int, float, bool or None (a rendered YAML mapping): None and the
empty string mean "unset"; True/False mean "1"/"0"; strings are kept exactly as bash will hold them (no
stripping). Values of secret names (``secret_rule.is_secret_name``) never appear in a message (``***``).
The first rule, ``env_writable``, refuses what the ``.env`` writer cannot write as data.
``DSPARK_SPS_TABLE`` is judged by its effect: the engine stays on the verify-all schedule when the table
it names does not exist, so with ``sps_table_exists=False`` the rule does not fire.
"""
from __future__ import absolute_import, division, print_function

import re
from collections import namedtuple

from ansible.module_utils.envfile.render import key_problem, value_problem
from ansible.module_utils.launcher.values import _as_float, _as_int, _switch_on, normalize_settings, shown

__metaclass__ = type

# Adapter switches (the import hook installs the adapter when the value is not "0") and other
# plain on/off engine switches: each must be 0 or 1.
ADAPTER_SWITCHES = (
    "DSV41_AUTOTUNE_KEEP", "DSV41_FOLDED_FENCE", "DSV41_WO_A_W8", "DSV41_WO_A_W8_MID",
    "DSV41_WO_A_W8_DROP", "DSV41_ENGRAM_PREFETCH", "DSV41_ENGRAM_PREFETCH_CHECK",
    "DSV41_DRAFT_HEAD_FP8", "DSV41_BLOCK_VERIFY",
)
ENGINE_SWITCHES = ("DSV41_MOE_DENSE_ROUTING",)

# Validations a stage can record (``validated=``) to unlock a dependent setting.
VALIDATIONS = {
    "wo_a_w8": "DSV41_WO_A_W8 alone was validated (stage D); unlocks DSV41_WO_A_W8_DROP",
    "block5": "DSPARK_BLOCK_SIZE=5 alone was measured (stage G); unlocks DSV41_VERIFY_CAP",
    "folded_sampling_budget": "the static buffers of forced folded sampling are budgeted; "
                              "unlocks SGLANG_DSPARK_FOLDED_SAMPLING=2",
    "block_verify": "DSV41_BLOCK_VERIFY passed its evidence, proposal and mixed-batch checks (stage H); the "
                    "confidence cap's sampled test (stage G) needs it",
}

# start.sh defaults for keys the rules read when the settings leave them unset.
LAUNCHER_DEFAULTS = {"TP_SIZE": "3", "EP_SIZE": "3", "DSPARK_BLOCK_SIZE": "3",
                     "MEM_FRACTION_STATIC": "0.95", "MAX_RUNNING_REQUESTS": "4"}

# The report: keep memory fraction 0.95 for the initial comparisons. Any other value on TP3 is refused
# unless an experiment arm varies MEM_FRACTION_STATIC deliberately (its settings name the key).
TP3_FRACTION = "0.95"
# The TP4 profile's values (the report's comparison; the downstream TP4 repository's .env.tp4.example), which
# assume TP4's much smaller per-rank weight footprint: never copied onto TP3.
TP4_FRACTION = 0.80
TP4_SLOTS = 16
TP4_POOL = 8000000
TP4_CACHE_GIB = 4.0
# Expert parallel sizes each TP size's MoE layout admits. TP3: EP=TP or EP1 (TP3/EP2 is not an even
# factorization, the report). TP4: EP4, EP2 (the community's base and canary images: 1152-wide expert slices,
# a multiple of 128 as FlashInfer's MXFP4 MoE needs) or EP1 (its production line, 576-wide slices).
EP_CHOICES = {3: (3, 1), 4: (4, 2, 1)}
# The TP sizes with a rule set (RULE_SETS); anything else is refused by name.
SUPPORTED_TP_SIZES = (3, 4)

# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

# ``tp``: the TP sizes whose rule set holds the rule (None: every supported size).
Rule = namedtuple("Rule", "id level summary check tp")
Rule.__new__.__defaults__ = (None,)
Finding = namedtuple("Finding", "rule level key message")


class UnsupportedTPSize(ValueError):
    """A TP size no rule set exists for (its rules would be another size's, which is never right)."""


class _Ctx(object):
    def __init__(self, settings, tp_size, validated, packed, timing, sps_table_exists=None, varied=()):
        self.raw = dict(settings or {})
        self.varied = frozenset(varied or ())
        self.s = normalize_settings(settings)
        self.tp_size = int(tp_size)
        self.validated = frozenset(validated or ())
        self.packed = bool(packed)
        self.timing = bool(timing)
        self.sps_table_exists = sps_table_exists

    def get(self, key):
        return self.s.get(key)

    def eff(self, key):
        """Value including start.sh's default."""
        v = self.s.get(key)
        return v if v is not None else LAUNCHER_DEFAULTS.get(key)

    def on(self, key):
        return _switch_on(self.s.get(key))


def _r_env_writable(c):
    """Keys and values the .env writer refuses: nothing is written, the message names the key."""
    for key, value in c.raw.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            yield ("%s" % (key,), problem)


def _r_alloc_expandable(c):
    v = c.get("PYTORCH_CUDA_ALLOC_CONF")
    if v and re.search(r"expandable_segments\s*:\s*(true|1)\b", v, re.I):
        yield ("PYTORCH_CUDA_ALLOC_CONF", "%s enables expandable_segments:True, which gives NaN logits on this "
               "fleet; keep the known-working allocator" % shown("PYTORCH_CUDA_ALLOC_CONF", v))


def _r_moe_fused_finalize(c):
    v = c.get("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE")
    if v is None:
        yield ("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE is unset: it must be "
               "set explicitly to 0 (fused MoE finalize stays off)")
    elif v != "0":
        yield ("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "%s turns fused MoE finalize on: it must be 0"
               % shown("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", v))


def _r_shared_pad(c):
    v = c.get("DSV41_SHARED_PAD_K")
    if v is not None and v != "0":
        yield ("DSV41_SHARED_PAD_K", "%s enables shared-expert padding on TP3: TP3 K=768 is already 128-aligned "
               "and the TP4 adapter expects K=576; leave it unset or 0" % shown("DSV41_SHARED_PAD_K", v))


def _r_shared_pad_switch(c):
    v = c.get("DSV41_SHARED_PAD_K")
    if v is not None and v not in ("0", "1"):
        yield ("DSV41_SHARED_PAD_K", "%s: DSV41_SHARED_PAD_K is the TP4 padding adapter's switch, 0 or 1 (the "
               "adapter pads the shared expert's K=576 to 640 itself; the TP4 profile runs 1)"
               % shown("DSV41_SHARED_PAD_K", v))


def _w_shared_pad_backend(c):
    backend = c.get("DSV41_MXFP8_BACKEND")
    if c.get("DSV41_SHARED_PAD_K") == "1" and backend is not None and backend != "b12x":
        yield ("DSV41_SHARED_PAD_K", "DSV41_SHARED_PAD_K='1' with %s: the padding only puts the K=576 shape back "
               "on the b12x MXFP8 kernel (on CUTLASS K=640 measured 0.7%% slower than 576)"
               % shown("DSV41_MXFP8_BACKEND", backend))


def _r_tp_pad_tp3(c):
    v = c.get("DSV41_TP_PAD")
    if v is not None and v.strip().lower() in ("0", "off", "false"):
        yield ("DSV41_TP_PAD", "%s turns TP padding off on TP3: TP3 needs its attention head/group, vocab and "
               "draft padding (TP4 runs 0 because 64 heads, 8 output groups, 128 draft experts and the vocab "
               "divide by 4); leave it unset" % shown("DSV41_TP_PAD", v))


def _r_sps_table(c):
    v = c.get("DSPARK_SPS_TABLE")
    if v is not None and c.sps_table_exists is not False:
        where = (" and the table exists where the container reads it (%s)" % c.sps_table_exists
                 if isinstance(c.sps_table_exists, str) else "")
        yield ("DSPARK_SPS_TABLE", "%s enables ragged (SPS) verification%s, which is excluded from the initial "
               "sequence (downstream Engram failure on that path); unset it" % (shown("DSPARK_SPS_TABLE", v), where))


def _r_offload_ram(c):
    v = c.get("OFFLOAD_MODE")
    if v is not None and v.lower() == "ram":
        yield ("OFFLOAD_MODE", "%s: CPU offload creates no extra memory pool on GB10 (host RAM is GPU memory); "
               "unset it" % shown("OFFLOAD_MODE", v))


def _r_tp4_slots(c):
    n = _as_int(c.get("MAX_RUNNING_REQUESTS"))
    if n is not None and n >= TP4_SLOTS:
        yield ("MAX_RUNNING_REQUESTS", "%s copies TP4's %d slots onto TP3; more slots are a separate, "
               "memory-checked experiment (6 or 8)" % (shown("MAX_RUNNING_REQUESTS", c.get("MAX_RUNNING_REQUESTS")),
                                                      TP4_SLOTS))


def _r_tp4_pool(c):
    n = _as_int(c.get("MAX_TOTAL_TOKENS"))
    if n is not None and n >= TP4_POOL:
        yield ("MAX_TOTAL_TOKENS", "%s copies TP4's 8M-token KV pool onto TP3 (the report's boot got 491,520 "
               "tokens for a 750,000 pin)" % shown("MAX_TOTAL_TOKENS", c.get("MAX_TOTAL_TOKENS")))


def _r_tp4_fraction(c):
    f = _as_float(c.get("MEM_FRACTION_STATIC"))
    if f is not None and abs(f - TP4_FRACTION) < 1e-9:
        yield ("MEM_FRACTION_STATIC", "%s copies TP4's 0.80 memory fraction onto TP3; keep 0.95"
               % shown("MEM_FRACTION_STATIC", c.get("MEM_FRACTION_STATIC")))


def _r_tp4_row_cache(c):
    f = _as_float(c.get("DSV41_CACHE_GIB"))
    if f is not None and f >= TP4_CACHE_GIB:
        yield ("DSV41_CACHE_GIB", "%s copies TP4's 4 GiB Engram row cache onto TP3; only a small cache "
               "(0.25/0.5 GiB) once headroom is proven" % shown("DSV41_CACHE_GIB", c.get("DSV41_CACHE_GIB")))


def _r_fraction_hold(c):
    v = c.get("MEM_FRACTION_STATIC")
    f = _as_float(v)
    if (f is not None and abs(f - float(TP3_FRACTION)) >= 1e-9 and abs(f - TP4_FRACTION) >= 1e-9
            and "MEM_FRACTION_STATIC" not in c.varied):
        yield ("MEM_FRACTION_STATIC", "%s on TP3: the fraction is held at %s for the comparisons; only an experiment "
               "arm that varies MEM_FRACTION_STATIC deliberately (in its settings) may set another value"
               % (shown("MEM_FRACTION_STATIC", v), TP3_FRACTION))


def _r_fraction_value(c):
    v = c.get("MEM_FRACTION_STATIC")
    f = _as_float(v)
    if v is not None and (f is None or not 0 < f < 1):
        yield ("MEM_FRACTION_STATIC", "%s is not a fraction between 0 and 1" % shown("MEM_FRACTION_STATIC", v))


def _r_wo_a_needs_w8(c):
    for key in ("DSV41_WO_A_W8_MID", "DSV41_WO_A_W8_DROP"):
        if c.on(key) and not c.on("DSV41_WO_A_W8"):
            yield (key, "%s needs DSV41_WO_A_W8=1 (it is %s)"
                   % (shown(key, c.get(key)), c.get("DSV41_WO_A_W8") or "unset"))


def _r_wo_a_drop_validated(c):
    if c.on("DSV41_WO_A_W8_DROP") and "wo_a_w8" not in c.validated:
        yield ("DSV41_WO_A_W8_DROP", "%s before DSV41_WO_A_W8 is validated (no recorded 'wo_a_w8' validation; "
               "DROP replaces the bf16 weights)" % shown("DSV41_WO_A_W8_DROP", c.get("DSV41_WO_A_W8_DROP")))


def _r_prefetch_packed(c):
    if c.on("DSV41_ENGRAM_PREFETCH") and not c.packed:
        yield ("DSV41_ENGRAM_PREFETCH", "%s needs packed Engram shards on every rank (packed=False or not "
               "checked)" % shown("DSV41_ENGRAM_PREFETCH", c.get("DSV41_ENGRAM_PREFETCH")))


def _r_prefetch_check_timing(c):
    if c.on("DSV41_ENGRAM_PREFETCH_CHECK") and c.timing:
        yield ("DSV41_ENGRAM_PREFETCH_CHECK", "%s is validation mode (repeats work, may synchronize): never "
               "while timing" % shown("DSV41_ENGRAM_PREFETCH_CHECK", c.get("DSV41_ENGRAM_PREFETCH_CHECK")))


def _r_prefetch_check_needs_prefetch(c):
    if c.on("DSV41_ENGRAM_PREFETCH_CHECK") and not c.on("DSV41_ENGRAM_PREFETCH"):
        yield ("DSV41_ENGRAM_PREFETCH_CHECK", "%s without DSV41_ENGRAM_PREFETCH=1 checks nothing"
               % shown("DSV41_ENGRAM_PREFETCH_CHECK", c.get("DSV41_ENGRAM_PREFETCH_CHECK")))


def _verify_cap_on(c):
    v = c.get("DSV41_VERIFY_CAP")
    return v is not None and v != "0"


def _r_verify_cap_format(c):
    v = c.get("DSV41_VERIFY_CAP")
    if not _verify_cap_on(c):
        return
    m = re.match(r"^conf:(.+)$", v)
    f = _as_float(m.group(1)) if m else None
    if f is None or not 0 < f <= 1:
        yield ("DSV41_VERIFY_CAP", "%s is not of the form conf:<float> with 0 < float <= 1 (e.g. conf:0.1)"
               % shown("DSV41_VERIFY_CAP", v))


def _r_verify_cap_block5(c):
    if _verify_cap_on(c) and c.eff("DSPARK_BLOCK_SIZE") != "5":
        yield ("DSV41_VERIFY_CAP", "%s is set while DSPARK_BLOCK_SIZE=%s: the confidence cap is tested at k=5 only"
               % (shown("DSV41_VERIFY_CAP", c.get("DSV41_VERIFY_CAP")), c.eff("DSPARK_BLOCK_SIZE")))


def _r_verify_cap_measured(c):
    if _verify_cap_on(c) and "block5" not in c.validated:
        yield ("DSV41_VERIFY_CAP", "%s before k=5 alone was measured (no recorded 'block5' validation)"
               % shown("DSV41_VERIFY_CAP", c.get("DSV41_VERIFY_CAP")))


def _r_block_size(c):
    v = c.get("DSPARK_BLOCK_SIZE")
    if v is None:
        return
    n = _as_int(v)
    if n is None or not 2 <= n <= 5:
        yield ("DSPARK_BLOCK_SIZE", "%s is not an integer from 2 to 5" % shown("DSPARK_BLOCK_SIZE", v))


def _r_draft_tau(c):
    v = c.get("DSV41_DRAFT_TAU")
    if v is None:
        return
    f = _as_float(v)
    if f is None or f <= 0:
        yield ("DSV41_DRAFT_TAU", "%s is not a float > 0 (1 or unset is off; 0.8 is the tested multiplier)"
               % shown("DSV41_DRAFT_TAU", v))


def _r_folded_sampling_value(c):
    v = c.get("SGLANG_DSPARK_FOLDED_SAMPLING")
    if v is not None and v not in ("0", "1", "2"):
        yield ("SGLANG_DSPARK_FOLDED_SAMPLING", "%s is not unset (AUTO), 0, 1 or 2"
               % shown("SGLANG_DSPARK_FOLDED_SAMPLING", v))


def _r_folded_sampling_budget(c):
    if c.get("SGLANG_DSPARK_FOLDED_SAMPLING") == "2" and "folded_sampling_budget" not in c.validated:
        yield ("SGLANG_DSPARK_FOLDED_SAMPLING", "SGLANG_DSPARK_FOLDED_SAMPLING='2' forces folded sampling before its "
               "static buffers are budgeted (no recorded 'folded_sampling_budget' validation)")


def _r_switch_values(c):
    for key in ADAPTER_SWITCHES + ENGINE_SWITCHES:
        v = c.get(key)
        if v is not None and v not in ("0", "1"):
            yield (key, "%s: a switch must be 0 or 1" % shown(key, v))


def _r_tp_size(c):
    v = c.eff("TP_SIZE")
    if _as_int(v) != c.tp_size:
        where = "" if c.get("TP_SIZE") is not None else " (unset: start.sh default 3)"
        yield ("TP_SIZE", "TP_SIZE=%r%s but the inventory has tp_size %d" % (v, where, c.tp_size))


def _r_ep_size(c):
    v = c.get("EP_SIZE")
    choices = EP_CHOICES[c.tp_size]
    if v is not None and _as_int(v) not in choices:
        if c.tp_size == 3:
            yield ("EP_SIZE", "%s: expert parallel must be 3 (EP=TP) or 1 (the EP1 experiment)" % shown("EP_SIZE", v))
        else:
            yield ("EP_SIZE", "%s: expert parallel on TP%d must be %s (EP=TP, or expert slices of a width the "
                   "MoE kernels take)" % (shown("EP_SIZE", v), c.tp_size, ", ".join(str(n) for n in choices)))


def _w_ep1_moe_width(c):
    if _as_int(c.get("EP_SIZE")) == 1 and not c.on("DSV41_MOE_B12X_NEXT"):
        yield ("EP_SIZE", "EP_SIZE='1' on TP4 gives every rank a 576-wide slice of each expert, not a multiple of "
               "128 as FlashInfer's MXFP4 MoE needs: the TP4 profile runs EP1 only with DSV41_MOE_B12X_NEXT=1 "
               "(else EP_SIZE=2)")


_POSITIVE_INTS = ("MAX_RUNNING_REQUESTS", "CHUNKED_PREFILL_SIZE", "MAX_TOTAL_TOKENS", "API_PORT", "DIST_PORT",
                  "DSV41_CACHE_WAYS")


def _r_integer_values(c):
    for key in _POSITIVE_INTS:
        v = c.get(key)
        if v is not None and (_as_int(v) is None or _as_int(v) < 1):
            yield (key, "%s is not a positive integer" % shown(key, v))
    v = c.get("DSV41_CACHE_GIB")
    if v is not None and (_as_float(v) is None or _as_float(v) < 0):
        yield ("DSV41_CACHE_GIB", "%s is not a size in GiB >= 0" % shown("DSV41_CACHE_GIB", v))


# The ported per-layer budget adapter's switch (engine feature engram_layer_budget): each Engram layer's own
# row-cache budget as "LAYER:GiB" pairs, comma-separated ("1:0,14:0.25"); a layer not named gets 0 and
# DSV41_CACHE_GIB is not used. The report: the stock adapter derives both layers' budgets from the global one,
# so raising it for the DRM layer also allocates an ordinary-RAM cache for the other.
LAYER_BUDGET_KEY = "DSV41_CACHE_LAYER_GIB"
ENGRAM_LAYERS = (1, 14)


def parse_layer_budgets(value):
    """``"1:0,14:0.25"`` -> ({1: 0.0, 14: 0.25}, problem or None)."""
    out = {}
    for item in (value or "").split(","):
        layer, sep, gib = item.strip().partition(":")
        if not sep or not layer.strip().isdigit() or int(layer) not in ENGRAM_LAYERS:
            return out, "%r is not LAYER:GiB with an Engram layer (%s)" % (item.strip(), " or ".join(
                str(n) for n in ENGRAM_LAYERS))
        f = _as_float(gib.strip())
        if f is None or f < 0:
            return out, "%r: %r is not a size in GiB >= 0" % (item.strip(), gib.strip())
        if int(layer) in out:
            return out, "layer %s is given twice" % layer.strip()
        out[int(layer)] = f
    return out, None


def _layer_budgets(c):
    v = c.get(LAYER_BUDGET_KEY)
    return parse_layer_budgets(v)[0] if v is not None else None


def _r_layer_budgets(c):
    v = c.get(LAYER_BUDGET_KEY)
    if v is None:
        return
    budgets, problem = parse_layer_budgets(v)
    if problem:
        yield (LAYER_BUDGET_KEY, "%s: %s (e.g. \"1:0,14:0.25\")" % (shown(LAYER_BUDGET_KEY, v), problem))
    elif c.tp_size == 3 and sum(budgets.values()) >= TP4_CACHE_GIB:
        yield (LAYER_BUDGET_KEY, "%s copies TP4's 4 GiB Engram row cache onto TP3; only a small cache (0.25/0.5 "
               "GiB) once headroom is proven" % shown(LAYER_BUDGET_KEY, v))


def _r_drm_global_budget(c):
    f = _as_float(c.get("DSV41_CACHE_GIB"))
    if c.get("DSV41_ENGRAM_DRM_NODE") is not None and f and f > 0 and c.get(LAYER_BUDGET_KEY) is None:
        yield ("DSV41_CACHE_GIB", "%s raises the global Engram budget with DSV41_ENGRAM_DRM_NODE set: that also "
               "allocates an ordinary-RAM cache for the non-DRM layer; give per-layer budgets in %s (e.g. "
               "\"1:0,14:0.25\", the ported adapter engram_layer_budget) and keep DSV41_CACHE_GIB 0"
               % (shown("DSV41_CACHE_GIB", c.get("DSV41_CACHE_GIB")), LAYER_BUDGET_KEY))


def _cache_off(c):
    budgets = _layer_budgets(c)
    if budgets:
        return not any(budgets.values())
    f = _as_float(c.get("DSV41_CACHE_GIB"))
    return c.get("DSV41_CACHE_GIB") is None or f == 0


def _w_cache_ways(c):
    if c.get("DSV41_CACHE_WAYS") is not None and _cache_off(c):
        yield ("DSV41_CACHE_WAYS", "%s has no effect while DSV41_CACHE_GIB is %s (ways matter only with a "
               "non-zero row cache)" % (shown("DSV41_CACHE_WAYS", c.get("DSV41_CACHE_WAYS")),
                                        c.get("DSV41_CACHE_GIB") or "unset"))


def _w_drm_node(c):
    if c.get("DSV41_ENGRAM_DRM_NODE") is not None and _cache_off(c):
        yield ("DSV41_ENGRAM_DRM_NODE", "%s yields no cache slots while %s"
               % (shown("DSV41_ENGRAM_DRM_NODE", c.get("DSV41_ENGRAM_DRM_NODE")),
                  "%s is %s" % (LAYER_BUDGET_KEY, c.get(LAYER_BUDGET_KEY)) if c.get(LAYER_BUDGET_KEY) is not None
                  else "DSV41_CACHE_GIB is %s" % (c.get("DSV41_CACHE_GIB") or "unset")))


RULES = (
    Rule("env_writable", "error", "keys are shell identifiers (not the shell's own variables); values hold no "
         "newline, NUL or control character and are UTF-8", _r_env_writable),
    Rule("alloc_expandable", "error", "PYTORCH_CUDA_ALLOC_CONF with expandable_segments:True (NaN logits)",
         _r_alloc_expandable),
    Rule("moe_fused_finalize", "error", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE must be explicitly 0",
         _r_moe_fused_finalize),
    Rule("shared_pad_tp3", "error", "no DSV41_SHARED_PAD_K (shared-expert padding) on TP3", _r_shared_pad, (3,)),
    Rule("shared_pad_switch", "error", "DSV41_SHARED_PAD_K is the TP4 padding adapter's 0/1 switch",
         _r_shared_pad_switch, (4,)),
    Rule("tp_pad_tp3", "error", "no DSV41_TP_PAD=0 (TP4's unpadded layout) on TP3", _r_tp_pad_tp3, (3,)),
    Rule("sps_table", "error", "no DSPARK_SPS_TABLE (ragged verify) in the initial sequence", _r_sps_table),
    Rule("offload_ram", "error", "no OFFLOAD_MODE=ram", _r_offload_ram),
    Rule("tp4_slots", "error", "no TP4 16 slots on TP3", _r_tp4_slots, (3,)),
    Rule("tp4_kv_pool", "error", "no TP4 8M KV pool on TP3", _r_tp4_pool, (3,)),
    Rule("tp4_fraction", "error", "no TP4 0.80 memory fraction on TP3", _r_tp4_fraction, (3,)),
    Rule("tp4_row_cache", "error", "no TP4 4 GiB Engram row cache on TP3", _r_tp4_row_cache, (3,)),
    Rule("fraction_hold", "error", "MEM_FRACTION_STATIC held at 0.95 on TP3 unless an arm varies it (0.80: "
         "tp4_fraction)", _r_fraction_hold, (3,)),
    Rule("fraction_value", "error", "MEM_FRACTION_STATIC is a fraction", _r_fraction_value),
    Rule("wo_a_needs_w8", "error", "DSV41_WO_A_W8_MID / _DROP need DSV41_WO_A_W8", _r_wo_a_needs_w8),
    Rule("wo_a_drop_validated", "error", "DSV41_WO_A_W8_DROP only after W8 is validated", _r_wo_a_drop_validated),
    Rule("prefetch_packed", "error", "DSV41_ENGRAM_PREFETCH needs packed shards", _r_prefetch_packed),
    Rule("prefetch_check_timing", "error", "DSV41_ENGRAM_PREFETCH_CHECK never while timing",
         _r_prefetch_check_timing),
    Rule("prefetch_check_needs_prefetch", "error", "DSV41_ENGRAM_PREFETCH_CHECK needs DSV41_ENGRAM_PREFETCH",
         _r_prefetch_check_needs_prefetch),
    Rule("verify_cap_format", "error", "DSV41_VERIFY_CAP is conf:<float>", _r_verify_cap_format),
    Rule("verify_cap_block5", "error", "DSV41_VERIFY_CAP only with DSPARK_BLOCK_SIZE=5", _r_verify_cap_block5),
    Rule("verify_cap_measured", "error", "DSV41_VERIFY_CAP only after k=5 alone was measured",
         _r_verify_cap_measured),
    Rule("block_size", "error", "DSPARK_BLOCK_SIZE is an integer 2..5", _r_block_size),
    Rule("draft_tau", "error", "DSV41_DRAFT_TAU is a float > 0", _r_draft_tau),
    Rule("folded_sampling_value", "error", "SGLANG_DSPARK_FOLDED_SAMPLING is unset, 0, 1 or 2",
         _r_folded_sampling_value),
    Rule("folded_sampling_budget", "error", "SGLANG_DSPARK_FOLDED_SAMPLING=2 only with budgeted buffers",
         _r_folded_sampling_budget),
    Rule("switch_values", "error", "adapter and engine switches are 0 or 1", _r_switch_values),
    Rule("tp_size", "error", "TP_SIZE equals the inventory's TP size", _r_tp_size),
    Rule("ep_size", "error", "EP_SIZE is one the TP size's MoE layout admits (TP3: 3 or 1; TP4: 4, 2 or 1)",
         _r_ep_size),
    Rule("integer_values", "error", "counts, ports and sizes are numbers", _r_integer_values),
    Rule("layer_budgets", "error", "DSV41_CACHE_LAYER_GIB is LAYER:GiB pairs of Engram layers 1 and 14 (no TP4 "
         "4 GiB on TP3)", _r_layer_budgets),
    Rule("drm_global_budget", "error", "a DRM node with a raised DSV41_CACHE_GIB needs per-layer budgets "
         "(DSV41_CACHE_LAYER_GIB) instead", _r_drm_global_budget),
    Rule("cache_ways_without_cache", "warning", "DSV41_CACHE_WAYS matters only with a non-zero DSV41_CACHE_GIB",
         _w_cache_ways),
    Rule("drm_without_cache", "warning", "DSV41_ENGRAM_DRM_NODE gives no slots with DSV41_CACHE_GIB 0",
         _w_drm_node),
    Rule("shared_pad_backend", "warning", "DSV41_SHARED_PAD_K gains only on the b12x MXFP8 backend",
         _w_shared_pad_backend, (4,)),
    Rule("ep1_moe_width", "warning", "EP_SIZE=1 on TP4 needs the b12x_next MoE (DSV41_MOE_B12X_NEXT=1)",
         _w_ep1_moe_width, (4,)),
)
RULE_IDS = tuple(r.id for r in RULES)
# The rule set of each supported TP size, in RULES order (a finding list keeps that order).
RULE_SETS = dict((tp, tuple(r for r in RULES if r.tp is None or tp in r.tp)) for tp in SUPPORTED_TP_SIZES)


def rules_for(tp_size):
    """The rule set of ``tp_size`` (the inventory's TP size); :class:`UnsupportedTPSize` naming the value when
    no set exists for it."""
    if isinstance(tp_size, bool):
        tp = None
    elif isinstance(tp_size, int):
        tp = tp_size
    else:   # a rendered inventory value ("4"); nothing else is a TP size
        tp = int(tp_size) if isinstance(tp_size, str) and tp_size.isdigit() else None
    if tp not in RULE_SETS:
        raise UnsupportedTPSize(
            "tp_size %r has no launcher rule set (there is one for %s): the settings of such a fleet cannot be "
            "judged, and another size's rules would be wrong for it"
            % (tp_size, " and ".join("TP%d" % n for n in SUPPORTED_TP_SIZES)))
    return RULE_SETS[tp]


def check_settings(settings, tp_size=3, validated=frozenset(), packed=False, timing=False, sps_table_exists=None,
                   varied=frozenset()):
    """Every broken rule of ``tp_size``'s rule set (:func:`rules_for`; :class:`UnsupportedTPSize` for a size
    without one) as a :class:`Finding` (rule id, level, key, message), in :data:`RULES` order.

    ``sps_table_exists``: False when the ``DSPARK_SPS_TABLE`` file is known to be missing where the
    container reads it (the engine then stays on verify-all: no finding), a host path when it is known
    to exist there, None when unknown (refused: it cannot be shown to be harmless). ``varied``: the keys an
    experiment arm varies deliberately (its settings), which a hold rule then leaves to the arm.
    """
    rules = rules_for(tp_size)
    ctx = _Ctx(settings, tp_size, validated, packed, timing, sps_table_exists, varied)
    out = []
    for rule in rules:
        for key, message in rule.check(ctx):
            out.append(Finding(rule.id, rule.level, key, message))
    return out


def validate_settings_full(settings, tp_size=3, validated=frozenset(), packed=False, timing=False, varied=frozenset()):
    """``(errors, warnings)``: two lists of messages, one per broken rule (and key)."""
    found = check_settings(settings, tp_size, validated, packed, timing, varied=varied)
    return ([f.message for f in found if f.level == "error"],
            [f.message for f in found if f.level != "error"])


def validate_settings(settings, tp_size=3, validated=frozenset(), packed=False, timing=False, varied=frozenset()):
    """Error messages only (warnings: :func:`validate_settings_full`)."""
    return validate_settings_full(settings, tp_size, validated, packed, timing, varied)[0]

