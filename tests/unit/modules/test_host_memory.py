"""host_memory: MemAvailable, memory pressure stalls (PSI) and the kernel in one read-only module run."""
import os

import host_memory
from ansible.module_utils.host import meminfo
from modrun import run_module

MEMINFO = "MemTotal:       127535720 kB\nMemFree:         2000000 kB\nMemAvailable:    5637144 kB\n"
PSI = ("some avg10=1.25 avg60=0.50 avg300=0.10 total=1658964\n"
       "full avg10=0.75 avg60=0.25 avg300=0.05 total=1527544\n")


def files(tmp_path, psi=PSI):
    (tmp_path / "meminfo").write_text(MEMINFO)
    if psi is not None:
        (tmp_path / "pressure").write_text(psi)
    return str(tmp_path / "meminfo"), str(tmp_path / "pressure")


def test_pressure_parses_both_lines_and_leaves_out_a_broken_one():
    assert meminfo.parse_pressure(PSI) == {
        "some": {"avg10": 1.25, "avg60": 0.5, "avg300": 0.1, "total_us": 1658964},
        "full": {"avg10": 0.75, "avg60": 0.25, "avg300": 0.05, "total_us": 1527544}}
    assert meminfo.parse_pressure("some avg10=x avg60=0 avg300=0 total=1\nfull avg10=0.1") == {}
    assert meminfo.parse_pressure("") == {}


def test_the_logic_reads_meminfo_pressure_and_the_kernel(tmp_path):
    m, p = files(tmp_path)
    out = host_memory.read_memory(m, p, "spark3")
    assert out["mem_available_bytes"] == 5637144 * 1024 and out["mem_total_bytes"] == 127535720 * 1024
    assert out["pressure"]["full"]["avg10"] == 0.75 and out["kernel"] == os.uname().release
    assert out["notes"] == [] and out["meminfo_text"] == MEMINFO


def test_through_the_entry_point_in_check_mode_and_without_psi(tmp_path):
    m, p = files(tmp_path, psi=None)
    res = run_module(host_memory.main, {"meminfo_path": m, "pressure_path": p, "host_label": "spark2",
                                        "_ansible_check_mode": True})
    assert res["changed"] is False and res["pressure"] is None
    assert res["notes"] == ["spark2: no memory pressure figures (%s: No such file or directory; a kernel without "
                            "PSI)" % p]
    assert res["mem_available_bytes"] == 5637144 * 1024


def test_an_unreadable_meminfo_fails_naming_host_and_file(tmp_path):
    res = run_module(host_memory.main, {"meminfo_path": str(tmp_path / "gone"), "host_label": "spark1"})
    assert res["failed"] is True and res["changed"] is False
    assert res["msg"] == "spark1: cannot read %s: No such file or directory" % (tmp_path / "gone")
