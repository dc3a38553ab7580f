"""Shared fixtures of the unit tests."""
import pytest

import ckpt_factory

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
