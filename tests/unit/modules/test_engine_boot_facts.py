"""engine_boot_facts through its entry point, on the lab's saved boot log and a missing file."""
import sys
from pathlib import Path
from modrun import run_module

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "library"))
import engine_boot_facts  # noqa: E402


def test_saved_boot_log_gives_latest_boot_facts():
    result = run_module(engine_boot_facts.main, {"log_path": str(ROOT / "lab" / "seed" / "dsv41.log"), "host_label": "spark1",
                                                   "count_boots": True})
    boot = result["boot"]
    assert not result.get("failed"), result
    assert boot["boots_seen"] >= 2 and boot["marker_found"] is True
    assert boot["pool"]["full"] == 491520
    assert boot["graph_shapes"]["target"] == [1, 2, 3, 4]
    assert boot["autotune"]["disagree"] == 2
    assert boot["ready"] is True


def test_check_mode_reads_the_same(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("[2026-09-24 02:51:10 TP1 EP1] server_args=ServerArgs(tp_size=3)\n"
                   "[2026-09-24 02:51:11 TP1 EP1] Capture cuda graph bs [1, 2]\n")
    result = run_module(engine_boot_facts.main, {"log_path": str(log), "_ansible_check_mode": True})
    assert result["boot"]["graph_shapes"] == {"target": [1, 2]}
    assert result["changed"] is False


def test_missing_file_fails_naming_it(tmp_path):
    result = run_module(engine_boot_facts.main, {"log_path": str(tmp_path / "nope.log"), "host_label": "spark2"})
    assert result["failed"] and "spark2" in result["msg"] and "nope.log" in result["msg"]
