"""Lab test runs only: the AnsiballZ bytecode cache for the module runs Ansible makes on the control node.

The lab hosts keep the bytecode of every AnsiballZ payload (lab/standins/dsv41_lab_ansiballz_cache.py, loaded
by a .pth file in the lab image). The module runs on the control node itself (``delegate_to: localhost``: the
run records, the experiment's state file, fetched logs) compile their payload from source on every task as
well, about 0.1 CPU-seconds each, a few hundred times per stage test. tests/run_lab_suites.py puts this
directory first on ``PYTHONPATH`` of every lab job, so each Python it starts loads the same cache (under
``DSV41_LAB_ANSIBALLZ_CACHE``, which the runner sets to its work directory). Nothing else changes: the code
objects are what ``compile`` makes of the same source, and every import but a payload zip's is Python's own.
An operator's control node never has this directory on its path.

Python imports one ``sitecustomize`` only: the interpreter's own, when it has one, is run after the cache is
installed, so shadowing it changes nothing else.
"""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_STANDINS = os.path.join(os.path.dirname(_HERE), "standins")


def _install_cache():
    if not os.environ.get("DSV41_LAB_ANSIBALLZ_CACHE"):
        return      # only where the test runner asked for it, never the cache root of the lab hosts
    sys.path.insert(0, _STANDINS)
    try:
        import dsv41_lab_ansiballz_cache  # noqa: F401  (installs its path hook on import)
    except Exception:   # a cache is an optimisation: never the reason a Python does not start
        pass
    finally:
        sys.path.remove(_STANDINS)


def _chain():
    """Run the sitecustomize this one shadows (Debian's apport hook, for one)."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == _HERE:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        pass


_install_cache()
_chain()
