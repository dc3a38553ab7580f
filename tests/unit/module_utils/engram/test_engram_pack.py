"""pack_layer and the engram_pack module: byte-exact output, idempotence, faults, locking."""
import errno
import fcntl
import json
import os
import signal
import stat
import subprocess
import textwrap
import time

import pytest

import ckpt_factory
from modrun import run_module
import engram_pack
import engram_plan
from ansible.module_utils.engram import packer as engram_packer, lock as pack_lock, plan as pack_plan, progress as pack_progress, safetensors_index
from ansible.module_utils.engram import shard_format, provenance as shard_provenance
from ansible.module_utils.base import process_wait
from ansible.module_utils.engram.packer import pack_layer
from ansible.module_utils.engram.shard_format import EngramFormatError, EngramPackError, partial_name, shard_name

HOST = os.uname().nodename
MIB = 1 << 20
ROWS = {1: 4099, 14: 3001}


@pytest.fixture
def ckpt(tmp_path):
    return ckpt_factory.make_checkpoint(str(tmp_path / "ckpt"), rows=ROWS)["dir"]


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
    assert sorted(os.listdir(dest)) == sorted([".engram-pack.lock"] + [shard_name(layer, r, 3) for r in range(3)]
                                              + [shard_format.meta_name(layer, r, 3) for r in range(3)])


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
    result = pack_layer(ckpt, dest, 14, 2, 3, chunk_rows=10, progress_path=progress, run_id="run-7")
    record = pack_progress.read_progress(progress)
    assert record["state"] == "done" and record["run_id"] == "run-7" and record["pid"] == os.getpid()
    assert (record["layer"], record["rank"], record["tp_size"]) == (14, 2, 3)
    assert record["done_bytes"] == record["total_bytes"] == result["bytes"] and record["percent"] == 100.0
    assert record["path"] == result["path"] and record["partial_path"] == os.path.join(dest, partial_name(14, 2, 3))
    assert result["path"] in record["message"] and "{:,}".format(result["bytes"]) in record["message"]
    assert record["started"] <= record["updated"]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    # An already complete shard says so, and writes nothing.
    pack_layer(ckpt, dest, 14, 2, 3, progress_path=progress, run_id="run-8")
    record = pack_progress.read_progress(progress)
    assert record["state"] == "done" and record["run_id"] == "run-8" and "already complete" in record["message"]


def test_progress_record_while_packing(ckpt, dest, tmp_path, monkeypatch):
    """Every record written mid-pack has consistent figures: done grows, percent and ETA follow it."""
    progress = str(tmp_path / "progress.json")
    seen = []
    real_update = pack_progress.Progress.update

    def spy(self, **fields):
        real_update(self, **fields)
        if self.path:
            seen.append(pack_progress.read_progress(self.path))

    monkeypatch.setattr(pack_progress.Progress, "update", spy)
    clock = FakeClock()
    use_clock(monkeypatch, clock)
    monkeypatch.setattr(engram_packer, "PROGRESS_INTERVAL_S", 0.0)
    pack_layer(ckpt, dest, 1, 0, 3, progress_path=progress, max_mib_s=0.25)
    states = [r["state"] for r in seen]
    assert states[0] == "starting" and states[-1] == "done" and "waiting_lock" in states
    packing = [r for r in seen if r["state"] == "packing"]
    assert len(packing) > 3
    done = [r["done_bytes"] for r in packing]
    assert done == sorted(done) and done[-1] == packing[-1]["total_bytes"] == 4096 + 1366 * 264
    for r in packing[1:-1]:
        assert 0 < r["percent"] < 100 and r["percent"] == round(100.0 * r["done_bytes"] / r["total_bytes"], 2)
        assert r["mib_s"] <= 0.25 and r["eta_s"] > 0 and r["max_mib_s"] == 0.25


# --------------------------------------------------------------------------- rate cap

class FakeClock(object):
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.t = 1000.0
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.t += seconds


def use_clock(monkeypatch, clock):
    """The fake clock for every part of a pack that keeps time: the packer, its rate cap, its lock wait."""
    for module in (engram_packer, pack_progress, pack_lock):
        monkeypatch.setattr(module, "_clock", clock.now)
    for module in (engram_packer, pack_progress):
        monkeypatch.setattr(module, "_sleep", clock.sleep)


def test_rate_limit_holds_the_average_at_the_cap():
    clock = FakeClock()
    limit = pack_progress.RateLimit(2)
    limit_clock = (pack_progress._clock, pack_progress._sleep)
    pack_progress._clock, pack_progress._sleep = clock.now, clock.sleep
    try:
        limit.start()
        for _ in range(10):
            limit.pace(MIB // 2)
        assert clock.t - 1000.0 == pytest.approx(2.5)  # 5 MiB at 2 MiB/s
        clock.t += 3.0  # time spent elsewhere counts: no sleep needed to stay under the cap
        assert limit.pace(MIB) == 0.0
    finally:
        pack_progress._clock, pack_progress._sleep = limit_clock


def test_rate_limit_off_never_sleeps_and_keeps_chunks():
    limit = pack_progress.RateLimit(0)
    assert limit.pace(10 ** 9) == 0.0 and limit.chunk_rows(31775) == 31775


def test_rate_limit_shrinks_chunks_to_a_slice():
    assert pack_progress.RateLimit(1).chunk_rows(31775) == int(MIB * pack_progress.THROTTLE_SLICE_S) // 264
    assert pack_progress.RateLimit(0.0001).chunk_rows(31775) == 1
    assert pack_progress.RateLimit(10 ** 6).chunk_rows(50) == 50


def test_capped_pack_takes_as_long_as_the_cap_says_and_is_exact(ckpt, dest, monkeypatch):
    clock = FakeClock()
    use_clock(monkeypatch, clock)
    result = pack_layer(ckpt, dest, 1, 1, 3, max_mib_s=0.5)
    rows_bytes = result["bytes"] - 4096
    assert result["seconds"] == pytest.approx(rows_bytes / (0.5 * MIB), rel=1e-3)
    assert result["throughput_mib_s"] <= 0.5 + 0.05 and result["max_mib_s"] == 0.5
    # Paced in slices of THROTTLE_SLICE_S (0.69 s here: 7 of them), not one sleep at the end.
    assert len(clock.slept) >= 6 and max(clock.slept) <= pack_progress.THROTTLE_SLICE_S + 1e-9
    _assert_exact(ckpt, dest, 1, 1, 3)


@pytest.mark.parametrize("bad", [-1, "fast", float("nan"), float("inf"), True])
def test_bad_cap_is_refused_before_writing(ckpt, dest, bad):
    with pytest.raises(EngramFormatError, match="max_mib_s must be a number"):
        pack_layer(ckpt, dest, 1, 0, 3, max_mib_s=bad)
    assert os.listdir(dest) == []


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
    assert shard_provenance.inspect_shard(dest, 14, 1, 3, ROWS[14]) == "stale"
    result = pack_layer(ckpt, dest, 14, 1, 3)
    assert result["changed"] is True and result["state_before"] == "stale"
    _assert_exact(ckpt, dest, 14, 1, 3)


def test_stale_final_space_counts_as_reclaimable(ckpt, dest, monkeypatch):
    """Free space alone is short, but the stale file being replaced makes room."""
    path = pack_layer(ckpt, dest, 1, 0, 3)["path"]
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.write(b"\0" * 8)  # bad magic
    monkeypatch.setattr(engram_packer, "free_bytes", lambda d: 4096)
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
    assert set(after) - set(before) == {".engram-pack.lock", "engram-l1-r1of3.bin", "engram-l1-r1of3.bin.meta.json"}


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
        from ansible.module_utils.engram import packer as engram_packer
        engram_packer.PROGRESS_INTERVAL_S = 0.05
        engram_packer.pack_layer(sys.argv[1], sys.argv[2], 1, 0, 1, chunk_rows=64, progress_path=sys.argv[3])
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
    assert shard_provenance.inspect_shard(dest, 1, 0, 1, 20000) == "partial"

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
    monkeypatch.setattr(engram_packer, "free_bytes", lambda d: 1 << 40)
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

    monkeypatch.setattr(os, "write", filling_write)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 1, chunk_rows=100)
    monkeypatch.undo()
    _assert_clean_failure(str(info.value), dest, before, shard_name(1, 0, 1))


def test_not_enough_space_refuses_before_writing(ckpt, dest, monkeypatch):
    before = _foreign_files(dest)
    monkeypatch.setattr(engram_packer, "free_bytes", lambda d: 1000)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 14, 0, 3, margin_bytes=50)
    need = 4096 + 1000 * 264 + 50
    message = str(info.value)
    assert HOST in message and dest in message and "deficit %d bytes" % (need - 1000) in message
    assert set(ckpt_factory.snapshot(dest)) - set(before) == {".engram-pack.lock"}


def test_truncated_checkpoint_read_fails_cleanly(ckpt, dest, monkeypatch):
    """The checkpoint shrinks after its header was validated: the short read names the shard."""
    real = safetensors_index.read_engram_tables

    def then_truncate(checkpoint, layers):
        tables = real(checkpoint, layers)
        os.truncate(tables[1].shard_path, tables[1].scale_offset + 100)
        return tables

    monkeypatch.setattr(engram_packer, "read_engram_tables", then_truncate)
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


def test_live_holder_is_named_and_respected(ckpt, dest, tmp_path):
    """A live pack in another process holds the lock: refused at once, naming its pid and layer."""
    python, bootstrap = ckpt_factory.python_with_module_utils()
    script = bootstrap + textwrap.dedent("""
        import sys, time
        from ansible.module_utils.engram import lock as pack_lock
        with pack_lock.dest_lock(sys.argv[1], 0, {"layer": 14, "rank": 2, "progress_file": "/tmp/p.json"}):
            print("held", flush=True)
            time.sleep(30)
    """)
    holder = subprocess.Popen([python, "-c", script, dest], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(EngramPackError) as info:
            pack_layer(ckpt, dest, 1, 0, 3)
        message = str(info.value)
        assert "pid %d on %s (layer 14, rank 2)" % (holder.pid, HOST) in message
        assert "progress in /tmp/p.json" in message and dest in message
        assert not os.path.exists(os.path.join(dest, shard_name(1, 0, 3)))
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_a_killed_holder_is_reclaimed(ckpt, dest):
    """SIGKILL leaves the holder's record in the lock file; the kernel has released the flock, so
    the next pack takes the lock at once and reports the dead holder's record as reclaimed."""
    python, bootstrap = ckpt_factory.python_with_module_utils()
    script = bootstrap + textwrap.dedent("""
        import sys, time
        from ansible.module_utils.engram import lock as pack_lock
        with pack_lock.dest_lock(sys.argv[1], 0, {"layer": 1, "rank": 0}):
            print("held", flush=True)
            time.sleep(30)
    """)
    holder = subprocess.Popen([python, "-c", script, dest], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    dead_pid = holder.pid
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with open(os.path.join(dest, ".engram-pack.lock")) as handle:
        assert json.load(handle)["pid"] == dead_pid  # the record outlived its holder
    assert not process_wait.pid_alive(dead_pid)
    started = time.monotonic()
    result = pack_layer(ckpt, dest, 1, 0, 3, lock_timeout=0)
    assert time.monotonic() - started < 5
    assert "pid %d on %s (layer 1, rank 0)" % (dead_pid, HOST) in result["reclaimed_lock"]
    _assert_exact(ckpt, dest, 1, 0, 3)
    # A clean release leaves no record, so the next run reclaims nothing.
    assert os.path.getsize(os.path.join(dest, ".engram-pack.lock")) == 0
    os.unlink(result["path"])
    assert pack_layer(ckpt, dest, 1, 0, 3)["reclaimed_lock"] is None


def test_pid_alive_tells_reused_pids_and_zombies_apart():
    me = os.getpid()
    assert process_wait.pid_alive(me) and process_wait.pid_alive(me, process_wait.process_start_ticks(me))
    assert not process_wait.pid_alive(me, process_wait.process_start_ticks(me) + 1)  # same number, another process
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while process_wait.proc_stat(child.pid)[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not process_wait.pid_alive(child.pid)  # exited, not yet reaped
    child.wait()
    assert not process_wait.pid_alive(child.pid) and not process_wait.pid_alive(0) and not process_wait.pid_alive(None)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_removes_partial_and_records_the_error(tmp_path, dest, signum):
    """A stop signal mid-pack: the packer removes its .partial, writes no final file, and its
    error (which signal, how far it got) is in the progress record and the module's failure."""
    big = ckpt_factory.make_checkpoint(str(tmp_path / "big"), rows={1: 6000, 14: 10})["dir"]
    progress = str(tmp_path / "progress.json")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "checkpoint": big, "dest": dest, "layer": 1, "rank": 0, "tp_size": 1, "max_mib_s": 0.5,
        "progress_file": progress, "run_id": "r1"}}))
    python, bootstrap = ckpt_factory.python_with_module_utils()
    module_path = engram_pack.__file__
    script = bootstrap + "import runpy, sys; sys.argv = [%r, %r]; runpy.run_path(%r, run_name='__main__')" % (
        module_path, str(args), module_path)
    child = subprocess.Popen([python, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = _wait_for_progress(progress, child)
    child.send_signal(signum)
    out, err = child.communicate(timeout=30)
    result = json.loads(out)
    name = signal.Signals(signum).name
    assert result["failed"] is True, err
    assert "was stopped by %s at " % name in result["msg"] and HOST in result["msg"] and "layer 1" in result["msg"]
    assert "no .partial is left and no final-named shard was written" in result["msg"]
    final = pack_progress.read_progress(progress)
    assert final["state"] == "failed" and final["message"] == result["msg"] and final["pid"] == child.pid
    assert final["done_bytes"] >= record["done_bytes"] > 0
    assert sorted(os.listdir(dest)) == [".engram-pack.lock"]
    assert os.path.getsize(os.path.join(dest, ".engram-pack.lock")) == 0  # released cleanly


def _wait_for_progress(progress, child, percent=0.0):
    """The packer's first progress record past ``percent`` while it still runs."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert child.poll() is None, "packer ended before it could be stopped"
        record = pack_progress.read_progress(progress)
        if record and record["state"] == "packing" and record["percent"] > percent:
            return record
        time.sleep(0.02)
    raise AssertionError("no progress past %s%% in 30 s" % percent)


def test_module_stop_handlers_are_restored(ckpt, dest):
    before = signal.getsignal(signal.SIGTERM)
    assert _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3})["changed"] is True
    assert signal.getsignal(signal.SIGTERM) is before


# --------------------------------------------------------------------------- module entry point

def _run(args, check_mode=False):
    return run_module(engram_pack.main, args, check_mode=check_mode)


def test_module_packs_then_is_idempotent(ckpt, dest):
    args = {"checkpoint": ckpt, "dest": dest, "layer": 14, "rank": 1, "tp_size": 3, "mode": "0600",
            "chunk_rows": 50}
    first = _run(args)
    assert first.get("failed") is not True, first
    assert first["changed"] is True and first["state_before"] == "missing" and first["rows"] == 1000
    assert os.stat(first["path"]).st_mode & 0o777 == 0o600
    assert os.stat(first["meta_path"]).st_mode & 0o777 == 0o600
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
                                   "run_id", "max_mib_s", "owner", "group", "mode"}
    yaml.safe_load(engram_pack.EXAMPLES)
    assert set(yaml.safe_load(engram_pack.RETURN)) == {
        "changed", "path", "bytes", "rows", "lo", "hi", "seconds", "throughput_mib_s", "state_before",
        "max_mib_s", "reclaimed_lock", "stale_reason", "verified", "meta_path", "metadata_written"}


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


# --------------------------------------------------------------------------- hostile destinations

def _lstate(directory):
    """{name: (mode, size, mtime_ns, bytes or None)} by lstat: links, directories and FIFOs included,
    never followed or opened."""
    state = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        st = os.lstat(path)
        data = _content(path) if stat.S_ISREG(st.st_mode) else None
        state[name] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
    return state


@pytest.fixture
def outside(tmp_path):
    """A directory beside the destination holding a file a hostile name may point at."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim").write_bytes(b"precious bytes that must not change\n" * 100)
    return str(path)


@pytest.fixture
def no_hang():
    """Fail instead of blocking forever (a FIFO opened for reading or writing waits for a peer)."""
    def on_alarm(signum, frame):
        raise AssertionError("the packer blocked")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _symlink_to_victim(path, outside):
    os.symlink(os.path.join(outside, "victim"), path)


# (what sits at which name, how it is made, the refusal's words); layer 1, rank 0 of 3.
HOSTILE_NAMES = {
    "partial_symlink": (partial_name(1, 0, 3), _symlink_to_victim, "shard .partial {path} is a symlink to {outside}/victim, not a regular file"),
    "partial_directory": (partial_name(1, 0, 3), lambda p, o: os.mkdir(p), "shard .partial {path} is a directory, not a regular file"),
    "partial_fifo": (partial_name(1, 0, 3), lambda p, o: os.mkfifo(p), "shard .partial {path} is a FIFO, not a regular file"),
    "final_symlink": (shard_name(1, 0, 3), _symlink_to_victim, "packed shard {path} is a symlink to {outside}/victim"),
    "final_directory": (shard_name(1, 0, 3), lambda p, o: os.mkdir(p), "packed shard {path} is a directory, not a regular file"),
    "final_fifo": (shard_name(1, 0, 3), lambda p, o: os.mkfifo(p), "packed shard {path} is a FIFO, not a regular file"),
    "metadata_symlink": (shard_format.meta_name(1, 0, 3), _symlink_to_victim, "shard metadata {path} is a symlink to {outside}/victim"),
    "lock_fifo": (pack_lock.LOCK_NAME, lambda p, o: os.mkfifo(p), "lock file {path} is a FIFO, not a regular file; refusing to use it"),
    "lock_symlink": (pack_lock.LOCK_NAME, _symlink_to_victim, "cannot open lock file {path}: ELOOP"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_hostile_name_in_dest_is_refused_and_nothing_changes(ckpt, dest, outside, no_hang, case):
    name, make, words = HOSTILE_NAMES[case]
    path = os.path.join(dest, name)
    make(path, outside)
    before, outside_before, ckpt_before = _lstate(dest), _lstate(outside), ckpt_factory.snapshot(ckpt)
    for check_mode in (True, False):
        if check_mode and name == pack_lock.LOCK_NAME:
            continue  # check mode takes no lock
        with pytest.raises(EngramPackError) as info:
            pack_layer(ckpt, dest, 1, 0, 3, check_mode=check_mode)
        message = str(info.value)
        assert message.startswith("host %s: " % HOST) and words.format(path=path, outside=outside) in message
        assert _lstate(dest) == before and _lstate(outside) == outside_before
    assert ckpt_factory.snapshot(ckpt) == ckpt_before
    # The module fails with the same words, no traceback, and changes nothing either.
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3})
    assert result["failed"] is True and words.format(path=path, outside=outside) in result["msg"]
    assert "Traceback" not in json.dumps(result) and "exception" not in result
    assert _lstate(dest) == before and _lstate(outside) == outside_before


@pytest.mark.parametrize("case", ["partial_symlink", "final_directory", "final_fifo", "metadata_symlink"])
def test_plan_refuses_the_same_hostile_names(ckpt, dest, outside, no_hang, case):
    name, make, words = HOSTILE_NAMES[case]
    path = os.path.join(dest, name)
    make(path, outside)
    before = _lstate(dest)
    with pytest.raises(EngramPackError) as info:
        pack_plan.plan(ckpt, dest, 0, 3)
    assert HOST in str(info.value) and words.format(path=path, outside=outside) in str(info.value)
    assert _lstate(dest) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the .partial another owner")
def test_leftover_partial_of_another_uid_is_not_removed(ckpt, dest):
    partial = os.path.join(dest, partial_name(1, 0, 3))
    with open(partial, "wb") as handle:
        handle.write(b"someone else's bytes")
    os.chown(partial, 65534, 65534)
    assert pack_plan.plan(ckpt, dest, 0, 3)["shards"][0]["state"] == "partial"
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 3)
    assert str(info.value) == (
        "host %s: left-over .partial %s belongs to uid 65534, not the packer's uid 0; refusing to remove it "
        "(nothing was written). Remove it as its owner and rerun" % (HOST, partial))
    assert _content(partial) == b"someone else's bytes" and os.stat(partial).st_uid == 65534
    assert sorted(os.listdir(dest)) == [".engram-pack.lock", partial_name(1, 0, 3)]


# Run the packer as another user (nobody) against a destination it may not write: root ignores
# permissions, so the refusal must come from a process that does not.
_AS_NOBODY = textwrap.dedent("""
    import os, sys
    from ansible.module_utils.engram import packer as engram_packer, shard_format
    os.setgid(65534)
    os.setuid(65534)
    try:
        engram_packer.pack_layer(sys.argv[1], sys.argv[2], 1, 0, 3)
    except shard_format.EngramError as exc:
        print(exc)
        sys.exit(3)
""")


@pytest.mark.parametrize("lock_exists", [False, True])
def test_non_writable_dest_fails_cleanly_eacces(lock_exists, no_hang):
    if os.geteuid() != 0:
        pytest.skip("needs root to run the packer as another user")
    import shutil
    import tempfile
    base = tempfile.mkdtemp(prefix="engram-eacces-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        ckpt_dir = ckpt_factory.make_checkpoint(os.path.join(base, "ckpt"), rows=ROWS)["dir"]
        target = os.path.join(base, "engram")
        os.mkdir(target, 0o755)
        if lock_exists:  # a lock left writable by an earlier pack: the refusal comes at the .partial
            lock = os.path.join(target, pack_lock.LOCK_NAME)
            open(lock, "wb").close()
            os.chmod(lock, 0o666)
        before = _lstate(target)
        python, bootstrap = ckpt_factory.python_with_module_utils()
        proc = subprocess.run([python, "-c", bootstrap + _AS_NOBODY, ckpt_dir, target],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 3, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        message = proc.stdout.strip()
        if lock_exists:
            assert message == ("host %s: packing layer 1 into %s failed at %s: EACCES (Permission denied); "
                               "nothing was published" % (HOST, os.path.join(target, shard_name(1, 0, 3)),
                                                          os.path.join(target, partial_name(1, 0, 3))))
        else:
            assert message == ("host %s: cannot open lock file %s: EACCES (Permission denied)"
                               % (HOST, os.path.join(target, pack_lock.LOCK_NAME)))
        after = _lstate(target)
        assert sorted(after) == sorted(before)
        # The lock's record is written and emptied again (its mtime moves): that is what it is for.
        assert {k: v for k, v in after.items() if k != pack_lock.LOCK_NAME} == \
            {k: v for k, v in before.items() if k != pack_lock.LOCK_NAME}
    finally:
        shutil.rmtree(base)


def test_read_only_dest_fails_cleanly_erofs(ckpt, small_tmpfs):
    pack_layer(ckpt, small_tmpfs, 14, 0, 3)  # the lock file exists, as after any earlier pack
    subprocess.run(["mount", "-o", "remount,ro", small_tmpfs], check=True)
    try:
        before = _lstate(small_tmpfs)
        with pytest.raises(EngramPackError) as info:
            pack_layer(ckpt, small_tmpfs, 1, 0, 3)
        assert str(info.value) == ("host %s: cannot open lock file %s: EROFS (Read-only file system)"
                                   % (HOST, os.path.join(small_tmpfs, pack_lock.LOCK_NAME)))
        assert _lstate(small_tmpfs) == before
    finally:
        subprocess.run(["mount", "-o", "remount,rw", small_tmpfs], check=True)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EISDIR, errno.EIO])
@pytest.mark.parametrize("where", ["create", "rename"])
def test_os_error_at_partial_or_rename_is_a_clean_failure(ckpt, dest, outside, monkeypatch, code, where):
    """The same errors arriving at the .partial's creation or at the rename (a directory appearing at
    the final name after the check gives EISDIR there): one message naming host and path."""
    before = _foreign_files(dest)
    partial = os.path.join(dest, partial_name(1, 0, 3))
    real_open, real_replace = os.open, os.replace

    def failing_open(path, flags, *args):
        if where == "create" and path == partial:
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, *args)

    def failing_replace(src, dst):
        if where == "rename" and src == partial:
            raise OSError(code, os.strerror(code), src, None, dst)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "open", failing_open)
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 3)
    monkeypatch.undo()
    assert str(info.value) == ("host %s: packing layer 1 into %s failed at %s: %s (%s); nothing was published"
                               % (HOST, os.path.join(dest, shard_name(1, 0, 3)), partial,
                                  errno.errorcode[code], os.strerror(code)))
    after = ckpt_factory.snapshot(dest)
    assert set(after) - set(before) == {".engram-pack.lock"}
    assert {k: v for k, v in after.items() if k in before} == before


# --------------------------------------------------------------------------- index confinement

def _point_layer1_at(ckpt_dir, value):
    ckpt_factory.edit_index(ckpt_dir, lambda index: index["weight_map"].update(
        {"layers.1.engram.embed.weight": value, "layers.1.engram.embed.scale": value}))


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink_out"])
def test_index_entries_outside_the_checkpoint_are_refused(ckpt, dest, outside, how):
    index = os.path.join(ckpt, ckpt_factory.INDEX_NAME)
    shard = os.path.join(ckpt, "model-00001-of-00002.safetensors")
    moved = os.path.join(outside, "model-00001-of-00002.safetensors")
    os.rename(shard, moved)
    if how == "absolute":
        value, words = moved, "names a file outside the checkpoint directory %s (absolute path or '..')" % ckpt
    elif how == "dotdot":
        value, words = "../outside/model-00001-of-00002.safetensors", "(absolute path or '..')"
    else:
        os.symlink(moved, shard)
        value = "model-00001-of-00002.safetensors"
        words = "which resolves to %s, outside the checkpoint directory %s" % (moved, os.path.realpath(ckpt))
    _point_layer1_at(ckpt, value)
    expected = "%s: weight_map entry for layers.1.engram.embed.weight is %r, " % (index, value)
    for call in (lambda: pack_plan.plan(ckpt, dest, 0, 3), lambda: pack_layer(ckpt, dest, 1, 0, 3),
                 lambda: safetensors_index.read_engram_tables(ckpt, (1,))):
        with pytest.raises(EngramFormatError) as info:
            call()
        assert str(info.value).startswith(expected) and words in str(info.value)
        assert "refusing to read it" in str(info.value)
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 0, "tp_size": 3})
    assert result["failed"] is True and result["msg"].startswith(expected)
    assert os.listdir(dest) == []


def test_symlinks_inside_the_checkpoint_are_followed(ckpt, dest, tmp_path):
    """A checkpoint reached through a symlinked directory, or a file linked to another inside it, is fine."""
    link_dir = str(tmp_path / "models-link")
    os.symlink(ckpt, link_dir)
    os.mkdir(os.path.join(ckpt, "files"))
    os.rename(os.path.join(ckpt, "model-00001-of-00002.safetensors"),
              os.path.join(ckpt, "files", "m1.safetensors"))
    os.symlink("files/m1.safetensors", os.path.join(ckpt, "model-00001-of-00002.safetensors"))
    pack_layer(link_dir, dest, 1, 0, 3)
    _assert_exact(ckpt, dest, 1, 0, 3)


# --------------------------------------------------------------------------- provenance

def _sha256(path):
    import hashlib
    return hashlib.sha256(_content(path)).hexdigest()


def _meta(dest_dir, layer, rank, tp):
    with open(os.path.join(dest_dir, shard_format.meta_name(layer, rank, tp))) as handle:
        return json.load(handle)


def _shard_state(ckpt_dir, dest_dir, layer, rank=1, tp=3, check_mode=False):
    """(state, stale_reason, verified) of one layer as engram_plan reports it through the module."""
    result = run_module(engram_plan.main, {"checkpoint": ckpt_dir, "dest": dest_dir, "rank": rank,
                                                        "tp_size": tp}, check_mode=check_mode)
    assert result.get("failed") is not True, result
    entry = [s for s in result["shards"] if s["layer"] == layer][0]
    return entry["state"], entry.get("stale_reason"), entry.get("verified")


def test_metadata_records_the_checkpoint_identity(ckpt, dest):
    path = pack_layer(ckpt, dest, 14, 1, 3)["path"]
    meta = _meta(dest, 14, 1, 3)
    source = os.path.join(ckpt, "model-00002-of-00002.safetensors")
    header, start = ckpt_factory.read_header(source)
    st = os.stat(source)
    assert meta["index_sha256"] == _sha256(os.path.join(ckpt, ckpt_factory.INDEX_NAME))
    assert meta["source"] == {"file": "model-00002-of-00002.safetensors", "size": st.st_size,
                              "mtime_ns": st.st_mtime_ns}
    for name in ("layers.14.engram.embed.weight", "layers.14.engram.embed.scale"):
        assert meta["tensors"][name] == {k: header[name][k] for k in ("dtype", "shape", "data_offsets")}
    assert (meta["layer"], meta["rank"], meta["tp_size"], meta["lo"], meta["hi"], meta["rows"]) == (14, 1, 3, 1000, 2000, 3001)
    assert meta["shard_bytes"] == os.path.getsize(path) and meta["packer_version"] == shard_provenance.PACKER_VERSION
    # The sampled rows' hash is that of 64 rows spread over [lo, hi) as packed, first and last included.
    rows = shard_provenance.sample_rows(1000, 2000)
    assert len(rows) == 64 and rows[0] == 1000 and rows[-1] == 1999
    import hashlib
    data = _content(path)
    digest = hashlib.sha256(b"".join(data[4096 + (r - 1000) * 264:4096 + (r - 999) * 264] for r in rows)).hexdigest()
    assert meta["sampled_rows"] == {"count": 64, "sha256": digest}
    assert not [n for n in os.listdir(dest) if n.endswith(".partial")]


def test_updated_checkpoint_same_shapes_is_stale_then_repacked_byte_exact(ckpt, dest):
    """The acceptance case: table bytes rewritten in place and the file touched."""
    for layer in (1, 14):
        pack_layer(ckpt, dest, layer, 1, 3)
    old = _content(os.path.join(dest, shard_name(1, 1, 3)))
    ckpt_factory.update_table_rows(ckpt, 1, range(1366, 2732, 7))  # rank 1's rows of layer 1
    source = os.path.join(ckpt, "model-00001-of-00002.safetensors")
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale"
    assert "source size or mtime changed: model-00001-of-00002.safetensors is %d bytes, mtime_ns %d" % (
        os.path.getsize(source), os.stat(source).st_mtime_ns) in reason
    assert "sampled rows differ" in reason
    assert _shard_state(ckpt, dest, 14)[0] == "complete"  # layer 14 lives in the other file
    # Check mode reports the same and changes nothing.
    before = ckpt_factory.snapshot(dest)
    checked = pack_layer(ckpt, dest, 1, 1, 3, check_mode=True)
    assert checked["changed"] is True and checked["state_before"] == "stale" and checked["stale_reason"] == reason
    assert ckpt_factory.snapshot(dest) == before
    result = pack_layer(ckpt, dest, 1, 1, 3)
    assert result["changed"] is True and result["state_before"] == "stale" and result["metadata_written"] is True
    _assert_exact(ckpt, dest, 1, 1, 3)
    assert _content(result["path"]) != old
    assert _meta(dest, 1, 1, 3)["source"]["mtime_ns"] == os.stat(source).st_mtime_ns
    assert _shard_state(ckpt, dest, 1) == ("complete", None, None)
    assert pack_layer(ckpt, dest, 1, 1, 3)["changed"] is False


def test_rows_rewritten_with_the_old_mtime_are_caught_by_the_sample(ckpt, dest):
    pack_layer(ckpt, dest, 1, 1, 3)
    ckpt_factory.update_table_rows(ckpt, 1, [1366], keep_mtime=True)  # lo is always sampled
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale" and reason.startswith("sampled rows differ: 64 rows of the checkpoint hash to ")
    assert "size or mtime" not in reason
    pack_layer(ckpt, dest, 1, 1, 3)
    _assert_exact(ckpt, dest, 1, 1, 3)


def test_index_change_is_stale_with_the_digest(ckpt, dest):
    pack_layer(ckpt, dest, 1, 1, 3)
    old = _meta(dest, 1, 1, 3)["index_sha256"]
    ckpt_factory.edit_index(ckpt, lambda index: index["metadata"].update({"total_size": 1}))
    new = _sha256(os.path.join(ckpt, ckpt_factory.INDEX_NAME))
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale" and reason == ("index digest changed: model.safetensors.index.json sha256 %s..., was %s... "
                                           "when packed" % (new[:12], old[:12]))
    assert pack_layer(ckpt, dest, 1, 1, 3)["state_before"] == "stale"
    assert _shard_state(ckpt, dest, 1)[0] == "complete"


def test_moved_tensors_are_stale_with_the_offsets(ckpt, dest):
    """The same tables stored in another order: same bytes, size and mtime, other offsets."""
    pack_layer(ckpt, dest, 1, 1, 3)
    source = os.path.join(ckpt, "model-00001-of-00002.safetensors")
    st = os.stat(source)
    header, start = ckpt_factory.read_header(source)
    with open(source, "rb") as handle:
        data = handle.read()[start:]
    tensors = [(name, info["dtype"], info["shape"], data[info["data_offsets"][0]:info["data_offsets"][1]])
               for name, info in sorted(header.items(), key=lambda kv: -kv[1]["data_offsets"][0])]
    ckpt_factory.write_safetensors(source, tensors)
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale" and "offsets changed: layers.1.engram.embed.weight data_offsets is [" in reason
    assert "sampled rows differ" not in reason
    pack_layer(ckpt, dest, 1, 1, 3)
    _assert_exact(ckpt, dest, 1, 1, 3)


def test_shard_bytes_changed_under_its_metadata_are_stale(ckpt, dest):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    with open(path, "r+b") as handle:
        handle.seek(4096 + 5)
        handle.write(b"\xff\x00\xff")  # row lo, always sampled
    assert _shard_state(ckpt, dest, 1)[1] == "sampled rows differ: the shard's own rows no longer match its metadata"
    pack_layer(ckpt, dest, 1, 1, 3)
    _assert_exact(ckpt, dest, 1, 1, 3)


# --------------------------------------------------------------------------- full content hash (issue: a corrupted
# row outside the 64 sampled rows counted as complete and was never repacked)

def _unsampled_row(lo=1000, hi=2000):
    return next(r for r in range(lo + 1, hi) if r not in shard_provenance.sample_rows(lo, hi))


def _corrupt_row(path, row, lo=1000, keep_mtime=False):
    st = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(4096 + (row - lo) * 264 + 17)
        handle.write(b"\x5a\xa5")
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _plan_entry(ckpt_dir, dest_dir, layer, content_check=None, rank=1, tp=3):
    args = {"checkpoint": ckpt_dir, "dest": dest_dir, "rank": rank, "tp_size": tp}
    if content_check:
        args["content_check"] = content_check
    result = run_module(engram_plan.main, args)
    assert result.get("failed") is not True, result
    return [s for s in result["shards"] if s["layer"] == layer][0]


def test_metadata_records_the_hash_of_every_byte_written_and_the_published_identity(ckpt, dest):
    path = pack_layer(ckpt, dest, 14, 1, 3, chunk_rows=7)["path"]
    content = _meta(dest, 14, 1, 3)["content"]
    st = os.stat(path)
    assert content == {"sha256": _sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
                       "dev": st.st_dev}
    entry = _plan_entry(ckpt, dest, 14)
    assert entry["state"] == "complete" and entry["content"]["hashed"] is False   # identity only: nothing read
    assert entry["content"]["recorded"] == content["sha256"]


def test_a_corrupted_row_outside_the_sample_is_stale_and_repacked(ckpt, dest):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    recorded = _meta(dest, 1, 1, 3)["content"]["sha256"]
    _corrupt_row(path, _unsampled_row())
    entry = _plan_entry(ckpt, dest, 1)
    assert entry["state"] == "stale" and entry["content"]["hashed"] is True
    assert entry["stale_reason"] == ("content differs: the file hashes to sha256 %s..., %s... was recorded when it "
                                     "was packed (size, mtime or inode changed since)" % (_sha256(path)[:12],
                                                                                         recorded[:12]))
    result = pack_layer(ckpt, dest, 1, 1, 3)
    assert result["changed"] is True and result["state_before"] == "stale"
    _assert_exact(ckpt, dest, 1, 1, 3)
    assert _plan_entry(ckpt, dest, 1)["state"] == "complete"


def test_bytes_changed_under_the_old_mtime_pass_the_cheap_check_and_fail_the_full_one(ckpt, dest):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    _corrupt_row(path, _unsampled_row(), keep_mtime=True)
    cheap = _plan_entry(ckpt, dest, 1)
    assert cheap["state"] == "complete" and cheap["content"]["hashed"] is False
    full = _plan_entry(ckpt, dest, 1, "full")
    assert full["state"] == "stale" and full["content"]["hashed"] is True
    assert full["stale_reason"].endswith("was recorded when it was packed (same size, mtime and inode)")


def test_a_touched_shard_is_read_once_then_its_new_identity_recorded_by_the_pack(ckpt, dest):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    entry = _plan_entry(ckpt, dest, 1)
    assert entry["state"] == "complete" and entry["content"]["hashed"] is True
    assert entry["verified"] == shard_provenance.NOTE_IDENTITY_CHANGED
    before = ckpt_factory.snapshot(dest)
    checked = pack_layer(ckpt, dest, 1, 1, 3, check_mode=True)
    assert checked["changed"] is True and ckpt_factory.snapshot(dest) == before   # check mode: said, not done
    result = pack_layer(ckpt, dest, 1, 1, 3)
    assert result["changed"] is True and result["metadata_written"] is True
    assert _content(path) == ckpt_factory.expected_shard(ckpt, 1, 1, 3) and os.stat(path).st_ino == st.st_ino
    assert _meta(dest, 1, 1, 3)["content"]["mtime_ns"] == st.st_mtime_ns + 10 ** 9
    again = _plan_entry(ckpt, dest, 1)
    assert again["content"]["hashed"] is False and "verified" not in again
    assert pack_layer(ckpt, dest, 1, 1, 3)["changed"] is False


def test_a_shard_packed_before_content_hashes_gets_one_recorded_by_the_next_pack(ckpt, dest):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    meta_path = os.path.join(dest, shard_format.meta_name(1, 1, 3))
    meta = _meta(dest, 1, 1, 3)
    del meta["content"]
    with open(meta_path, "w") as handle:
        json.dump(meta, handle)
    entry = _plan_entry(ckpt, dest, 1, "full")
    assert entry["state"] == "complete" and entry["verified"] == shard_provenance.NOTE_NO_CONTENT_HASH
    result = pack_layer(ckpt, dest, 1, 1, 3)
    assert result["changed"] is True and result["metadata_written"] is True
    assert _meta(dest, 1, 1, 3)["content"]["sha256"] == _sha256(path)
    assert pack_layer(ckpt, dest, 1, 1, 3)["changed"] is False


def test_full_check_skips_a_shard_verified_at_this_identity_only(ckpt, dest, monkeypatch):
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    table = safetensors_index.read_engram_tables(ckpt, (1,))[1]
    identity = shard_provenance.verification_key(os.stat(path))
    reads = []
    real = shard_provenance.content_sha256
    monkeypatch.setattr(shard_provenance, "content_sha256", lambda p, *a: reads.append(p) or real(p, *a))
    status = shard_provenance.describe_shard(dest, 1, 1, 3, table.rows, table, "full", {path: identity})
    assert status.state == "complete" and status.content["hashed"] is False and reads == []
    status = shard_provenance.describe_shard(dest, 1, 1, 3, table.rows, table, "full", {path: "0:0:0:0:0"})
    assert status.content["hashed"] is True and reads == [path]
    # bytes rewritten under the old mtime: the identity recorded at pack time still matches, the key a full
    # check is remembered by does not (ctime moved), so the drift check reads it again and finds it stale
    _corrupt_row(path, _unsampled_row(), keep_mtime=True)
    status = shard_provenance.describe_shard(dest, 1, 1, 3, table.rows, table, "full", {path: identity})
    assert status.state == "stale" and status.content["hashed"] is True and reads == [path, path]
    with pytest.raises(EngramFormatError, match="content_check must be one of identity, full, got 'sometimes'"):
        pack_plan.plan(ckpt, dest, 1, 3, content_check="sometimes")


def test_content_sha256_refuses_a_file_that_changes_while_read(tmp_path, monkeypatch):
    path = tmp_path / "shard.bin"
    path.write_bytes(b"x" * (3 * 4096))
    real_pread = os.pread
    calls = []

    def pread(fd, n, off):
        calls.append(off)
        if len(calls) == 2:
            with open(path, "ab") as handle:
                handle.write(b"y")
        return real_pread(fd, n, off)
    monkeypatch.setattr(shard_provenance.os, "pread", pread)
    with pytest.raises(OSError, match="changed while its content was hashed"):
        shard_provenance.content_sha256(str(path), chunk=4096)


@pytest.mark.parametrize("bad", [b"{not json", b"[]", b'{"version": 99}'])
def test_unreadable_metadata_is_never_trusted(ckpt, dest, bad):
    pack_layer(ckpt, dest, 1, 1, 3)
    meta_path = os.path.join(dest, shard_format.meta_name(1, 1, 3))
    with open(meta_path, "wb") as handle:
        handle.write(bad)
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale" and reason.startswith("metadata %s " % meta_path)
    pack_layer(ckpt, dest, 1, 1, 3)
    assert _meta(dest, 1, 1, 3)["version"] == shard_provenance.META_VERSION


def test_shard_without_metadata_is_verified_by_sampled_rows(ckpt, dest):
    """A shard packed before metadata existed: trusted after sampling, its metadata written only by a real run."""
    path = pack_layer(ckpt, dest, 1, 1, 3)["path"]
    meta_path = os.path.join(dest, shard_format.meta_name(1, 1, 3))
    os.unlink(meta_path)
    before = ckpt_factory.snapshot(dest)
    assert _shard_state(ckpt, dest, 1) == ("complete", None, "verified by sampled rows, no metadata")
    assert _shard_state(ckpt, dest, 1, check_mode=True)[2] == "verified by sampled rows, no metadata"
    checked = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 1, "tp_size": 3}, check_mode=True)
    # check mode says what the real run below does (writes the metadata) and writes nothing
    assert checked["changed"] is True and checked["verified"] == "verified by sampled rows, no metadata"
    assert checked["metadata_written"] is False
    assert ckpt_factory.snapshot(dest) == before
    result = _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 1, "tp_size": 3})
    assert result["changed"] is True and result["metadata_written"] is True and result["state_before"] == "complete"
    assert os.stat(path).st_mtime_ns == before[shard_name(1, 1, 3)][1]  # the shard itself is not rewritten
    assert _meta(dest, 1, 1, 3)["sampled_rows"]["sha256"] == shard_provenance.shard_sample_sha256(path, 1366, 2732)
    assert _meta(dest, 1, 1, 3)["content"]["sha256"] == _sha256(path)
    assert _shard_state(ckpt, dest, 1) == ("complete", None, None)
    assert _run({"checkpoint": ckpt, "dest": dest, "layer": 1, "rank": 1, "tp_size": 3})["changed"] is False


def test_shard_without_metadata_from_another_checkpoint_is_stale(ckpt, dest):
    pack_layer(ckpt, dest, 1, 1, 3)
    os.unlink(os.path.join(dest, shard_format.meta_name(1, 1, 3)))
    ckpt_factory.update_table_rows(ckpt, 1, [2731])  # hi - 1 is always sampled
    state, reason, _ = _shard_state(ckpt, dest, 1)
    assert state == "stale"
    assert reason == "sampled rows differ: the shard has no metadata and 64 sampled rows differ from the checkpoint"
    result = pack_layer(ckpt, dest, 1, 1, 3)
    assert result["state_before"] == "stale" and result["metadata_written"] is True
    _assert_exact(ckpt, dest, 1, 1, 3)


def test_checkpoint_changing_during_the_pack_publishes_nothing(ckpt, dest, monkeypatch):
    real = engram_packer._copy_rows

    def change_then_copy(table, *args):
        ckpt_factory.update_table_rows(ckpt, 1, [1366])
        return real(table, *args)

    monkeypatch.setattr(engram_packer, "_copy_rows", change_then_copy)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 1, 3)
    assert str(info.value) == ("host %s: %s changed while layer 1 was being packed (sampled rows differ from those "
                               "read before writing); nothing was published, rerun the pack"
                               % (HOST, os.path.join(ckpt, "model-00001-of-00002.safetensors")))
    assert sorted(os.listdir(dest)) == [".engram-pack.lock"]
    monkeypatch.undo()
    pack_layer(ckpt, dest, 1, 1, 3)
    _assert_exact(ckpt, dest, 1, 1, 3)


def test_a_crash_before_the_metadata_leaves_a_shard_that_is_verified_not_trusted(ckpt, dest, monkeypatch):
    pack_layer(ckpt, dest, 1, 1, 3)
    ckpt_factory.update_table_rows(ckpt, 1, [1366])

    def fail(path, meta):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path + ".partial")

    monkeypatch.setattr(engram_packer, "write_meta", fail)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 1, 3)
    meta_path = os.path.join(dest, shard_format.meta_name(1, 1, 3))
    assert str(info.value) == ("host %s: %s was published but its metadata %s could not be written: ENOSPC (No space "
                               "left on device); the next plan verifies the shard by sampled rows"
                               % (HOST, os.path.join(dest, shard_name(1, 1, 3)), meta_path))
    monkeypatch.undo()
    assert not os.path.exists(meta_path)  # the old checkpoint's metadata went before the shard was replaced
    _assert_exact(ckpt, dest, 1, 1, 3)
    assert _shard_state(ckpt, dest, 1) == ("complete", None, "verified by sampled rows, no metadata")


def test_follower_leaves_a_planted_partial_alone(dest, outside):
    from ansible.module_utils.engram import follow
    partial = os.path.join(dest, partial_name(1, 0, 3))
    _symlink_to_victim(partial, outside)
    before = _lstate(outside)
    removed, note = follow.remove_dead_partial(
        {"partial_path": partial, "path": os.path.join(dest, shard_name(1, 0, 3)), "pid": 4242})
    assert removed is False
    assert note.startswith("left its .partial %s in place: host %s: left-over .partial %s is a symlink to %s/victim"
                           % (partial, HOST, partial, outside))
    assert os.path.islink(partial) and _lstate(outside) == before


def test_progress_record_never_writes_through_a_symlink(ckpt, dest, outside, tmp_path):
    progress = str(tmp_path / "progress.json")
    _symlink_to_victim(progress, outside)
    _symlink_to_victim("%s.%d.tmp" % (progress, os.getpid()), outside)
    before = _lstate(outside)
    with pytest.raises(EngramPackError) as info:
        pack_layer(ckpt, dest, 1, 0, 3, progress_path=progress)
    assert "left-over progress temp file %s.%d.tmp is a symlink" % (progress, os.getpid()) in str(info.value)
    os.unlink("%s.%d.tmp" % (progress, os.getpid()))
    pack_layer(ckpt, dest, 1, 0, 3, progress_path=progress)
    assert not os.path.islink(progress) and pack_progress.read_progress(progress)["state"] == "done"
    assert _lstate(outside) == before


@pytest.mark.parametrize("name", [ckpt_factory.INDEX_NAME, "model-00001-of-00002.safetensors"])
def test_fifo_in_the_checkpoint_is_refused_without_blocking(ckpt, dest, no_hang, name):
    path = os.path.join(ckpt, name)
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(EngramFormatError) as info:
        pack_layer(ckpt, dest, 1, 0, 3)
    assert str(info.value).startswith(path + ": ") and "is a FIFO, not a regular file" in str(info.value)
    assert os.listdir(dest) == []
