"""The engram_pack role's fleet table, notes, refusals and time limit (filter_plugins/engram_pack_filters.py)."""
import pytest

import engram_pack_filters as pf

FITS = {"required_bytes": 67586019080, "required_gib": 62.944, "to_write_bytes": 67586019080, "to_write_gib": 62.944,
        "free_bytes": 1099511627776, "free_gib": 1024.0, "reclaimable_bytes": 0, "margin_bytes": 1073741824,
        "fits": True, "deficit_bytes": 0, "deficit_gib": 0.0,
        "shards": [{"layer": 1, "bytes": 33792000000, "state": "missing", "path": "/e/engram-l1-r0of3.bin"},
                   {"layer": 14, "bytes": 33794000000, "state": "complete", "verified": "metadata",
                    "path": "/e/engram-l14-r0of3.bin"}]}
SHORT = dict(FITS, free_bytes=10 ** 9, free_gib=0.931, reclaimable_bytes=5 * 10 ** 9, fits=False,
             deficit_bytes=52659760856, deficit_gib=49.043,
             shards=[{"layer": 1, "bytes": 1, "state": "stale", "stale_reason": "rows 0..5 differ", "path": "/s/l1"}])
HV = {"spark1": {"dsv41_rank": 0, "engram_pack_plan": FITS, "engram_pack_destination": "/e"},
      "spark3": {"dsv41_rank": 2, "engram_pack_plan": SHORT, "engram_pack_destination": "/s"}}


def test_plan_rows_print_bytes_with_separators_and_the_verdict():
    fits, short = pf.dsv41_pack_plan_rows(["spark1", "spark3"], HV)
    assert fits == {"host": "spark1", "rank": 0, "dest": "/e", "required": "67,586,019,080 (62.944 GiB)",
                    "to_write": "67,586,019,080", "free": "1,099,511,627,776 (1024.0 GiB)", "reclaimable": "0",
                    "margin": "1,073,741,824", "verdict": "fits"}
    assert short["verdict"] == "SHORT by 52,659,760,856 (49.043 GiB)"


def test_notes_say_why_shards_are_repacked_or_trusted():
    assert pf.dsv41_pack_plan_notes(["spark1", "spark3"], HV) == [
        "spark1 (rank 0) /e/engram-l14-r0of3.bin: complete (metadata)",
        "spark3 (rank 2) /s/l1: stale: rows 0..5 differ"]


def test_short_names_each_rank_that_does_not_fit():
    assert pf.dsv41_pack_plan_short(["spark1"], HV) == []
    assert pf.dsv41_pack_plan_short(["spark1", "spark3"], HV) == [
        "spark3 (rank 2) needs 67,586,019,080 bytes (62.944 GiB) plus a 1,073,741,824-byte margin in /s and has "
        "1,000,000,000 free + 5,000,000,000 reclaimable: deficit 52,659,760,856 bytes (49.043 GiB)"]


def test_time_limit_grows_with_a_rate_cap_only():
    assert pf.dsv41_pack_time_limit(FITS, "1", "7200") == 7200
    assert pf.dsv41_pack_time_limit(FITS, 1, 7200, "0") == 7200
    # 33,792,000,000 bytes at 100 MiB/s: 322.3 s, twice that plus 600 s, rounded up.
    assert pf.dsv41_pack_time_limit(FITS, 1, 600, 100) == 1245
    assert pf.dsv41_pack_time_limit(FITS, 14, 100000, 100) == 100000


def test_time_limit_of_a_layer_not_in_the_plan_fails_naming_it():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="layer 7 is not in the pack plan"):
        pf.dsv41_pack_time_limit(FITS, 7, 600)
