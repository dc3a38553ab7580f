# -*- coding: utf-8 -*-
"""dsv41 adapter import hook: the launcher checkout's ``adapter/sitecustomize.py`` (LAB SEED copy).

The checkout's ``adapter/`` directory is bind-mounted read-only at ``/adapter`` in both serving
containers and is on ``PYTHONPATH``, so every Python process in the container imports this file
at start-up (``site`` imports ``sitecustomize``). It does two things:

1. Finder. A meta-path finder serves ``adapter.<name>`` from ``<this directory>/<name>.py`` for
   the modules registered in ``_ADAPTERS`` only: a stray file in the directory (for instance the
   TP4 ``wo_a_w8.py`` copied beside the local one under another name) is never importable as an
   adapter.
2. Install. One explicit branch per adapter, gated on its switch variable. Switches default off
   (the launcher forwards ``${VAR:-0}``); an adapter whose switch is unset or "0" is never even
   imported. ``DSV41_DRAFT_TAU`` is a float: 1 (or unset) is off. ``DSV41_VERIFY_CAP`` is
   ``conf:<float>``: unset or 0 is off. A switched-on adapter that fails to import or install
   stops the process with a message naming it (``site`` would otherwise print a warning and
   start the engine without the adapter).

Format contract (read by ``module_utils/launcher.py`` ``sitecustomize_registrations`` and checked
by the adapters role): ``_ADAPTERS`` maps module name -> switch; each adapter has a branch
``if _on("SWITCH"): from adapter import <name>; _install("<name>", <name>)``. Adding an adapter is
one mapping entry plus one branch (stage B adds ``autotune_keep`` / ``DSV41_AUTOTUNE_KEEP``).
Seven local adapters are registered: six byte-identical to the pinned downstream revision and
the local TP3 ``wo_a_w8``.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_PACKAGE = "adapter"
_ADAPTER_DIR = os.environ.get("DSV41_ADAPTER_DIR") or os.path.dirname(os.path.abspath(__file__))

# Finder mapping: adapter module -> switch variable (one entry per line).
_ADAPTERS = {
    "engram_prefetch": "DSV41_ENGRAM_PREFETCH",
    "draft_head_fp8": "DSV41_DRAFT_HEAD_FP8",
    "draft_tau": "DSV41_DRAFT_TAU",
    "block_verify": "DSV41_BLOCK_VERIFY",
    "verify_cap": "DSV41_VERIFY_CAP",
    "folded_fence": "DSV41_FOLDED_FENCE",
    "wo_a_w8": "DSV41_WO_A_W8",
    "autotune_keep": "DSV41_AUTOTUNE_KEEP",
}


def _on(var, off=("", "0")):
    """A switch is on unless unset or one of ``off``."""
    return os.environ.get(var, "0").strip() not in off


class _AdapterFinder(importlib.abc.MetaPathFinder):
    """Serves ``adapter`` (an empty package) and ``adapter.<name>`` for registered names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == _PACKAGE:
            spec = importlib.machinery.ModuleSpec(_PACKAGE, None, is_package=True)
            spec.submodule_search_locations = []
            return spec
        package, _, name = fullname.partition(".")
        if package != _PACKAGE or name not in _ADAPTERS:
            return None
        location = os.path.join(_ADAPTER_DIR, name + ".py")
        if not os.path.isfile(location):
            return None
        return importlib.util.spec_from_file_location(fullname, location)


def _fail(name, exc):
    sys.stderr.write("DSV41 adapter %s (%s=%s): %s: %s\n"
                     % (name, _ADAPTERS[name], os.environ.get(_ADAPTERS[name], ""), type(exc).__name__, exc))
    sys.stderr.flush()
    os._exit(1)


def _install(name, module):
    try:
        module.install()
    except Exception as exc:  # noqa: BLE001 - any failure must stop the boot, naming the adapter
        _fail(name, exc)
    sys.stderr.write("DSV41 adapter %s installed (%s=%s)\n" % (name, _ADAPTERS[name], os.environ[_ADAPTERS[name]]))


if not any(isinstance(f, _AdapterFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AdapterFinder())


def _install_adapters():
    # One gated branch per adapter; the import itself is inside the branch.
    if _on("DSV41_ENGRAM_PREFETCH"):
        try:
            from adapter import engram_prefetch
        except Exception as exc:  # noqa: BLE001
            _fail("engram_prefetch", exc)
        _install("engram_prefetch", engram_prefetch)

    if _on("DSV41_DRAFT_HEAD_FP8"):
        try:
            from adapter import draft_head_fp8
        except Exception as exc:  # noqa: BLE001
            _fail("draft_head_fp8", exc)
        _install("draft_head_fp8", draft_head_fp8)

    if _on("DSV41_DRAFT_TAU", off=("", "0", "1", "1.0")):
        try:
            from adapter import draft_tau
        except Exception as exc:  # noqa: BLE001
            _fail("draft_tau", exc)
        _install("draft_tau", draft_tau)

    if _on("DSV41_BLOCK_VERIFY"):
        try:
            from adapter import block_verify
        except Exception as exc:  # noqa: BLE001
            _fail("block_verify", exc)
        _install("block_verify", block_verify)

    if _on("DSV41_VERIFY_CAP"):
        try:
            from adapter import verify_cap
        except Exception as exc:  # noqa: BLE001
            _fail("verify_cap", exc)
        _install("verify_cap", verify_cap)

    if _on("DSV41_FOLDED_FENCE"):
        try:
            from adapter import folded_fence
        except Exception as exc:  # noqa: BLE001
            _fail("folded_fence", exc)
        _install("folded_fence", folded_fence)

    if _on("DSV41_WO_A_W8"):
        try:
            from adapter import wo_a_w8
        except Exception as exc:  # noqa: BLE001
            _fail("wo_a_w8", exc)
        _install("wo_a_w8", wo_a_w8)

    if _on("DSV41_AUTOTUNE_KEEP"):
        try:
            from adapter import autotune_keep
        except Exception as exc:  # noqa: BLE001
            _fail("autotune_keep", exc)
        _install("autotune_keep", autotune_keep)


_install_adapters()
