"""module_utils/base/safe_open.py: a name replaced by a symlink or a FIFO is never read through nor waited on."""
import errno
import os

import pytest

from ansible.module_utils.base.safe_open import OPEN_SAFE, open_read


def test_open_read_reads_a_regular_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"data")
    fd = open_read(str(path))
    try:
        assert os.read(fd, 10) == b"data"
        assert not os.get_inheritable(fd)                    # O_CLOEXEC: a child does not inherit it
    finally:
        os.close(fd)


def test_a_symlink_is_not_followed(tmp_path):
    (tmp_path / "target").write_bytes(b"secret")
    os.symlink(str(tmp_path / "target"), str(tmp_path / "link"))
    with pytest.raises(OSError) as err:
        open_read(str(tmp_path / "link"))
    assert err.value.errno == errno.ELOOP


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(str(tmp_path / "fifo"))              # opened without O_NONBLOCK this would wait for a writer
    with pytest.raises(OSError) as err:
        open_read(str(tmp_path / "fifo"))
    assert err.value.errno == errno.EINVAL and "not a regular file" in str(err.value)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(OSError) as err:
        open_read(str(tmp_path))
    assert err.value.errno == errno.EINVAL


def test_a_missing_file_raises_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_read(str(tmp_path / "missing"))


def test_writers_open_through_the_same_flags(tmp_path):
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "link"))
    with pytest.raises(OSError) as err:
        os.open(str(tmp_path / "link"), os.O_WRONLY | os.O_CREAT | OPEN_SAFE, 0o600)
    assert err.value.errno == errno.ELOOP and not (tmp_path / "elsewhere").exists()
