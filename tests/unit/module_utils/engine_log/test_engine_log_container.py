"""A container's latest boot read in bounded time (module_utils/engine_log/source.ContainerBoot), docker's
16 KiB partial records made whole (module_utils/engine_log/docker_stream.py) and every upstream Decode line form."""
import os
import sys

import pytest

from ansible.module_utils.engine_log import messages as E, source as engine_log_source, scan
from ansible.module_utils.engine_log.docker_stream import StreamMerger, join_partials
from ansible.module_utils.engine_log.lines import EngineLogError

import engine_logs as L

S = 10 ** 9
START = L.parse_rfc3339("2026-09-11T23:34:00Z")
P = "[2026-09-11 23:50:00 TP0 EP0] "


# --------------------------------------------------------------------------- Decode lines, every form

@pytest.mark.parametrize("line, forward_ct", [
    (P + "Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token usage: "
         "0.00, accept len: 3.08, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 3.12, #queue-req: 0",
     None),
    (P + "Decode batch. #running-req: 1, #token: 240, token usage: 0.00, accept len: 3.08, accept rate: 0.41, "
         "cuda graph: True, gen throughput (token/s): 3.12, #queue-req: 0", None),
    (P + "Decode batch [1234], #running-req: 1, #full token: 0, full token usage: 0.00, #swa token: 0, swa token "
         "usage: 0.00, accept len: 3.08, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 3.12, "
         "#queue-req: 0", 1234),
    ("\x1b[32m" + P + "Decode batch [7] , #running-req: 1, accept len: 3.08, accept rate: 0.41, gen throughput "
     "(token/s): 3.12, #queue-req: 0\x1b[0m", 7),
])
def test_every_decode_line_form_is_read(line, forward_ct):
    kind, f = E.parse_line(line)
    assert kind == "decode" and f["running_req"] == 1 and f["accept_len"] == 3.08 and f["queue_req"] == 0
    assert f.get("forward_ct") == forward_ct
    facts = scan.scan_text(L.text(L.boot(0)) + line + "\n")
    assert facts.decode["count"] == 1 and facts.decode["accept_len"] == [3.08]


def test_text_that_only_mentions_decode_batch_is_not_a_decode_line():
    assert E.parse_line(P + 'INFO: "POST /generate" Decode batch [x], #running-req: 1') is None
    assert E.parse_line(P + "Decode batches were slow, #running-req: 1") is None


# --------------------------------------------------------------------------- 16 KiB partial records

def marker_of(size):
    """A new-build marker line of ``size`` bytes whose key past 16 KiB is one the project could read."""
    line = "[2026-09-11 23:34:03] " + L.server_args(0)
    pad = size - len(line) - len(", 'enable_tokenizer_batch_encode': False}")
    fields = line[:-1] + ", 'zz_pad': '%s', 'enable_tokenizer_batch_encode': False}" % ("x" * (pad - 13))
    return fields


def test_a_marker_docker_split_at_16k_is_one_message_again():
    marker = marker_of(17130)
    assert len(marker) == 17130
    docker = L.FakeDocker(START)
    docker.add(START + S, "stderr", marker)
    assert len(docker.records) == 2 and len(docker.records[0][2]) == 16384     # stored as two records
    err = "".join((L.rfc3339(ns) + " ").encode().decode() + data.decode() for ns, _s, data in docker.records)
    assert err.count("Z ") == 2 and "\n" not in err[:-1]       # the second part's time sits inside the line
    merged = engine_log_source.merge_docker_streams("", err)
    assert merged == marker + "\n"
    facts = scan.scan_text(merged)
    assert facts.marker_found and facts.server_args["enable_tokenizer_batch_encode"] is False
    assert not any("2026-09-11T" in k for k in facts.server_args)
    # without --timestamps docker prints the parts back to back: nothing to remove
    assert engine_log_source.merge_docker_streams("", marker + "\n") == marker + "\n"


def test_a_line_split_into_three_parts_and_one_that_is_exactly_16k():
    body = ("y" * (3 * 16384 - 10)).encode()
    stamped = b"".join(b"2026-09-11T23:34:0%d.000000001Z " % i + body[i * 16384:(i + 1) * 16384] for i in range(3))
    assert join_partials(stamped[31:]) == (body, 3)
    exact = b"z" * 16384
    assert join_partials(exact) == (exact, 1)
    # a timestamp-looking text that is not at a split point stays
    text = b"a" * 100 + b"2026-09-11T23:34:00.000000001Z rest"
    assert join_partials(text) == (text, 1)


def test_the_merger_never_glues_a_line_still_being_written():
    m = StreamMerger()
    m.feed(0, b"2026-09-11T23:34:01.000000000Z Ready: API on port 8888\n2026-09-11T23:34:05.0Z [wo_a")
    m.feed(1, b"2026-09-11T23:34:02.000000000Z second\n")
    assert m.take() == b"Ready: API on port 8888\n"          # stdout may still print before 23:34:02
    assert m.take(drained=True) == b"second\n"
    m.end(0)
    m.end(1)
    assert m.partial == [b"[wo_a"]


# --------------------------------------------------------------------------- a container that has served for days

def aged_head(days=7.0, lines_per_day=8000, rank=0):
    """A head whose boot is followed by ``days`` of periodic lines (the last period's are marked)."""
    docker = L.FakeDocker(START)
    boot = [(s, l) for s, l in L.boot(rank, periodic=1, decode=2)]
    ns = docker.add_lines(START + S, boot)
    step = int(days * 86400 * S / max(1, lines_per_day * days))
    n = int(lines_per_day * days)
    for i in range(n):
        ns += step
        if i % 2:
            docker.add(ns, "stderr", "[2026-09-12 00:00:00 TP%d EP%d] Engram layer=%d lookups=%d hit_rate=%.1f%% "
                                      "reads=%d cache=0.0GiB(4-way) scales=0.0GiB threads=96 packed=True"
                       % (rank, rank, 1 if i % 4 == 1 else 14, i, 50.0 + i / n * 10, i))
        elif rank == 0:
            docker.add(ns, "stderr", "[2026-09-12 00:00:00 TP0 EP0] Decode batch [%d], #running-req: 0, #full token: 0, "
                                     "full token usage: 0.00, accept len: 3.%02d, accept rate: 0.41, cuda graph: "
                                     "True, gen throughput (token/s): 0.00, #queue-req: 0" % (i, i % 100))
    return docker, ns


def read(docker, **kw):
    return engine_log_source.ContainerBoot(docker.run, "dsv41-head", open_stream=docker.open_stream, **kw).run()


def whole(docker, since_ns=None):
    """The facts of reading every record since the container's start (what the reader used to do)."""
    text = engine_log_source.merge_docker_streams(
        "".join(L.rfc3339(ns) + " " + d.decode() for ns, s, d in docker.records if s == "stdout" and ns >= (since_ns or 0)),
        "".join(L.rfc3339(ns) + " " + d.decode() for ns, s, d in docker.records if s == "stderr" and ns >= (since_ns or 0)))
    return scan.scan_text(text)


@pytest.fixture
def small_bounds(monkeypatch):
    monkeypatch.setattr(engine_log_source, "HEAD_AFTER_READY", 64 << 10)
    monkeypatch.setattr(engine_log_source, "TAIL_RECORDS", 2000)


def test_an_aged_head_is_read_from_its_start_and_its_end_only(small_bounds):
    docker, _ = aged_head(days=7)
    total = len(docker.records)
    facts = read(docker)
    ref = whole(docker)
    # the verdicts of the boot are those of reading everything
    assert facts.engram == ref.engram and facts.memory == ref.memory and facts.pool == ref.pool
    assert facts.ready and facts.server_args == ref.server_args and facts.autotune == ref.autotune
    assert facts.periodic[1]["first"] == ref.periodic[1]["first"] and facts.periodic[14]["last"] == ref.periodic[14]["last"]
    public = lambda f: dict((k, v) for k, v in f.items() if k != "_line")   # lines after the gap count from it
    assert public(facts.decode["last"]) == public(ref.decode["last"]) and not facts.fatal
    # ... from a bounded part of the log
    assert docker.delivered < 2000 + 1500 < total / 15
    calls = [c for c in docker.calls if c[1] == "logs"]
    assert calls[0] == ["docker", "logs", "--timestamps", "--since", "2026-09-11T23:34:00.000000000Z", "dsv41-head"]
    assert calls[1][:4] == ["docker", "logs", "--timestamps", "--since"] and calls[1][5:] == ["--tail", "2000", "dsv41-head"]
    assert facts.read["gap"] and facts.read["stopped_at"] == facts.read["gap"]["after"]
    assert facts.decode["count"] < ref.decode["count"]            # counts cover what was read, and say so


def test_the_cost_does_not_grow_with_uptime(small_bounds):
    a, _ = aged_head(days=2)
    b, _ = aged_head(days=14)
    read(a)
    read(b)
    assert len(b.records) > 6 * len(a.records) and abs(a.delivered - b.delivered) <= 2


def test_a_fresh_boot_is_read_whole_without_a_tail(small_bounds):
    docker = L.FakeDocker(START)
    docker.add_lines(START + S, L.boot(0, decode=3))
    facts = read(docker)
    assert facts.read["stopped_at"] is None and facts.read["gap"] is None and facts.decode["count"] == 3
    assert [c[1] for c in docker.calls] == ["inspect", "logs"]


def test_a_boot_that_died_after_its_marker_inside_an_aged_log_still_fails(small_bounds):
    docker, ns = aged_head(days=7)
    docker.started_ns = ns + 60 * S                  # the container restarted: a new start, same log
    docker.add_lines(ns + 61 * S, L.boot(0, fatal=(14, "is truncated")))
    facts = read(docker)
    assert facts.marker_found and sorted(facts.engram) == [1] and not facts.ready
    with pytest.raises(EngineLogError) as err:
        facts.require_engram(14, layers=[1, 14], rank=0)
    assert "while attaching layer 14" in str(err.value) and "is truncated" in str(err.value)
    assert docker.delivered < 100                    # only the new start's records were read


def test_a_fatal_error_at_the_end_of_an_aged_boot_is_seen(small_bounds):
    docker, ns = aged_head(days=3)
    docker.add(ns + S, "stderr", "Engram retrieval failed: packed Engram shard is truncated (errno=0)")
    facts = read(docker)
    assert facts.read["gap"] and len(facts.fatal) == 1
    assert facts.fatal_text(facts.fatal_attributed([1, 14], 0)) == [
        "fatal on rank 0 after layers 1, 14 were attached: Engram retrieval failed: packed Engram shard is "
        "truncated (errno=0)"]


def test_a_restart_in_the_tail_is_the_latest_boot(small_bounds):
    docker, ns = aged_head(days=3)
    docker.add_lines(ns + S, L.boot(0, packed=(False, False)))
    facts = read(docker)
    assert facts.engram[1]["packed"] is False and facts.engram[14]["packed"] is False and facts.ready


@pytest.mark.parametrize("days", [7, 0.01])
def test_a_worker_that_prints_no_ready_stops_after_its_first_periodic_line(small_bounds, days):
    # 0.01 days: the same lines packed into minutes (as the lab ages a log); the read is as bounded.
    docker, _ = aged_head(days=days, lines_per_day=int(56000 / days), rank=1)
    facts = read(docker)
    assert sorted(facts.engram) == [1, 14] and facts.memory is not None and not facts.ready
    assert facts.read["stopped_at"] and facts.read["gap"] and facts.periodic[14]["last"]["reads"] > 50000
    assert docker.delivered < 2000 + 1500 < len(docker.records) / 7


def test_a_boot_that_never_ends_is_read_until_the_boot_span(small_bounds):
    docker = L.FakeDocker(START)
    ns = docker.add_lines(START + S, L.boot(1, die_after_marker=True))
    for i in range(20000):                           # a rank stuck before serving, logging on and on
        ns = docker.add(ns + S, "stderr", "[2026-09-12 00:00:00 TP1 EP1] waiting for peers, attempt %d" % i)
    facts = read(docker)
    assert facts.marker_found and facts.read["stopped_at"] and docker.delivered < 7200 + 1500 + 2000


def test_counting_boots_reads_the_whole_log(small_bounds):
    docker, ns = aged_head(days=1)
    docker.add_lines(ns + S, L.boot(0))
    facts = read(docker, count_boots=True)
    assert facts.boots_seen == 2 and docker.delivered == len(docker.records)
    assert "--since" not in docker.calls[1]


def test_the_boot_text_says_what_it_left_out(small_bounds):
    docker, _ = aged_head(days=7)
    text, info = engine_log_source.read_boot_text(docker.run, container="dsv41-head", open_stream=docker.open_stream)
    assert text.startswith("[2026-09-11 23:34:03] server_args=") and "not read: the container has served since" in text
    assert info["read"]["gap"] and info["source"] == "docker logs dsv41-head"


def _measured_window_then_more(days=1, after=5000):
    """An aged head, then a measured window (30 C1 Decode batch lines), then ``after`` more periodic records."""
    docker, ns = aged_head(days=days)
    window_start = ns + S
    for i in range(30):
        ns = docker.add(window_start + i * S, "stderr", "[2026-09-12 09:00:00 TP0 EP0] Decode batch, #running-req: 1, "
                        "accept len: 3.%02d, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 60.00, "
                        "#queue-req: 0" % i)
    for i in range(after):
        ns = docker.add(ns + S // 10, "stderr", "[2026-09-12 09:10:00 TP0 EP0] Engram layer=14 lookups=%d hit_rate=50.0%% "
                        "reads=%d cache=0.0GiB(4-way) scales=0.0GiB threads=96 packed=True" % (i, i))
    return docker, window_start


def test_a_window_older_than_the_tail_read_is_lost_without_keep_since(small_bounds):
    docker, _ = _measured_window_then_more()
    text, info = engine_log_source.read_boot_text(docker.run, container="dsv41-head", open_stream=docker.open_stream)
    assert info["read"]["gap"] and text.count("09:00:00 TP0 EP0] Decode batch") == 0


def test_keep_since_reads_every_line_of_the_measured_window(small_bounds):
    docker, window_start = _measured_window_then_more()
    keep = window_start / S - 0.5
    text, info = engine_log_source.read_boot_text(docker.run, container="dsv41-head", open_stream=docker.open_stream,
                                                  keep_since=keep)
    assert text.count("09:00:00 TP0 EP0] Decode batch") == 30 and text.count("Engram layer=14 lookups=") >= 5000
    tail_call = [c for c in docker.calls if c[1] == "logs"][1]
    assert "--tail" not in tail_call and tail_call[tail_call.index("--since") + 1].startswith("2026-")
    assert abs(L.parse_rfc3339(tail_call[tail_call.index("--since") + 1]) - (window_start - S // 2)) < 1000
    # what was not read lies before the window, and the text says so
    assert info["read"]["gap"]["before"] == tail_call[tail_call.index("--since") + 1]
    assert "not read: the container has served since" in text.split("09:00:00 TP0 EP0] Decode batch")[0]


def test_keep_since_before_the_head_stopped_reads_the_rest_without_a_gap(small_bounds):
    docker, _ = _measured_window_then_more(days=0.2)
    keep = START / S + 60                        # the engine was up a minute after the start: all of it is read
    text, info = engine_log_source.read_boot_text(docker.run, container="dsv41-head", open_stream=docker.open_stream,
                                                  keep_since=keep)
    assert info["read"]["stopped_at"] and info["read"]["gap"] is None
    assert text.count("09:00:00 TP0 EP0] Decode batch") == 30 and "not read" not in text
    assert len(docker.records) <= docker.delivered <= len(docker.records) + 1   # the record at the cut, twice


def test_rfc3339_of_is_what_docker_prints_and_reads_back():
    assert engine_log_source.rfc3339_of(1757633640.25) == b"2025-09-11T23:34:00.250000000Z"
    assert engine_log_source.epoch_of(engine_log_source.rfc3339_of(1757633640.5)) == 1757633640.5


def test_no_marker_counts_no_boot(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(P + "Decode batch, #running-req: 1, accept len: 3.08, #queue-req: 0\n")
    facts = scan.scan_file(str(log), count_boots=True)
    assert facts.boots_seen == 0 and not facts.marker_found
    with pytest.raises(EngineLogError) as err:
        facts.require_marker()
    assert "(boots seen: 0)" in str(err.value)


# --------------------------------------------------------------------------- real pipes

WRITER = r'''
import os, sys
n = int(sys.argv[1])
for i in range(n):
    fd = 1 if i % 3 == 0 else 2          # docker writes each record to its stream, one after the other
    os.write(fd, b"2026-09-11T23:34:%02d.%09dZ line %d\n" % (i // 10 ** 6 % 60, i, i))
'''


def test_both_pipes_are_merged_in_the_order_written_while_streaming(tmp_path):
    from ansible.module_utils.base import command_stream
    script = tmp_path / "w.py"
    script.write_text(WRITER)
    n = 60000
    merger = StreamMerger()
    out = []
    with command_stream.open_stream([sys.executable, str(script), str(n)], 60) as st:
        while not st.finished:
            chunks = st.read()
            more, drained = st.drain()
            for which, data in chunks + more:
                merger.feed(which, data)
            out.append(merger.take(drained))
    out.append(merger.take(True))
    lines = b"".join(out).decode().splitlines()
    assert lines == ["line %d" % i for i in range(n)]


def test_closing_a_stream_early_kills_the_command(tmp_path):
    from ansible.module_utils.base import command_stream
    st = command_stream.open_stream(["sh", "-c", "echo $$; exec sleep 300"], 30)
    pid = int(st.read()[0][1])
    assert st.close() is None and not os.path.exists("/proc/%d" % pid)


def test_the_module_passes_keep_since_to_the_reader(small_bounds, monkeypatch):
    from modrun import run_module
    import engine_boot_log
    docker, window_start = _measured_window_then_more()
    # modrun hands a streamed command's whole output over at once (the head read would take everything): the
    # reader streams from the fake docker here, so the module's own bounded reads run
    real = engine_boot_log.read_boot_text
    monkeypatch.setattr(engine_boot_log, "read_boot_text",
                        lambda *a, **kw: real(docker.run, **dict(kw, open_stream=docker.open_stream)))
    res = run_module(engine_boot_log.main, {"container": "dsv41-head", "keep_since": window_start / S - 0.5})
    assert not res.get("failed") and res["content"].count("09:00:00 TP0 EP0] Decode batch") == 30
    assert "--tail" not in [c for c in docker.calls if c[1] == "logs"][-1] and res["read"]["gap"]
    res = run_module(engine_boot_log.main, {"container": "dsv41-head"})
    assert res["content"].count("09:00:00 TP0 EP0] Decode batch") == 0 and res["read"]["gap"]
    assert "--tail" in [c for c in docker.calls if c[1] == "logs"][-1]
