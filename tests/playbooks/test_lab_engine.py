"""The lab engine stand-in decides packed= from the node's actual /engram content (foundation acceptance).

spark2 (rank 1 of 3) on the full-scale header-only checkpoint: after the launcher's serve both layers
read packed=False; a valid layer-14 shard (written here from SPEC section 3, sparse) flips that layer to
packed=True at the next serve; a shard whose header range is wrong does not.
"""
import re
import struct


from labhelpers import sh

N14 = 384_016_684  # layer 14 rows of the full-scale lab checkpoint
SHARD = "/home/zurih/dsv41-3x-spark/engram/engram-l14-r1of3.bin"


def lab_cleanup():
    """After the module's last test (conftest.fresh_lab): leave no fault knob behind for the next module."""
    sh("spark2", f"rm -f {SHARD}", user="zurih")


def serve():
    return sh("spark1", "cd /home/mia/dsv41-3x-spark && ./start.sh serve", user="mia", check=False)


def latest_engram_lines():
    # the engine logs to stderr: both streams, from the last boot marker
    log = sh("spark2", "docker logs dsv41-worker 2>&1", user="zurih")
    latest = log[log.rfind("] server_args="):]
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"Exact nvme Engram layer=(\d+) rank=1 .*packed=\w+", latest)}, latest


def write_shard(lo, hi, n):
    header = struct.pack("<6Q", 0x31344E4531565344, 14, lo, hi, n, 264).hex()
    size = 4096 + (hi - lo) * 264
    sh("spark2", f"python3 -c \"import os; f=open('{SHARD}','wb'); f.write(bytes.fromhex('{header}')); "
                 f"f.truncate({size}); f.close()\"", user="zurih")


def test_serve_reports_both_layers_unpacked_in_the_real_format():
    serve()
    lines, _ = latest_engram_lines()
    assert set(lines) == {1, 14}
    assert all(line.endswith("packed=False") for line in lines.values())
    assert re.search(r"rows=\[128005561,256011122\) cache=0\.0GiB \(0 slots, 4-way, 0\.0% of owned rows\) "
                     r"scales=0\.0GiB io_threads=96 packed=False", lines[14])


def test_valid_shard_flips_that_layer_only():
    lo, hi = N14 * 1 // 3, N14 * 2 // 3
    write_shard(lo, hi, N14)
    serve()
    lines, _ = latest_engram_lines()
    assert lines[14].endswith("packed=True")
    assert lines[1].endswith("packed=False")


def test_shard_with_wrong_range_does_not_flip():
    lo, hi = N14 * 1 // 3, N14 * 2 // 3
    write_shard(lo + 1, hi + 1, N14)
    out = serve()
    lines, latest = latest_engram_lines()
    assert 14 not in lines or lines[14].endswith("packed=False")
    assert "does not match this rank's range; re-run the pack step" in latest, out
