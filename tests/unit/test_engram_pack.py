"""pack_layer and the engram_pack module: byte-exact output, idempotence, faults, locking."""
import errno
import fcntl
import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

import ckpt_factory
import engram_pack
from ansible.module_utils import engram_format as ef
from ansible.module_utils.engram_format import (
    EngramFormatError, EngramPackError, pack_layer, partial_name, shard_name)

HOST = os.uname().nodename
ROWS = {1: 4099, 14: 3001}


@pytest.fixture
def ckpt(tmp_path):
    return ckpt_factory.make_checkpoint(str(tmp_path / "ckpt"), rows=ROWS)["dir"]


@pytest.fixture
def dest(tmp_path):
    path = tmp_path / "engram"
    path.mkdir()
    return str(path)


def _content(path):
    with open(path, "rb") as handle:
        return handle.read()


def _assert_exact(ckpt_dir, dest_dir, layer, rank, tp):
    path = os.path.join(dest_dir, shard_name(layer, rank, tp))
    assert _content(path) == ckpt_factory.expected_shard(ckpt_dir, layer, rank, tp)


def _foreign_files(dest_dir):
    """Files the packer must never touch: TP2 shards, another rank's shard, an unrelated file."""
    for name, size in (("engram-l1-r1of2.bin", 9000), ("engram-l14-r1of2.bin", 7000),
                       ("engram-l1-r2of3.bin", 5000), ("notes.txt", 100)):
        with open(os.path.join(dest_dir, name), "wb") as handle:
            handle.write(os.urandom(size))
    return ckpt_factory.snapshot(dest_dir)


# --------------------------------------------------------------------------- correct output

@pytest.mark.parametrize("chunk_rows", [7, 1500, None])
@pytest.mark.parametrize("layer", [1, 14])
def test_byte_exact_all_ranks_uneven_rows(ckpt, dest, layer, chunk_rows):
    """N=4099 and N=3001 split unevenly over 3 ranks; chunks smaller and larger than IOV_MAX rows."""
    for rank in range(3):
        result = pack_layer(ckpt, dest, layer, rank, 3, chunk_rows=chunk_rows)
        lo, hi = ROWS[layer] * rank // 3, ROWS[layer] * (rank + 1) // 3
        assert result["changed"] is True and result["state_before"] == "missing"
        assert (result["lo"], result["hi"], result["rows"]) == (lo, hi, hi - lo)
        assert result["bytes"] == 4096 + (hi - lo) * 264 == os.path.getsize(result["path"])
        assert result["seconds"] >= 0 and result["throughput_mib_s"] >= 0
        _assert_exact(ckpt, dest, layer, rank, 3)
    assert sorted(os.listdir(dest)) == sorted([".engram-pack.lock"] + [shard_name(layer, r, 3) for r in range(3)])


def test_whole_table_tp1(ckpt, dest):
    pack_layer(ckpt, dest, 14, 0, 1, chunk_bytes=264 * 100)
    _assert_exact(ckpt, dest, 14, 0, 1)


def test_second_run_is_unchanged(ckpt, dest):
    first = pack_layer(ckpt, dest, 1, 1, 3)
    before = os.stat(first["path"])
    second = pack_layer(ckpt, dest, 1, 1, 3)
    assert second["changed"] is False and second["state_before"] == "complete"
    assert second["seconds"] == 0.0 and second["path"] == first["path"]
    assert os.stat(first["path"]).st_mtime_ns == before.st_mtime_ns


def test_check_mode_touches_nothing(ckpt, dest):
    result = pack_layer(ckpt, dest, 1, 0, 3, check_mode=True)
    assert result["changed"] is True and result["state_before"] == "missing"
    assert result["bytes"] == 4096 + 1366 * 264
    assert os.listdir(dest) == []
    pack_layer(ckpt, dest, 1, 0, 3)
    assert pack_layer(ckpt, dest, 1, 0, 3, check_mode=True)["changed"] is False


def test_progress_file(ckpt, dest, tmp_path):
    progress = str(tmp_path / "progress.json")
    result = pack_layer(ckpt, dest, 14, 2, 3, chunk_rows=10, progress_path=progress)
    with open(progress) as handle:
        assert json.load(handle) == {"done_bytes": result["bytes"], "total_bytes": result["bytes"],
                                     "percent": 100.0}


# --------------------------------------------------------------------------- stale and partial

@pytest.mark.parametrize("damage", ["wrong_lo", "wrong_length"])
def test_stale_final_is_detected_and_replaced(ckpt, dest, damage):
    path = pack_layer(ckpt, dest, 14, 1, 3)["path"]
    data = bytearray(_content(path))
    if damage == "wrong_lo":
        data[16:24] = (999).to_bytes(8, "little")
    else:
        data = data[:-264]
    with open(path, "wb") as handle:
        handle.write(data)
    assert ef.inspect_shard(dest, 14, 1, 3, ROWS[14]) == "stale"
    result = pack_layer(ckpt, dest, 14, 1, 3)
    assert result["changed"] is True and result["state_before"] == "stale"
    _assert_exact(ckpt, dest, 14, 1, 3)


def test_stale_final_space_counts_as_reclaimable(ckpt, dest, monkeypatch):
    """Free space alone is short, but the stale file being replaced makes room."""
    path = pack_layer(ckpt, dest, 1, 0, 3)["path"]
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.write(b"\0" * 8)  # bad magic
    monkeypatch.setattr(ef, "free_bytes", lambda d: 4096)
    assert pack_layer(ckpt, dest, 1, 0, 3)["state_before"] == "stale"
    assert os.path.getsize(path) == size
    _assert_exact(ckpt, dest, 1, 0, 3)


def test_leftover_partial_is_overwritten(ckpt, dest):
    partial = os.path.join(dest, partial_name(1, 2, 3))
    with open(partial, "wb") as handle:
        handle.write(os.urandom(2 * 1024 * 1024))  # longer than the real shard: must be truncated
    result = pack_layer(ckpt, dest, 1, 2, 3)
    assert result["state_before"] == "partial"
    assert not os.path.exists(partial)
    _assert_exact(ckpt, dest, 1, 2, 3)


def test_other_files_untouched(ckpt, dest):
    before = _foreign_files(dest)
    pack_layer(ckpt, dest, 1, 1, 3)
    after = ckpt_factory.snapshot(dest)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {".engram-pack.lock", "engram-l1-r1of3.bin"}


# --------------------------------------------------------------------------- faults

def test_sigkill_mid_pack_leaves_no_final_and_rerun_is_exact(tmp_path, dest):
    big = ckpt_factory.make_checkpoint(str(tmp_path / "big"), rows={1: 20000, 14: 10})["dir"]
    progress = str(tmp_path / "progress.json")
    python, bootstrap = ckpt_factory.python_with_module_utils()
    # Slow the reads down in the child only, so the kill lands mid-write.
    script = bootstrap + textwrap.dedent("""
        import os, sys, time
        real_preadv = os.preadv
        def slow_preadv(*args):
            time.sleep(0.002)
            return real_preadv(*args)
        os.preadv = slow_preadv
        from ansible.module_utils import engram_format as ef
        ef.PROGRESS_INTERVAL_S = 0.05
        ef.pack_layer(sys.argv[1], sys.argv[2], 1, 0, 1, chunk_rows=64, progress_path=sys.argv[3])
    """)
    child = subprocess.Popen([python, "-c", script, big, dest, progress])
    deadline = time.monotonic() + 30
    percent = 0
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with open(progress) as handle:
                percent = json.load(handle)["percent"]
        except (OSError, ValueError):
            percent = 0
        if percent > 0:
            break
        time.sleep(0.02)
    assert child.poll() is None, "packer finished before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert 0 < percent < 100
    final = os.path.join(dest, shard_name(1, 0, 1))
    assert not os.path.exists(final)
    assert os.path.exists(os.path.join(dest, partial_name(1, 0, 1)))
    assert ef.inspect_shard(dest, 1, 0, 1, 20000) == "partial"

    result = pack_layer(big, dest, 1, 0, 1)
    assert result["state_before"] == "partial" and result["changed"] is True
    _assert_exact(big, dest, 1, 0, 1)
    assert not os.path.exists(os.path.join(dest, partial_name(1, 0, 1)))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 512 KiB tmpfs (root only); skipped where mounting is not allowed."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
                          capture_output=True)
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % proc.stderr.decode().strip())
    yield str(mount)
    subprocess.run(["umount", str(mount)], check=True)


def _assert_clean_failure(message, dest_dir, before, final_name):
    assert HOST in message and os.path.join(dest_dir, final_name) in message
    assert "ENOSPC" in message and "No space left on device" in message
    after = ckpt_factory.snapshot(dest_dir)
    assert not os.path.exists(os.path.join(dest_dir, final_name))
    assert not any(name.endswith(".partial") for name in after)
    assert {k: v for k, v in after.items() if k in before} == before


def test_full_disk_mid_write_tmpfs(ckpt, small_tmpfs, monkeypatch):
    before = _foreign_files(small_tmpfs)
    # The table (1.08 MB) cannot fit in 512 KiB; pretend the pre-check passed so the write
    # itself runs into the real ENOSPC.
    monkeypatch.setattr(ef, "free_bytes", lambda d: 1 << 40)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, small_tmpfs, 1, 0, 1, chunk_rows=100)
    _assert_clean_failure(str(info.value), small_tmpfs, before, shard_name(1, 0, 1))


def test_full_disk_mid_write_simulated(ckpt, dest, monkeypatch):
    before = _foreign_files(dest)
    real_write = os.write
    written = [0]

    def filling_write(fd, data):
        if written[0] > 300000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written[0] += len(data)
        return real_write(fd, data)

    monkeypatch.setattr(ef.os, "write", filling_write)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 1, chunk_rows=100)
    monkeypatch.undo()
    _assert_clean_failure(str(info.value), dest, before, shard_name(1, 0, 1))


def test_not_enough_space_refuses_before_writing(ckpt, dest, monkeypatch):
    before = _foreign_files(dest)
    monkeypatch.setattr(ef, "free_bytes", lambda d: 1000)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 14, 0, 3, margin_bytes=50)
    need = 4096 + 1000 * 264 + 50
    message = str(info.value)
    assert HOST in message and dest in message and "deficit %d bytes" % (need - 1000) in message
    assert set(ckpt_factory.snapshot(dest)) - set(before) == {".engram-pack.lock"}


def test_truncated_checkpoint_read_fails_cleanly(ckpt, dest, monkeypatch):
    """The checkpoint shrinks after its header was validated: the short read names the shard."""
    real = ef.read_engram_tables

    def then_truncate(checkpoint, layers):
        tables = real(checkpoint, layers)
        os.truncate(tables[1].shard_path, tables[1].scale_offset + 100)
        return tables

    monkeypatch.setattr(ef, "read_engram_tables", then_truncate)
    with pytest.raises(EngramFormatError) as info:
        pack_layer(ckpt, dest, 1, 2, 3)
    assert "model-00001-of-00002.safetensors: is truncated" in str(info.value)
    assert sorted(os.listdir(dest)) == [".engram-pack.lock"]


def test_missing_dest_names_host(ckpt, tmp_path):
    missing = str(tmp_path / "absent")
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, missing, 1, 0, 3)
    assert HOST in str(info.value) and missing in str(info.value) and "does not exist" in str(info.value)
    assert not os.path.exists(missing)


# --------------------------------------------------------------------------- locking

@pytest.fixture
def held_lock(dest):
    fd = os.open(os.path.join(dest, ".engram-pack.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield fd
    os.close(fd)


def test_concurrent_pack_refuses_immediately(ckpt, dest, held_lock):
    started = time.monotonic()
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 3, lock_timeout=0)
    assert time.monotonic() - started < 1
    message = str(info.value)
    assert "another engram pack holds" in message and HOST in message and dest in message
    assert os.listdir(dest) == [".engram-pack.lock"]


def test_lock_timeout_waits_then_refuses(ckpt, dest, held_lock):
    started = time.monotonic()
    with pytest.raises(EngramPackError, match="waited 0.3s"):
        pack_layer(ckpt, dest, 1, 0, 3, lock_timeout=0.3)
    assert time.monotonic() - started >= 0.3


def test_lock_released_after_pack(ckpt, dest):
    pack_layer(ckpt, dest, 1, 0, 3)
    fd = os.open(os.path.join(dest, ".engram-pack.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- module entry point

def _run(args, check_mode=False):
    return ckpt_factory.run_module(engram_pack.main, args, check_mode=check_mode)


def test_module_packs_then_is_idempotent(ckpt, dest):
    args = {"checkpoint": ckpt, "dest": dest, "layer": 14, "rank": 1, "tp_size": 3, "mode": "0600",
            "chunk_rows": 50}
    first = _run(args)
    assert first.get("failed") is not True, first
    assert first["changed"] is True and first["state_before"] == "missing" and first["rows"] == 1000
    assert os.stat(first["path"]).st_mode & 0o777 == 0o600
    _assert_exact(ckpt, dest, 14, 1, 3)
    second = _run(args)
    assert second["changed"] is False and second["state_before"] == "complete"
    third = _run(dict(args, mode="0644"), check_mode=True)
    assert third["changed"] is True  # mode would change
    assert os.stat(first["path"]).st_mode & 0o777 == 0o600


def test_module_check_mode_writes_nothing(ckpt, dest):
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3,
                   "mode": "0600", "owner": "root"}, check_mode=True)
    assert result["changed"] is True and result["state_before"] == "missing"
    assert result["bytes"] == 4096 + 1366 * 264
    assert os.listdir(dest) == []


@pytest.mark.parametrize("case", sorted(ckpt_factory.MALFORMED_CASES))
@pytest.mark.parametrize("check_mode", [False, True])
def test_module_malformed_fails_naming_file(case, check_mode, tmp_path, dest):
    bad = ckpt_factory.MALFORMED_CASES[case](str(tmp_path / "bad"))
    result = _run({"checkpoint": bad["dir"], "dest": dest, "layer": bad["layer"], "rank": bad["rank"],
                   "tp_size": bad["tp_size"]}, check_mode=check_mode)
    assert result["failed"] is True
    assert bad["file"] in result["msg"] and bad["message"] in result["msg"], result["msg"]
    assert os.listdir(dest) == []


def test_module_missing_dest_names_host(ckpt, tmp_path):
    result = _run({"checkpoint": ckpt, "dest": str(tmp_path / "absent"), "layer": 1, "rank": 0,
                   "tp_size": 3})
    assert result["failed"] is True and HOST in result["msg"] and "absent" in result["msg"]


def test_module_chunk_options_exclusive(ckpt, dest):
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3,
                   "chunk_rows": 10, "chunk_bytes": 4096})
    assert result["failed"] is True and "mutually exclusive" in result["msg"]


def test_module_lock_refusal(ckpt, dest, held_lock):
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3})
    assert result["failed"] is True and "another engram pack holds" in result["msg"]


def test_module_documentation_is_yaml():
    import yaml
    doc = yaml.safe_load(engram_pack.DOCUMENTATION)
    assert set(doc["options"]) == {"checkpoint", "dest", "layer", "rank", "tp_size", "margin_bytes",
                                   "chunk_rows", "chunk_bytes", "lock_timeout", "progress_file",
                                   "owner", "group", "mode"}
    yaml.safe_load(engram_pack.EXAMPLES)
    assert set(yaml.safe_load(engram_pack.RETURN)) == {
        "changed", "path", "bytes", "rows", "lo", "hi", "seconds", "throughput_mib_s", "state_before"}


def test_module_runs_as_a_script(ckpt, dest, tmp_path):
    """The module file runs stand-alone the way Ansible ships it (args file on the command line)."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3}}))
    python, bootstrap = ckpt_factory.python_with_module_utils()
    module_path = engram_pack.__file__
    script = bootstrap + "import runpy, sys; sys.argv = [%r, %r]; runpy.run_path(%r, run_name='__main__')" % (
        module_path, str(args), module_path)
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
    result = json.loads(proc.stdout)
    assert result["changed"] is True, proc.stderr
    _assert_exact(ckpt, dest, 1, 0, 3)
