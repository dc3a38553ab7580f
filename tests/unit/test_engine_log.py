"""Unit tests for module_utils/engine_log.py (the one engine-log parser)."""
import io
import os
import random

import pytest

from ansible.module_utils import engine_log as E
from ansible.module_utils.engine_log import EngineLogError

FIX = os.path.join(os.path.dirname(__file__), "fixtures")
ESC = "\x1b"
P = "[2026-09-24 02:55:01 TP1 EP1] "

MARKER = "[2026-09-24 02:51:10] server_args=ServerArgs(model_path='/srv/models/DeepSeek-V4.1-Flash', tp_size=3, max_total_tokens=750000, context_length=None, enable_x=True)"
EXACT = ("Exact nvme Engram layer={layer} rank=1 rows=[128002056,256004112) cache=0.0GiB (0 slots, 4-way, "
         "0.0% of owned rows) scales=0.0GiB io_threads=96 packed={packed}")
PERIODIC = ("Engram layer={layer} lookups=123456 hit_rate=0.0% reads=98765 cache=0.0GiB(4-way) "
            "scales=0.0GiB threads=96 packed={packed}")


def fx(name):
    return os.path.join(FIX, name)


def exact(layer, packed=True, prefix=P):
    return prefix + EXACT.format(layer=layer, packed=packed)


def periodic(layer, packed=True, prefix=P):
    return prefix + PERIODIC.format(layer=layer, packed=packed)


def all_ways(lines, tmp_path, **kw):
    """Scan the same log every way the module can; all must agree. Returns the facts."""
    text = "".join(line + "\n" for line in lines)
    path = tmp_path / "log.txt"
    path.write_text(text)
    results = [
        E.scan_file(str(path), **kw),
        E.scan_file(str(path), chunk_size=E.mmap.ALLOCATIONGRANULARITY, **kw),
        E.scan(text, **kw),
        E.scan(text, chunk_size=7, **kw),
        E.scan(io.BytesIO(text.encode()), chunk_size=64, **kw),
        E.scan_lines(lines, **kw),
        reference_scan(lines, **kw),
    ]
    dicts = []
    for r in results:
        d = r.to_dict()
        d["source"] = None
        dicts.append(d)
    for d in dicts[1:]:
        assert d == dicts[0]
    return results[0]


def reference_scan(lines, kinds=E.ALL_KINDS):
    """Naive per-line implementation: parse_line + the state machine, line by line."""
    st = E._State("<ref>", frozenset(kinds))
    for line in lines:
        st.saw_text = True
        ev = E.parse_line(line)
        if ev is None:
            continue
        kind, f = ev
        want = E._EVENT_KIND.get(kind)
        if kind.startswith("autotune"):
            want = E.KIND_AUTOTUNE
        if kind in ("boot", "engram") or want in st.kinds:
            st.apply(kind, f)
    return st.finish()


# --------------------------------------------------------------------------- strip_line

@pytest.mark.parametrize("raw, want", [
    (P + "Ready: API on port 8888\n", "Ready: API on port 8888"),
    ("[2026-09-24 02:51:10] server_args=ServerArgs(x=1)", "server_args=ServerArgs(x=1)"),
    (ESC + "[32m" + P + ESC + "[0mFlashInfer autotune completed." + ESC + "[0m\r\n",
     "FlashInfer autotune completed."),
    (P + "[autotune_keep] armed", "[autotune_keep] armed"),
    ("[autotune_keep] reused /a/b.json", "[autotune_keep] reused /a/b.json"),
    ("[2026-09-24 02:55:01] [TP1] Engram layer=1", "Engram layer=1"),
    (b"[2026-09-24 02:55:01 TP0 EP0] x\xff", "x\ufffd"),
    ("plain line", "plain line"),
])
def test_strip_line(raw, want):
    assert E.strip_line(raw) == want


def test_to_bytes_gb_is_gib():
    assert E.GIB == 1 << 30
    assert E.to_bytes("1.04", "GB") == round(1.04 * 2 ** 30)
    assert E.to_bytes("1", "GiB") == 2 ** 30
    assert E.to_bytes("2", "MB") == 2 << 20
    assert E.to_bytes("5", "B") == 5
    assert E.to_bytes(None, "GB") is None
    assert E.to_bytes("1", "parsec") is None


# --------------------------------------------------------------------------- parse_line, every kind

def test_parse_exact_engram_with_prefix_and_colour():
    kind, f = E.parse_line(ESC + "[36m" + exact(14, "False") + ESC + "[0m")
    assert kind == "engram"
    assert f["layer"] == 14 and f["rank"] == 1
    assert (f["lo"], f["hi"]) == (128002056, 256004112)
    assert f["packed"] is False
    assert f["cache_gib"] == 0.0 and f["cache_slots"] == 0 and f["cache_ways"] == 4
    assert f["cache_owned_pct"] == 0.0 and f["scales_gib"] == 0.0 and f["io_threads"] == 96
    assert f["line"].startswith("Exact nvme Engram layer=14")


def test_parse_exact_engram_spec_example_and_case():
    line = ("Exact nvme Engram layer=1 rank=0 rows=[0,128002056) cache=0.0GiB (0 slots, 4-way, 0.0% of owned "
            "rows) scales=0.0GiB io_threads=96 packed=True")
    assert E.parse_line(line)[1]["packed"] is True
    kind, f = E.parse_line(P + line.upper().replace("ROWS=", "rows="))
    assert kind == "engram" and f["layer"] == 1 and f["packed"] is True and f["lo"] == 0
    kind, f = E.parse_line(P + "exact NVMe ENGRAM layer=1 rank=0 rows=[0, 5) packed=true")
    assert kind == "engram" and f["hi"] == 5 and f["packed"] is True and f["io_threads"] is None


def test_parse_periodic():
    kind, f = E.parse_line(periodic(1, "False"))
    assert kind == "engram_periodic"
    assert f == {"layer": 1, "packed": False, "lookups": 123456, "reads": 98765, "threads": 96,
                 "hit_rate_pct": 0.0, "cache_gib": 0.0, "cache_ways": 4, "scales_gib": 0.0}
    assert E.parse_line("ENGRAM LAYER=14 LOOKUPS=1 packed=TRUE")[1]["packed"] is True


@pytest.mark.parametrize("tail, reason, layer, rank", [
    ("/engram/engram-l1-r1of3.bin does not match this rank's range; re-run the pack step", "range_mismatch", 1, 1),
    ("/engram/engram-l14-r2of3.bin is truncated", "truncated", 14, 2),
    ("/engram/engram-l14-r0of3.bin has no header", "no_header", 14, 0),
    ("/engram/weird.bin exploded", "other", None, None),
])
def test_parse_fatal(tail, reason, layer, rank):
    kind, f = E.parse_line(P + ESC + "[31mRuntimeError: packed Engram shard " + tail + ESC + "[0m")
    assert kind == "fatal_engram"
    assert f["reason"] == reason and f["layer"] == layer and f["rank"] == rank
    assert f["path"].startswith("/engram/") and f["shard"] == f["path"].rsplit("/", 1)[1]


@pytest.mark.parametrize("word", ["DSV4", "DSv4", "dsv4"])
def test_parse_memory_case_variants(word):
    kind, f = E.parse_line(P + "%s memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB, "
                               "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=0.74 GB" % word)
    assert kind == "memory"
    assert f["bytes_per_full_token"] == 1670.75 and isinstance(f["bytes_per_full_token"], float)
    assert f["available_bytes"] == "1.04 GB"
    assert f["available_bytes_bytes"] == round(1.04 * 2 ** 30)
    assert f["available_gib"] == 1.04
    assert f["swa_fixed_printed"] == "0.30 GB" and f["swa_fixed_bytes"] == round(0.30 * 2 ** 30)
    assert f["full_token"] == 0.74 and f["c128_state_fixed"] == 0.0


@pytest.mark.parametrize("word", ["DSV4", "DSv4"])
def test_parse_pool(word):
    assert E.parse_line(P + "%s pool sizes: full=491520, swa=61440, c128=3840" % word) == (
        "pool", {"full": 491520, "swa": 61440, "c128": 3840})


def test_parse_max_total():
    kind, f = E.parse_line(P + "max_total_num_tokens=491520, chunked_prefill_size=1024, max_prefill_tokens=16384, "
                               "max_running_requests=4, context_len=1048576, available_gpu_mem=2.81 GB")
    assert kind == "max_total"
    assert f["max_total_num_tokens"] == 491520 and f["chunked_prefill_size"] == 1024
    assert f["max_prefill_tokens"] == 16384 and f["max_running_requests"] == 4
    assert f["context_len"] == 1048576
    assert f["available_gpu_mem_printed"] == "2.81 GB" and f["available_gpu_mem_bytes"] == round(2.81 * 2 ** 30)


@pytest.mark.parametrize("line, kind, fields", [
    ("FlashInfer autotune: per-rank caches disagree, discarding them and tuning from scratch so all ranks "
     "agree on the tactics.", "autotune_disagree", None),
    ("Running FlashInfer autotune with cache: /root/.cache/sglang/flashinfer/autotune/0.6.1/sm121/3f9a/"
     "rank_tp1_pp0_dp0.json", "autotune_run",
     {"cache": "/root/.cache/sglang/flashinfer/autotune/0.6.1/sm121/3f9a/rank_tp1_pp0_dp0.json"}),
    ("FlashInfer autotune completed.", "autotune_completed", {}),
    ("flashinfer AUTOTUNE completed.", "autotune_completed", {}),
    ("[autotune_keep] armed", "autotune_armed", {}),
    ("[autotune_keep] reused /c/a/rank_tp1_pp0_dp0.json", "autotune_reused", {"path": "/c/a/rank_tp1_pp0_dp0.json"}),
    ("[autotune_keep] tuned and saved /c/b/r.json", "autotune_tuned_saved", {"path": "/c/b/r.json"}),
    ("RuntimeError: DSV41_AUTOTUNE_KEEP: flashinfer_autotune_context is gone; engine drifted",
     "autotune_drift", None),
    ("Ready: API on port 8888", "ready", {"port": 8888}),
])
def test_parse_autotune_and_ready(line, kind, fields):
    got = E.parse_line(ESC + "[33m" + P + line + ESC + "[0m")
    assert got[0] == kind
    if fields is not None:
        assert got[1] == fields
    if kind == "autotune_drift":
        assert got[1]["name"] == "flashinfer_autotune_context"


def test_parse_boot_server_args():
    kind, f = E.parse_line(MARKER)
    assert kind == "boot"
    assert f["server_args"] == {"model_path": "/srv/models/DeepSeek-V4.1-Flash", "tp_size": 3,
                                "max_total_tokens": 750000, "context_length": None, "enable_x": True}


@pytest.mark.parametrize("line", ["", P, P + "Decode batch. #running-req: 4, gen throughput (token/s): 38.2",
                                  P + "Engram prefetch disabled", "server_args are fine", "ready to go"])
def test_parse_noise(line):
    assert E.parse_line(line) is None


# --------------------------------------------------------------------------- fixtures

def test_fixture_two_boots_latest_wins_and_report_figures():
    facts = E.scan_file(fx("two_boots_rank1.log"))
    assert facts.boots_seen == 2
    assert facts.boundary == "server_args"
    # first boot: both packed; latest: layer 14 packed=False -> the latest wins
    assert facts.engram[1]["packed"] is True
    assert facts.engram[14]["packed"] is False
    assert facts.periodic_packed(14) is False and facts.periodic_packed(1) is True
    assert facts.periodic[14] == {"count": 2, "packed_true": 0, "packed_false": 2, "packed_other": 0,
                                  "last": facts.periodic[14]["last"]}
    assert facts.periodic[14]["last"]["lookups"] == 246912
    # report-like boot
    assert facts.pool_count == 2 and [p["full"] for p in facts.pool_sizes] == [491520, 491520]
    assert facts.require_pool() == {"full": 491520, "swa": 61440, "c128": 3840}
    mem = facts.require_memory()
    assert mem["available_bytes"] == "1.04 GB" and mem["bytes_per_full_token"] == 1670.75
    assert facts.require_max_total()["max_total_num_tokens"] == 491520
    assert facts.server_args["max_total_tokens"] == 750000          # the requested pin, clamped
    assert facts.autotune["disagree"] == 2
    assert facts.autotune["run_count"] == 2 and facts.autotune["completed"] == 2
    assert facts.autotune["armed"] == 0 and facts.autotune["reused"] == []
    assert facts.fatal == [] and facts.ready is False
    with pytest.raises(EngineLogError) as err:
        facts.require_ready()
    assert "two_boots_rank1.log" in str(err.value) and "'Ready: API on port'" in str(err.value)
    # every reader agrees
    for other in (E.scan(open(fx("two_boots_rank1.log"), "rb")), E.scan(open(fx("two_boots_rank1.log")))):
        d1, d2 = facts.to_dict(), other.to_dict()
        d1["source"] = d2["source"] = None
        assert d1 == d2


def test_fixture_autotune_keep_head():
    facts = E.scan_file(fx("autotune_keep_head.log"))
    a = facts.require_autotune()
    assert a["armed"] == 1 and a["disagree"] == 0 and a["completed"] == 2
    assert [os.path.basename(os.path.dirname(p)) for p in a["reused"]] == ["3f9a0c1d"]
    assert [os.path.basename(os.path.dirname(p)) for p in a["tuned_saved"]] == ["77aa01be"]
    assert facts.require_ready() == 8888
    assert facts.require_pool()["full"] == 491520 and facts.pool_count == 1
    assert facts.require_memory()["available_bytes"] == "1.04 GB"       # "dsv4 Memory Calculation"
    assert facts.boots_seen == 1


def test_fixture_drift_and_fatal():
    facts = E.scan_file(fx("drift_fatal.log"))
    assert facts.autotune["drift"] == ["_autotune_cache_digest"]
    assert [f["shard"] for f in facts.fatal] == ["engram-l14-r2of3.bin"]
    assert facts.fatal[0]["reason"] == "truncated"
    assert facts.require_engram(1)["rank"] == 2
    with pytest.raises(EngineLogError) as err:
        facts.require_engram(14)
    msg = str(err.value)
    assert "drift_fatal.log" in msg and "'Exact nvme Engram layer=14'" in msg
    assert "layers found: [1]" in msg and "is truncated" in msg and "boots seen: 1" in msg


# --------------------------------------------------------------------------- boots

def test_multiple_boots_latest_only(tmp_path):
    lines = [MARKER, exact(1), exact(14), periodic(14), "noise",
             MARKER.replace("750000", "600000"), exact(1), exact(14, "False"), periodic(14, "False"),
             P + "DSV4 pool sizes: full=1, swa=2, c128=3", P + "DSV4 pool sizes: full=491520, swa=2, c128=3"]
    facts = all_ways(lines, tmp_path)
    assert facts.boots_seen == 2
    assert facts.engram[14]["packed"] is False
    assert facts.periodic[14]["packed_true"] == 0 and facts.periodic[14]["packed_false"] == 1
    assert facts.server_args["max_total_tokens"] == 600000
    assert facts.pool["full"] == 491520 and facts.pool_count == 2


def test_no_marker_is_one_boot(tmp_path):
    facts = all_ways([exact(1), exact(14, "False"), periodic(1)], tmp_path)
    assert facts.boots_seen == 1 and facts.boundary == "start"
    assert facts.engram[14]["packed"] is False


def test_repeated_exact_line_starts_a_boot(tmp_path):
    lines = [MARKER, exact(1), exact(14), periodic(1), P + "DSV4 pool sizes: full=7, swa=1, c128=1",
             exact(1, "False"), exact(14, "False"), periodic(1, "False")]
    facts = all_ways(lines, tmp_path)
    assert facts.boots_seen == 2 and facts.boundary == "engram_repeat"
    assert facts.engram[1]["packed"] is False and facts.periodic[1]["count"] == 1
    assert facts.pool is None and facts.server_args == {}


def test_repeated_exact_in_superseded_region_counts(tmp_path):
    # marker-less restart before the last marker: counted by scan_file's boundary-only pass
    lines = ["launcher noise", exact(1), exact(14), exact(1), exact(14), MARKER, exact(1), exact(14)]
    facts = all_ways(lines, tmp_path)
    assert facts.boots_seen == 3


def test_leading_noise_before_marker_is_not_a_boot(tmp_path):
    facts = all_ways(["+ exec launcher", "nothing here", MARKER, exact(1)], tmp_path)
    assert facts.boots_seen == 1


def test_empty_log(tmp_path):
    facts = all_ways([], tmp_path)
    assert facts.boots_seen == 0
    with pytest.raises(EngineLogError) as err:
        facts.require_engram(1)
    assert "'Exact nvme Engram layer=1'" in str(err.value)


def test_missing_lines_name_source_and_kind(tmp_path):
    path = tmp_path / "engine.log"
    path.write_text(MARKER + "\n" + exact(1) + "\n")
    facts = E.scan_file(str(path))
    for call, kind in [(facts.require_memory, "DSV4 memory calculation"), (facts.require_pool, "DSV4 pool sizes"),
                       (facts.require_max_total, "max_total_num_tokens"), (facts.require_ready, "Ready"),
                       (facts.require_autotune, "autotune")]:
        with pytest.raises(EngineLogError) as err:
            call()
        assert str(path) in str(err.value) and kind in str(err.value)
        assert err.value.source == str(path)


def test_unreadable_file(tmp_path):
    with pytest.raises(EngineLogError) as err:
        E.scan_file(str(tmp_path / "nope.log"))
    assert "nope.log" in str(err.value) and "cannot open" in str(err.value)


def test_latest_boot_lines():
    lines = ["pre", MARKER, exact(1), "a", MARKER, exact(1), "b", exact(1), "c"]
    assert E.latest_boot(lines) == [exact(1), "c"]
    assert E.latest_boot(["x", "y"]) == ["x", "y"]
    assert E.latest_boot(["x", MARKER, "y"]) == [MARKER, "y"]
    assert E.latest_boot([]) == []


def test_kinds_restrict_what_is_kept(tmp_path):
    lines = [MARKER, exact(1), P + "DSV4 pool sizes: full=1, swa=2, c128=3", P + "Ready: API on port 8888",
             P + "FlashInfer autotune completed."]
    facts = all_ways(lines, tmp_path, kinds=E.ENGRAM_KINDS)
    assert facts.engram[1]["packed"] is True
    assert facts.pool is None and facts.ready is False and facts.autotune["completed"] == 0
    assert facts.server_args == {}
    with pytest.raises(ValueError):
        E.Scanner("x", kinds=["bogus"])


def test_event_lists_are_capped(tmp_path):
    lines = [MARKER] + [P + "[autotune_keep] reused /c/%d.json" % i for i in range(E.MAX_EVENTS + 10)]
    lines += [P + "DSV4 pool sizes: full=%d, swa=1, c128=1" % i for i in range(E.MAX_EVENTS + 5)]
    facts = all_ways(lines, tmp_path)
    assert len(facts.autotune["reused"]) == E.MAX_EVENTS
    assert facts.pool_count == E.MAX_EVENTS + 5 and facts.pool["full"] == E.MAX_EVENTS + 4


def test_colour_in_periodic_value_and_crlf(tmp_path):
    lines = [MARKER, exact(1), periodic(1, ESC + "[31mFalse" + ESC + "[0m") + "\r",
             ESC + "[2m" + periodic(1, "True") + ESC + "[0m"]
    facts = all_ways(lines, tmp_path)
    assert facts.periodic[1]["packed_false"] == 1 and facts.periodic[1]["packed_true"] == 1
    assert facts.periodic_packed(1) is True


def test_long_line_longer_than_chunk(tmp_path):
    big = MARKER[:-1] + ", " + ", ".join("opt_%d=%d" % (i, i) for i in range(3000)) + ")"
    facts = all_ways([exact(1), big, exact(1, "False")], tmp_path)
    assert facts.server_args["opt_2999"] == 2999 and facts.engram[1]["packed"] is False


@pytest.mark.parametrize("seed", range(12))
def test_random_logs_all_readers_agree(tmp_path, seed):
    rng = random.Random(seed)
    pool = [
        lambda: MARKER, lambda: exact(rng.choice([1, 14]), rng.choice(["True", "False"])),
        lambda: periodic(rng.choice([1, 14, 3]), rng.choice(["True", "False", "None"])),
        lambda: P + "DSv4 pool sizes: full=%d, swa=1, c128=1" % rng.randint(1, 9),
        lambda: P + "DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=1.04 GB",
        lambda: P + "max_total_num_tokens=%d, available_gpu_mem=2.81 GB" % rng.randint(1, 9),
        lambda: P + "FlashInfer autotune: per-rank caches disagree, discarding them",
        lambda: P + "[autotune_keep] reused /c/x.json", lambda: P + "[autotune_keep] armed",
        lambda: P + "RuntimeError: packed Engram shard /engram/engram-l1-r1of3.bin has no header",
        lambda: P + "Ready: API on port 8888",
        lambda: ESC + "[33m" + P + "warning" + ESC + "[0m",
        lambda: P + "Decode batch. #running-req: 4",
        lambda: P + "Capture %scuda graph bs [%s]" % (rng.choice(["", "draft ", "DRAFT "]),
                                                      ", ".join(str(b) for b in range(1, rng.randint(1, 9)))),
    ]
    weights = [1, 2, 10, 1, 1, 1, 1, 1, 1, 1, 1, 4, 20, 1]
    lines = [rng.choices(pool, weights)[0]() for _ in range(rng.randint(0, 400))]
    all_ways(lines, tmp_path)
    all_ways(lines, tmp_path, kinds=E.ENGRAM_KINDS)
    all_ways(lines, tmp_path, kinds=[E.KIND_GRAPH_SHAPES])


# --------------------------------------------------------------------------- cuda graph shapes

@pytest.mark.parametrize("line, want", [
    (P + "Capture cuda graph bs [1, 2, 3, 4]", ("target", [1, 2, 3, 4])),
    (P + "Capture draft cuda graph bs [1, 2, 3, 4]", ("draft", [1, 2, 3, 4])),
    (ESC + "[32m" + P + ESC + "[0mCAPTURE Cuda Graph BS [1, 2, 4, 8, 16]" + ESC + "[0m\r\n",
     ("target", [1, 2, 4, 8, 16])),
    (P + "capture DRAFT cuda graph bs [1,2,3]", ("draft", [1, 2, 3])),
    (P + "Capture cuda graph bs [8]", ("target", [8])),
    ("Capture cuda graph bs []", ("target", [])),
    (b"[2026-09-24 02:55:01 TP0 EP0] Capture draft cuda graph bs [1, 2]\n", ("draft", [1, 2])),
])
def test_parse_graph_shapes(line, want):
    assert E.parse_line(line) == ("graph_shapes", {"pass": want[0], "bs": want[1]})


@pytest.mark.parametrize("line", [
    P + "Capturing target cuda graphs (bs 1..4)",
    P + "Capture cuda graph begin. This can take up to several minutes. avail mem=20.1 GB",
    P + "Capture cuda graph end. Time elapsed: 3.2 s. mem usage=1.1 GB. avail mem=19.0 GB.",
    P + "Capture cuda graph bs 1",
])
def test_parse_graph_shapes_noise(line):
    assert E.parse_line(line) is None


def test_graph_shapes_latest_boot_last_line_per_pass_wins(tmp_path):
    lines = [MARKER, exact(1), P + "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
             P + "Capture draft cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
             MARKER, exact(1),
             P + "Capturing target cuda graphs (bs 1..2)", P + "Capture cuda graph bs [1]",
             P + "Capture cuda graph bs [1, 2]",
             P + "Capturing draft cuda graphs (bs 1..2)",
             ESC + "[36m" + P + "Capture Draft CUDA graph bs [1, 2]" + ESC + "[0m",
             P + "Ready: API on port 8888"]
    facts = all_ways(lines, tmp_path)
    assert facts.graph_shapes == {"target": [1, 2], "draft": [1, 2]}
    assert facts.require_graph_shapes() == [1, 2]
    assert facts.require_graph_shapes("draft") == [1, 2]
    assert facts.to_dict()["graph_shapes"] == {"target": [1, 2], "draft": [1, 2]}
    only = all_ways(lines, tmp_path, kinds=[E.KIND_GRAPH_SHAPES])
    assert only.graph_shapes == facts.graph_shapes and only.ready is False and only.engram
    assert only.boots_seen == 2


def test_graph_shapes_absent_or_not_asked_for(tmp_path):
    lines = [MARKER, exact(1), P + "Capture cuda graph bs [1, 2]"]
    facts = all_ways(lines, tmp_path)
    assert facts.graph_shapes == {"target": [1, 2]}
    with pytest.raises(EngineLogError, match="Capture draft cuda graph bs"):
        facts.require_graph_shapes("draft")
    # the engram_packed kinds do not look for the new needle and keep no shapes
    assert b"cuda graph bs" not in E._needles_for(E.ENGRAM_KINDS)
    assert all_ways(lines, tmp_path, kinds=E.ENGRAM_KINDS).graph_shapes == {}
    # a new boot without capture lines resets them
    facts = all_ways(lines + [MARKER], tmp_path)
    assert facts.graph_shapes == {} and facts.to_dict()["graph_shapes"] == {}


# --------------------------------------------------------------------------- docker logs

def test_merge_docker_streams_by_timestamp():
    out = ("2026-09-24T02:51:10.000000001Z " + MARKER + "\n"
           "2026-09-24T02:53:01.5Z " + P + "DSV4 pool sizes: full=491520, swa=1, c128=1\n")
    err = ("2026-09-24T02:52:48.000000000Z " + exact(1) + "\n"
           "continuation without timestamp\n"
           "2026-09-24T02:55:00Z " + P + "Ready: API on port 8888\n")
    text = E.merge_docker_streams(out, err)
    assert text.splitlines() == [MARKER, exact(1), "continuation without timestamp",
                                 P + "DSV4 pool sizes: full=491520, swa=1, c128=1", P + "Ready: API on port 8888"]


def test_docker_logs_text_runs_docker_and_fails_clearly():
    calls = []

    def run(args):
        calls.append(args)
        return 0, "2026-09-24T02:51:10Z a\n", "2026-09-24T02:51:09Z b\n"
    assert E.docker_logs_text(run, "dsv41-worker") == "b\na\n"
    assert calls == [["docker", "logs", "--timestamps", "dsv41-worker"]]
    assert E.docker_logs_text(lambda a: (0, "a", "b\n"), "c", timestamps=False) == "a\nb\n"
    with pytest.raises(EngineLogError) as err:
        E.docker_logs_text(lambda a: (1, "", "Error: No such container: dsv41-worker"), "dsv41-worker")
    assert "docker logs dsv41-worker" in str(err.value) and "No such container" in str(err.value)


def test_scan_docker():
    out = "2026-09-24T02:51:10Z " + MARKER + "\n2026-09-24T02:52:49Z " + exact(14, "False") + "\n"
    err = "2026-09-24T02:52:48Z " + exact(1) + "\n"
    facts = E.scan_docker(lambda a: (0, out, err), "dsv41-head", kinds=E.ENGRAM_KINDS)
    assert facts.source == "docker logs dsv41-head"
    assert facts.boots_seen == 1 and facts.engram[1]["packed"] and facts.engram[14]["packed"] is False
