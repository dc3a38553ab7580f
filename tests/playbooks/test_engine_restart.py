"""The engine role against a boot that takes as long as the lab is told to, and a boot that fails.

A real boot takes about 13 minutes; the lab engine's LAB_ENGINE_BOOT_SECONDS knob (read from
/etc/dsv41-lab/engine.env on each host) spreads the lab boot over a chosen time so the role's wait
has to poll many rounds. The engine logs to stderr and prints `Ready` to stdout, so the collected
boot logs and a failed restart's report must carry both streams.
"""
import re
import subprocess


from labhelpers import HOSTS, ROOT, env, sh

CONVERGE = ROOT / "roles" / "engine" / "molecule" / "default" / "converge.yml"
KNOBS = "/etc/dsv41-lab/engine.env"
BAD_SHARD = "/home/zurih/dsv41-3x-spark/engram/engram-l1-r1of3.bin"


def lab_cleanup():
    """After the module's last test (conftest.fresh_lab): leave no fault knob behind for the next module."""
    for host in HOSTS:
        sh(host, f"rm -f {KNOBS}", check=False)
    sh("spark2", f"rm -f {BAD_SHARD}", check=False)


def converge(tmp_path, *extra):
    res = subprocess.run(["ansible-playbook", str(CONVERGE), "-e", f"engine_log_dir={tmp_path}", *extra],
                         cwd=ROOT, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=900)
    return res.returncode, res.stdout


def test_slow_boot_is_waited_for_over_many_rounds_and_logs_keep_both_streams(tmp_path):
    for host in HOSTS:
        sh(host, f"mkdir -p /etc/dsv41-lab && echo LAB_ENGINE_BOOT_SECONDS=30 > {KNOBS}")
    rc, out = converge(tmp_path, "-e", "engine_serve_poll_seconds=1")
    assert rc == 0, out[-3000:]
    rounds = len(re.findall(r"RETRYING: \[[^\]]+\]: Wait for the launcher to report the head ready", out))
    assert rounds >= 10, out[-3000:]
    head = (tmp_path / "spark1-rank0.log").read_text()
    worker = (tmp_path / "spark2-rank1.log").read_text()
    # stdout (print) and stderr (logging) lines of the same boot, in one file per rank
    assert "Ready: API on port 8888" in head and "max_total_num_tokens=" in head
    assert re.search(r"\] Exact nvme Engram layer=14 rank=1 ", worker) and "DSV4 pool sizes:" in worker
    assert worker.count("server_args=") == 1 and "max_total_num_tokens=" not in worker   # rank 0 only


def test_failed_restart_shows_the_engines_stderr(tmp_path):
    for host in HOSTS:
        sh(host, f"rm -f {KNOBS}")
    # A layer-1 shard with a valid header for rank 1 but one row short: the engine refuses it.
    sh("spark2", "python3 - <<'EOF'\n"
                 "import json, struct\n"
                 "idx = json.load(open('/srv/models/DeepSeek-V4.1-Flash/model.safetensors.index.json'))\n"
                 "f = idx['weight_map']['layers.1.engram.embed.weight']\n"
                 "raw = open('/srv/models/DeepSeek-V4.1-Flash/' + f, 'rb')\n"
                 "n = struct.unpack('<Q', raw.read(8))[0]\n"
                 "hdr = json.loads(raw.read(n))\n"
                 "rows = hdr['layers.1.engram.embed.weight']['shape'][0]\n"
                 "lo, hi = rows * 1 // 3, rows * 2 // 3\n"
                 f"out = open('{BAD_SHARD}', 'wb')\n"
                 "out.write(struct.pack('<6Q', 0x31344E4531565344, 1, lo, hi, rows, 264).ljust(4096, b'\\0'))\n"
                 "out.truncate(4096 + (hi - lo - 1) * 264)\n"
                 "EOF", user="zurih")
    rc, out = converge(tmp_path)
    assert rc != 0
    assert "The engine did not come up" in out
    section = out[out.find("--- spark2 (dsv41-worker)"):]
    assert "Engram retrieval failed: packed Engram shard is truncated" in section, out[-4000:]


RUN_EXTRA = "/etc/dsv41-lab/docker-run-extra.env"


def test_a_worker_launch_that_differs_from_the_prediction_fails_the_restart(tmp_path):
    # The launch is predicted on the head before anything stops; spark2's docker then gives its container one
    # more variable (lab knob: as if its launch had been edited in between). The running containers are the
    # truth: the restart fails naming the rank, the key and both values.
    for host in HOSTS:
        sh(host, f"rm -f {KNOBS}")
    sh("spark2", f"rm -f {BAD_SHARD}")                  # the previous test's truncated shard
    sh("spark2", f"mkdir -p /etc/dsv41-lab && echo DSV41_EDITED_ON_THE_WORKER=1 > {RUN_EXTRA}")
    try:
        rc, out = converge(tmp_path)
    finally:
        sh("spark2", f"rm -f {RUN_EXTRA}")
    assert rc != 0, out[-3000:]
    assert "The running containers differ from the launch predicted before the restart" in out, out[-3000:]
    assert "rank 1 (spark2, dsv41-worker): env DSV41_EDITED_ON_THE_WORKER predicted '(absent)', actual '1'" in out
    assert "rank 0 (" not in out.split("differ from the launch predicted")[1].split("PLAY RECAP")[0]
    rc, out = converge(tmp_path)                      # the same launch without the edit passes the check
    assert rc == 0, out[-3000:]
    assert "Require every rank's container to be what the launch predicted" in out
