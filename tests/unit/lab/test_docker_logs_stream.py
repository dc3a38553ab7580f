"""The docker stand-in's ``docker logs`` at real sizes, and the lab knob that ages a container's log.

``docker logs`` streams the json-file log (forward, record by record; ``--tail N`` backwards from the end), so
its memory stays flat and a tail costs the size of the records it returns. Its output must stay what it was
when the stand-in read the whole file: that implementation is kept below (``reference_logs``) and both are
compared on a generated log holding every kind of record the stand-in meets. ``docker __lab-age`` appends days
of a serving engine's periodic lines to a container's log (lab/README.md, "Lab knobs").

Everything runs on the control machine against a private state dir (LAB_DOCKER_STATE_DIR); the 200 MB log of
the memory checks is made once per session.
"""
import datetime as _dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_standins import load   # a script loaded as a module, as the stand-in tests load one

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "lab" / "standins" / "docker"
LABCTL = ROOT / "lab" / "labctl.py"
SEED_LOG = ROOT / "lab" / "seed" / "dsv41.log"
BASE_NS = 1790217521 * 10 ** 9          # 2026-09-24T02:38:41Z
MIB = 1 << 20

# the stand-in's package (lab_docker/ beside the docker file, which puts that directory on sys.path as well)
sys.path.insert(0, str(DOCKER.parent))
from lab_docker.commands.logs import _log_time_arg  # noqa: E402
from lab_docker.logfile import import_text_log, json_log_record, log_messages  # noqa: E402
from lab_docker.store import Store, new_container  # noqa: E402
from lab_docker.timefmt import parse_time_ns, rfc3339_ns, rfc3339_ns_trimmed  # noqa: E402


# --------------------------------------------------------------------------------------------
# The former implementation (whole file in memory), the reference for every output
# --------------------------------------------------------------------------------------------
def reference_records(path):
    """read_log_records as it was: the whole file, cut with splitlines, json.loads per record."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    records, mtime = [], None
    for raw in data[:end].splitlines():
        try:
            rec = json.loads(raw)
            records.append((parse_time_ns(rec["time"]), rec.get("stream", "stdout"), rec.get("log", "")))
        except (ValueError, KeyError, TypeError):
            if mtime is None:
                mtime = int(os.stat(path).st_mtime * 10 ** 9)
            records.append((mtime, "stdout", raw.decode("utf-8", "replace") + "\n"))
    return records


def reference_logs(path, tail="all", since=None, until=None, ts=False, records=None):
    """(stdout, stderr, both in order) as cmd_logs printed them without -f."""
    records = reference_records(path) if records is None else records
    if tail not in ("all", "-1"):
        n = int(tail)
        records = records[-n:] if n > 0 else []
    out, err, both = [], [], []
    for ns, stream, text in records:
        if since is not None and ns < since:
            continue
        if until is not None and ns > until:
            continue
        data = text.encode("utf-8")
        if ts:
            data = (rfc3339_ns(ns) + " ").encode() + data
        (err if stream == "stderr" else out).append(data)
        both.append(data)
    return b"".join(out), b"".join(err), b"".join(both)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def docker(state, *args, check=True, merged=False, env=None):
    e = dict(os.environ, LAB_DOCKER_STATE_DIR=str(state), **(env or {}))
    p = subprocess.run([sys.executable, str(DOCKER), *args], env=e, capture_output=not merged, timeout=120,
                       **({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merged else {}))
    if check and p.returncode != 0:
        raise AssertionError("docker %s: rc %d %s" % (args, p.returncode, p.stderr))
    return p


def make_container(state, name="dsv41-head", env=("NODE_RANK=0",), status="exited", image="dsv41-sglang:tp3",
                   started="2026-09-24T02:38:40.118804221Z", finished="2026-09-24T03:12:44.902417550Z"):
    """A container record as the seeder writes one (no process), its log left to the caller."""
    with Store(state) as store:
        c = new_container(store, name, image, env=list(env), network="host",
                          created="2026-09-24T02:38:39.412093117Z")
        if status != "created":
            c["State"].update(Status=status, Running=False, StartedAt=started, FinishedAt=finished)
        store.containers.append(c)
        return store.log_path(name)


def seeded_head(state, name="dsv41-head"):
    """The lab's seeded head: the report's two boots imported as its json-file log."""
    path = make_container(state, name)
    import_text_log(path, SEED_LOG.read_bytes())
    return path


def json_records(path, lenient=False):
    data = Path(path).read_bytes()
    out = []
    for line in data[:data.rfind(b"\n") + 1].split(b"\n")[:-1]:
        try:
            out.append(json.loads(line))
        except ValueError:
            if not lenient:
                raise
    return out


def ns_of(stamp):
    return parse_time_ns(stamp)


PROBE = r"""
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "maxrss": u.ru_maxrss * 1024, "cpu": u.ru_utime + u.ru_stime}))
"""


def probe(state, *args):
    """Peak RSS (bytes) and CPU seconds of one `docker ARGS` run, as its parent sees them (getrusage of the
    child, in a fresh process so no earlier child counts)."""
    env = dict(os.environ, LAB_DOCKER_STATE_DIR=str(state))
    p = subprocess.run([sys.executable, "-c", PROBE, sys.executable, str(DOCKER), *args], env=env,
                       capture_output=True, text=True, timeout=300, check=True)
    res = json.loads(p.stdout)
    assert res["rc"] == 0, args
    return res


# --------------------------------------------------------------------------------------------
# A generated log: every kind of record
# --------------------------------------------------------------------------------------------
def write_generated_log(path, records=9000, seed=11):
    """Docker's records (both streams, trimmed nanosecond times, a whole second now and then), and the odd
    ones: Go's escapes, tqdm's \\r and cursor codes, non-ASCII text, a 40,000-byte line cut into partial
    records, an empty log field, an unknown stream, attrs, a time with an offset, a bad time, plain-text
    lines (one holding a bare CR), an empty line, and a record still being written at the end."""
    rnd = random.Random(seed)
    ns = BASE_NS
    lines = []
    for i in range(records):
        ns += rnd.choice((1, 1000, 123457, 10 ** 6, 10 ** 9, 2 * 10 ** 9 + 17, 987654321))
        stream = "stderr" if rnd.random() < 0.7 else "stdout"
        day = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns // 10 ** 9))
        text = "[%s TP0 EP0] Decode batch, #running-req: 1, #full token: %d, accept len: 3.%02d\n" % (
            day, rnd.randint(0, 9999), rnd.randint(0, 99))
        kind = i % 211
        if kind == 3:
            text = "Capturing batches (bs=4 avail_mem=3.89 GB):   0%|          | 0/4 [00:00<?, ?it/s]\r\x1b[A" + text
        elif kind == 7:
            text = "quote \" backslash \\ tab \t <&> \u2028 end\n"
        elif kind == 11:
            text = "Capturing batches:  25%|██▌       | 1/4 [00:46<02:19, 46.37s/it]\n"
        elif kind == 13:
            text = "[autotune_keep] reused 05cc0d96dc7e28b8/rank_tp0_pp0_dp0.json\n"
        if kind == 17:
            raw = ("[%s] server_args={'model_path': '/m', " % day + "'x': 1, " * 5600 + "'end': True}\n").encode()
            for j, part in enumerate(log_messages(raw)):
                lines.append(json_log_record("stderr", part, ns + j * 1000))
            ns += 10 ** 6
            continue
        if kind == 19:
            lines.append(b"plain text line from before the json-file format\n")
            continue
        if kind == 23:
            lines.append(b"legacy\rline with a bare CR\n")
            continue
        if kind == 29:
            lines.append(b"\n")
            continue
        if kind == 31:
            lines.append((json.dumps({"log": text, "stream": "stdout", "attrs": {"tag": "dsv41"},
                                      "time": rfc3339_ns_trimmed(ns)}) + "\n").encode())
            continue
        if kind == 37:
            local = _dt.datetime.fromtimestamp(ns // 10 ** 9, _dt.timezone(_dt.timedelta(hours=2)))
            stamp = local.strftime("%Y-%m-%dT%H:%M:%S") + ".%09d+02:00" % (ns % 10 ** 9)
            lines.append((json.dumps({"log": text, "stream": "stderr", "time": stamp}) + "\n").encode())
            continue
        if kind == 41:
            lines.append(json.dumps({"log": text, "stream": "stderr", "time": "yesterday"}).encode() + b"\n")
            continue
        if kind == 43:
            lines.append(json.dumps({"stream": "stderr", "time": rfc3339_ns_trimmed(ns)}).encode() + b"\n")
            continue
        if kind == 47:
            lines.append(json_log_record("stdin", text, ns))
            continue
        if kind == 53:
            text = text[:-1]                     # a partial record (output left without a newline)
        lines.append(json_log_record(stream, text, ns))
    lines.append(b'{"log":"[2026-09-24 09:00:00 TP0 EP0] still being writ')   # no newline: left for later
    Path(path).write_bytes(b"".join(lines))
    return ns


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    state = tmp_path_factory.mktemp("docker-logs-state")
    path = make_container(state)
    last_ns = write_generated_log(path)
    os.utime(path, ns=(last_ns + 3600 * 10 ** 9, last_ns + 3600 * 10 ** 9))
    stamps = [r["time"] for r in json_records(path, lenient=True) if re.fullmatch(r"[\d\-T:.]+Z", r.get("time", ""))]
    return {"state": state, "path": path, "stamps": stamps, "count": len(reference_records(path))}


def test_generated_log_has_every_kind(generated):
    data = generated["path"].read_bytes()
    assert len(data) > 2 * MIB, "more than the forward chunk, many backward blocks"
    assert not data.endswith(b"\n") and b"\\u003c\\u0026\\u003e" in data and "█".encode() in data
    partial = [r for r in json_records(generated["path"], lenient=True) if not r.get("log", "\n").endswith("\n")]
    assert len(partial) > 40


def _cases(g):
    s = g["stamps"]
    n = g["count"]
    mid = s[len(s) // 2]
    between = rfc3339_ns(ns_of(s[len(s) // 3]) + 1)          # between two records
    return [
        [], ["-t"], ["--tail", "0"], ["--tail", "1"], ["-n", "7"], ["--tail", "500", "-t"], ["--tail", "4321"],
        ["--tail", str(n + 50)], ["--tail", "all"], ["--tail", "-1", "-t"],
        ["--since", mid], ["--until", mid], ["--since", between, "--until", s[2 * len(s) // 3], "-t"],
        ["--tail", "3000", "--since", s[-2000]], ["--tail", "2500", "--until", s[-1000], "-t"],
        ["--since", str(ns_of(mid) // 10 ** 9)], ["--until", "2026-09-24"], ["--since", "2026-09-25T00:00:00"],
    ]


def _flags(args):
    """The reference's arguments for a docker logs argument list."""
    kw, it = {}, iter(args)
    for a in it:
        if a in ("-t", "--timestamps"):
            kw["ts"] = True
        elif a in ("--tail", "-n"):
            kw["tail"] = next(it)
        elif a in ("--since", "--until"):
            kw[a[2:]] = _log_time_arg(next(it), a[2:])
    return kw


def test_logs_match_the_whole_file_implementation(generated):
    records = reference_records(generated["path"])
    for i, args in enumerate(_cases(generated)):
        out, err, both = reference_logs(generated["path"], records=records, **_flags(args))
        p = docker(generated["state"], "logs", *args, "dsv41-head")
        assert p.stdout == out, ("stdout", args)
        assert p.stderr == err, ("stderr", args)
        if i % 3 == 0 or "--tail" in args and "--since" in args:
            merged = docker(generated["state"], "logs", *args, "dsv41-head", merged=True).stdout
            assert merged == both, ("2>&1 keeps the log order", args)


def test_partial_records_come_back_whole_and_stamped_inside(generated):
    out, err, _ = reference_logs(generated["path"])
    line = next(ln for ln in err.split(b"\n") if b"server_args=" in ln)
    assert len(line) > 32 * 1024 and line.endswith(b"'end': True}"), "three records, one line"
    stamped = docker(generated["state"], "logs", "-t", "dsv41-head").stderr
    line = next(ln for ln in stamped.split(b"\n") if b"server_args=" in ln)
    inside = re.findall(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ", line)
    assert len(inside) == 3 and not line.startswith(b"[") and line.index(inside[1]) > 16000, \
        "docker stamps each part: the later parts' times land inside the line"


def test_a_record_still_being_written_is_left_for_later(generated, tmp_path):
    both = docker(generated["state"], "logs", "dsv41-head", merged=True).stdout
    assert b"still being writ" not in both
    # completing the line makes it the last record
    state = tmp_path / "state"
    path = make_container(state)
    path.write_bytes(json_log_record("stderr", "first\n", BASE_NS) + b'{"log":"sec')
    assert docker(state, "logs", "dsv41-head").stderr == b"first\n"
    with open(path, "ab") as fh:
        fh.write(b'ond\\n","stream":"stderr","time":"2026-09-24T02:38:42Z"}\n')
    assert docker(state, "logs", "--tail", "1", "-t", "dsv41-head").stderr == \
        b"2026-09-24T02:38:42.000000000Z second\n"


def test_logs_of_a_container_without_a_log_and_of_an_empty_one(tmp_path):
    make_container(tmp_path / "s")
    for args in ([], ["--tail", "5"], ["--since", "1h"]):
        p = docker(tmp_path / "s", "logs", *args, "dsv41-head")
        assert (p.stdout, p.stderr) == (b"", b"")
    (tmp_path / "s" / "logs" / "dsv41-head.log").write_bytes(b"")
    assert docker(tmp_path / "s", "logs", "--tail", "5", "dsv41-head").stdout == b""


def test_a_reader_that_stops_early_ends_the_read(generated):
    """docker logs NAME | head: the stand-in stops at the closed pipe, quietly."""
    env = dict(os.environ, LAB_DOCKER_STATE_DIR=str(generated["state"]))
    p = subprocess.run("%s %s logs dsv41-head 2>&1 | head -c 100" % (sys.executable, DOCKER), shell=True,
                       env=env, capture_output=True, timeout=60)
    assert len(p.stdout) == 100 and p.stderr == b""


# --------------------------------------------------------------------------------------------
# The lab knob: docker __lab-age
# --------------------------------------------------------------------------------------------
DECODE_NEW = re.compile(r"Decode batch, #running-req: 1, #full token: \d+, full token usage: \d\.\d\d, #swa token: \d+, "
                        r"swa token usage: \d\.\d\d, accept len: \d\.\d\d, accept rate: \d\.\d\d, cuda graph: True, "
                        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0")
DECODE_OLD = re.compile(r"Decode batch\. #running-req: 1, #token: \d+, token usage: \d\.\d\d, cuda graph: True, "
                        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0")
ENGRAM_NEW = re.compile(r"Engram layer=(1|14) lookups=(\d+) hit_rate=0\.0% reads=(\d+) cache=0\.0GiB\(4-way\) "
                        r"scales=0\.0GiB threads=96 packed=(True|False)")
ENGRAM_OLD = re.compile(r"Engram layer=(1|14) lookups=(\d+) hit_rate=0\.0% reads=(\d+) cache=0\.0GiB\(4-way\) threads=96")
PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) TP(\d) EP\2\] ")


def aged_part(path, before):
    """The records appended after the first `before` bytes of the log."""
    data = Path(path).read_bytes()[before:]
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def check_aged(recs, rank, decode, engram, packed=None):
    """Each record a stderr logging line of the rank, its prefix the record's own second, in the real formats:
    rank 0 a decode report then the two layers' Engram lines, workers only the Engram lines; lookups grow."""
    per = 3 if rank == 0 else 2
    assert len(recs) % per == 0 and recs
    lookups = 0
    for i, r in enumerate(recs):
        assert r["stream"] == "stderr" and r["log"].endswith("\n")
        m = PREFIX.match(r["log"])
        assert m and int(m.group(2)) == rank, r["log"]
        assert m.group(1) == r["time"][:19].replace("T", " "), "the prefix is the line's own time"
        msg = r["log"][m.end():-1]
        if rank == 0 and i % per == 0:
            assert decode.fullmatch(msg), msg
            continue
        e = engram.fullmatch(msg)
        assert e, msg
        assert e.group(1) == ("1" if i % per == per - 2 else "14")
        assert e.group(2) == e.group(3), "no row cache: every lookup is a read"
        if packed is not None:
            assert e.group(4) == packed
        assert int(e.group(2)) >= lookups
        lookups = int(e.group(2))
    ns = [ns_of(r["time"]) for r in recs]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)


def test_age_the_seeded_head(tmp_path):
    state = tmp_path / "state"
    path = seeded_head(state)
    boot = path.read_bytes()
    before = len(boot)
    last_before = ns_of(json_records(path)[-1]["time"])
    started = docker(state, "inspect", "-f", "{{.State.StartedAt}}", "dsv41-head").stdout
    p = docker(state, "__lab-age", "dsv41-head", "--mb", "5")
    assert "dsv41-head: +5.0 MB" in p.stdout.decode() and "rank 0, new build, packed=False" in p.stdout.decode()
    grown = path.stat().st_size - before
    assert 5_000_000 <= grown <= 5_000_000 + 1000, grown
    assert path.read_bytes()[:before] == boot, "appended, nothing before it rewritten"
    recs = aged_part(path, before)
    check_aged(recs, 0, DECODE_NEW, ENGRAM_NEW, packed="False")
    first, last = ns_of(recs[0]["time"]), ns_of(recs[-1]["time"])
    assert first > last_before, "after the boot's last record"
    days = (last - first) / 86400e9
    assert abs(days - 5 / 27) < 0.01 * 5 / 27 + 1e-4, "27 MB a day by default"
    assert int(ENGRAM_NEW.search(recs[1]["log"]).group(2)) > 16664, "the lookups counter goes on from the boot's"
    assert docker(state, "inspect", "-f", "{{.State.StartedAt}}", "dsv41-head").stdout == started
    finished = docker(state, "inspect", "-f", "{{.State.FinishedAt}}", "dsv41-head").stdout.decode().strip()
    assert ns_of(finished) > last, "an exited container ran until after its last line"
    # readers see one boot: the marker of the report's boot is still the last one, the aged lines after Ready
    both = docker(state, "logs", "dsv41-head", merged=True).stdout
    assert both.count(b"] server_args={") == 2 and both.rindex(b"Ready: API on port 8888") < both.rindex(b"Decode batch")
    # --days spreads them; a second run goes on after the first
    before = path.stat().st_size
    docker(state, "__lab-age", "dsv41-head", "--mb", "1", "--days", "2")
    more = aged_part(path, before)
    check_aged(more, 0, DECODE_NEW, ENGRAM_NEW, packed="False")
    assert ns_of(more[0]["time"]) > last
    assert abs((ns_of(more[-1]["time"]) - ns_of(more[0]["time"])) / 86400e9 - 2) < 0.03
    assert int(ENGRAM_NEW.search(more[1]["log"]).group(2)) > int(ENGRAM_NEW.search(recs[-1]["log"]).group(2))


def boot_log(path, rank, old=False, packed="True"):
    """A short boot of a rank in the engine's formats (the marker and the Engram lines), as json-file records."""
    tag = "TP%d EP%d" % (rank, rank)
    if old:
        marker = "server_args=ServerArgs(model_path='/m', node_rank=%d, speculative_dspark_block_size=3)" % rank
        exact = ["Exact nvme Engram layer=%d rank=%d rows=[0,10) cache_budget=0.0GiB ways=4 io_threads=96" % (layer, rank)
                 for layer in (1, 14)]
    else:
        marker = "server_args={'model_path': '/m', 'node_rank': %d, 'speculative_dspark_block_size': 3}" % rank
        exact = ["Exact nvme Engram layer=%d rank=%d rows=[0,10) cache=0.0GiB (0 slots, 4-way, 0.0%% of owned rows) "
                 "scales=0.0GiB io_threads=96 packed=%s" % (layer, rank, packed) for layer in (1, 14)]
    text = ("[2026-09-24 02:38:41] %s\n" % marker
            + "[2026-09-24 02:39:02 %s] %s\n" % (tag, exact[0])
            + "[2026-09-24 02:39:08 %s] %s\n" % (tag, exact[1])
            + "[2026-09-24 02:51:04] INFO:     Uvicorn running on http://0.0.0.0:8888 (Press CTRL+C to quit)\n")
    import_text_log(path, text.encode())


def test_age_a_worker_and_an_old_build(tmp_path):
    state = tmp_path / "state"
    path = make_container(state, "dsv41-worker", env=("NODE_RANK=1",))
    boot_log(path, 1, packed="True")
    before = path.stat().st_size
    p = docker(state, "__lab-age", "dsv41-worker", "--mb", "0.5")
    assert "rank 1, new build, packed=True" in p.stdout.decode()
    recs = aged_part(path, before)
    check_aged(recs, 1, None, ENGRAM_NEW, packed="True")
    assert not any("Decode batch" in r["log"] for r in recs), "workers never print decode reports"
    old = make_container(state, "dsv41-old", env=())
    boot_log(old, 0, old=True)
    before = old.stat().st_size
    assert "rank 0, old build" in docker(state, "__lab-age", "dsv41-old", "--mb", "0.3").stdout.decode()
    check_aged(aged_part(old, before), 0, DECODE_OLD, ENGRAM_OLD)
    # a rank the log does not show: the container's NODE_RANK
    bare = make_container(state, "dsv41-bare", env=("NODE_RANK=2",))
    import_text_log(bare, b"[2026-09-24 02:38:41] server_args={'node_rank': 2}\n")
    before = bare.stat().st_size
    docker(state, "__lab-age", "dsv41-bare", "--mb", "0.1")
    check_aged(aged_part(bare, before), 2, None, re.compile(ENGRAM_OLD.pattern.replace(" threads=96", " scales=0\\.0GiB threads=96")))


def test_age_refuses_what_has_no_boot(tmp_path):
    state = tmp_path / "state"
    make_container(state, "never", status="created")
    make_container(state, "redis", image="redis:7")
    for name, why in (("never", "has never run"), ("redis", "not an engine container"), ("missing", "No such container")):
        p = docker(state, "__lab-age", name, "--mb", "1", check=False)
        assert p.returncode == 1 and why in p.stderr.decode(), p.stderr
    p = docker(state, "__lab-age", "never", check=False)
    assert p.returncode == 1 and "usage" in p.stderr.decode()


TICK_ENGINE = r"""
import sys, time
def log(msg):
    sys.stderr.write(time.strftime("[%Y-%m-%d %H:%M:%S TP0 EP0] ", time.gmtime()) + msg + "\n")
    sys.stderr.flush()
log("server_args={'node_rank': 0}")
print("Ready: API on port 8888", flush=True)
i = 0
while True:
    i += 1
    log("tick %d" % i)
    time.sleep(0.05)
"""


def test_age_a_running_engine_order(tmp_path):
    """The aged block sits between the engine's lines: every tick before it is older, every tick after newer,
    and no tick is lost (the engine was held, not killed)."""
    engine = tmp_path / "tick_engine.py"
    engine.write_text(TICK_ENGINE)
    state = tmp_path / "state"
    env = {"LAB_DOCKER_ENGINE": str(engine)}
    docker(state, "run", "-d", "--name", "dsv41-head", "--network", "host", "dsv41-sglang:tp3", env=env)
    path = state / "logs" / "dsv41-head.log"
    try:
        deadline = time.time() + 20
        while b"tick 3\\n" not in (path.read_bytes() if path.exists() else b"") and time.time() < deadline:
            time.sleep(0.05)
        started = docker(state, "inspect", "-f", "{{.State.StartedAt}}", "dsv41-head", env=env).stdout
        out = docker(state, "__lab-age", "dsv41-head", "--mb", "1", env=env).stdout.decode()
        assert "rank 0, new build" in out
        aged_end = len(json_records(path))
        while len(json_records(path)) < aged_end + 3 and time.time() < deadline:
            time.sleep(0.05)
        recs = json_records(path)
        status = docker(state, "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", "dsv41-head",
                        env=env).stdout
    finally:
        docker(state, "rm", "-f", "dsv41-head", check=False, env=env)
    assert status.split() == [b"running", started.strip()], "held and continued; StartedAt unchanged"
    aged = [i for i, r in enumerate(recs) if "Engram layer=" in r["log"] or "Decode batch" in r["log"]]
    assert aged and aged == list(range(aged[0], aged[-1] + 1)), "one block"
    ticks = [(i, int(r["log"].rsplit(" ", 1)[1])) for i, r in enumerate(recs) if "] tick " in r["log"]]
    assert [t for _, t in ticks] == list(range(1, len(ticks) + 1)), "no tick lost"
    assert any(i > aged[-1] for i, _ in ticks), "the engine goes on after"
    ns = [ns_of(r["time"]) for r in recs]
    assert ns == sorted(ns), "times keep the log order: the aged lines are older than what the engine writes next"


def test_labctl_age_runs_the_stand_in_on_each_host(monkeypatch):
    labctl = load(LABCTL, "labctl_for_age")
    calls = []

    class Res:
        stdout = "dsv41-head: +190.0 MB, ...\n"

    monkeypatch.setattr(labctl, "pexec", lambda host, *cmd, **kw: calls.append((host, cmd, kw)) or Res())
    labctl.age(["spark1", "spark2"], 190, days=7)
    labctl.age(["spark3"], 1.5, name="dsv41-other")
    assert calls == [
        ("spark1", ("docker", "__lab-age", "dsv41-head", "--mb", "190", "--days", "7"), {"capture": True}),
        ("spark2", ("docker", "__lab-age", "dsv41-worker", "--mb", "190", "--days", "7"), {"capture": True}),
        ("spark3", ("docker", "__lab-age", "dsv41-other", "--mb", "1.5"), {"capture": True})]
    with pytest.raises(SystemExit):
        labctl.age(["spark9"], 1)


# --------------------------------------------------------------------------------------------
# Real sizes: 200 MB of log, made once
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def big_head(tmp_path_factory):
    state = tmp_path_factory.mktemp("docker-big-state")
    path = seeded_head(state)
    boot_last = json_records(path)[-1]["time"]
    docker(state, "__lab-age", "dsv41-head", "--mb", "200")
    return {"state": state, "path": path, "boot_last": boot_last}


def test_tail_and_until_cost_what_they_return_and_memory_stays_flat(big_head):
    state, path = big_head["state"], big_head["path"]
    assert path.stat().st_size > 200_000_000
    base = probe(state, "logs", "--tail", "1", "--until", "2026-09-24T00:00:00Z", "dsv41-head")
    tail = probe(state, "logs", "--tail", "100", "dsv41-head")
    assert tail["maxrss"] < base["maxrss"] + 8 * MIB, (tail, base)
    assert tail["cpu"] < 1.0, "a tail reads the last records, not the file"
    # --until at the boot's end: docker's reader ends at the first record after it
    until = probe(state, "logs", "--until", big_head["boot_last"], "dsv41-head")
    assert until["cpu"] < 1.0
    whole = probe(state, "logs", "-t", "dsv41-head")
    assert whole["maxrss"] < base["maxrss"] + 24 * MIB, (whole, base)
    # and the tail is the last records of the file
    out = docker(state, "logs", "--tail", "100", "-t", "dsv41-head").stderr
    with open(path, "rb") as fh:
        fh.seek(-200_000, os.SEEK_END)
        last = [json.loads(line) for line in fh.read().split(b"\n")[1:-1]][-100:]
    assert out == b"".join((rfc3339_ns(ns_of(r["time"])) + " " + r["log"]).encode() for r in last)


def test_the_aged_log_reads_like_the_boot_plus_days(big_head):
    """Through docker logs, the 200 MB head is its boot, then only periodic lines."""
    state = big_head["state"]
    boot = docker(state, "logs", "--until", big_head["boot_last"], "dsv41-head", merged=True).stdout
    assert boot == SEED_LOG.read_bytes(), "up to the boot's last line: the seed, unchanged"
    tail = docker(state, "logs", "--tail", "3000", "dsv41-head")
    assert tail.stdout == b"" and tail.stderr.count(b" packed=False\n") == 2000, "then only periodic lines"
