# -*- coding: utf-8 -*-
"""dsv41 adapter import hook: the launcher checkout's ``adapter/sitecustomize.py`` (LAB SEED copy).

The image carries the checkout's ``adapter/`` at ``/sgl-workspace/adapter`` and ``site`` imports this
file in every Python process of the container. Nothing happens unless the launcher sets
``DSV41_SOURCE`` (the directory holding ``adapter/``): then a finder is inserted into
``sys.meta_path`` that wraps a fixed list of engine modules (``_WRAPPED``). When one of them is
imported, the engine module executes as usual and its loader then calls the ``install_<adapter>``
functions registered for it:

* most are gated by their switch (``if os.environ.get("DSV41_X", "0") not in ("0", "", "off", "false"):``);
  the prefetch gate takes only ``1``, ``on`` or ``true``;
* ``install_draft_tau`` is not gated: the adapter reads ``DSV41_DRAFT_TAU`` itself (a float; 1 is off);
* ``install_shared_pad`` runs only on the TP4 launcher (``DSV41_LAUNCHER=tp4``): never on TP3;
* the confidence cap hooks five modules.

A switched-on adapter that fails to import or install stops the process with a message naming it
(``site`` would otherwise print a warning and start the engine without the adapter). Adding an adapter
is one module name in ``_WRAPPED`` (if its engine module is not wrapped yet), one ``install_<name>``
function and one gated call in that module's branch.
"""
import importlib
import importlib.abc
import os
import sys

_OFF = ("0", "", "off", "false")

# The engine modules whose import is wrapped (the loader installs adapters after each one executes).
_WRAPPED = (
    "sglang.srt.layers.engram",
    "sglang.srt.models.deepseek_v4",
    "sglang.srt.speculative.dspark_components.dspark_verify",
    "sglang.srt.speculative.dspark_components.dspark_draft",
    "sglang.srt.speculative.dspark_worker",
    "sglang.srt.model_executor.cuda_graph_runner",
)


def _fail(name, exc):
    sys.stderr.write("DSV41 adapter %s: %s: %s\n" % (name, type(exc).__name__, exc))
    sys.stderr.flush()
    os._exit(1)


def _adapter(name):
    """``adapter.<name>`` from the launcher checkout the image was built from (``$DSV41_SOURCE/adapter``)."""
    source = os.environ["DSV41_SOURCE"]
    if source not in sys.path:
        sys.path.insert(0, source)
    try:
        return importlib.import_module("adapter." + name)
    except Exception as exc:  # noqa: BLE001 - any failure must stop the boot, naming the adapter
        _fail(name, exc)


def _install(name):
    try:
        _adapter(name).install()
    except Exception as exc:  # noqa: BLE001 - any failure must stop the boot, naming the adapter
        _fail(name, exc)


def install_engram_prefetch(module):
    _install("engram_prefetch")


def install_wo_a_w8(module):
    _install("wo_a_w8")


def install_draft_head_fp8(module):
    _install("draft_head_fp8")


def install_verify_cap(module):
    _install("verify_cap")      # idempotent: the cap hooks five modules, it patches once


def install_block_verify(module):
    _install("block_verify")


def install_folded_fence(module):
    _install("folded_fence")


def install_draft_tau(module):
    _install("draft_tau")


def install_shared_pad(module):
    _install("shared_pad")


class _Loader(importlib.abc.Loader):
    """Runs the engine module's own loader, then installs the adapters registered for it."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        name = module.__name__
        if name == "sglang.srt.layers.engram":
            if os.environ.get("DSV41_ENGRAM_PREFETCH", "0").strip().lower() in ("1", "on", "true"):
                install_engram_prefetch(module)
        elif name == "sglang.srt.models.deepseek_v4":
            if os.environ.get("DSV41_WO_A_W8", "0") not in ("0", "", "off", "false"):
                install_wo_a_w8(module)
            if os.environ.get("DSV41_DRAFT_HEAD_FP8", "0") not in ("0", "", "off", "false"):
                install_draft_head_fp8(module)
            if os.environ.get("DSV41_VERIFY_CAP", "0") not in ("0", "", "off", "false"):
                install_verify_cap(module)
            if os.environ.get("DSV41_LAUNCHER") == "tp4":
                if os.environ.get("DSV41_SHARED_PAD_K", "0") not in ("0", "", "off", "false"):
                    install_shared_pad(module)
        elif name == "sglang.srt.speculative.dspark_components.dspark_verify":
            if os.environ.get("DSV41_BLOCK_VERIFY", "0") not in ("0", "", "off", "false"):
                install_block_verify(module)
            if os.environ.get("DSV41_FOLDED_FENCE", "0") not in ("0", "", "off", "false"):
                install_folded_fence(module)
            if os.environ.get("DSV41_VERIFY_CAP", "0") not in ("0", "", "off", "false"):
                install_verify_cap(module)
        elif name == "sglang.srt.speculative.dspark_components.dspark_draft":
            install_draft_tau(module)
            if os.environ.get("DSV41_VERIFY_CAP", "0") not in ("0", "", "off", "false"):
                install_verify_cap(module)
        elif name in ("sglang.srt.speculative.dspark_worker", "sglang.srt.model_executor.cuda_graph_runner"):
            if os.environ.get("DSV41_VERIFY_CAP", "0") not in ("0", "", "off", "false"):
                install_verify_cap(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the engine modules in ``_WRAPPED``; every other import is left alone."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WRAPPED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


if os.environ.get("DSV41_SOURCE"):
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
