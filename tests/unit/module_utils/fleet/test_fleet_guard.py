"""module_utils/fleet/guard.py: the decisions of the guard no tag or -e can turn off (strategy dsv41_guarded)."""
import pytest

from ansible.module_utils.fleet import guard as G

RANKS = ["spark1", "spark2", "spark3"]


def test_the_scope_comes_from_the_playbook_file_through_wrappers(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "drift.yml").write_text(
        "- name: Preflight\n  ansible.builtin.import_playbook: preflight.yml\n  vars:\n    preflight_fleet_scope: any\n")
    (tmp_path / "playbooks" / "site.yml").write_text("- name: Preflight\n  ansible.builtin.import_playbook: preflight.yml\n")
    (tmp_path / "drift.yml").write_text("- name: Drift\n  ansible.builtin.import_playbook: playbooks/drift.yml\n")
    (tmp_path / "odd.yml").write_text("- name: x\n  ansible.builtin.import_playbook: preflight.yml\n  vars:\n"
                                      "    preflight_fleet_scope: everything\n")
    assert G.playbook_scope(str(tmp_path / "drift.yml")) == "any"
    assert G.playbook_scope(str(tmp_path / "playbooks" / "site.yml")) == "whole"
    assert G.playbook_scope(str(tmp_path / "odd.yml")) == "whole"          # an unknown scope is the strict one
    assert G.playbook_scope(str(tmp_path / "missing.yml")) == "whole"


@pytest.mark.parametrize("scope, allow, refused", [
    ("whole", None, True), ("whole", "true", False), ("whole", True, False), ("whole", "false", True),
    ("whole_only", "true", True), ("any", None, False)])
def test_a_subset_is_refused_unless_the_playbook_allows_it(scope, allow, refused):
    msg = G.partial_refusal("playbooks/site.yml", scope, RANKS, ["spark2"], allow, "spark2")
    assert (msg is not None) == refused
    if refused:
        assert "site.yml acts on the whole fleet" in msg and "leaves out spark1, spark3" in msg
    assert G.partial_refusal("site.yml", scope, RANKS, RANKS, allow, None) is None     # the whole fleet


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("10.0.0.2", False), ("198.51.100.7", False), ("spark2", False), ("", False), (None, False)])
def test_only_loopback_addresses_count_as_this_machine(address, loopback):
    assert G.is_loopback(address) is loopback


def test_lab_only_refuses_any_host_reached_elsewhere_and_any_fleet_that_is_not_a_lab():
    lab = [("spark1", "ssh", "127.0.0.1"), ("spark2", "ssh", "127.0.0.1"), ("ctl", "local", "ctl")]
    assert G.lab_only_refusal(lab, {("lab", True), ("lab-tp4", True), ("", False)}) is None
    msg = G.lab_only_refusal(lab + [("spark3", "ssh", "10.0.0.3")], {("lab", True)})
    assert "spark3 (10.0.0.3) would be reached outside this machine" in msg
    # whatever its addresses: production, the TP4 example, a lab copy not marked as a lab, one named production
    for fleets, named in (({("production", False)}, "'production'"), ({("tp4-example", False)}, "'tp4-example'"),
                          ({("lab-b", None)}, "'lab-b'"), ({("production", True)}, "'production'"),
                          ({("lab", True), ("tp4-example", "false")}, "'tp4-example'")):
        msg = G.lab_only_refusal(lab, fleets)
        assert msg.startswith("This control node is lab-only (DSV41_LAB_ONLY=1) and the inventory describes the "
                              "%s fleet, not a lab" % named), (fleets, msg)
