"""engram_relocate: moving foreign Engram shards between hosts through the head, restoring and deleting them.

Real files in tmp_path; "hosts" are reached through a fake ssh that runs the remote command line with
``bash -c`` on this machine (so the quoting of the agent's program text and arguments is exercised), and
each host is told apart by the machine id its inspection reports.
"""
import hashlib
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from modrun import run_module
import engram_relocate as relocate_module
from ansible.module_utils.engram import relocate_runner as engram_relocate_runner
from ansible.module_utils.engram.relocate import delete_disposable, relocate, restore
from ansible.module_utils.engram.relocate_agent import AGENT, temp_name
from ansible.module_utils.engram.relocate_plan import copy_need, plan_move, shard_verdict
from ansible.module_utils.engram.relocate_runner import Manifest, RelocateError, Runner

MAGIC = 0x31344E4531565344
SRC, DST = "zurih@spark2", "zurih@spark3"
FULL_ROWS = {1: 384006168, 14: 384016684}
REPORT_TP2_BYTES = 101379024656


# --------------------------------------------------------------------------- helpers

def write_shard(path, layer, rank, tp, rows, extents=((8 << 10, 20000), (-5000, 5000)), sparse=True, seed=1,
                digest=True):
    """A packed shard as the SPEC describes it (header, then rows), with random data at ``extents``
    (offset from the end when negative) and holes elsewhere. Returns its sha256 (read as plain bytes)."""
    lo, hi = rows * rank // tp, rows * (rank + 1) // tp
    size = 4096 + (hi - lo) * 264
    rnd = __import__("random").Random(seed)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<6Q", MAGIC, layer, lo, hi, rows, 264) + bytes(4096 - 48))
        handle.truncate(size)
        for off, length in extents:
            handle.seek(off if off >= 0 else size + off)
            handle.write(bytes(rnd.getrandbits(8) for _ in range(length)) if length < 50000 else os.urandom(length))
        if not sparse:
            handle.seek(4096)
            handle.write(os.urandom(size - 4096))
    return sha256_of(path) if digest else None


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree(root):
    """Every entry under ``root``: (relative path, kind, size, sha256 and mtime_ns of regular files)."""
    out = []
    for base, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(base, name)
            st = os.lstat(path)
            regular = stat.S_ISREG(st.st_mode)
            out.append((os.path.relpath(path, root), stat.S_IFMT(st.st_mode), st.st_size,
                        sha256_of(path) if regular else None, st.st_mtime_ns if regular else None))
    return sorted(out)


FAKE_SSH = r'''#!{python}
"""ssh stand-in: parses ssh's options, logs them, then runs the remote command line as sshd would hand it
to the user's shell: the words after the host joined by spaces, through bash -c."""
import getopt, json, os, shlex, sys
opts, args = getopt.getopt(sys.argv[1:], "46AaCfGgKkMNnqsTtVvXxYyB:b:c:D:E:e:F:I:i:J:L:l:m:O:o:p:Q:R:S:W:w:")
with open({log!r}, "a") as log:
    log.write(json.dumps({{"opts": opts, "host": args[0], "words": shlex.split(" ".join(args[1:]))[3:]}}) + "\n")
os.execvp("bash", ["bash", "-c", " ".join(args[1:])])
'''


@pytest.fixture
def fake_ssh(tmp_path):
    path = tmp_path / "fake-ssh"
    log = tmp_path / "ssh.log"
    path.write_text(FAKE_SSH.format(python=sys.executable, log=str(log)))
    path.chmod(0o755)
    return {"path": str(path), "log": log}


def ssh_log(fake):
    return [json.loads(line) for line in fake["log"].read_text().splitlines()] if fake["log"].exists() else []


class Hosts(Runner):
    """A Runner whose hosts are told apart: each one's inspection reports its own machine id."""

    def call(self, host, op, args, timeout=engram_relocate_runner.CALL_TIMEOUT):
        report = Runner.call(self, host, op, args, timeout)
        if op == "inspect":
            report["machine_id"] = "machine-of-%s" % self.label(host)
        return report


@pytest.fixture
def distinct_hosts(monkeypatch):
    """The same for the Runner the module builds."""
    real = engram_relocate_runner.Runner.call

    def call(self, host, op, args, timeout=engram_relocate_runner.CALL_TIMEOUT):
        report = real(self, host, op, args, timeout)
        if op == "inspect":
            report["machine_id"] = "machine-of-%s" % self.label(host)
        return report
    monkeypatch.setattr(engram_relocate_runner.Runner, "call", call)


@pytest.fixture
def fleet(tmp_path, fake_ssh):
    """spark2's old TP2 shards, the active worker Engram directory, spark3's archive, the head's records."""
    src = tmp_path / "home/zurih/dsv41-engram"
    active = tmp_path / "home/zurih/dsv41-3x-spark/engram"
    dest = tmp_path / "data/dsv41-tp2-archive"
    records = tmp_path / "records"
    for d in (src, active, dest, records):
        d.mkdir(parents=True)
    files = {}
    for layer, rows in ((1, 300001), (14, 200003)):
        path = str(src / ("engram-l%d-r1of2.bin" % layer))
        files[path] = write_shard(path, layer, 1, 2, rows, seed=layer)
    runner = Hosts(ssh_executable=fake_ssh["path"], ssh_options=["-o", "BatchMode=yes"],
                   remote_python=sys.executable, labels={SRC: "spark2"})
    return {"src": str(src), "active": str(active), "dest": str(dest), "files": files, "runner": runner,
            "manifest": Manifest(str(records / "relocate.json")), "root": str(tmp_path), "ssh": fake_ssh}


def move(fleet, files=None, **kwargs):
    args = dict(src=SRC, dst=DST, dest_dir=fleet["dest"], active_dir=fleet["active"], tp_size=3,
                runner=fleet["runner"], manifest=fleet["manifest"])
    args.update(kwargs)
    return relocate(list(fleet["files"]) if files is None else files, **args)


def snapshot(fleet):
    return tree(fleet["root"] + "/home"), tree(fleet["root"] + "/data"), os.path.exists(fleet["manifest"].path)


# --------------------------------------------------------------------------- moving

def test_move_sparse_files_through_the_head_keeps_holes_and_content(fleet):
    before = {p: (os.stat(p).st_blocks, os.stat(p).st_mode, os.stat(p).st_mtime_ns, os.stat(p).st_size)
              for p in fleet["files"]}
    plan, entries = move(fleet)
    assert plan["ok"] and [f["verdict"] for f in plan["files"]] == ["move", "move"]
    assert [e["state"] for e in entries] == ["moved", "moved"]
    for path, digest in fleet["files"].items():
        copy = os.path.join(fleet["dest"], os.path.basename(path))
        assert not os.path.exists(path)
        st = os.stat(copy)
        assert sha256_of(copy) == digest and st.st_size == before[path][3]
        assert st.st_blocks <= before[path][0] + 16, "holes must stay holes"
        assert st.st_blocks * 512 < st.st_size // 10
        assert (st.st_mode, st.st_mtime_ns) == before[path][1:3]
    assert sorted(os.listdir(fleet["dest"])) == ["engram-l1-r1of2.bin", "engram-l14-r1of2.bin"]
    recorded = json.load(open(fleet["manifest"].path))
    assert recorded["format"] == "dsv41-engram-relocate/1"
    entry = recorded["entries"][0]
    assert {k: entry[k] for k in ("file", "src_host", "src_path", "dst_host", "dst_path", "state")} == {
        "file": "engram-l1-r1of2.bin", "src_host": SRC, "src_path": os.path.join(fleet["src"], "engram-l1-r1of2.bin"),
        "dst_host": DST, "dst_path": os.path.join(fleet["dest"], "engram-l1-r1of2.bin"), "state": "moved"}
    assert entry["sha256"] == fleet["files"][entry["src_path"]] and entry["moved_at"].endswith("Z")
    # Everything went through ssh: -T, the operator's options, and the hosts.
    calls = ssh_log(fleet["ssh"])
    assert {c["host"] for c in calls} == {SRC, DST}
    assert all(["-T", ""] in c["opts"] and ["-o", "BatchMode=yes"] in c["opts"] for c in calls)
    assert {c["words"][0] for c in calls} >= {"inspect", "send", "receive", "commit", "remove"}


def test_non_sparse_file_and_odd_destination_name_quoting(fleet, tmp_path):
    """A file without holes; a destination whose path needs quoting for the remote shell."""
    odd = tmp_path / "data" / "it's a $HOME `dir`"
    odd.mkdir()
    path = os.path.join(fleet["src"], "engram-l1-r0of4.bin")
    digest = write_shard(path, 1, 0, 4, 20003, sparse=False)
    plan, entries = move(fleet, [path], dest_dir=str(odd))
    copy = odd / "engram-l1-r0of4.bin"
    assert sha256_of(str(copy)) == digest and entries[0]["dst_path"] == str(copy) and not os.path.exists(path)
    assert plan["destination"]["need_bytes"] >= os.path.getsize(str(copy))


def test_head_side_runs_without_ssh(fleet):
    """A host omitted is the head itself: its side runs without ssh. The same machine and filesystem on both
    sides is refused, as it would free nothing."""
    plan, entries = move(fleet, src=None)
    assert [e["src_host"] for e in entries] == [None, None] and all(not os.path.exists(p) for p in fleet["files"])
    assert {c["host"] for c in ssh_log(fleet["ssh"])} == {DST}
    restore(Manifest(fleet["manifest"].path).load(), fleet["runner"], fleet["active"])
    with pytest.raises(RelocateError, match="same filesystem as %s: moving it there frees nothing; nothing was moved"
                       % fleet["dest"]):
        move(fleet, src=None, dst=None, runner=Runner())
    assert {p: sha256_of(p) for p in fleet["files"]} == fleet["files"]


def test_rerun_is_idempotent(fleet):
    move(fleet)
    fleet["manifest"].load()
    plan, entries = move(fleet)
    assert entries == [] and [f["verdict"] for f in plan["files"]] == ["already_moved", "already_moved"]


def test_existing_identical_copy_is_kept_and_source_removed(fleet):
    path = next(iter(fleet["files"]))
    target = os.path.join(fleet["dest"], os.path.basename(path))
    with open(path, "rb") as a, open(target, "wb") as b:
        b.write(a.read())
    plan, entries = move(fleet, [path])
    assert plan["files"][0]["dst_exists"] is True and entries[0]["published"] == "already_present"
    assert not os.path.exists(path) and sha256_of(target) == fleet["files"][path]


def test_existing_different_copy_is_refused_and_nothing_changes(fleet):
    path = next(iter(fleet["files"]))
    target = os.path.join(fleet["dest"], os.path.basename(path))
    with open(path, "rb") as a, open(target, "wb") as b:
        data = bytearray(a.read())
        data[-1] ^= 0xFF
        b.write(data)
    before = snapshot(fleet)
    with pytest.raises(RelocateError) as err:
        move(fleet, [path])
    assert "spark3: %s already exists with different content" % target in str(err.value)
    assert "the source %s was not touched" % path in str(err.value)
    assert snapshot(fleet) == before


# --------------------------------------------------------------------------- refusals change nothing

def _symlink(fleet):
    link = os.path.join(fleet["src"], "engram-l1-r0of2.bin")
    os.symlink(next(iter(fleet["files"])), link)
    return [link], "spark2: %s is a symlink" % link


def _foreign_name(fleet):
    path = os.path.join(fleet["src"], "notes.txt")
    open(path, "w").write("x")
    return [path], "spark2: %s is not named engram-l{layer}-r{rank}of{tp}.bin" % path


def _own_tp(fleet):
    path = os.path.join(fleet["src"], "engram-l1-r1of3.bin")
    write_shard(path, 1, 1, 3, 3000)
    return [path], "spark2: %s is a shard of the fleet's own TP size (of3)" % path


def _bad_header(fleet):
    path = os.path.join(fleet["src"], "engram-l1-r0of2.bin")
    write_shard(path, 1, 1, 2, 3000)  # rank 1's rows under rank 0's name
    return [path], "header rows [1500, 3000) are not rank 0 of 2's rows [0, 1500) of N=3000"


def _truncated(fleet):
    path = os.path.join(fleet["src"], "engram-l14-r0of2.bin")
    write_shard(path, 14, 0, 2, 3000)
    os.truncate(path, os.path.getsize(path) - 264)
    return [path], "is %d bytes, not 4096 + 1500 rows * 264 = %d" % (4096 + 1499 * 264, 4096 + 1500 * 264)


def _in_active(fleet):
    path = os.path.join(fleet["active"], "engram-l1-r0of2.bin")
    write_shard(path, 1, 0, 2, 3000)
    return [path], "spark2: %s lies in the active Engram directory %s" % (path, fleet["active"])


def _dest_missing(fleet):
    fleet["dest"] += "-absent"
    return None, "destination %s does not exist" % fleet["dest"]


def _dest_symlink(fleet):
    link = fleet["dest"] + "-link"
    os.symlink(fleet["dest"], link)
    fleet["dest"] = link
    return None, "spark3: destination %s is a symlink, not a directory" % link


def _dest_in_active(fleet):
    fleet["dest"] = fleet["active"]
    return None, "spark3: destination %s lies in the active Engram directory" % fleet["active"]


def _missing_file(fleet):
    path = os.path.join(fleet["src"], "engram-l1-r0of2.bin")
    return [path], "spark2: %s does not exist" % path


REFUSALS = {"symlink": _symlink, "unidentifiable name": _foreign_name, "own tp size": _own_tp,
            "header": _bad_header, "truncated": _truncated, "active dir": _in_active, "missing": _missing_file,
            "dest missing": _dest_missing, "dest symlink": _dest_symlink, "dest in active": _dest_in_active}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_change_nothing(fleet, case):
    extra, message = REFUSALS[case](fleet)
    files = list(fleet["files"]) + (extra or [])  # good files beside the bad one stay too
    before = snapshot(fleet)
    with pytest.raises(RelocateError) as err:
        move(fleet, files)
    assert message in str(err.value) and str(err.value).endswith("nothing was moved")
    assert snapshot(fleet) == before
    assert [c["words"][0] for c in ssh_log(fleet["ssh"])] == ["inspect", "inspect"]


def test_no_room_on_destination_is_refused(fleet):
    before = snapshot(fleet)
    calls = []

    def free(label, path, reported):
        calls.append((label, path, reported))
        return 10000

    with pytest.raises(RelocateError) as err:
        move(fleet, free_space=free, margin_bytes=5000)
    need = sum(copy_need_for(fleet, p) for p in fleet["files"])
    assert "spark3: no room in %s: 10,000 bytes free, the copies need %s + margin 5,000; short by %s bytes" % (
        fleet["dest"], "{:,}".format(need), "{:,}".format(need + 5000 - 10000)) in str(err.value)
    assert calls[0][:2] == ("spark3", fleet["dest"]) and snapshot(fleet) == before


def copy_need_for(fleet, path):
    plan = plan_move([path], SRC, DST, fleet["dest"], fleet["active"], 3, fleet["runner"])
    return plan["files"][0]["need_bytes"]


def test_margin_counts_and_exact_fit_passes(fleet):
    need = sum(copy_need_for(fleet, p) for p in fleet["files"])
    plan = plan_move(list(fleet["files"]), SRC, DST, fleet["dest"], fleet["active"], 3, fleet["runner"],
                     margin_bytes=100, free_space=lambda label, path, reported: need + 100)
    assert plan["ok"] and plan["destination"]["fits"] and plan["destination"]["free_after_bytes"] == 100
    plan = plan_move(list(fleet["files"]), SRC, DST, fleet["dest"], fleet["active"], 3, fleet["runner"],
                     margin_bytes=101, free_space=lambda label, path, reported: need + 100)
    assert not plan["ok"] and plan["destination"]["deficit_bytes"] == 1


def test_active_dir_must_exist_on_each_host(fleet):
    with pytest.raises(RelocateError, match="spark2: active_dir /nowhere does not exist there"):
        move(fleet, active_dir="/nowhere")


def test_duplicate_names_and_relative_paths_are_refused(fleet):
    path = next(iter(fleet["files"]))
    with pytest.raises(RelocateError, match="engram-l1-r1of2.bin named more than once"):
        move(fleet, [path, "/elsewhere/engram-l1-r1of2.bin"])
    with pytest.raises(RelocateError, match="must be an absolute, normalised path"):
        move(fleet, ["engram-l1-r1of2.bin"])


def test_host_that_looks_like_an_option_is_refused():
    with pytest.raises(RelocateError, match="not a host name"):
        Runner().argv("-oProxyCommand=x", "inspect", [])


# --------------------------------------------------------------------------- interrupted copies

def _big_source(fleet):
    path = os.path.join(fleet["src"], "engram-l14-r0of2.bin")
    digest = write_shard(path, 14, 0, 2, 60000, extents=((4096, 3 << 20),))
    return path, digest


def test_receiver_killed_mid_copy_leaves_source_and_no_final_name(fleet):
    path, digest = _big_source(fleet)
    seen = []

    temp = os.path.join(fleet["dest"], temp_name(os.path.basename(path)))

    def kill_receiver(done, sender, receiver):
        if done >= 256 << 10 and not seen:
            seen.append(done)
            wait_for(lambda: os.path.exists(temp) and os.path.getsize(temp) > 4096)  # it has written rows
            os.kill(receiver.pid, signal.SIGKILL)
            receiver.wait()

    with pytest.raises(RelocateError) as err:
        move(fleet, [path], chunk_bytes=4096, on_progress=kill_receiver)
    assert seen, "the receiver was killed mid-copy"
    text = str(err.value)
    assert "spark3: receiving engram-l14-r0of2.bin into %s failed" % fleet["dest"] in text
    assert "the source %s was not touched" % path in text
    assert "its temporary copy %s was removed" % os.path.join(fleet["dest"], temp_name("engram-l14-r0of2.bin")) \
        in text
    assert sha256_of(path) == digest and os.listdir(fleet["dest"]) == []
    assert not os.path.exists(fleet["manifest"].path)


def test_sender_killed_mid_copy_receiver_removes_its_temp(fleet):
    path, digest = _big_source(fleet)

    def kill_sender(done, sender, receiver):
        if done and sender.returncode is None:
            os.kill(sender.pid, signal.SIGKILL)
            sender.wait()

    with pytest.raises(RelocateError) as err:
        move(fleet, [path], chunk_bytes=4096, on_progress=kill_sender)
    assert "the stream ended early" in str(err.value) and "no temporary copy is left" in str(err.value)
    assert sha256_of(path) == digest and os.listdir(fleet["dest"]) == []


def test_source_changed_during_copy_is_not_published(fleet):
    path, digest = _big_source(fleet)

    def touch(done, sender, receiver):
        if done:
            os.utime(path, ns=(1, 1))

    with pytest.raises(RelocateError, match="changed while it was being sent"):
        move(fleet, [path], chunk_bytes=4096, on_progress=touch)
    assert sha256_of(path) == digest and os.listdir(fleet["dest"]) == []


def wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _agent(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-c", AGENT] + [str(a) for a in args], **kwargs)


def test_receiver_sigkilled_leaves_only_its_temp_name_and_the_next_run_recovers(fleet):
    path, digest = _big_source(fleet)
    name = os.path.basename(path)
    size = os.path.getsize(path)
    receiver = _agent("receive", fleet["dest"], name, size, 0, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    receiver.stdin.write(struct.pack("<cQQ", b"S", size, 0) + struct.pack("<cQQ", b"D", 0, 4096) + bytes(4096))
    receiver.stdin.flush()
    temp = os.path.join(fleet["dest"], temp_name(name))
    wait_for(lambda: os.path.exists(temp) and os.path.getsize(temp) == 4096)
    receiver.kill()
    receiver.wait()
    assert os.listdir(fleet["dest"]) == [temp_name(name)]
    assert stat.S_IMODE(os.stat(temp).st_mode) == 0o600
    plan, entries = move(fleet, [path])  # the dead receiver's temp is taken back
    assert os.listdir(fleet["dest"]) == [name] and sha256_of(os.path.join(fleet["dest"], name)) == digest


def test_receiver_stopped_by_sigterm_removes_its_temp(fleet):
    receiver = _agent("receive", fleet["dest"], "engram-l1-r0of2.bin", 10 ** 6, 0, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE)
    receiver.stdin.write(struct.pack("<cQQ", b"S", 10 ** 6, 0))
    receiver.stdin.flush()
    temp = os.path.join(fleet["dest"], temp_name("engram-l1-r0of2.bin"))
    wait_for(lambda: os.path.exists(temp))
    receiver.terminate()
    out, _ = receiver.communicate()
    assert receiver.returncode == 1 and b"stopped by signal 15" in out and os.listdir(fleet["dest"]) == []


def test_live_receivers_temp_is_never_taken(fleet):
    receiver = _agent("receive", fleet["dest"], "x.bin", 100, 0, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    receiver.stdin.write(struct.pack("<cQQ", b"S", 100, 0))
    receiver.stdin.flush()
    temp = os.path.join(fleet["dest"], temp_name("x.bin"))
    wait_for(lambda: os.path.exists(temp))
    try:
        with pytest.raises(RelocateError, match="being written by another relocation still running"):
            Runner().call(None, "discard", [fleet["dest"], "x.bin"])
    finally:
        receiver.kill()
        receiver.wait()
    assert Runner().call(None, "discard", [fleet["dest"], "x.bin"])["removed"] is True


@pytest.mark.parametrize("case", ["no room", "symlinked dir", "missing dir"])
def test_receiver_refuses_before_writing(fleet, case):
    dest = fleet["dest"]
    need = 0
    if case == "no room":
        need = 1 << 62
    elif case == "symlinked dir":
        os.symlink(dest, dest + "-link")
        dest += "-link"
    else:
        dest += "-absent"
    receiver = _agent("receive", dest, "x.bin", 100, need, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    out, _ = receiver.communicate()
    want = {"no room": "no room in %s" % dest, "symlinked dir": "is a symlink, not a directory",
            "missing dir": "does not exist"}[case]
    assert receiver.returncode == 1 and want in out.decode() and os.listdir(fleet["dest"]) == []


def test_unknown_agent_operation():
    with pytest.raises(RelocateError, match="unknown operation 'nope'"):
        Runner().call(None, "nope", [])


# --------------------------------------------------------------------------- restore and delete

def test_restore_brings_files_back_byte_identical(fleet):
    before = {p: os.stat(p) for p in fleet["files"]}
    move(fleet)
    manifest = Manifest(fleet["manifest"].path).load()
    plan, restored = restore(manifest, fleet["runner"], fleet["active"])
    assert [e["state"] for e in restored] == ["restored", "restored"]
    for path, digest in fleet["files"].items():
        st = os.stat(path)
        assert sha256_of(path) == digest and (st.st_mode, st.st_mtime_ns, st.st_size) == (
            before[path].st_mode, before[path].st_mtime_ns, before[path].st_size)
        assert st.st_blocks <= before[path].st_blocks + 16
    assert os.listdir(fleet["dest"]) == []
    states = [e["state"] for e in json.load(open(fleet["manifest"].path))["entries"]]
    assert states == ["restored", "restored"]
    # Nothing left to restore: a second restore changes nothing.
    plan, restored = restore(Manifest(fleet["manifest"].path).load(), fleet["runner"], fleet["active"])
    assert restored == [] and {f["verdict"] for f in plan["files"]} == {"already_restored"}


def test_restore_refuses_a_copy_that_no_longer_matches_the_manifest(fleet):
    move(fleet)
    copy = os.path.join(fleet["dest"], "engram-l1-r1of2.bin")
    with open(copy, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\x01")
    manifest = Manifest(fleet["manifest"].path).load()
    with pytest.raises(RelocateError) as err:
        restore(manifest, fleet["runner"], fleet["active"], only=["engram-l1-r1of2.bin"])
    assert "spark3: %s reads as sha256" % copy in str(err.value) and "nothing published" in str(err.value)
    assert os.listdir(fleet["src"]) == [] and os.path.exists(copy)


def test_restore_refuses_an_occupied_original_name(fleet):
    move(fleet)
    original = next(iter(fleet["files"]))
    open(original, "wb").write(b"someone else's file")
    before = snapshot(fleet)
    with pytest.raises(RelocateError, match="already holds a different regular"):
        restore(Manifest(fleet["manifest"].path).load(), fleet["runner"], fleet["active"])
    assert snapshot(fleet) == before


def test_delete_requires_the_matching_sha256_of_every_file(fleet):
    (first, first_sha), (second, second_sha) = fleet["files"].items()
    before = snapshot(fleet)
    with pytest.raises(RelocateError) as err:
        delete_disposable([{"path": first, "sha256": first_sha}, {"path": second, "sha256": "0" * 64}],
                          SRC, fleet["active"], 3, fleet["runner"], fleet["manifest"])
    assert "spark2: %s has sha256 %s, not the %s named; nothing was deleted" % (second, second_sha, "0" * 64) \
        in str(err.value)
    assert snapshot(fleet) == before
    plan, entries = delete_disposable([{"path": first, "sha256": first_sha.upper()}], SRC, fleet["active"], 3,
                                      fleet["runner"], fleet["manifest"])
    assert not os.path.exists(first) and os.path.exists(second) and plan["sha256_checked"] is True
    assert entries[0]["state"] == "deleted" and entries[0]["sha256"] == first_sha and entries[0]["freed_bytes"] > 0
    assert json.load(open(fleet["manifest"].path))["entries"][0]["deleted_at"] == entries[0]["deleted_at"]


def test_delete_refuses_unidentified_files_even_with_their_sha(fleet):
    path = os.path.join(fleet["src"], "engram-l1-r1of3.bin")
    digest = write_shard(path, 1, 1, 3, 3000)
    with pytest.raises(RelocateError, match="own TP size"):
        delete_disposable([{"path": path, "sha256": digest}], SRC, fleet["active"], 3, fleet["runner"],
                          fleet["manifest"])
    assert os.path.exists(path)


# --------------------------------------------------------------------------- verdicts and figures

def test_full_size_tp2_shards_plan_with_the_report_figures(tmp_path, fake_ssh):
    """spark2's two TP2 shards at their real sizes (sparse): 101,379,024,656 bytes, identified without reading
    them; their copies need only what their data extents allocate."""
    src, active, dest = tmp_path / "src", tmp_path / "active", tmp_path / "dest"
    for d in (src, active, dest):
        d.mkdir()
    paths = []
    for layer, rows in FULL_ROWS.items():
        path = str(src / ("engram-l%d-r1of2.bin" % layer))
        write_shard(path, layer, 1, 2, rows, extents=(), digest=False)
        paths.append(path)
    runner = Hosts(ssh_executable=fake_ssh["path"], remote_python=sys.executable)
    plan = plan_move(paths, SRC, DST, str(dest), str(active), 3, runner,
                     free_space=lambda label, path, reported: 64906600448)
    assert plan["ok"] and sum(f["size"] for f in plan["files"]) == REPORT_TP2_BYTES
    assert [f["shard"]["rows"] for f in plan["files"]] == [FULL_ROWS[1], FULL_ROWS[14]]
    assert plan["destination"]["free_bytes"] == 64906600448 and plan["destination"]["need_bytes"] < 1 << 20


def test_copy_need_of_a_file_without_holes():
    size = 50689728232
    assert copy_need({"size": size, "data_bytes": size, "extents": 1}, 4096) == -(-size // 4096) * 4096 + size // 1024
    assert copy_need({"size": size, "data_bytes": 8192, "extents": 2}, 4096) == 8192 + 4 * 4096 + 8


@pytest.mark.parametrize("facts, why", [
    ({"kind": None, "path": "/x/engram-l1-r1of2.bin"}, "does not exist"),
    ({"kind": "directory", "path": "/x/engram-l1-r1of2.bin"}, "is a directory, not a regular file"),
    ({"kind": "regular", "path": "/x/engram-l1-r1of2.bin", "size": 10}, "has no shard header (10 bytes)"),
    ({"kind": "regular", "path": "/x/engram-l1-r1of2.bin", "size": 4096 + 264, "padding_zero": True,
      "header": [1, 1, 1, 2, 2, 264]}, "has magic 0x0000000000000001"),
    ({"kind": "regular", "path": "/x/engram-l1-r1of2.bin", "size": 4096 + 264, "padding_zero": True,
      "header": [MAGIC, 14, 1, 2, 2, 264]}, "header says layer 14, row bytes 264; its name says layer 1"),
    ({"kind": "regular", "path": "/x/engram-l1-r1of2.bin", "size": 4096 + 264, "padding_zero": False,
      "header": [MAGIC, 1, 1, 2, 2, 264]}, "header padding is not zero"),
    ({"kind": "regular", "path": "/x/engram-l1-r5of2.bin", "size": 4096 + 264, "padding_zero": True,
      "header": [MAGIC, 1, 1, 2, 2, 264]}, "rank 5 is outside 0..1"),
])
def test_shard_verdicts(facts, why):
    shard, reason = shard_verdict(facts, 3)
    assert shard is None and why in reason


def test_manifest_lock_keeps_two_runs_apart(tmp_path):
    first = Manifest(str(tmp_path / "m.json"))
    with first.locked():
        with pytest.raises(RelocateError, match="another engram_relocate holds"):
            with Manifest(str(tmp_path / "m.json")).locked():
                pass
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(RelocateError, match="is not an engram_relocate manifest"):
        Manifest(str(tmp_path / "bad.json")).load()


# --------------------------------------------------------------------------- the module

def _module_args(fleet, **extra):
    args = {"action": "move", "files": list(fleet["files"]), "src_host": SRC, "dst_host": DST,
            "dest_dir": fleet["dest"], "active_dir": fleet["active"], "tp_size": 3,
            "manifest": fleet["manifest"].path, "ssh_executable": fleet["ssh"]["path"],
            "ssh_options": ["-o", "BatchMode=yes", "-i", "/home/mia/.ssh/id_ed25519_shared"],
            "remote_python": sys.executable, "host_label": "spark2"}
    args.update(extra)
    return {k: v for k, v in args.items() if v is not None}


@pytest.mark.parametrize("action", ["move", "delete"])
def test_module_check_mode_writes_nothing(fleet, distinct_hosts, action):
    files = list(fleet["files"]) if action == "move" else [{"path": p, "sha256": s} for p, s in fleet["files"].items()]
    before = snapshot(fleet)
    result = run_module(relocate_module.main, _module_args(fleet, action=action, files=files), check_mode=True)
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["entries"] == [] and result["plan"]["ok"] is True
    assert {f["verdict"] for f in result["plan"]["files"]} == {action}
    assert snapshot(fleet) == before and not os.path.exists(fleet["manifest"].path + ".lock")
    ops = [c["words"][0] for c in ssh_log(fleet["ssh"])]
    assert set(ops) == {"inspect"}
    freed = result["plan"]["src_filesystems"][0]
    assert freed["freed_bytes"] == sum(os.stat(p).st_blocks * 512 for p in fleet["files"])
    assert freed["free_after_bytes"] == freed["free_bytes"] + freed["freed_bytes"]


def test_module_move_then_restore(fleet, distinct_hosts):
    result = run_module(relocate_module.main, _module_args(fleet))
    assert result.get("failed") is not True, result
    assert result["changed"] is True and [e["state"] for e in result["entries"]] == ["moved", "moved"]
    assert all(not os.path.exists(p) for p in fleet["files"])
    assert ["-i", "/home/mia/.ssh/id_ed25519_shared"] in ssh_log(fleet["ssh"])[0]["opts"]
    again = run_module(relocate_module.main, _module_args(fleet))
    assert again["changed"] is False and again["entries"] == []
    recorded = open(fleet["manifest"].path).read()
    check = run_module(relocate_module.main, _module_args(fleet, action="restore", files=None), check_mode=True)
    assert check["changed"] is True and {f["verdict"] for f in check["plan"]["files"]} == {"restore"}
    assert "_entry" not in check["plan"]["files"][0] and check["plan"]["destinations"][0]["fits"] is True
    assert all(not os.path.exists(p) for p in fleet["files"]) and open(fleet["manifest"].path).read() == recorded
    back = run_module(relocate_module.main, _module_args(fleet, action="restore", files=None))
    assert back.get("failed") is not True, back
    assert back["changed"] is True and [e["state"] for e in back["entries"]] == ["restored", "restored"]
    assert {p: sha256_of(p) for p in fleet["files"]} == fleet["files"] and os.listdir(fleet["dest"]) == []


def test_module_refusal_names_host_file_and_value(fleet, distinct_hosts):
    extra, message = _own_tp(fleet)
    before = snapshot(fleet)
    for check_mode in (True, False):
        result = run_module(relocate_module.main, _module_args(fleet, files=list(fleet["files"]) + extra),
                            check_mode=check_mode)
        assert result["failed"] is True and result["changed"] is False and message in result["msg"]
        assert result["plan"]["ok"] is False if check_mode else True
    assert snapshot(fleet)[:2] == before[:2]


def test_module_delete_needs_sha256(fleet, distinct_hosts):
    before = snapshot(fleet)
    result = run_module(relocate_module.main, _module_args(fleet, action="delete"))
    assert result["failed"] is True and "sha256 None is not 64 hex digits" in result["msg"]
    assert result["msg"].startswith("spark2: ")
    bad = run_module(relocate_module.main, _module_args(fleet, action="delete", files=[{"path": "/x", "sh": 1}]))
    assert bad["failed"] is True and "neither a path nor a {path, sha256} dict" in bad["msg"]
    assert snapshot(fleet) == before


def test_module_restore_without_manifest_fails(fleet):
    result = run_module(relocate_module.main, _module_args(fleet, action="restore", files=None))
    assert result["failed"] is True and "manifest %s does not exist" % fleet["manifest"].path in result["msg"]


def test_module_required_options(fleet):
    result = run_module(relocate_module.main, {"action": "move", "active_dir": "/a", "manifest": "/tmp/m.json"})
    assert result["failed"] is True and "dest_dir" in result["msg"] and "tp_size" in result["msg"]


def test_documentation_matches_interface():
    doc = yaml.safe_load(relocate_module.DOCUMENTATION)
    assert set(doc["options"]) == {"action", "files", "src_host", "dst_host", "dest_dir", "active_dir", "tp_size",
                                   "manifest", "margin_bytes", "ssh_options", "ssh_executable", "remote_python",
                                   "host_label", "create_dirs", "bandwidth_limit", "dst_active_dir"}
    assert doc["options"]["action"]["choices"] == ["move", "restore", "delete"]
    yaml.safe_load(relocate_module.EXAMPLES)
    assert set(yaml.safe_load(relocate_module.RETURN)) == {"changed", "action", "plan", "entries", "manifest"}


def test_agent_is_small_enough_for_one_ssh_command_line():
    """Linux caps one argument (the remote command line sshd hands the shell) at 128 KiB."""
    argv = Runner().argv("zurih@spark2", "inspect", [json.dumps({"files": ["/" + "x" * 200] * 10})])
    assert len(argv[-1].encode()) < 100 * 1024
    assert textwrap.dedent(AGENT) == AGENT


def test_receiver_rechecks_room_with_the_margin(fleet, monkeypatch):
    """Room taken between the plan and the copy: the receiver refuses before writing, the source stays."""
    path = next(iter(fleet["files"]))
    free = os.statvfs(fleet["dest"])
    with pytest.raises(RelocateError) as err:
        move(fleet, [path], margin_bytes=free.f_bavail * free.f_frsize + (1 << 40),
             free_space=lambda label, d, reported: 1 << 60)
    assert "spark3: receiving engram-l1-r1of2.bin into %s failed: no room in %s" % (fleet["dest"], fleet["dest"]) \
        in str(err.value)
    assert sha256_of(path) == fleet["files"][path] and os.listdir(fleet["dest"]) == []
