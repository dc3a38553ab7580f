"""Unit tests for module_utils/engine_log/messages*.py and boot_facts.py (the one reader of engine logs), on logs in the real
engine's formats (tests/unit/engine_logs.py builds them from SPEC section 3)."""
import io
import os
import subprocess

import pytest

from ansible.module_utils.base import command_stream
from ansible.module_utils.engine_log import messages as E, lines as engine_log_lines, scan as engine_log_scan, source as engine_log_source
from ansible.module_utils.engine_log.lines import EngineLogError, MalformedLogLine

import engine_logs as L

P = "[2026-09-11 23:34:14 TP1 EP1] "


def all_ways(log_text, tmp_path, lines=True, **kw):
    """Read the same log every way the modules can; all must agree. Returns the facts.

    An iterable of lines is taken as complete lines, so it is left out (``lines=False``) where the
    test is about a last line still being written."""
    path = tmp_path / "log.txt"
    path.write_bytes(log_text.encode())
    results = [
        engine_log_scan.scan_file(str(path), **kw),
        engine_log_scan.scan_file(str(path), chunk_size=4096, **kw),
        engine_log_scan.scan(log_text, **kw),
        engine_log_scan.scan(log_text, chunk_size=97, **kw),
        engine_log_scan.scan(io.BytesIO(log_text.encode()), chunk_size=64, **kw),
        engine_log_scan.scan(io.StringIO(log_text), chunk_size=1000, **kw),
    ] + ([engine_log_scan.scan_lines(log_text.splitlines(True), **kw)] if lines else [])
    dicts = []
    for r in results:
        d = r.to_dict()
        d["source"] = None
        dicts.append(d)
    for d in dicts[1:]:
        assert d == dicts[0]
    return results[0]


# --------------------------------------------------------------------------- messages

def test_a_logging_record_is_one_message_whatever_it_quotes():
    line = P + "Receive: obj=GenerateReqInput(text='x\\n[2026-09-11 23:34:14 TP0 EP0] server_args={} Exact nvme')"
    msgs = engine_log_lines.split_messages(line)
    assert len(msgs) == 1 and msgs[0].prefixed and msgs[0].tp_rank == 1
    assert msgs[0].text.startswith("Receive: obj=")


def test_glued_tqdm_line_with_cursor_codes_gives_the_record_after_the_bar():
    raw = ("Capturing batches (bs=4 avail_mem=7.62 GB):   0%|          | 0/4 [00:00<?, ?it/s]\x1b[A\x1b[2K\r"
           " 25%|##5       | 1/4 [00:01<00:03,  1.1s/it][2026-09-11 23:46:45 TP0 EP0] FlashInfer autotune: per-rank "
           "caches disagree, discarding them and tuning from scratch so all ranks agree on the tactics.\r\n")
    msgs = engine_log_lines.split_messages(raw)
    assert [m.prefixed for m in msgs] == [False, False, True]
    assert msgs[-1].tp_rank == 0 and msgs[-1].text.startswith("FlashInfer autotune: per-rank caches disagree")
    assert E.parse_line(raw)[0] == "autotune_disagree"


def test_colour_codes_crlf_and_prefix_forms():
    assert engine_log_lines.strip_line("\x1b[32m" + P + "\x1b[0mFlashInfer autotune completed.\x1b[0m\r\n") == \
        "FlashInfer autotune completed."
    assert engine_log_lines.strip_line("[2026-09-11 23:34:03] server_args={'a': 1}\r\n") == "server_args={'a': 1}"
    assert engine_log_lines.strip_line("[autotune_keep] armed") == "[autotune_keep] armed"      # a message, not a prefix
    assert engine_log_lines.split_messages("[2026-09-11 23:34:14 DP0 TP2 EP2] x")[0].tp_rank == 2


def test_words_elsewhere_in_a_message_are_not_that_kind():
    for text in ("Receive: server_args={'node_rank': 0}", "echo Exact nvme Engram layer=1 rank=0 packed=True",
                 "note: Ready: API on port 8888", "x DSV4 pool sizes: full=9", "got [autotune_keep] reused a/b.json"):
        assert E.parse_line(P + text) is None, text


# --------------------------------------------------------------------------- numbers

@pytest.mark.parametrize("raw, want", [
    ("491,520", (491520, None)), ("1,228,800", (1228800, None)), ("8.84 GB", (8.84, "GB")),
    ("9490000000", (9490000000, None)), ("0.58 GB", (0.58, "GB")), ("541.76 s", (541.76, "s")),
    ("12 MiB", (12, "MiB")), ("1.0.4 GB", None), ("49,52", None), ("GB", None),
])
def test_parse_number(raw, want):
    assert engine_log_lines.parse_number(raw) == want


def test_thousands_separators_in_pool_line():
    kind, f = E.parse_line(P + "DSV4 pool sizes: full=491,520, swa=13,312, c4=122,880, c128=3840, c4_state=2048")
    assert kind == "pool" and (f["full"], f["swa"], f["c4"], f["c128"]) == (491520, 13312, 122880, 3840)


@pytest.mark.parametrize("printed, want_bytes", [
    ("8.84 GB", round(8.84 * 2 ** 30)), ("8.84 GiB", round(8.84 * 2 ** 30)), ("900 MB", 900 * 2 ** 20),
    ("900 MiB", 900 * 2 ** 20), ("9490000000", 9490000000), ("9,490,000,000 bytes", 9490000000),
])
def test_available_bytes_units(printed, want_bytes):
    kind, f = E.parse_line(P + "DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=%s, "
                               "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=5491200" % printed)
    assert kind == "memory" and f["available_bytes_bytes"] == want_bytes and f["available_bytes"] == printed
    assert f["available_gib"] == pytest.approx(want_bytes / 2 ** 30)
    assert f["full_token"] == 5491200


def test_malformed_number_is_a_clear_failure_naming_source_and_line(tmp_path):
    boot = L.boot(1, available="1.0.4 GB")
    log = tmp_path / "spark2.log"
    log.write_text(L.text(L.boot(1), boot))
    facts = engine_log_scan.scan_file(str(log), kinds=[engine_log_lines.KIND_MEMORY])
    with pytest.raises(MalformedLogLine) as err:
        facts.require_memory()
    msg = str(err.value)
    line_no = L.text(L.boot(1), boot).splitlines().index(
        next(l for _s, l in boot if "memory calculation" in l)) + 1
    assert str(log) in msg and "line %d:" % line_no in msg and "available_bytes='1.0.4 GB'" in msg
    assert facts.to_dict()["malformed"][0]["line"] == line_no


def test_half_written_last_line_is_ignored_and_said(tmp_path):
    good = L.text(L.boot(1, allocated=491520))
    log_text = good + P + "DSV4 pool sizes: full=49"
    facts = all_ways(log_text, tmp_path, lines=False)
    assert facts.pool["full"] == 491520 and facts.pool_count == 2
    assert facts.partial_last_line == P + "DSV4 pool sizes: full=49"


def test_half_written_marker_still_ends_the_previous_boot(tmp_path):
    log_text = L.text(L.boot(1)) + "[2026-09-12 01:00:03] server_args={'model_path': '/m', 'node"
    facts = all_ways(log_text, tmp_path, lines=False)
    assert facts.marker_found and facts.marker_complete is False and facts.engram == {}
    with pytest.raises(EngineLogError):
        facts.require_engram(1)


# --------------------------------------------------------------------------- boots

@pytest.mark.parametrize("build", ["new", "old"])
def test_worker_boot_real_format(tmp_path, build):
    facts = all_ways(L.text(L.boot(2, build=build, packed=(False, False)), L.boot(2, build=build, decode=0)),
                     tmp_path)
    assert facts.marker_found and facts.marker_form == ("dict" if build == "new" else "ServerArgs")
    assert facts.server_args["node_rank"] == 2 and facts.server_args["max_total_tokens"] == 750000
    assert facts.rank == 2
    lo, hi = L.rank_range(14, 2)
    e14 = facts.require_engram(14)
    assert (e14["lo"], e14["hi"], e14["rank"], e14["mode"]) == (lo, hi, 2, "nvme")
    assert e14["packed"] is (True if build == "new" else None)   # older builds: unknown, never true
    assert facts.pool["full"] == 491520 and facts.pool_count == 2
    assert facts.max_total is None and facts.autotune["disagree"] == 0 and not facts.ready   # rank 0 only
    assert facts.graph_shapes == {"target": [1, 2, 3, 4], "draft": [1, 2, 3, 4]}
    assert facts.startup["load_weight_begin"]["avail_mem_bytes"] == round(111.47 * 2 ** 30)
    assert facts.startup["load_weight"][0]["mem_usage_printed"] == "94.00 GB"
    assert facts.graphs["draft"]["end"]["avail_mem_printed"] == "7.62 GB"


def test_head_boot_real_format_with_glued_disagreements_and_decode(tmp_path):
    facts = all_ways(L.text(L.boot(0, disagree=2, decode=3)), tmp_path)
    assert facts.autotune["disagree"] == 2 and facts.autotune["run_count"] == 2 and facts.autotune["completed"] == 2
    assert facts.autotune["runs"][0] == L.CACHE % (L.HASH, 0)
    assert facts.max_total["max_total_num_tokens"] == 491520 and facts.ready and facts.ready_port == 8888
    assert facts.decode["count"] == 3 and facts.decode["accept_len"] == [3.08, 3.09, 3.10]
    assert facts.decode["last"]["accept_rate"] == 0.41


def test_retention_adapter_prints_hash_and_file(tmp_path):
    facts = all_ways(L.text(L.boot(1, keep="reused")), tmp_path)
    a = facts.autotune
    assert a["armed"] == 1 and a["reused"] == ["%s/rank_tp1_pp0_dp0.json" % L.HASH] * 2 and a["run_count"] == 0


def test_latest_boot_died_after_marker_hides_the_earlier_packed_boot(tmp_path):
    facts = all_ways(L.text(L.boot(1), L.boot(1, die_after_marker=True)), tmp_path)
    assert facts.marker_found and facts.engram == {}
    with pytest.raises(EngineLogError) as err:
        facts.require_engram(1)
    assert "Exact ... Engram layer=1" in str(err.value)


def test_echoed_request_starts_no_boot_and_fakes_no_packed_line(tmp_path):
    echo = [("stderr", P + "Receive: obj=GenerateReqInput(text='server_args={} \\nExact nvme Engram layer=14 rank=1 "
                           "rows=[0,1) cache=0.0GiB packed=True', rid='1')"),
            ("stderr", P + "Receive: obj=GenerateReqInput(text=\"[2026-09-11 23:34:03] server_args={'node_rank': 1}\")")]
    base = L.text(L.boot(1, packed=(True, False)))
    facts = all_ways(base + L.text(echo), tmp_path)
    assert facts.engram[14]["packed"] is False and facts.pool["full"] == 491520
    assert facts.to_dict() == dict(all_ways(base, tmp_path).to_dict(), source=facts.source)


def test_fatal_error_is_attributed_to_rank_and_attached_layers(tmp_path):
    facts = all_ways(L.text(L.boot(2, fatal=(14, "is truncated"))), tmp_path)
    (f,) = facts.fatal
    assert f["reason"] == "truncated" and f["rank"] == 2 and f["attached_layers"] == [1] and f["errno"] == 0
    facts = all_ways(L.text(L.boot(1, fatal=(1, "does not match this rank's range; re-run the pack step"))),
                     tmp_path)
    assert facts.fatal[0]["reason"] == "range_mismatch" and facts.fatal[0]["attached_layers"] == []
    assert E.parse_line("RuntimeError: Engram retrieval failed: packed Engram shard has no header (errno=2)")[1][
        "reason"] == "no_header"


def test_ssd_offload_mode():
    kind, f = E.parse_line(P + "Exact ssd Engram layer=1 rank=0 rows=[0,128002056) cache=0.0GiB (0 slots, 4-way, "
                               "0.0% of owned rows) scales=0.0GiB io_threads=96 packed=True")
    assert kind == "engram" and f["mode"] == "ssd" and f["packed"] is True


def test_no_marker_is_flagged(tmp_path):
    body = [l for l in L.boot(1) if "server_args" not in l[1]]
    facts = all_ways(L.text(body), tmp_path)
    assert not facts.marker_found and facts.engram
    with pytest.raises(EngineLogError) as err:
        facts.require_marker()
    assert "boot marker" in str(err.value)


def test_crlf_log(tmp_path):
    facts = all_ways(L.text(L.boot(0, disagree=2), crlf=True), tmp_path)
    assert facts.engram[14]["packed"] is True and facts.autotune["disagree"] == 2 and facts.ready


def test_count_boots_is_optional(tmp_path):
    log_text = L.text(L.boot(1), L.boot(1, build="old"), L.boot(1))
    assert all_ways(log_text, tmp_path).boots_seen is None
    assert all_ways(log_text, tmp_path, count_boots=True).boots_seen == 3


def test_required_lines_missing_name_the_source(tmp_path):
    log = tmp_path / "w.log"
    log.write_text(L.text(L.boot(1, die_after_marker=True)))
    facts = engine_log_scan.scan_file(str(log))
    for require, what in ((facts.require_memory, "DSV4 memory calculation"), (facts.require_pool, "pool sizes"),
                          (facts.require_max_total, "max_total_num_tokens"), (facts.require_ready, "Ready"),
                          (facts.require_autotune, "autotune")):
        with pytest.raises(EngineLogError) as err:
            require()
        assert str(log) in str(err.value) and what in str(err.value)
    with pytest.raises(EngineLogError) as err:
        engine_log_scan.scan_file(str(tmp_path / "nope.log"))
    assert "cannot open" in str(err.value)


# --------------------------------------------------------------------------- docker logs

def scan_docker(run, container, **kw):
    """The container reader with ``run`` answering docker inspect and the streamed docker logs."""
    return engine_log_source.scan_docker(run, container, open_stream=command_stream.opener_over(run), **kw)


def test_docker_streams_merge_in_order_and_read_both():
    out, err = L.docker_streams(L.boot(0, disagree=1))
    assert "Ready: API" in out and "Exact nvme" in err          # the engine logs to stderr
    merged = engine_log_source.merge_docker_streams(out, err)
    assert merged == L.text(L.boot(0, disagree=1))
    facts = scan_docker(lambda args: (0, out, err), "dsv41-head")
    assert facts.ready and facts.engram[1]["packed"] is True and facts.source == "docker logs dsv41-head"


def test_docker_partial_last_line_is_left_out_and_said():
    out, err = L.docker_streams(L.boot(0))
    err += "2026-09-11T10:00:00.000000000Z " + P + "DSV4 pool sizes: full=49"
    facts = scan_docker(lambda args: (0, out, err), "dsv41-head")
    assert facts.pool["full"] == 491520 and facts.partial_last_line.endswith("full=49")


def test_docker_failure_names_container():
    with pytest.raises(EngineLogError) as err:
        scan_docker(lambda args: (1, "", "Error response from daemon: No such container: dsv41-head"), "dsv41-head")
    assert "docker logs dsv41-head" in str(err.value) and "No such container" in str(err.value)


def test_read_boot_text_latest_boot_both_sources(tmp_path):
    first, second = L.boot(1, packed=(False, False)), L.boot(1)
    log = tmp_path / "x.log"
    log.write_text(L.text(first, second) + "partial")
    text, info = engine_log_source.read_boot_text(None, log_path=str(log))
    assert text == L.text(second) and info["marker_found"] and info["partial_last_line"] == "partial"
    out, err = L.docker_streams(first, second)
    text, info = engine_log_source.read_boot_text(lambda a: (0, out, err), container="dsv41-worker",
                                                 open_stream=command_stream.opener_over(lambda a: (0, out, err)))
    assert text == L.text(second) and info["source"] == "docker logs dsv41-worker"
    text, info = engine_log_source.read_boot_text(None, log_path=str(log), max_bytes=4096)
    assert info["omitted_bytes"] > 0 and len(text) < 4096 + 100
    assert text.startswith("[2026-09-11 23:34:03] server_args=") and "bytes of this boot omitted" in text


def test_latest_boot_lines():
    lines = L.text(L.boot(1), L.boot(2)).splitlines()
    assert engine_log_scan.latest_boot(lines) == L.text(L.boot(2)).splitlines()


def test_memory_is_bounded_by_the_latest_boot_not_the_log(tmp_path):
    # Many earlier boots, then the latest: the file reader reads from the last marker only.
    reads = []
    log = tmp_path / "big.log"
    with open(log, "w") as fh:
        for _ in range(200):
            fh.write(L.text(L.boot(1, packed=(False, False), periodic=20)))
        fh.write(L.text(L.boot(1)))
    real_open = open

    class Counting(io.FileIO):
        def read(self, n=-1):
            data = super().read(n)
            reads.append(len(data))
            return data

    import builtins
    try:
        builtins.open = lambda p, m="r", *a, **k: Counting(p, "r") if m == "rb" else real_open(p, m, *a, **k)
        facts = engine_log_scan.scan_file(str(log), kinds=engine_log_lines.ENGRAM_KINDS, chunk_size=65536)
    finally:
        builtins.open = real_open
    assert facts.engram[14]["packed"] is True
    assert sum(reads) < 4 * 65536 + 3 * len(L.text(L.boot(1))) < log.stat().st_size / 5


def test_periodic_fast_path_reads_what_the_line_parser_reads(tmp_path):
    lines = [l for s, l in L.boot(1, periodic=2) if "lookups=" in l]
    facts = all_ways(L.text(L.boot(1, periodic=2)), tmp_path)
    assert facts.periodic[14]["last"] == E.parse_line(lines[-1])[1]
    assert facts.periodic[14]["count"] == 2 and facts.periodic[14]["packed_true"] == 2
    # an odd spelling still goes through the tolerant parser
    odd = P + "Engram layer=14 lookups=1 hit_rate=0.0% reads=1 cache=0.0 GiB(4-way) scales=0.0GiB threads=96 packed=False"
    facts = all_ways(L.text(L.boot(1)) + odd + "\n", tmp_path)
    assert facts.periodic[14]["packed_false"] == 1 and facts.periodic[14]["last"]["packed"] is False


def test_docker_inspect_runs_under_a_time_limit():
    import shutil
    seen = []

    def run(args):
        seen.append(args)
        return 124, "", ""

    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout is not installed here")
    with pytest.raises(EngineLogError) as err:
        engine_log_source.scan_docker(run, "dsv41-head", timeout=7)
    assert seen[0][1:3] == ["--kill-after=10", "7s"] and seen[0][3:5] == ["docker", "inspect"]
    assert "did not finish within 7 s" in str(err.value) and "docker logs dsv41-head" in str(err.value)


def test_docker_logs_ends_at_its_deadline_and_leaves_no_process(tmp_path):
    # A docker that prints part of a boot and then stops answering: the read fails in time, naming
    # the container, and the docker it started is gone.
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = inspect ]; then echo '{\"StartedAt\": \"2026-09-11T23:34:00Z\"}'; exit 0; fi\n"
                    "echo $$ > %s/pid\n"
                    "echo '2026-09-11T23:34:03.000000000Z [2026-09-11 23:34:03] server_args={}' >&2\n"
                    "exec sleep 600\n" % tmp_path)
    fake.chmod(0o755)

    def run(args):
        res = subprocess.run(args, capture_output=True, text=True)
        return res.returncode, res.stdout, res.stderr

    with pytest.raises(EngineLogError) as err:
        engine_log_source.scan_docker(run, "dsv41-head", docker=str(fake), timeout=2)
    assert "did not finish within 2 s" in str(err.value) and "docker logs dsv41-head" in str(err.value)
    pid = int((tmp_path / "pid").read_text())
    assert not os.path.exists("/proc/%d" % pid)


def test_fatal_line_numbers_count_from_the_top_of_the_file(tmp_path):
    # The file is read from its last marker on; the line a fatal error names is still the file's.
    text = L.text(L.boot(2), L.boot(2, fatal=(14, "is truncated")))
    log = tmp_path / "w.log"
    log.write_text(text)
    want = next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith("Engram retrieval failed"))
    for facts in (engine_log_scan.scan_file(str(log)), engine_log_scan.scan(text), engine_log_scan.scan_lines(text.splitlines())):
        assert facts.fatal[0]["line_no"] == want
