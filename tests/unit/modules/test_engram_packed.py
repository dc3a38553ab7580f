"""The engram_packed module, run through its entry point like Ansible runs it."""
import os

import pytest

from modrun import run_module


import engram_packed

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures")
TWO_BOOTS = os.path.join(FIX, "two_boots_rank1.log")
ROWS = {1: 384006168, 14: 384016684}      # the real tables; rank 1 of 3 owns the fixture's ranges

import ckpt_factory


def run(args, run_command=None):
    return run_module(engram_packed.main, args, run_command=run_command)


def base(**kw):
    args = {"log_path": TWO_BOOTS, "rank": 1, "tp_size": 3, "host_label": "spark2"}
    args.update(kw)
    return args


def test_report_latest_boot():
    res = run(base(rows_total={"1": ROWS[1], "14": ROWS[14]}, count_boots=True))
    assert not res.get("failed") and res["changed"] is False
    assert res["boots_seen"] == 2 and res["all_packed"] is False and res["all_ok"] is False
    l1, l14 = res["layers"]
    assert (l1["layer"], l1["packed"], l1["periodic_packed"]) == (1, True, True)
    assert (l14["layer"], l14["packed"], l14["periodic_packed"], l14["periodic_unpacked"]) == (14, False, False, 2)
    assert (l1["lo"], l1["hi"], l1["expected_lo"], l1["expected_hi"]) == (128002056, 256004112, 128002056, 256004112)
    assert (l14["expected_lo"], l14["expected_hi"]) == (128005561, 256011122)
    assert l1["rows_ok"] is True and l14["rows_ok"] is True and l1["rank_ok"] is True
    assert l14["shard"] == "engram-l14-r1of3.bin" and l1["rank"] == 1 and l1["io_threads"] == 96
    assert res["problems"] == ["layer 14 packed=False"] and res["fatal"] == []
    assert res["source"] == TWO_BOOTS


def test_without_row_counts_rows_are_not_judged():
    res = run(base(layers=[1]))
    (l1,) = res["layers"]
    assert l1["rows_ok"] is None and l1["expected_lo"] is None
    assert res["all_packed"] is True and res["all_ok"] is True


def test_require_packed_names_layer_rank_and_rows():
    res = run(base(require_packed=True, rows_total={1: 15, 14: ROWS[14]}))
    assert res["failed"] is True
    assert res["msg"].startswith("spark2 rank 1: layer 14 packed=False; layer 1 rows [128002056,256004112) "
                                 "expected [5,10)")
    assert TWO_BOOTS in res["msg"] and "latest boot" in res["msg"]
    assert res["layers"][1]["packed"] is False            # details still returned


def test_require_packed_passes_when_packed(tmp_path):
    log = tmp_path / "ok.log"
    text = open(TWO_BOOTS).read().replace("packed=False", "packed=True")
    log.write_text(text)
    res = run(base(log_path=str(log), require_packed=True, rows_total=ROWS))
    assert not res.get("failed") and res["all_packed"] is True and res["all_ok"] is True


def test_require_packed_catches_unpacked_periodic_line(tmp_path):
    log = tmp_path / "flip.log"
    text = open(TWO_BOOTS).read().replace("io_threads=96 packed=False", "io_threads=96 packed=True")
    log.write_text(text)
    res = run(base(log_path=str(log), require_packed=True))
    assert res["failed"] and "layer 14 packed=True at start but 2 periodic line(s) packed=False" in res["msg"]


def test_wrong_rank_in_log():
    res = run(base(rank=2, require_packed=True))
    assert res["failed"] and "layer 1 logged rank=1, expected 2" in res["msg"]
    assert res["msg"].startswith("spark2 rank 2: ")


def test_check_mode_is_read_only_and_same():
    normal = run(base(rows_total=ROWS))
    checked = run(base(rows_total=ROWS, _ansible_check_mode=True))
    assert checked["changed"] is False and not checked.get("skipped")
    for key in ("layers", "all_packed", "boots_seen", "problems"):
        assert checked[key] == normal[key]
    failed = run(base(require_packed=True, _ansible_check_mode=True))
    assert failed["failed"] and "layer 14 packed=False" in failed["msg"]


def test_missing_layer_fails_naming_source_and_layer():
    res = run(base(log_path=os.path.join(FIX, "drift_fatal.log"), rank=2))
    assert res["failed"]
    assert "drift_fatal.log" in res["msg"] and "'Exact ... Engram layer=14'" in res["msg"]
    assert "fatal on rank 2 while attaching layer 14: Engram retrieval failed: packed Engram shard is truncated" \
        in res["msg"]
    assert res["msg"].startswith("spark2 rank 2: ")


def test_missing_log_file(tmp_path):
    res = run(base(log_path=str(tmp_path / "none.log")))
    assert res["failed"] and "none.log" in res["msg"] and "cannot open" in res["msg"]


def test_fatal_error_fails_require_packed(tmp_path):
    log = tmp_path / "fatal.log"
    log.write_text(open(TWO_BOOTS).read().replace("packed=False", "packed=True")
                   + "Engram retrieval failed: packed Engram shard does not match this rank's range; "
                     "re-run the pack step (errno=0)\n")
    res = run(base(log_path=str(log), require_packed=True))
    assert res["failed"] and ("fatal on rank 1 after layers 1, 14 were attached: Engram retrieval failed: packed Engram "
                              "shard does not match this rank's range") in res["msg"]
    assert res["fatal"][0]["reason"] == "range_mismatch" and res["all_packed"] is True


DOCKER_OUT = ("2026-09-24T02:51:10.000000000Z [2026-09-24 02:51:10] server_args=ServerArgs(tp_size=3)\n"
              "2026-09-24T02:55:00.000000000Z [2026-09-24 02:55:00] Ready: API on port 8888\n")
DOCKER_ERR = ("2026-09-24T02:52:48.100000000Z [2026-09-24 02:52:48 TP0 EP0] Exact nvme Engram layer=1 rank=0 "
              "rows=[0,128002056) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 "
              "packed=True\n"
              "2026-09-24T02:52:48.200000000Z [2026-09-24 02:52:48 TP0 EP0] Exact nvme Engram layer=14 rank=0 "
              "rows=[0,128005561) cache=0.0GiB (0 slots, 4-way, 0.0% of owned rows) scales=0.0GiB io_threads=96 "
              "packed=True\n")


def test_docker_path():
    res = run({"container": "dsv41-head", "rank": 0, "tp_size": 3, "rows_total": ROWS, "require_packed": True,
               "_ansible_check_mode": True, "count_boots": True},
              run_command=lambda cmd: (0, DOCKER_OUT, DOCKER_ERR))
    assert not res.get("failed"), res
    assert res["_calls"] == [["docker", "inspect", "--format", "{{json .State}}", "dsv41-head"],
                             ["docker", "logs", "--timestamps", "dsv41-head"]]   # counting boots: the whole log
    assert res["source"] == "docker logs dsv41-head"
    assert res["all_packed"] is True and res["boots_seen"] == 1
    assert [l["rows_ok"] for l in res["layers"]] == [True, True]


def test_docker_without_timestamps_and_custom_binary():
    strip = lambda text: "".join(line.split(" ", 1)[1] + "\n" for line in text.splitlines())
    res = run({"container": "dsv41-worker", "rank": 0, "tp_size": 3, "docker_bin": "/lab/bin/docker",
               "docker_timestamps": False},
              run_command=lambda cmd: (0, strip(DOCKER_OUT), strip(DOCKER_ERR)))
    assert res["_calls"] == [["/lab/bin/docker", "inspect", "--format", "{{json .State}}", "dsv41-worker"],
                             ["/lab/bin/docker", "logs", "dsv41-worker"]]
    assert res["all_packed"] is True


def test_docker_failure():
    res = run({"container": "dsv41-worker", "rank": 1, "tp_size": 3, "host_label": "spark2"},
              run_command=lambda cmd: (1, "", "Error response from daemon: No such container: dsv41-worker"))
    assert res["failed"]
    assert res["msg"].startswith("spark2 rank 1: docker logs dsv41-worker")
    assert "No such container" in res["msg"]


@pytest.mark.parametrize("args, needle", [
    ({"log_path": TWO_BOOTS, "container": "x", "rank": 1, "tp_size": 3}, "mutually exclusive"),
    ({"rank": 1, "tp_size": 3}, "one of the following is required"),
    ({"log_path": TWO_BOOTS, "rank": 1, "tp_size": 3, "rows_total": ROWS, "checkpoint": "/x"}, "mutually exclusive"),
    ({"log_path": TWO_BOOTS, "tp_size": 3}, "rank"),
    ({"log_path": TWO_BOOTS, "rank": 3, "tp_size": 3}, "rank 3 is outside 0..2"),
    ({"log_path": TWO_BOOTS, "rank": 1, "tp_size": 3, "layers": []}, "layers is empty"),
    ({"log_path": TWO_BOOTS, "rank": 1, "tp_size": 3, "rows_total": {"one": 5}}, "rows_total"),
])
def test_argument_validation(args, needle):
    res = run(args)
    assert res["failed"] and needle in res["msg"]


def test_documentation_blocks_parse():
    import yaml
    doc = yaml.safe_load(engram_packed.DOCUMENTATION)
    assert doc["module"] == "engram_packed"
    assert doc["extends_documentation_fragment"] == ["engine_log_source"]
    assert set(doc["options"]) == {"rank", "tp_size",
                                   "layers", "rows_total", "checkpoint", "require_packed", "host_label"}
    yaml.safe_load(engram_packed.EXAMPLES)
    ret = yaml.safe_load(engram_packed.RETURN)
    assert {"layers", "all_packed", "boots_seen", "fatal"} <= set(ret)


def test_checkpoint_gives_expected_rows(tmp_path):
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "ckpt"), rows=ROWS, sparse=True)
    res = run(base(checkpoint=ckpt["dir"]))
    assert [l["rows_total"] for l in res["layers"]] == [ROWS[1], ROWS[14]]
    assert [l["rows_ok"] for l in res["layers"]] == [True, True]
    small = ckpt_factory.make_checkpoint(str(tmp_path / "small"), rows={1: 3000, 14: 4100}, sparse=True)
    res = run(base(checkpoint=small["dir"], require_packed=True))
    assert res["failed"]
    assert "layer 1 rows [128002056,256004112) expected [1000,2000)" in res["msg"]
    assert "layer 14 rows [128005561,256011122) expected [1366,2733)" in res["msg"]


def test_bad_checkpoint_fails_clearly(tmp_path):
    res = run(base(checkpoint=str(tmp_path)))
    assert res["failed"] and "cannot get the Engram row counts" in res["msg"]
    assert "model.safetensors.index.json" in res["msg"]
