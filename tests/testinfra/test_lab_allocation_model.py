"""The lab allocation model on a running lab (lab/standins/dsv41_lab_allocation.py, lab/README.md "Stand-ins"):
Python on the lab hosts counts the sparse TP2 stand-ins at their full size, so spark2's Engram destination
shows the report's free space with them present and gains their blocks when one leaves its filesystem.

Run against the lab after `make lab-up` (with tests/testinfra; the move test puts everything back):
    pytest tests/testinfra --hosts=ansible://dsv41_ranks --ansible-inventory=inventory/lab --connection=ansible
"""
import json
import shlex

import pytest

GIB = 1 << 30
DEST = "/home/zurih/dsv41-3x-spark/engram"
TP2_DIR = "/home/zurih/dsv41-engram"
TP2 = {"engram-l1-r1of2.bin": 50_688_818_272, "engram-l14-r1of2.bin": 50_690_206_384}
REPORT_FREE = 64_906_600_448
PARK = "/data/dsv41-lab-allocation-test"   # spark2's spare volume: same host, another filesystem
# Free bytes Python reads at each host's Engram directory (lab/README.md, "Host layout"), and spark2's /data
FREE = {"spark1": {"/home/mia/dsv41-engram": 384 * GIB},
        "spark2": {DEST: REPORT_FREE, "/data/dsv41-engram": 256 * GIB},
        "spark3": {DEST: 448 * GIB}}

# Reads, as the product does (os.statvfs; os.lstat st_blocks), one JSON line.
FACTS = r"""
import json, os, sys
out = {"module": os.statvfs.__module__, "free": {}, "files": {}}
for p in sys.argv[1].split(","):
    if p:
        s = os.statvfs(p)
        out["free"][p] = {"bavail": s.f_bavail * s.f_frsize, "bfree": s.f_bfree * s.f_frsize, "frsize": s.f_frsize,
                          "dev": os.stat(p).st_dev}
for p in sys.argv[2].split(","):
    if p and os.path.lexists(p):
        st = os.lstat(p)
        out["files"][p] = {"size": st.st_size, "blocks": st.st_blocks, "dev": st.st_dev}
print(json.dumps(out))
"""

# A hole-aware move across filesystems (only the data extents are copied: a stand-in's header), refusing to
# copy more than 64 MiB of data so a mistake can never fill a tmpfs (host memory) with a stand-in's zeros.
MOVE = r"""
import errno, os, sys
src, dst = sys.argv[1], sys.argv[2]
tmp = dst + ".lab-move"
fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
st = os.fstat(fd)
out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
copied = pos = 0
try:
    while pos < st.st_size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        copied += end - start
        if copied > 64 << 20:
            raise SystemExit("refused: %s holds more than 64 MiB of data" % src)
        while start < end:
            data = os.pread(fd, min(1 << 20, end - start), start)
            os.pwrite(out, data, start)
            start += len(data)
        pos = end
    os.ftruncate(out, st.st_size)
    os.fchmod(out, st.st_mode & 0o7777)
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.fsync(out)
except BaseException:
    os.unlink(tmp)
    raise
finally:
    os.close(out)
    os.close(fd)
os.rename(tmp, dst)
os.unlink(src)
print(copied)
"""


def spark2_only(host):
    if host.backend.get_hostname() != "spark2":
        pytest.skip("spark2 only")


def facts(host, dirs=(), files=()):
    cmd = "python3 -c %s %s %s" % (shlex.quote(FACTS), shlex.quote(",".join(dirs)), shlex.quote(",".join(files)))
    return json.loads(host.check_output(cmd))


def move(host, src, dst):
    return int(host.check_output("python3 -c %s %s %s" % (shlex.quote(MOVE), shlex.quote(src), shlex.quote(dst))))


def blocks(n, frsize):
    return -(-n // frsize) * frsize


def test_model_loaded_and_figures_of_the_host_layout(host):
    name = host.backend.get_hostname()
    got = facts(host, FREE[name])
    assert got["module"] == "dsv41_lab_allocation"
    assert {p: f["bavail"] for p, f in got["free"].items()} == FREE[name]
    assert all(f["bavail"] == f["bfree"] for f in got["free"].values())


def test_spark2_stand_ins_count_fully_allocated_on_the_destination_filesystem(host):
    spark2_only(host)
    paths = ["%s/%s" % (TP2_DIR, n) for n in TP2]
    got = facts(host, [DEST], paths)
    assert got["free"][DEST]["bavail"] == REPORT_FREE
    for path in paths:
        f = got["files"][path]
        assert f["size"] == TP2[path.rsplit("/", 1)[1]]
        assert f["blocks"] * 512 >= f["size"]
        assert f["dev"] == got["free"][DEST]["dev"]    # the destination's filesystem, as on the fleet
    # the model is Python's: stat(1) and df show the sparse stand-ins and the raw tmpfs figures
    raw_blocks = [int(b) for b in host.check_output("stat -c %%b %s" % " ".join(paths)).split()]
    assert all(b * 512 < 1 << 20 for b in raw_blocks)
    df_avail = int(host.check_output("df -B1 --output=avail %s | tail -n 1" % DEST))
    assert df_avail == REPORT_FREE + sum(blocks(n, 4096) for n in TP2.values()) - sum(b * 512 for b in raw_blocks)


def test_spark2_moving_a_stand_in_to_data_frees_its_blocks_then_back(host):
    spark2_only(host)
    name = "engram-l1-r1of2.bin"
    src, parked = "%s/%s" % (TP2_DIR, name), "%s/%s" % (PARK, name)
    before = facts(host, [DEST, "/data"], [src])
    assert before["free"][DEST]["bavail"] == REPORT_FREE
    frsize = before["free"][DEST]["frsize"]
    header = host.check_output("head -c 4096 %s | sha256sum" % src)
    host.run_expect([0], "sudo -n install -d -o zurih -g zurih -m 0755 %s" % PARK)
    moved = False
    try:
        assert move(host, src, parked) == 4096            # the header: the rest is a hole
        moved = True
        during = facts(host, [DEST, "/data"], [src, parked])
        assert src not in during["files"]
        assert during["files"][parked]["blocks"] * 512 >= TP2[name]
        gained = during["free"][DEST]["bavail"] - REPORT_FREE
        assert gained == blocks(TP2[name], frsize)        # the file's size rounded to blocks
        assert before["free"]["/data"]["bavail"] - during["free"]["/data"]["bavail"] == gained
    finally:
        if moved or host.file(parked).exists:
            move(host, parked, src)
        host.run("sudo -n rmdir %s" % PARK)
    after = facts(host, [DEST, "/data"], [src])
    assert after["free"][DEST]["bavail"] == REPORT_FREE
    assert after["free"]["/data"]["bavail"] == before["free"]["/data"]["bavail"]
    assert after["files"][src]["size"] == TP2[name]
    assert host.check_output("head -c 4096 %s | sha256sum" % src) == header
    assert host.check_output("stat -c %%a:%%U %s" % src) == "644:zurih"
