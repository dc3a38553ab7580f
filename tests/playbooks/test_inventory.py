"""Inventories: production is parsed only (never connected to); preflight catches broken ones first."""
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from labhelpers import LAB_INVENTORY, ROOT, env, playbook

sys.path.insert(0, str(ROOT / "filter_plugins"))
import fleet_filters as fleet  # noqa: E402  (filter plugin under test, from the repo)

# Inventory validation and structure: seconds each, so all of it runs in `make test` (conftest.py).
pytestmark = pytest.mark.smoke


def inventory(path):
    out = subprocess.run(["ansible-inventory", "-i", str(path), "--list"], env=env(), cwd=ROOT,
                         check=True, text=True, stdout=subprocess.PIPE).stdout
    data = json.loads(out)
    hostvars = data["_meta"]["hostvars"]
    groups = {}

    def hosts_of(group):
        node = data.get(group, {})
        found = list(node.get("hosts", []))
        for child in node.get("children", []):
            found += hosts_of(child)
        return found

    for group in ("dsv41_ranks", "head", "workers"):
        groups[group] = hosts_of(group)
    return hostvars, groups


def test_production_inventory_is_consistent_and_points_at_the_real_fleet():
    hostvars, groups = inventory(ROOT / "inventory" / "production")
    # Variables are templates until Ansible renders them; the raw values are what the rules check here.
    assert fleet.dsv41_inventory_errors(hostvars, groups) == []
    assert {h: hostvars[h]["ansible_host"] for h in groups["dsv41_ranks"]} == {
        "spark1": "10.0.0.1", "spark2": "10.0.0.2", "spark3": "10.0.0.3"}
    assert groups["head"] == ["spark1"] and sorted(groups["workers"]) == ["spark2", "spark3"]


def test_production_has_a_drift_control_host_outside_the_ranks_that_checks_production():
    out = subprocess.run(["ansible-inventory", "-i", str(ROOT / "inventory" / "production"), "--host", "ops-workstation"],
                         env=env(), cwd=ROOT, check=True, text=True, stdout=subprocess.PIPE).stdout
    control = json.loads(out)
    hostvars, groups = inventory(ROOT / "inventory" / "production")
    assert "ops-workstation" in hostvars and "ops-workstation" not in groups["dsv41_ranks"]
    assert control["drift_schedule_fleets"] == ["production"]
    # a documentation address (RFC 5737) until the operator sets the workstation's own: it reaches nothing
    assert control["ansible_host"].startswith("192.0.2.")


def test_lab_and_production_share_groups_and_host_variables():
    lab_vars, lab_groups = inventory(LAB_INVENTORY)
    prod_vars, prod_groups = inventory(ROOT / "inventory" / "production")
    assert lab_groups == prod_groups
    for host in prod_groups["dsv41_ranks"]:
        for var in ("dsv41_rank", "dsv41_login_user", "dsv41_launcher_dir", "dsv41_engram_dir"):
            assert lab_vars[host][var] == prod_vars[host][var], (host, var)


def test_ansible_cfg_defaults_to_the_lab():
    cfg = (ROOT / "ansible.cfg").read_text()
    assert "inventory = inventory/lab" in cfg


@pytest.fixture
def broken_inventory(tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(LAB_INVENTORY, inv, ignore=shutil.ignore_patterns("lab_connection.yml"))
    return inv


def test_two_hosts_at_rank_one_fail_in_the_first_task(broken_inventory):
    main = broken_inventory / "host_vars" / "spark3" / "main.yml"
    main.write_text(main.read_text().replace("dsv41_rank: 2", "dsv41_rank: 1"))
    rc, out = playbook("fleet_status.yml", inventories=(broken_inventory,))
    assert rc != 0
    assert "rank 1 is held by more than one host: spark2, spark3" in out
    # The first task failed: no other task ran, no host was contacted.
    tasks = [t for t in re.findall(r"TASK \[([^\]]+)\]", out) if "Validating arguments against arg spec" not in t]
    assert tasks == ["preflight : Validate the inventory (ranks, head, TP size, per-host variables)"], out
    assert "UNREACHABLE" not in out


def test_missing_and_mistyped_variables_are_named(broken_inventory):
    main = broken_inventory / "host_vars" / "spark2" / "main.yml"
    text = main.read_text().replace("dsv41_rank: 1", "dsv41_rank: one")
    main.write_text("\n".join(line for line in text.splitlines() if not line.startswith("dsv41_engram_dir")))
    rc, out = playbook("fleet_status.yml", inventories=(broken_inventory,))
    assert rc != 0
    assert "spark2: dsv41_rank='one' is not a non-negative integer" in out
    assert "spark2: dsv41_engram_dir is not set" in out


@pytest.mark.parametrize("name, is_lab", [("production", "true"), ("tp4-example", "false"), ("lab-b", None)],
                         ids=["named-production", "tp4-example-not-a-lab", "lab-copy-unmarked"])
def test_a_fleet_that_is_not_a_lab_is_refused_from_a_lab_only_machine(broken_inventory, name, is_lab):
    # A copy of the lab inventory (lab addresses only) that calls itself production (even marked as a lab), the
    # TP4 example's name and flag, or a lab copy whose dsv41_fleet_is_lab line is gone: the real production and
    # TP4 example inventories are never handed to ansible-playbook on this machine.
    group_vars = broken_inventory / "group_vars" / "dsv41_ranks" / "main.yml"
    lines = [line for line in group_vars.read_text().splitlines() if not line.startswith("dsv41_fleet_is_lab:")]
    lines = [("dsv41_fleet_name: %s" % name) if line.startswith("dsv41_fleet_name:") else line for line in lines]
    group_vars.write_text("\n".join(lines + (["dsv41_fleet_is_lab: %s" % is_lab] if is_lab else [])) + "\n")
    rc, out = playbook("fleet_status.yml", inventories=(broken_inventory,))
    assert rc != 0
    text = " ".join(out.split())
    assert "This control node is lab-only (DSV41_LAB_ONLY=1) and the inventory %s describes the '%s' fleet" % (
        broken_inventory, name) in text
    tasks = [t for t in re.findall(r"TASK \[([^\]]+)\]", out) if "Validating arguments against arg spec" not in t]
    assert tasks[-1] == "preflight : Refuse a fleet that is not a lab from a lab-only control node", tasks
    assert "UNREACHABLE" not in out


# Which part of the ranks each playbook may run on (roles/preflight/README.md): read-only playbooks any
# subset, stage B never a subset, every other playbook the whole fleet unless -e allow_partial_fleet=true.
FLEET_SCOPE = {"fleet_status.yml": "any", "drift.yml": "any", "drift_schedule.yml": "any", "adapters_manifest.yml": "any",
               "stage_b_autotune.yml": "whole_only", "stage_c_fence.yml": "whole_only", "stage_d_wo_a.yml": "whole_only",
               "stage_e_prefetch.yml": "whole_only", "stage_f_drop.yml": "whole_only", "stage_g_spec.yml": "whole_only",
               "stage_h_sampling.yml": "whole_only", "stage_i_experiments.yml": "whole_only",
               "campaign.yml": "whole_only",
               "stage_a_pack.yml": "whole", "site.yml": "whole",
               "contention.yml": "whole", "rollback.yml": "whole", "adopt.yml": "whole"}
# Playbooks whose plays stop every host on the first host's failure (rollback restores what it can).
ERRORS_FATAL = ("stage_a_pack.yml", "stage_b_autotune.yml", "stage_b/boot.yml", "site.yml", "contention.yml")


def test_every_playbook_validates_first_with_its_fleet_scope():
    books = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml") if p.name != "preflight.yml")
    assert books == sorted(FLEET_SCOPE), "a new playbook needs its fleet scope here and in the preflight README"
    # the one preflight play every playbook imports
    (preflight,) = yaml.safe_load((ROOT / "playbooks" / "preflight.yml").read_text())
    assert preflight["hosts"] == "dsv41_ranks" and preflight["roles"] == [{"role": "preflight"}]
    for book in books:
        first = yaml.safe_load((ROOT / "playbooks" / book).read_text())[0]
        assert first["ansible.builtin.import_playbook"] == "preflight.yml", book
        assert first.get("vars", {}).get("preflight_fleet_scope", "whole") == FLEET_SCOPE[book], book
        text = (ROOT / "playbooks" / book).read_text()
        assert "role: preflight" not in text, f"{book} copies the preflight play instead of importing it"


def test_every_playbook_is_reachable_from_the_root_by_its_name():
    """The root playbooks are one import each of playbooks/<same name> (as kubespray keeps them)."""
    for book in FLEET_SCOPE:
        plays = yaml.safe_load((ROOT / book).read_text())
        assert [list(p) for p in plays] == [["name", "ansible.builtin.import_playbook"]], book
        assert plays[0]["ansible.builtin.import_playbook"] == f"playbooks/{book}", book
    root_books = sorted(p.name for p in ROOT.glob("*.yml"))
    assert root_books == sorted(FLEET_SCOPE), "a root playbook without a playbooks/ counterpart"
    # the fleet guard (strategy dsv41_guarded) reads the same scope from the files, through the root wrappers too
    from ansible.module_utils.fleet import guard
    for book, scope in FLEET_SCOPE.items():
        assert guard.playbook_scope(str(ROOT / book)) == scope == guard.playbook_scope(
            str(ROOT / "playbooks" / book)), book


@pytest.mark.parametrize("book, args", [
    ("site.yml", ["--skip-tags", "always"]),
    ("site.yml", ["--skip-tags", "preflight"]),
    ("site.yml", ["-e", "preflight_fleet_scope=any"]),
    ("stage_a_pack.yml", ["--skip-tags", "preflight,always", "-e", "maintenance_window=true"]),
])
def test_the_fleet_guard_holds_whatever_the_tags_and_extra_vars_say(book, args):
    rc, out = playbook(book, "--limit", "spark2", *args)
    assert rc != 0
    text = re.sub(r"\s+", " ", out)
    assert ("Fleet guard: %s acts on the whole fleet" % book) in text or "Refusing to run on part of the fleet" in text
    assert "leaves out spark1" in text
    # nothing after the preflight ran, on any host
    assert all(t.startswith("preflight : ") for t in re.findall(r"TASK \[([^\]]+)\]", out)), out[-2000:]
    assert "changed=1" not in out and "UNREACHABLE" not in out


def test_a_lab_only_control_node_never_reaches_a_host_outside_this_machine(tmp_path):
    # A copy of the lab inventory with spark2 at an address elsewhere. ssh's ProxyCommand=false means that
    # even a guard that let it through would send nothing: the refusal must come before any connection.
    inv = tmp_path / "elsewhere"
    shutil.copytree(LAB_INVENTORY, inv)
    (inv / "host_vars" / "spark2" / "zz_elsewhere.yml").write_text(
        "---\nansible_host: 198.51.100.7\nansible_ssh_common_args: -o ProxyCommand=false\n")
    rc, out = playbook("site.yml", "--check", "--skip-tags", "always", inventories=(inv,))
    assert rc != 0
    assert "spark2 (198.51.100.7) would be reached outside this machine" in re.sub(r"\s+", " ", out)
    assert "UNREACHABLE" not in out and "TASK [clock_lock" not in out


def test_stage_plays_stop_every_host_on_one_failure():
    for book in ERRORS_FATAL:
        plays = [p for p in yaml.safe_load((ROOT / "playbooks" / book).read_text()) if "hosts" in p]
        assert plays and all(p.get("any_errors_fatal") is True for p in plays), (book, [p["name"] for p in plays])


def test_stage_a_lists_its_parts_in_the_specs_order_and_selects_them_by_tag():
    """From the repository root, as typed: play names follow SPEC section 4 (stage A), and each stage part
    has a play-level tag (the preflight runs under any tag)."""
    def listed(*args):
        out = subprocess.run(["ansible-playbook", "stage_a_pack.yml", "--list-tasks", *args], cwd=ROOT, env=env(),
                             check=True, text=True, stdout=subprocess.PIPE).stdout
        # plays with a task selected (a role's argument validation is tagged `always`: not a selected part)
        plays = re.split(r"^\s+play #\d+ \([^)]*\): ", out, flags=re.M)[1:]
        return [p.split("\t")[0] for p in plays
                if [t for t in p.splitlines()[2:] if t.strip() and not re.match(r"\s+(TASK TAGS|\S+ : Validating arguments)", t)]]

    plays = listed()
    parts = [p.split(" | ")[0] for p in plays]
    assert parts == ["Preflight", "Stage A plan", "Stage A relocate", "Stage A pack", "Stage A pack", "Stage A verify",
                     "Stage A bench", "Stage A contention", "Stage A verify", "Stage A bench", "Stage A bench",
                     "Stage A record", "Stage A ledger"], plays
    # the all-rank step profile is the last bench play, and its own tag selects it alone
    assert plays[-3].startswith("Stage A bench | every rank's step profile"), plays
    assert [p.split(" | ")[1][:24] for p in listed("--tags", "profile")[1:]] == ["every rank's step profil"]
    assert [p.split(" | ")[0] for p in listed("--tags", "plan")] == ["Preflight", "Stage A plan"]
    assert [p.split(" | ")[0] for p in listed("--tags", "relocate")] == ["Preflight", "Stage A plan", "Stage A relocate"]
    assert [p.split(" | ")[0] for p in listed("--tags", "pack")] == ["Preflight", "Stage A plan", "Stage A relocate",
                                                                     "Stage A pack", "Stage A pack"]
    for tag, part in (("verify", "Stage A verify"), ("bench", "Stage A bench"), ("ledger", "Stage A ledger")):
        assert {p.split(" | ")[0] for p in listed("--tags", tag)} == {"Preflight", part}, tag
    # the record's tag also reaches the ledger play, which proposes nothing unless this run verified stage A
    assert {p.split(" | ")[0] for p in listed("--tags", "record")} == {"Preflight", "Stage A record", "Stage A ledger"}


def test_an_entry_point_run_without_its_producer_fails_naming_the_fact(tmp_path):
    """Facts roles hand each other are validated where consumed: pack without an earlier plan fails at the
    pack entry point's argument validation, naming engram_pack_plan, before any pack task runs."""
    book = tmp_path / "pack_only.yml"
    book.write_text(f"""---
- name: Preflight
  ansible.builtin.import_playbook: {ROOT / "playbooks" / "preflight.yml"}
- name: Pack without the plan
  hosts: dsv41_ranks
  gather_facts: false
  tasks:
    - name: Pack
      ansible.builtin.include_role:
        name: engram_pack
        tasks_from: pack
""")
    res = subprocess.run(["ansible-playbook", str(book), "-i", str(LAB_INVENTORY)], cwd=ROOT, env=env(), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert res.returncode != 0
    assert "missing required arguments: engram_pack_plan" in res.stdout, res.stdout[-3000:]
    assert "Decide whether this host may write now" not in res.stdout
