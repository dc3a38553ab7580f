"""module_utils/base/probe_read.py: the root probe never blocks or follows what the login user put in its way."""
import os
import threading

import pytest

from ansible.module_utils.adapters import arming
from ansible.module_utils.base import probe_read
from ansible.module_utils.drift import snapshot


def _fifo(path):
    os.mkfifo(str(path))
    return path


@pytest.mark.parametrize("make, needle", [
    (lambda p: _fifo(p), "is a FIFO, not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "is a symlink; the probe does not follow it"),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
])
def test_a_fifo_a_device_symlink_or_a_directory_is_refused_at_once(tmp_path, make, needle):
    target = tmp_path / "adapter.py"
    make(target)
    outcome = {}

    def read():
        try:
            probe_read.sha256(str(target))
        except probe_read.ProbeReadError as exc:
            outcome["error"] = str(exc)
    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "the probe blocked"
    assert needle in outcome["error"] and str(target) in outcome["error"]
    with pytest.raises(probe_read.ProbeReadError, match=needle):
        probe_read.read_text(str(target))


def test_regular_files_missing_files_and_the_size_cap(tmp_path):
    f = tmp_path / "hook.py"
    f.write_text("import os\n")
    assert probe_read.read_text(str(f)) == "import os\n"
    assert probe_read.sha256(str(f)) == snapshot.sha256_file(str(f))
    assert probe_read.read_bytes(str(tmp_path / "gone")) is None and probe_read.sha256(str(tmp_path / "gone")) is None
    f.write_bytes(b"x" * 2000)
    with pytest.raises(probe_read.ProbeReadError, match="is larger than 1000 bytes"):
        probe_read.read_bytes(str(f), limit=1000)


def test_the_adapter_switch_read_skips_a_fifo_instead_of_hanging(tmp_path):
    _fifo(tmp_path / "wo_a_w8.py")
    (tmp_path / "fence.py").write_text('import os\nON = os.environ.get("DSV41_FOLDED_FENCE") == "1"\n')
    done = {}
    worker = threading.Thread(target=lambda: done.update(r=arming.adapter_reads(
        str(tmp_path), {"wo_a_w8": "DSV41_WO_A_W8", "fence": "DSV41_FOLDED_FENCE"})), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and done["r"]["wo_a_w8"] is None and done["r"]["fence"] is True
