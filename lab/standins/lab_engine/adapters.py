"""Adapters in the image: which of the engine's adapters take effect (the switch on, the adapter file in the
image and registered by its import hook), and what the image's own files give the engine."""
from __future__ import annotations

import os

from . import knobs
from .constants import IMAGE_ADAPTER_DIR
from .knobs import env_float, flag


def _registered_adapters(sitecustomize: str) -> set:
    """Adapters the image's import hook installs in THIS container's environment (empty if unreadable).

    The hook (the real family's shape) inserts its finder into ``sys.meta_path`` only under its
    condition (``DSV41_SOURCE`` set) and calls ``install_<name>(module)`` in the loader of a wrapped
    engine module, under conditions on the environment (a switch gate, ``DSV41_LAUNCHER == "tp4"``), or
    none. Each condition that reads only ``os`` is evaluated here as the hook would evaluate it; the
    loader's dispatch on the module name (and anything else) counts as true."""
    import ast
    try:
        with open(sitecustomize, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=sitecustomize)
    except (OSError, SyntaxError, ValueError):
        return set()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def holds(node):
        child, cur = node, parents.get(node)
        while cur is not None:
            if isinstance(cur, ast.If) and child is not cur.test \
                    and not {n.id for n in ast.walk(cur.test) if isinstance(n, ast.Name)} - {"os"}:
                try:
                    ok = bool(eval(compile(ast.Expression(cur.test), "<gate>", "eval"),  # noqa: S307 - lab hook
                                   {"os": os, "__builtins__": {}}))
                except Exception:  # noqa: BLE001 - a condition the stand-in cannot evaluate: not installed
                    ok = False
                if ok != (child in cur.body):
                    return False
            child, cur = cur, parents.get(cur)
        return True

    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    if not any(n.func.attr in ("insert", "append") and isinstance(n.func.value, ast.Attribute)
               and n.func.value.attr == "meta_path" and holds(n) for n in calls):
        return set()
    return {n.func.id[len("install_"):] for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("install_")
            and holds(n)}


_IMAGE_CACHE: dict = {}


def registered_adapters() -> set | None:
    """THE one place that decides which adapters the image carries: names whose
    ``$LAB_IMAGE_ROOT/sgl-workspace/adapter/<name>.py`` exists AND that the image's ``sitecustomize.py``
    installs in this container's environment (see :func:`_registered_adapters`). None without LAB_IMAGE_ROOT (an engine started outside
    the docker stand-in): every adapter counts as present."""
    root = knobs.text("LAB_IMAGE_ROOT")
    if root is None:
        return None
    if "registered" not in _IMAGE_CACHE:
        adir = os.path.join(root, IMAGE_ADAPTER_DIR)
        names = _registered_adapters(os.path.join(adir, "sitecustomize.py"))
        _IMAGE_CACHE["registered"] = {n for n in names if os.path.isfile(os.path.join(adir, f"{n}.py"))}
    return _IMAGE_CACHE["registered"]


def adapter_in_image(name: str) -> bool:
    """The adapter NAME is in the container's image and registered in its import hook."""
    names = registered_adapters()
    return names is None or name in names


def prefetch_check_on() -> bool:
    return adapter_on("engram_prefetch") and os.environ.get("DSV41_ENGRAM_PREFETCH_CHECK", "0").strip() == "1"


ARM_ADAPTERS = ("folded_fence", "wo_a_w8", "engram_prefetch", "draft_head_fp8", "draft_tau", "block_verify",
                "verify_cap")


def tau_value() -> float:
    return env_float("DSV41_DRAFT_TAU", 1.0)


def adapter_on(name: str) -> bool:
    """The switch of adapter NAME is on (each switch's own rule) and the adapter is in the image."""
    if name == "engram_prefetch":
        on = os.environ.get("DSV41_ENGRAM_PREFETCH", "0").strip().lower() in ("1", "on", "true")
    elif name == "draft_tau":
        on = abs(tau_value() - 1.0) > 1e-9
    elif name == "engram_drm":
        on = bool(os.environ.get("DSV41_ENGRAM_DRM_NODE", "").strip())
    elif name == "engram_layer_budget":
        on = bool(os.environ.get("DSV41_CACHE_LAYER_GIB", "").strip())
    else:
        switch = {"autotune_keep": "DSV41_AUTOTUNE_KEEP", "folded_fence": "DSV41_FOLDED_FENCE",
                  "wo_a_w8": "DSV41_WO_A_W8", "draft_head_fp8": "DSV41_DRAFT_HEAD_FP8",
                  "block_verify": "DSV41_BLOCK_VERIFY", "verify_cap": "DSV41_VERIFY_CAP"}[name]
        on = flag(switch)
    return on and adapter_in_image(name)


def autotune_keep_armed() -> bool:
    """DSV41_AUTOTUNE_KEEP non-zero and the retention adapter in the image; otherwise the switch is
    silently ignored, as the real engine ignores a switch whose adapter the image does not carry."""
    return adapter_on("autotune_keep")


def small_row_kernel() -> bool:
    """The engine has wo_a's small-row kernel: only the canary, whose W8 adapter carries the kernel module's
    G=4 dispatch (its wo_a_w8.py replaces DeepseekV4Attention.wo_a_forward), or the knob
    LAB_ENGINE_SMALL_ROW_KERNEL=1 (an engine started outside the docker stand-in). Today's fleet image has
    none: W8 runs through its einsum bridge (SPEC section 3)."""
    if knobs.on("LAB_ENGINE_SMALL_ROW_KERNEL"):
        return True
    root = knobs.text("LAB_IMAGE_ROOT")
    if root is None:
        return False
    if "small_row" not in _IMAGE_CACHE:
        try:
            with open(os.path.join(root, IMAGE_ADAPTER_DIR, "wo_a_w8.py"), encoding="utf-8", errors="replace") as fh:
                _IMAGE_CACHE["small_row"] = "DeepseekV4Attention.wo_a_forward =" in fh.read()
        except OSError:
            _IMAGE_CACHE["small_row"] = False
    return _IMAGE_CACHE["small_row"]


def wo_a_bridge() -> bool:
    """wo_a_w8 is armed and runs through the einsum bridge (no small-row kernel in this engine)."""
    return adapter_on("wo_a_w8") and not small_row_kernel()
