"""/proc/meminfo: one parser (module_utils/host/meminfo.py) behind the contention module and the dsv41_meminfo filter."""
from ansible.module_utils.host import meminfo

import fleet_filters as fleet

MEMINFO = """MemTotal:       125523316 kB
MemFree:         2315012 kB
MemAvailable:    4330292 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
Truncated:
Garbled:    n/a kB
"""


def test_kb_lines_are_bytes_and_counts_stay_counts():
    m = meminfo.parse_meminfo(MEMINFO)
    assert m == {"MemTotal": 125523316 * 1024, "MemFree": 2315012 * 1024, "MemAvailable": 4330292 * 1024,
                 "HugePages_Total": 0, "Hugepagesize": 2048 * 1024}
    assert meminfo.parse_meminfo(None) == {} and meminfo.parse_meminfo("") == {}


def test_memory_facts_in_bytes_and_gib():
    f = meminfo.memory_facts(meminfo.parse_meminfo(MEMINFO))
    assert (f["mem_total_bytes"], f["mem_available_bytes"]) == (125523316 * 1024, 4330292 * 1024)
    assert (f["mem_total_gib"], f["mem_available_gib"]) == (119.71, 4.13)
    assert meminfo.memory_facts({})["mem_available_gib"] is None


def test_the_filter_is_the_same_parser():
    assert fleet.dsv41_meminfo(MEMINFO) == meminfo.parse_meminfo(MEMINFO)


def test_field_gib_of_meminfo_text():
    from ansible.module_utils.host.meminfo import field_gib
    text = "MemTotal:       127535604 kB\nMemAvailable:    66002000 kB\n"
    assert field_gib(text) == 62.94 and field_gib(text, "MemTotal", 3) == 121.627
    assert field_gib(text, "SwapTotal") is None and field_gib("") is None and field_gib(None) is None
