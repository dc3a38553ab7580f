"""Stage A from the report's state (issue 30): spark2 is short by 4,826,902,280 bytes, its old TP2 shards
(101,379,024,656 bytes, sparse stand-ins that the lab allocation model counts at their size) sit on the same
filesystem; the preflight names the ways out, an opt-in relocation to spark3 makes the room, stage A runs to
its end, and rollback.yml brings the shards back byte-identical.

- smoke: ``--check`` on the report's state prints the options with their free-space outcome and the exact
  commands, writes make demo's one line, and changes nothing (the TP2 shards, the destinations).
- refusals before anything moves: a destination without room, a file that cannot be identified, a file in
  the active /engram directory, the active directory itself as destination.
- an interrupted copy (bandwidth cap + the receiver killed mid-copy): source intact, no final name, nothing
  in the manifest; a rerun completes.
- end to end (one stage A run, reused by its assertions): --check counts the chosen relocation, the real
  run relocates, packs, restarts, checks the six packed layers, contention, KV pool, C1/C4 and records what
  moved; the copies on spark3 have the sha256 the files had on spark2; rollback restores them exactly and a
  second rollback changes nothing.

Packing the full-scale checkpoint would write 67.6 GB per rank, more than the lab machine holds: the end to
end run packs the mini checkpoint and gives spark2 a margin that leaves it short by exactly the report's
deficit (64,906,600,448 free, 4,826,902,280 missing), so the decision and the relocation are the report's.
The relocation to spark3 needs room for 101,379,024,656 bytes in spark3's archive directory: on the fleet its
home shares the 481,036,337,152 free bytes of its Engram filesystem; the lab must bind both from one volume
(the end to end fixture fails saying so when it does not).
"""
import json
import re
import subprocess
import threading
import time

import pytest

from labhelpers import (LAB_INVENTORY, MINI_CHECKPOINT, MODELS, ROOT, boot_facts, changed_tasks, env, lab_container,
                        playbook, recap, set_launcher_env, sh, snapshot)
from spec_reader import expected_shard

TP2_DIR = "/home/zurih/dsv41-engram"
TP2 = [f"{TP2_DIR}/engram-l1-r1of2.bin", f"{TP2_DIR}/engram-l14-r1of2.bin"]
TP2_BYTES = 101_379_024_656
REPORT_FREE = 64_906_600_448
REPORT_DEFICIT = 4_826_902_280
MARGIN = 2 * 2 ** 30
ENGRAM = "/home/zurih/dsv41-3x-spark/engram"
ARCHIVE = "/home/zurih/dsv41-engram-archive"          # the default archive directory on a worker
MANIFEST = "/home/mia/dsv41-records/engram-relocate.json"
WATCHED = {"spark1": ["/home/mia/dsv41-engram", "/home/mia/dsv41-records"],
           "spark2": [TP2_DIR, ENGRAM, "/data"],
           "spark3": [ENGRAM, ARCHIVE]}


def flat(out):
    """The output with whitespace runs folded (the yaml callback wraps long scalars)."""
    return " ".join(out.split())


def section(out, task):
    """The output of the first task whose name contains ``task``, up to the next task or play."""
    part = out.split(task, 1)[1] if task in out else ""
    return part.split("\nTASK [", 1)[0].split("\nPLAY ", 1)[0]


def relocate_arg(to="spark3", files=None, **extra):
    return "-e", json.dumps({"engram_relocate": dict({"to": to, "files": {"spark2": files or TP2}}, **extra)})


SHA256 = r"""
import hashlib, json, sys
from concurrent.futures import ThreadPoolExecutor
def one(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return path, h.hexdigest()
with ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    print(json.dumps(dict(pool.map(one, sys.argv[1:]))))
"""


def sha256s(host, paths):
    """{path: sha256} of every byte of each file on the lab host (holes read as zeros, as sha256sum reads
    them: the same digest), with Python's hashlib, one thread per file (hashlib lets go of the GIL while it
    hashes). coreutils' sha256sum (9.1, without the CPU's SHA instructions) took six times the CPU: 2 GiB of a
    sparse file in 18.8 CPU-s against 2.1 with hashlib, on this machine; the two 50.7 GB stand-ins cost the
    whole suite about 900 CPU-seconds through it."""
    return json.loads(sh(host, "python3 -c '%s' %s" % (SHA256.replace("'", "'\\''"), " ".join(paths))))


FINGERPRINT = r"""
import hashlib, json, os, sys
out = {}
for path in sys.argv[1:]:
    h, fd = hashlib.sha256(), os.open(path, os.O_RDONLY)
    size, pos = os.fstat(fd).st_size, 0
    h.update(b"%d;" % size)
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        while start < end:
            chunk = os.pread(fd, min(1 << 20, end - start), start)
            if chunk.strip(b"\0"):
                h.update(b"%d:" % start + chunk)
            start += len(chunk)
        pos = end
    os.close(fd)
    out[path] = h.hexdigest()
print(json.dumps(out))
"""


def fingerprints(host, paths):
    """{path: digest of the size and every non-zero 1 MiB chunk with its offset}: equal exactly when the bytes are
    equal (zeros, written or holes, read as zeros), without reading the holes of the 50.7 GB stand-ins. The
    relocation's own sha256 on both sides and sha256sum before the run (``sha256s``) tie it to the sha256."""
    return json.loads(sh(host, "python3 -c '%s' %s" % (FINGERPRINT.replace("'", "'\\''"), " ".join(paths))))


def stats(host, paths):
    """{path: (size, mode, mtime_ns)}."""
    script = "import os, sys, json; print(json.dumps({p: [os.stat(p).st_size, os.stat(p).st_mode, " \
             "os.stat(p).st_mtime_ns] for p in sys.argv[1:]}))"
    return {p: tuple(v) for p, v in json.loads(sh(host, "python3 -c '%s' %s" % (script, " ".join(paths)))).items()}


def manifest_entries():
    out = sh("spark1", f"cat {MANIFEST} 2>/dev/null || true")
    return json.loads(out)["entries"] if out.strip() else []


def write_shard(host, path, layer, rank, tp, rows, data=True, bad_magic=False, owner="zurih"):
    """A packed shard of another TP size on a lab host (random rows, no holes), or one with a wrong magic."""
    script = (
        "import os, struct, sys\n"
        "path, layer, rank, tp, n, data, bad = sys.argv[1], *map(int, sys.argv[2:])\n"
        "lo, hi = n * rank // tp, n * (rank + 1) // tp\n"
        "magic = 0x0123456789ABCDEF if bad else 0x31344E4531565344\n"
        "with open(path, 'wb') as f:\n"
        "    f.write(struct.pack('<6Q', magic, layer, lo, hi, n, 264).ljust(4096, b'\\0'))\n"
        "    left = (hi - lo) * 264\n"
        "    while left > 0:\n"
        "        k = min(left, 1 << 22)\n"
        "        f.write(os.urandom(k) if data else bytes(k))\n"
        "        left -= k\n")
    subprocess.run(["podman", "exec", "--user", owner, lab_container(host), "python3", "-c", script, path, str(layer),
                    str(rank), str(tp), str(rows), str(int(data)), str(int(bad_magic))], check=True)


CLEAN = {  # what this module's relocations leave on the lab, which `labctl.py reset` does not wipe
    "spark1": "rm -rf /home/mia/dsv41-records /home/mia/dsv41-engram-archive",
    "spark2": "rm -f {TP2_DIR}/engram-l1-r0of2.bin {TP2_DIR}/engram-l1-r0of4.bin {ENGRAM}/engram-l14-r0of2.bin",
    "spark3": "if mountpoint -q {ARCHIVE}; then find {ARCHIVE} -mindepth 1 -delete; else rm -rf {ARCHIVE}; fi",
}


@pytest.fixture(scope="module", autouse=True)
def relocation_state_cleaned(fresh_lab):
    """The head's manifest and the archives emptied before this module (a run that died may have left them)
    and after it."""
    def clean():
        for host, script in CLEAN.items():
            sh(host, script.format(TP2_DIR=TP2_DIR, ENGRAM=ENGRAM, ARCHIVE=ARCHIVE))
    clean()
    yield
    clean()


# --------------------------------------------------------------------------- the preflight names the way out

@pytest.mark.smoke
def test_check_mode_names_the_ways_out_with_their_outcome_and_changes_nothing(tmp_path):
    summary = tmp_path / "demo-line.txt"
    before = snapshot(WATCHED)
    started = time.monotonic()
    rc, out = playbook("stage_a_pack.yml", "--check", "-e", f"engram_pack_summary_file={summary}")
    print(f"stage A --check on the report's state: {time.monotonic() - started:.0f} s")
    assert snapshot(WATCHED) == before
    assert rc != 0
    text = flat(out)
    table = text.split("Print the preflight for every rank", 1)[1].split("TASK [", 1)[0]
    assert "64,906,600,448 (60.449 GiB)" in table and "SHORT by 4,826,902,280 (4.495 GiB)" in table
    for layer, size in ((1, "50,688,818,272"), (14, "50,690,206,384")):
        assert (f"spark2 (rank 1): {TP2_DIR}/engram-l{layer}-r1of2.bin, {size} bytes ({size} allocated): "
                f"TP2 rank 1 layer {layer} shard, may be relocated") in text
    options = out.split("Print the ways to make room for each rank that is short", 1)[1].split("TASK [", 1)[0]
    print(options)
    head = ("spark2 (rank 1), 64,906,600,448 free, short by 4,826,902,280: relocate 2 file(s) (101,379,024,656 bytes) "
            "to spark3:%s -> 166,285,625,104 free after (fits)" % ARCHIVE)
    assert head in options  # then either what spark3 keeps, or why it cannot take them
    command = ("ansible-playbook stage_a_pack.yml -i inventory/lab -e maintenance_window=true -e '%s'"
               % json.dumps({"engram_relocate": {"to": "spark3", "files": {"spark2": TP2}}}, separators=(", ", ": ")))
    spare = "/data/dsv41-engram/dsv41-engram-archive"    # spark2's dsv41_spare_volumes in inventory/lab
    assert (f"relocate 2 file(s) (101,379,024,656 bytes) to its spare volume {spare} -> 166,285,625,104 free after "
            f"(fits); spark2 keeps ") in options
    assert "-e '%s'" % json.dumps({"engram_relocate": {"to": "spark2", "files": {"spark2": TP2}, "dest_dir": spare}},
                                  separators=(", ", ": ")) in options
    assert "delete 2 file(s) (101,379,024,656 bytes), only with each one's sha256 -> 166,285,625,104 free after " \
           "(fits)" in options
    assert f"1. on spark2: sha256sum {TP2[0]} {TP2[1]}" in options
    assert '-e \'{"engram_delete": {"spark2": [{"path": "%s", "sha256": "<sha256 of engram-l1-r1of2.bin>"}' % TP2[0] \
        in options
    assert "another destination the launcher can express: rank 1: set WORKER_ENGRAM_DIR" in flat(options)
    line = summary.read_text().strip()
    print(line)
    assert line.startswith("stage A stops at spark2 (short by 4,826,902,280 bytes). Next: ansible-playbook "
                           "stage_a_pack.yml -i inventory/lab -e maintenance_window=true -e '")
    next_command = line.split("Next: ", 1)[1].split(" (moves ", 1)[0]
    assert next_command in options  # the line names one of the printed commands, verbatim
    if next_command == command:
        assert "spark2 then has 166,285,625,104 free" in line
    assert "Pack this rank's layers" not in out and "nothing was written on any rank" in text


# --------------------------------------------------------------------------- refusals before anything moves

BAD_HEADER = f"{TP2_DIR}/engram-l1-r0of2.bin"
IN_ACTIVE = f"{ENGRAM}/engram-l14-r0of2.bin"


def test_refusals_before_anything_moves():
    write_shard("spark2", BAD_HEADER, 1, 0, 2, 3000, bad_magic=True)
    write_shard("spark2", IN_ACTIVE, 14, 0, 2, 1000)
    try:
        before = snapshot(WATCHED)
        # A destination without room (spark3's /dev/shm: 64 MiB), a file that cannot be identified, a file in the
        # active /engram directory: all refused in one message, nothing moved.
        rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true",
                           *relocate_arg(files=TP2 + [BAD_HEADER, IN_ACTIVE], dest_dir="/dev/shm/dsv41-archive"))
        assert rc != 0 and snapshot(WATCHED) == before
        text = flat(out)
        fatal = text.split("Refuse the chosen room making before anything moves", 1)[1]
        print(section(out, "Refuse the chosen room making before anything moves"))
        assert f"spark2: {BAD_HEADER} has magic 0x0123456789ABCDEF, not a packed shard's 0x31344E4531565344" in fatal
        assert f"spark2: {IN_ACTIVE} lies in the active Engram directory {ENGRAM}; never relocated" in fatal
        assert re.search(r"spark3: no room in /dev/shm/dsv41-archive: [\d,]+ bytes free, the copies need "
                         r"101,379,024,664 \+ margin 2,147,483,648; short by [\d,]+ bytes", fatal), fatal[:3000]
        assert "Nothing was moved, deleted or written on any rank." in fatal
        assert f"spark2 (rank 1): {BAD_HEADER}" in text and "never offered for moving" in text
        assert manifest_entries() == []
        # The active directory itself as the destination.
        rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", *relocate_arg(dest_dir=ENGRAM))
        assert rc != 0 and snapshot(WATCHED) == before
        assert f"spark3: destination {ENGRAM} lies in the active Engram directory; relocated shards never go there" \
            in flat(out)
        # A real run without a maintenance window is refused before the hosts are even asked.
        rc, out = playbook("stage_a_pack.yml", *relocate_arg())
        assert rc != 0 and "rerun with -e maintenance_window=true" in flat(out) and snapshot(WATCHED) == before
    finally:
        sh("spark2", f"rm -f {BAD_HEADER} {IN_ACTIVE}")


# --------------------------------------------------------------------------- an interrupted copy

@pytest.fixture
def mini_inventory(tmp_path):
    """The lab with the small real checkpoint, where every rank fits (relocations are then the operator's
    choice alone)."""
    inv = tmp_path / "mini"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (inv / "group_vars" / "dsv41_ranks.yml").write_text(f"---\ndsv41_checkpoint_dir: {MINI_CHECKPOINT}\n")
    return inv


PACED = f"{TP2_DIR}/engram-l1-r0of4.bin"   # 90,000 rows of TP4 rank 0: 23,764,096 bytes, no holes
PACED_RATE = 2_000_000                       # bytes/s: about 12 s of copying


def test_an_interrupted_copy_leaves_the_source_and_no_final_name_then_a_rerun_completes(mini_inventory):
    write_shard("spark2", PACED, 1, 0, 4, 360000)
    source = sha256s("spark2", [PACED])[PACED]
    final, temp = f"{ARCHIVE}/engram-l1-r0of4.bin", f"{ARCHIVE}/.engram-l1-r0of4.bin.dsv41-relocate.partial"
    cmd = ["ansible-playbook", str(ROOT / "playbooks" / "stage_a_pack.yml"), "-i", str(LAB_INVENTORY), "-i",
           str(mini_inventory), "--tags", "relocate", "-e", "maintenance_window=true",
           "-e", f"engram_pack_relocate_bandwidth_limit={PACED_RATE}", *relocate_arg(files=[PACED])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout))
    reader.start()
    killed, deadline = None, time.monotonic() + 600
    try:
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            size = sh("spark3", f"stat -c %s {temp} 2>/dev/null || echo 0").strip()
            if int(size or 0) > 4 * 1024 * 1024:   # mid-copy: a few MB of 23.8 written
                pid = sh("spark3", "pgrep -u zurih -f 'receive %s engram-l1-r0of4.bin' | head -1" % ARCHIVE).strip()
                if pid:
                    sh("spark3", f"kill -KILL {pid}")
                    killed = (pid, int(size))
            time.sleep(0.3)
        rc = proc.wait(timeout=600)
    finally:
        proc.kill()
        reader.join()
    out = flat("".join(lines))
    assert killed is not None, out[-3000:]
    print(f"receiver pid {killed[0]} killed with {killed[1]:,} of 23,764,096 bytes written")
    assert rc != 0
    assert "spark3: receiving engram-l1-r0of4.bin into %s failed" % ARCHIVE in out, out[-3000:]
    assert "the source %s was not touched" % PACED in out
    assert sha256s("spark2", [PACED])[PACED] == source
    listing = sh("spark3", f"ls -a {ARCHIVE}").split()
    assert "engram-l1-r0of4.bin" not in listing and ".engram-l1-r0of4.bin.dsv41-relocate.partial" not in listing
    assert not [e for e in manifest_entries() if e["src_path"] == PACED]
    # The rerun, uncapped, completes: the copy has the source's sha256 and the manifest records it.
    rc, out = playbook("stage_a_pack.yml", "--tags", "relocate", "-e", "maintenance_window=true",
                       *relocate_arg(files=[PACED]), inventories=(LAB_INVENTORY, mini_inventory))
    assert rc == 0, out[-4000:]
    assert sha256s("spark3", [final])[final] == source and "engram-l1-r0of4.bin" not in sh("spark2", f"ls {TP2_DIR}")
    entry = [e for e in manifest_entries() if e["src_path"] == PACED][-1]
    assert entry["state"] == "moved" and entry["sha256"] == source and entry["dst_path"] == final


# --------------------------------------------------------------------------- end to end, from the report's state

def e2e_inventory(tmp_path):
    """The report's state with a checkpoint the lab can pack: the mini checkpoint, and on spark2 a margin that
    leaves it short by exactly the report's deficit (its free space is the report's)."""
    inv = tmp_path / "e2e"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars" / "spark2").mkdir(parents=True)
    (inv / "hosts.yml").write_text((LAB_INVENTORY / "hosts.yml").read_text())
    (inv / "group_vars" / "dsv41_ranks.yml").write_text(f"---\ndsv41_checkpoint_dir: {MINI_CHECKPOINT}\n")
    to_write = sum(len(expected_shard(MODELS / "DeepSeek-V4.1-Flash-mini", layer, 1, 3)[0]) for layer in (1, 14))
    margin = REPORT_FREE + REPORT_DEFICIT - to_write
    (inv / "host_vars" / "spark2" / "report_deficit.yml").write_text(f"---\nengram_pack_margin_bytes: {margin}\n")
    return inv


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """One stage A run from the report's state with the relocation to spark3, and what was measured around it."""
    devices = sh("spark3", f"mkdir -p {ARCHIVE} && stat -c %d {ARCHIVE} {ENGRAM}", user="zurih").split()
    if devices[0] != devices[1]:
        pytest.fail(f"lab: spark3's {ARCHIVE} is not on the filesystem of its Engram destination (the 448 GiB one), as "
                    "the fleet's home is: the lab has no room there for the 101,379,024,656 bytes (lab/labctl.py "
                    "HOSTS['spark3'] needs a volume bound at both, as spark2 has)")
    inv = e2e_inventory(tmp_path_factory.mktemp("inv"))
    inventories = (LAB_INVENTORY, inv)
    set_launcher_env(MODEL_PATH=MINI_CHECKPOINT)
    t0 = time.monotonic()
    before = {"sha256": sha256s("spark2", TP2), "stat": stats("spark2", TP2), "bytes": fingerprints("spark2", TP2)}
    hashed = time.monotonic() - t0
    watched = snapshot(WATCHED)
    t0 = time.monotonic()
    check_rc, check_out = playbook("stage_a_pack.yml", "--check", "-e", "maintenance_window=true", *relocate_arg(),
                                   inventories=inventories)
    check_s = time.monotonic() - t0
    check_unchanged = snapshot(WATCHED) == watched
    t0 = time.monotonic()
    rc, out = playbook("stage_a_pack.yml", "-e", "maintenance_window=true", *relocate_arg(), inventories=inventories)
    run_s = time.monotonic() - t0
    print(f"sha256 of the two TP2 files on spark2: {hashed:.0f} s; stage A --check with the relocation: "
          f"{check_s:.0f} s; stage A with the relocation: {run_s:.0f} s")
    return {"inventories": inventories, "before": before, "check": (check_rc, check_out, check_unchanged),
            "run": (rc, out), "record": sorted((ROOT / "records" / "lab" / "runs").glob("*-stage_a"))[-1]}


def test_e2e_check_mode_counts_the_chosen_relocation(e2e):
    rc, out, unchanged = e2e["check"]
    print(section(out, "Print the preflight for every rank"), section(out, "Say what is relocated and deleted"))
    assert unchanged
    assert rc == 0, out[-6000:]
    text = flat(out)
    assert "fits after relocating 2 file(s) (+101,379,024,656 bytes)" in text
    assert re.search(r"spark2 -> spark3:%s( \(to be created\))?: engram-l1-r1of2.bin \(50,688,818,272 bytes\), "
                     r"engram-l14-r1of2.bin \(50,690,206,384 bytes\) would be relocated" % ARCHIVE, text), text[-6000:]


def test_e2e_stage_a_completes_after_relocating_to_spark3(e2e):
    rc, out = e2e["run"]
    print(section(out, "Print the preflight for every rank"), section(out, "Relocate the chosen foreign shards"))
    assert rc == 0, out[-8000:]
    assert "changed: [spark1 -> spark1]" not in section(out, "Check each chosen relocation on its hosts")
    text = flat(out)
    assert "fits after relocating 2 file(s) (+101,379,024,656 bytes)" in text
    for host, container in (("spark1", "dsv41-head"), ("spark2", "dsv41-worker"), ("spark3", "dsv41-worker")):
        facts = boot_facts(host, container)
        assert facts.marker_found and [facts.engram[layer]["packed"] for layer in (1, 14)] == [True, True], host
    record = e2e["record"]
    relocated = json.loads((record / "relocations.json").read_text())
    assert sorted(e["src_path"] for e in relocated) == TP2
    assert all(e["state"] == "moved" and e["dst_path"] == f"{ARCHIVE}/{e['file']}" for e in relocated)
    assert {e["src_path"]: e["sha256"] for e in relocated} == e2e["before"]["sha256"]
    summary = (record / "summary.md").read_text()
    assert "## Engram files relocated or deleted to make room" in summary and "engram-l14-r1of2.bin" in summary
    for host in ("spark1", "spark2", "spark3"):
        node = json.loads((record / "nodes" / f"{host}.json").read_text())
        assert node["packed"] == {"1": True, "14": True} and node["kv_pool"]["allocated_tokens"] and node["contention"]
    bench = json.loads((record / "benchmark.json").read_text())
    assert {(r["workload"], r["concurrency"]) for r in bench["results"]} == {("prose", 1), ("prose", 4), ("code", 1),
                                                                             ("code", 4)}
    assert sh("spark2", f"ls {TP2_DIR}").split() == []


def test_e2e_copies_on_spark3_have_the_sha256_they_had_on_spark2(e2e):
    assert e2e["run"][0] == 0
    copies = [f"{ARCHIVE}/{p.rsplit('/', 1)[1]}" for p in TP2]
    # byte-identical to what spark2 held (its sha256sum before the run is the manifest's, tested above), so the
    # same sha256; read without the holes, which sha256sum would take minutes over
    got = fingerprints("spark3", copies)
    assert [got[c] for c in copies] == [e2e["before"]["bytes"][p] for p in TP2]
    assert {e["dst_path"]: e["sha256"] for e in manifest_entries() if e["src_path"] in TP2} == {
        c: e2e["before"]["sha256"][p] for c, p in zip(copies, TP2)}
    assert [v[0] for v in stats("spark3", copies).values()] == [e2e["before"]["stat"][p][0] for p in TP2]


def test_e2e_the_same_relocation_again_changes_nothing(e2e):
    assert e2e["run"][0] == 0
    rc, out = playbook("stage_a_pack.yml", "--tags", "relocate", "-e", "maintenance_window=true", *relocate_arg(),
                       inventories=e2e["inventories"])
    assert rc == 0, out[-4000:]
    assert changed_tasks(out) == set(), changed_tasks(out)
    assert "engram-l1-r1of2.bin (already moved), engram-l14-r1of2.bin (already moved)" in flat(out)


def test_e2e_rollback_restores_byte_identical_and_twice_equals_once(e2e):
    assert e2e["run"][0] == 0
    rc, out = playbook("rollback.yml", "--check", "-e", "rollback_engram_relocation=true",
                       inventories=e2e["inventories"])
    assert rc == 0, out[-4000:]
    assert f"spark2: {TP2[0]} back from zurih@spark3:{ARCHIVE}/engram-l1-r1of2.bin" in flat(out)
    assert sh("spark2", f"ls {TP2_DIR}").split() == []
    t0 = time.monotonic()
    rc, out = playbook("rollback.yml", "-e", "rollback_engram_relocation=true", inventories=e2e["inventories"])
    print(f"rollback (restore of both files): {time.monotonic() - t0:.0f} s")
    assert rc == 0, out[-6000:]
    assert stats("spark2", TP2) == e2e["before"]["stat"]                 # size, mode, mtime
    assert fingerprints("spark2", TP2) == e2e["before"]["bytes"]          # the same bytes, so the same sha256
    assert sh("spark3", f"ls -a {ARCHIVE}").split() == [".", ".."]
    assert {e["state"] for e in manifest_entries() if e["src_path"] in TP2} == {"restored"}
    rc, out = playbook("rollback.yml", "-e", "rollback_engram_relocation=true", inventories=e2e["inventories"])
    assert rc == 0, out[-4000:]
    assert "Nothing to restore" in flat(out) and changed_tasks(out) == set(), changed_tasks(out)
    assert all(counts["changed"] == 0 for counts in recap(out).values())
