"""The refusal of a run on part of the fleet (filter_plugins/preflight_filters.py)."""
import preflight_filters as pf

HV = {"spark1": {"dsv41_rank": 0}, "spark2": {"dsv41_rank": 1}, "spark3": {"dsv41_rank": 2}}


def test_whole_fleet_playbook_names_what_is_left_out_and_the_opt_in():
    text = pf.dsv41_partial_fleet_refusal(["spark1", "spark3"], ["spark2"], HV, "whole", "spark1", "spark1,spark3")
    assert text.startswith("Refusing to run on part of the fleet; nothing was changed on any host. This run covers "
                           "spark1, spark3 (--limit spark1,spark3) and leaves out spark2 (rank 1). ")
    assert "the engine restart goes through the launcher on spark1" in text
    assert "add -e allow_partial_fleet=true to act on spark1, spark3 only" in text


def test_whole_only_playbook_gives_its_reason_and_no_opt_in():
    text = pf.dsv41_partial_fleet_refusal(["spark3"], ["spark1", "spark2"], HV, "whole_only", "spark1")
    assert "This run covers spark3 and leaves out spark1 (rank 0), spark2 (rank 1). " in text
    assert text.endswith("even with -e allow_partial_fleet=true: every step reaches every rank. Run it without --limit.")
    text = pf.dsv41_partial_fleet_refusal(["spark3"], ["spark1"], HV, "whole_only", "spark1", "", "the pack is TP3")
    assert ": the pack is TP3. Run it without --limit." in text and "act on" not in text
