"""The lab allocation model (lab/standins/dsv41_lab_allocation.py): sparse TP2 stand-ins count as fully
allocated in os.stat/os.statvfs on the lab hosts. These tests run on this machine without the lab: the
module is loaded without installing it (the wrappers are called directly), except in the fresh
interpreters that check what the .pth file's import does."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[3] / "lab"
STANDINS = LAB / "standins"
SIZE = 10_000_001           # not a multiple of 512 or 4096: the rounding shows


@pytest.fixture()
def model(monkeypatch, tmp_path):
    monkeypatch.setenv("DSV41_LAB_ALLOCATION", "off")   # loaded, not installed: os stays untouched here
    spec = importlib.util.spec_from_file_location("dsv41_lab_allocation_under_test",
                                                  STANDINS / "dsv41_lab_allocation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert os.stat is mod._REAL["stat"] and os.statvfs is mod._REAL["statvfs"]
    roots = tmp_path / "allocated.roots"
    roots.write_text("# test roots\n%s 3\n" % (tmp_path / "home"))
    mod.ROOTS_FILE = str(roots)
    (tmp_path / "home").mkdir()
    return mod


def sparse(path, size=SIZE):
    """A stand-in as the seeder writes one: a real 4096-byte header, a hole up to size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"\1" * 4096)
        handle.truncate(size)
    st = os.lstat(path)
    assert st.st_blocks * 512 < size, "this filesystem does not keep holes"
    return path


def fixed_statvfs(real, bfree, bavail):
    cls, (fields, extra) = real.__reduce__()
    fields = list(fields)
    fields[3], fields[4] = bfree, bavail
    return cls(tuple(fields), extra)


@pytest.mark.parametrize("name, modeled", [
    ("engram-l1-r1of2.bin", True), ("engram-l14-r1of2.bin", True), ("engram-l14-r0of2.bin", True),
    ("engram-l1-r3of4.bin", True), ("engram-l7-r0of1.bin", True), ("engram-l1-r1of12.bin", True),
    ("engram-l1-r1of3.bin", False),                       # the lab fleet's own TP size
    ("engram-l1-r1of03.bin", False),                      # 3 all the same
    (".engram-l1-r1of2.bin.dsv41-relocate.partial", False),  # a relocation's copy being written
    ("engram-l1-r1of2.partial", False), ("engram-l1-r1of2.bin.bak", False), ("engram-l1-r1of2.bin ", False),
    ("engram-l-r1of2.bin", False), ("engram-lx-r1of2.bin", False), ("engram-l1-rof2.bin", False),
    ("engram-l1-r1of.bin", False), ("engram-l1r1of2.bin", False), ("engram-l\u0661-r1of2.bin", False),
    ("Engram-l1-r1of2.bin", False), ("engram-l1-r1of2.BIN", False),
])
def test_name_rule(model, name, modeled):
    assert model.is_modeled_name(name) is modeled


@pytest.mark.parametrize("size, blocks512, frsize, extra", [
    (50_688_818_272, 8, 4096, 12_375_199),      # spark2's l1 stand-in: ceil(size/4096) - its header page
    (50_690_206_384, 8, 4096, 12_375_538),
    (4096, 8, 4096, 0), (4097, 8, 4096, 1), (1, 0, 4096, 1), (0, 0, 4096, 0),
    (10_000_001, 8, 4096, 2441), (10_000_001, 19000, 4096, 67),  # 19000 * 512 bytes: 2375 whole blocks
    (10_000_001, 19532, 4096, 0),                                # 19532 * 512 rounds up to the same 2442 blocks
    (10_000_001, 40000, 4096, 0),                                # allocated more than its size: never negative
    (10_000_001, 8, 65536, 152),
])
def test_extra_blocks(model, size, blocks512, frsize, extra):
    assert model.extra_blocks(size, blocks512, frsize) == extra


def test_report_figures(model):
    """spark2's volume (lab/labctl.py) is the report's free space plus the TP2 stand-ins rounded to blocks:
    with them present, the modeled free space is the report's figure; without, that plus their blocks."""
    spec = importlib.util.spec_from_file_location("dsv41_lab_host_seed_under_test", LAB / "seed" / "host_seed.py")
    host_seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_seed)
    sizes = host_seed.tp2_shard_sizes()
    assert sum(sizes.values()) == 101_379_024_656
    volume = 64_906_600_448 + sum(-(-n // 4096) * 4096 for n in sizes.values())
    header_pages = len(sizes)
    real_free_blocks = volume // 4096 - header_pages
    modeled = real_free_blocks - sum(model.extra_blocks(n, 8, 4096) for n in sizes.values())
    assert modeled * 4096 == 64_906_600_448
    assert (real_free_blocks + header_pages) * 4096 == 64_906_600_448 + 101_379_026_944
    spec = importlib.util.spec_from_file_location("dsv41_labctl_under_test", LAB / "labctl.py")
    labctl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(labctl)
    spark2 = labctl.HOSTS["spark2"]
    assert spark2["volume"]["size"] == 64_906_600_448 + sum(-(-n // labctl.PAGE) * labctl.PAGE for n in sizes.values())
    assert sorted(spark2["volume"]["binds"].values()) == ["/home/zurih/dsv41-3x-spark/engram", "/home/zurih/dsv41-engram"]
    assert spark2["tmpfs"] == {"/data": 256 << 30}


def test_stat_lstat_fstat_report_full_blocks(model, tmp_path):
    shard = sparse(tmp_path / "home" / "zurih" / "dsv41-engram" / "engram-l1-r1of2.bin")
    real = os.lstat(shard)
    want = -(-SIZE // 512)
    assert model.stat(shard).st_blocks == want
    assert model.lstat(str(shard)).st_blocks == want
    assert model.stat(os.fsencode(shard)).st_blocks == want
    with open(shard, "rb") as handle:
        assert model.fstat(handle.fileno()).st_blocks == want
        assert model.stat(handle.fileno()).st_blocks == want
    dir_fd = os.open(shard.parent, os.O_RDONLY)
    try:
        assert model.stat(shard.name, dir_fd=dir_fd).st_blocks == want
    finally:
        os.close(dir_fd)
    st = model.stat(shard)
    # every other field is the real one
    for field in ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_size", "st_mtime_ns", "st_blksize"):
        assert getattr(st, field) == getattr(real, field), field
    assert tuple(st) == tuple(real) and isinstance(st, os.stat_result)


def test_what_is_not_modeled(model, tmp_path):
    home = tmp_path / "home"
    cases = {
        "tp3": sparse(home / "zurih" / "dsv41-3x-spark" / "engram" / "engram-l1-r1of3.bin"),
        "partial": sparse(home / "zurih" / "dsv41-engram" / ".engram-l1-r1of2.bin.dsv41-relocate.partial"),
        "outside the roots": sparse(tmp_path / "elsewhere" / "engram-l1-r1of2.bin"),
        "too deep": sparse(home / "a" / "b" / "c" / "engram-l1-r1of2.bin"),   # level 4 under a depth-3 root
    }
    for what, path in cases.items():
        assert model.stat(path).st_blocks == os.stat(path).st_blocks, what
    # a full (not sparse) file: the cheap path, nothing to change
    full = home / "engram-l2-r0of2.bin"
    full.write_bytes(b"\1" * 8192)
    assert model.stat(full).st_blocks == os.stat(full).st_blocks


def test_symlinks_are_never_modeled_files(model, tmp_path):
    home = tmp_path / "home"
    shard = sparse(tmp_path / "elsewhere" / "data.img")          # not a stand-in name, outside the roots
    link = home / "engram-l1-r1of2.bin"
    link.symlink_to(shard)
    assert model.lstat(link).st_blocks == os.lstat(link).st_blocks            # the link itself
    assert model.stat(link).st_blocks == os.stat(shard).st_blocks             # followed: data.img, not a stand-in
    # a link to a stand-in in the roots: stat through it sees the stand-in, the scan counts the file once
    real = sparse(home / "zurih" / "engram-l14-r1of2.bin")
    alias = home / "other-name.bin"
    alias.symlink_to(real)
    assert model.stat(alias).st_blocks == -(-SIZE // 512)
    assert model.lstat(alias).st_blocks == os.lstat(alias).st_blocks
    found = model.scan(model.read_roots())
    assert [p for p, _ in found] == [str(real)]
    # where a file is is its real path: through a symlinked directory into the roots it is modeled ...
    (tmp_path / "door").symlink_to(home / "zurih")
    assert model.lstat(tmp_path / "door" / real.name).st_blocks == -(-SIZE // 512)
    # ... and a stand-in outside the roots reached through a symlinked directory inside them is not
    outside = sparse(tmp_path / "elsewhere" / "engram-l1-r0of2.bin")
    (home / "window").symlink_to(outside.parent)
    assert model.stat(home / "window" / outside.name).st_blocks == os.stat(outside).st_blocks
    assert [p for p, _ in model.scan(model.read_roots())] == [str(real)]   # the scan never follows it either


def test_statvfs_reduced_by_the_modeled_files_on_that_filesystem(model, tmp_path, monkeypatch):
    home = tmp_path / "home"
    a = sparse(home / "zurih" / "dsv41-engram" / "engram-l1-r1of2.bin")
    b = sparse(home / "zurih" / "dsv41-engram" / "engram-l14-r1of2.bin", SIZE + 4096 * 10)
    os.link(b, home / "zurih" / "engram-l14-r1of2.bin")          # a hard link: counted once
    sparse(home / "zurih" / "engram-l1-r1of3.bin")                # TP3: not counted
    real = os.statvfs(tmp_path)
    fixed = fixed_statvfs(real, 10_000_000, 9_000_000)
    monkeypatch.setitem(model._REAL, "statvfs", lambda path: fixed)
    frsize = real.f_frsize
    extra = sum(model.extra_blocks(os.lstat(p).st_size, os.lstat(p).st_blocks, frsize) for p in (a, b))
    assert extra > 0
    got = model.statvfs(tmp_path / "home" / "zurih" / "dsv41-engram")
    assert (got.f_bfree, got.f_bavail) == (10_000_000 - extra, 9_000_000 - extra)
    assert (got.f_blocks, got.f_frsize, got.f_files, got.f_fsid) == (fixed.f_blocks, fixed.f_frsize, fixed.f_files,
                                                                     fixed.f_fsid)
    # a file descriptor of that filesystem: os.statvfs(fd) and os.fstatvfs(fd)
    monkeypatch.setitem(model._REAL, "fstatvfs", lambda fd: fixed)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert model.statvfs(fd).f_bavail == 9_000_000 - extra
        assert model.fstatvfs(fd).f_bavail == 9_000_000 - extra
    finally:
        os.close(fd)
    # one stand-in leaves the roots (same filesystem): its blocks come back, rounded to whole blocks
    size_a = os.lstat(a).st_size
    blocks_a = os.lstat(a).st_blocks
    os.rename(a, tmp_path / "parked.bin")
    assert model.statvfs(tmp_path).f_bavail == 9_000_000 - extra + model.extra_blocks(size_a, blocks_a, frsize)
    # and comes back
    os.rename(tmp_path / "parked.bin", a)
    assert model.statvfs(tmp_path).f_bavail == 9_000_000 - extra
    # never below 0
    monkeypatch.setitem(model._REAL, "statvfs", lambda path: fixed_statvfs(real, 5, 3))
    got = model.statvfs(tmp_path)
    assert (got.f_bfree, got.f_bavail) == (0, 0)


def test_statvfs_counts_only_files_on_the_same_filesystem(model, tmp_path, monkeypatch):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test directory")
    other = shm / ("dsv41-alloc-test-%d" % os.getpid())
    try:
        sparse(other / "engram-l1-r1of2.bin")
        Path(model.ROOTS_FILE).write_text("%s 3\n%s 2\n" % (tmp_path / "home", other))
        fixed = fixed_statvfs(os.statvfs(tmp_path), 1000, 1000)
        monkeypatch.setitem(model._REAL, "statvfs", lambda path: fixed)
        assert model.statvfs(tmp_path).f_bavail == 1000            # the stand-in is on /dev/shm
        assert model.statvfs(other).f_bavail < 1000
    finally:
        for p in other.glob("*"):
            p.unlink()
        if other.exists():
            other.rmdir()


def test_roots_file(model, tmp_path):
    roots = Path(model.ROOTS_FILE)
    roots.write_text("/home 4\n# comment\n\n/data   # depth 4 by default\n/srv 99\n")
    assert model.read_roots() == ((os.path.realpath("/home"), 4), (os.path.realpath("/data"), 4),
                                  (os.path.realpath("/srv"), model.MAX_DEPTH))
    roots.write_text("")
    assert model.read_roots() == ()
    roots.unlink()
    assert model.read_roots() == tuple((os.path.realpath(r), d) for r, d in model.DEFAULT_ROOTS)
    assert model.within_roots("/home/zurih/dsv41-engram/engram-l1-r1of2.bin", (("/home", 3),))
    assert not model.within_roots("/home/zurih/a/b/engram-l1-r1of2.bin", (("/home", 3),))
    assert not model.within_roots("/homework/engram-l1-r1of2.bin", (("/home", 3),))
    assert model.within_roots("/data/engram-l1-r1of2.bin", (("/", 2),))


def test_any_error_inside_gives_the_real_value(model, tmp_path, monkeypatch):
    shard = sparse(tmp_path / "home" / "engram-l1-r1of2.bin")
    real_st, real_vfs = os.stat(shard), os.statvfs(tmp_path)
    fixed = fixed_statvfs(real_vfs, 1000, 1000)
    monkeypatch.setitem(model._REAL, "statvfs", lambda path: fixed)
    assert model.statvfs(tmp_path).f_bavail < 1000 and model.stat(shard).st_blocks > real_st.st_blocks
    Path(model.ROOTS_FILE).write_text("relative/root 2\n")               # a bad roots file
    assert model.statvfs(tmp_path) == fixed
    assert model.stat(shard).st_blocks == real_st.st_blocks
    Path(model.ROOTS_FILE).write_text("%s 3\n" % (tmp_path / "home"))
    monkeypatch.setattr(model, "SCAN_BUDGET", 0)                         # a scan over its budget
    assert model.statvfs(tmp_path) == fixed
    monkeypatch.setattr(model, "SCAN_BUDGET", 50000)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(model, "read_roots", broken)
    assert model.statvfs(tmp_path) == fixed
    assert model.stat(shard).st_blocks == real_st.st_blocks
    # the real call's own errors reach the caller unchanged
    monkeypatch.setitem(model._REAL, "statvfs", os.statvfs)
    with pytest.raises(FileNotFoundError):
        model.stat(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        model.statvfs(tmp_path / "missing")
    assert not model._local.busy


def installed(code, env_extra, tmp_path):
    """A fresh interpreter that imports the model as the .pth file does; the JSON it prints."""
    env = dict(os.environ, PYTHONPATH=str(STANDINS), DSV41_LAB_ALLOCATED_ROOTS=str(tmp_path / "allocated.roots"))
    env.pop("DSV41_LAB_ALLOCATION", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", "import dsv41_lab_allocation\n" + code], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_installed_in_a_fresh_interpreter(tmp_path):
    (tmp_path / "allocated.roots").write_text("%s 3\n" % (tmp_path / "home"))
    shard = sparse(tmp_path / "home" / "zurih" / "engram-l1-r1of2.bin")
    code = """
import json, os, pathlib, shutil
p = pathlib.Path(%r)
print(json.dumps({"module": os.statvfs.__module__, "path_stat": p.stat().st_blocks, "path_lstat": p.lstat().st_blocks,
                  "rmtree_safe": shutil.rmtree.avoids_symlink_attacks,
                  "caps": [os.stat in os.supports_dir_fd, os.stat in os.supports_fd, os.stat in os.supports_follow_symlinks,
                           os.statvfs in os.supports_fd]}))
""" % str(shard)
    got = installed(code, {}, tmp_path)
    assert got == {"module": "dsv41_lab_allocation", "path_stat": -(-SIZE // 512), "path_lstat": -(-SIZE // 512),
                   "rmtree_safe": True, "caps": [True, True, True, True]}
    off = installed(code, {"DSV41_LAB_ALLOCATION": "off"}, tmp_path)
    assert off["module"] == os.statvfs.__module__ and off["path_stat"] == os.stat(shard).st_blocks


def test_the_fleet_s_own_tp_size_from_the_seeded_file(model, tmp_path, monkeypatch):
    """On the TP4 lab (/etc/dsv41-lab/fleet.tp holds 4) TP4 shards are the fleet's own, real files, and TP3 ones stand
    for full data; without the file, or with a value that is no size, the TP3 lab's rule."""
    tp_file = tmp_path / "fleet.tp"
    assert model._fleet_tp(str(tp_file)) == 3
    tp_file.write_text("4\n")
    assert model._fleet_tp(str(tp_file)) == 4
    monkeypatch.setattr(model, "TP_SIZE", 4)
    assert not model.is_modeled_name("engram-l1-r3of4.bin") and model.is_modeled_name("engram-l1-r2of3.bin")
    for junk in ("", "four\n", "0\n", "-4\n"):
        tp_file.write_text(junk)
        assert model._fleet_tp(str(tp_file)) == 3
