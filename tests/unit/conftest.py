"""Shared fixtures of the unit tests, and the import path of their tree.

The tests are laid out like the code they test (``modules/``, ``module_utils/<package>/``, ``filters/``,
``lab/``, ...), and a few share fixtures by importing another test module by name (``from test_decode_bench
import engine``). Every directory of the tree is on the import path before any test module is collected, so
such an import works whichever file runs first or alone; test file names are unique across the tree.
"""
import os
import sys

import pytest

UNIT = os.path.dirname(os.path.abspath(__file__))
for _dir, _subdirs, _files in sorted(os.walk(UNIT)):
    _subdirs[:] = [d for d in _subdirs if d not in ("__pycache__", "fixtures")]
    if _dir not in sys.path and any(f.startswith("test_") and f.endswith(".py") for f in _files):
        sys.path.append(_dir)

import ckpt_factory  # noqa: E402  (tests/unit itself is on the path through pytest's rootdir conftest)

from ansible.module_utils import _internal as module_utils_internal


@pytest.fixture(autouse=True)
def stay_a_module_process():
    """A filter error is an AnsibleFilterError, controller code whose import marks the whole process as
    the controller (module warnings then go to the display instead of the module result). Module tests
    run later in the same pytest process must still see module behaviour."""
    was = module_utils_internal.is_controller
    yield
    module_utils_internal.is_controller = was


@pytest.fixture
def dest(tmp_path):
    """An empty Engram destination directory."""
    path = tmp_path / "engram"
    path.mkdir()
    return str(path)


@pytest.fixture
def full_ckpt(tmp_path):
    """Header-only sparse checkpoint with the real table shapes."""
    return ckpt_factory.make_checkpoint(str(tmp_path / "full"), sparse=True)["dir"]
