"""Every fleet inventory of the repository (inventory/<fleet>/, a directory holding hosts.yml; common/ is the layer
the fleets share): parsed as an operator parses it (ansible-inventory --list; never connected to), it names itself,
its TP size is its number of rank hosts, the preflight's inventory rules pass, the launcher settings it declares
pass its TP size's rule set, and a lab-only control node refuses it before any host unless it is a lab.

The TP4 example (inventory/tp4-example) is four placeholder hosts that can never reach a machine."""
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils.drift import history
from ansible.module_utils.fleet import guard as fleet_guard
from ansible.module_utils.launcher import rules

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "filter_plugins"))
import fleet_filters as fleet  # noqa: E402  (the preflight's inventory rules, filter_plugins/fleet_filters.py)

INVENTORY = ROOT / "inventory"
FLEETS = sorted(p for p in INVENTORY.iterdir() if p.is_dir() and (p / "hosts.yml").is_file())
PREFLIGHT_TASKS = ROOT / "roles" / "preflight" / "tasks" / "main.yml"
LAB_ONLY_TASK = "Refuse a fleet that is not a lab from a lab-only control node"


def ansible_inventory(path):
    """``(hostvars, groups)`` from ``ansible-inventory --list`` (raw values: templates are not rendered)."""
    tool = Path(sys.executable).parent / "ansible-inventory"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run([str(tool) if tool.exists() else "ansible-inventory", "-i", str(path), "--list"], env=env,
                         cwd=ROOT, check=True, text=True, stdout=subprocess.PIPE, timeout=120).stdout
    data = json.loads(out)

    def hosts_of(group):
        node = data.get(group, {})
        return list(node.get("hosts", [])) + [h for child in node.get("children", []) for h in hosts_of(child)]

    groups = dict((g, hosts_of(g)) for g in ("dsv41_ranks", "head", "workers", "drift_control"))
    return data["_meta"]["hostvars"], groups


def rendered(path, host):
    """The host's variables as a play sees them (templates rendered on demand by a Templar) and the loader."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory).get_vars(host=inventory.get_host(host))
    return variables, loader


@pytest.fixture(scope="module", params=FLEETS, ids=[p.name for p in FLEETS])
def parsed(request):
    return request.param, ansible_inventory(request.param)


def test_the_repository_holds_each_kind_of_fleet_and_the_drift_timer_checks_every_one():
    names = [p.name for p in FLEETS]
    assert {"lab", "production", "tp4-example"} <= set(names) and "common" not in names
    # bin/fleet-drift --all: one run per fleet inventory, exactly these, each under its own name
    assert [Path(p) for _key, p in history.fleet_inventories(str(INVENTORY))] == FLEETS
    assert [key for key, _p in history.fleet_inventories(str(INVENTORY))] == names


def test_every_fleet_parses_names_itself_and_its_tp_size_is_its_rank_count(parsed):
    path, (hostvars, groups) = parsed
    ranks = groups["dsv41_ranks"]
    assert len(groups["head"]) == 1 and sorted(groups["head"] + groups["workers"]) == sorted(ranks)
    # one name on every rank host, the inventory's directory name (records/<fleet>/, the drift history's key)
    assert {hostvars[h].get("dsv41_fleet_name") for h in ranks} == {path.name}
    assert {hostvars[h]["dsv41_tp_size"] for h in ranks} == {len(ranks)}
    assert sorted(hostvars[h]["dsv41_rank"] for h in ranks) == list(range(len(ranks)))
    assert fleet.dsv41_inventory_errors(hostvars, groups) == []
    assert rules.rules_for(len(ranks)) is rules.RULE_SETS[len(ranks)], "a TP size with a launcher rule set"


def test_every_fleet_s_declared_launcher_settings_pass_its_tp_size_s_rule_set(parsed):
    from ansible.template import Templar
    path, (hostvars, groups) = parsed
    head = groups["head"][0]
    variables, loader = rendered(path, head)
    settings = Templar(loader=loader, variables=variables).template(variables["dsv41_launcher_settings"])
    tp = len(groups["dsv41_ranks"])
    assert int(settings["TP_SIZE"]) == tp
    assert rules.validate_settings(settings, tp_size=tp) == []
    if tp == 4:     # a TP4 fleet's values on a TP3 fleet: each one the report says never to copy is refused
        found = rules.check_settings(dict(settings, TP_SIZE=3, EP_SIZE=3), tp_size=3)
        assert {"shared_pad_tp3", "tp4_slots", "tp4_kv_pool", "tp4_fraction", "tp4_row_cache"} <= \
            set(f.rule for f in found if f.level == "error")


def test_a_lab_only_control_node_refuses_every_fleet_that_is_not_a_lab_before_any_host(parsed):
    """The preflight's first tasks run on the control node (playbooks/preflight.yml, no facts gathered): its
    lab-only condition is evaluated here on each inventory as the play renders it, and so is the fleet guard
    (strategy dsv41_guarded) that holds for every later play. bin/fleet-drift --all runs drift.yml per fleet, whose
    first play is that preflight: a fleet refused here is refused there before any connection."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    path, (hostvars, groups) = parsed
    block = next(t["block"] for t in DataLoader().load_from_file(str(PREFLIGHT_TASKS)) if "block" in t)
    (task,) = [t for t in block if t["name"] == LAB_ONLY_TASK]
    ranks = groups["dsv41_ranks"]
    is_lab = {hostvars[h].get("dsv41_fleet_is_lab", False) for h in ranks}
    variables, loader = rendered(path, ranks[0])
    templar = Templar(loader=loader, variables=dict(variables, preflight_lab_only=True))
    refused = templar.evaluate_conditional(trust_as_template(task["when"]))
    assert refused is (is_lab != {True}), (path.name, is_lab)
    fleets = {(hostvars[h]["dsv41_fleet_name"], hostvars[h].get("dsv41_fleet_is_lab", False)) for h in ranks}
    guard = fleet_guard.lab_only_refusal([], fleets)
    if refused:
        message = templar.template(trust_as_template(task["ansible.builtin.fail"]["msg"]))
        assert "inventory %s describes the '%s' fleet" % (path, path.name) in message
        assert guard.startswith("This control node is lab-only (DSV41_LAB_ONLY=1) and the inventory describes the "
                                "'%s' fleet, not a lab" % path.name)
    else:
        assert guard is None and path.name.startswith("lab")
    # off a lab-only node (the operator's workstation) nothing refuses it
    templar = Templar(loader=loader, variables=dict(variables, preflight_lab_only=False))
    assert templar.evaluate_conditional(trust_as_template(task["when"])) is False


def test_the_tp4_example_is_four_placeholder_hosts_in_the_community_shape():
    hostvars, groups = ansible_inventory(INVENTORY / "tp4-example")
    assert groups["head"] == ["spark1"] and groups["workers"] == ["spark2", "spark3", "spark4"]
    assert groups["drift_control"] == ["ops-workstation"] and "ops-workstation" not in groups["dsv41_ranks"]
    assert hostvars["ops-workstation"]["drift_schedule_fleets"] == ["tp4-example"]
    for host, hv in hostvars.items():
        address = hv["ansible_host"]
        # the reserved .invalid domain (RFC 6761) never resolves, and no address of any network is written
        assert address.endswith(".tp4-example.invalid"), (host, address)
        with pytest.raises(ValueError):
            ipaddress.ip_address(address)
    spark1 = hostvars["spark1"]
    assert spark1["dsv41_tp_size"] == 4 and spark1["dsv41_fleet_is_lab"] is False
    # no secret and no built-in key: the API key is the vault's, the manifest is filled in by the operator
    assert spark1["dsv41_api_key"] == "{{ vault_dsv41_api_key }}" and spark1["dsv41_adapters_manifest"] == {}
    # the shared TP4 baseline (the lab's TP4 fleet runs exactly it): the TP4 values TP3 must never copy
    link = INVENTORY / "tp4-example" / "group_vars" / "dsv41_ranks" / "launcher_baseline.yml"
    assert link.is_symlink() and link.resolve() == INVENTORY / "common" / "launcher_baseline_tp4.yml"
    settings = spark1["dsv41_launcher_settings"]
    assert (settings["MAX_RUNNING_REQUESTS"], settings["MAX_TOTAL_TOKENS"], settings["MEM_FRACTION_STATIC"],
            settings["DSV41_CACHE_GIB"], settings["DSV41_SHARED_PAD_K"]) == (16, 8000000, "0.80", 4, 1)
