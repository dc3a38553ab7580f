"""Contention report on the lab in the report's state, opt-in pause of two spark3 containers, rollback."""
import json
import re

import pytest

from labhelpers import lab, playbook, recap, sh


@pytest.fixture(scope="module", autouse=True)
def fresh_lab():
    lab("up")
    yield


def states(host):
    out = sh(host, "docker ps -a --format '{{.Names}} {{.State}}'")
    return dict(line.split() for line in out.splitlines())


def flat(out):
    return " ".join(out.split())


def test_report_shows_the_reports_fleet_state():
    rc, out = playbook("contention.yml")
    assert rc == 0, out[-3000:]
    summary = out.split("Print the contention summary of every node", 1)[1]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\s+(spark\d)\s+dsv41-\S+.*$", summary, re.M)}
    assert set(rows) == {"spark1", "spark2", "spark3"}
    spark3 = rows["spark3"].split()
    # host serving others running memory GiB dm active target MemAvailable GiB psi load pollers nv_err
    assert spark3[2] == "19"
    assert "gdm.service active" in rows["spark3"] and "graphical.target" in rows["spark3"]
    assert "4.13 GiB" in rows["spark3"] and "3.07 GiB" in rows["spark1"] and "7.55 GiB" in rows["spark2"]
    assert spark3[-2] == "2.0" and spark3[-1] == "1"  # one poller every 2 s, one NV_ERR_NO_MEMORY event
    assert rows["spark1"].split()[-1] == "0" and "multi-user.target" in rows["spark1"]
    # The per-node container table names the owners where they are known.
    spark3_table = out.split("ok: [spark3] =>", 1)[1]
    assert re.search(r"comfyui\s+zurih\s+running", spark3_table)
    assert re.search(r"uptime-kuma\s+unknown\s+running", spark3_table)
    assert all(c["changed"] == 0 for c in recap(out).values())


def test_two_opted_in_containers_pause_and_rollback_restores_them():
    before = {h: states(h) for h in ("spark1", "spark2", "spark3")}
    rc, out = playbook("contention.yml", "-e", json.dumps(
        {"contention_actions": [{"name": "comfyui", "action": "pause"}, {"name": "ollama", "action": "pause"}]}))
    assert rc == 0, out[-3000:]
    after = {h: states(h) for h in ("spark1", "spark2", "spark3")}
    assert after["spark3"]["comfyui"] == "paused" and after["spark3"]["ollama"] == "paused"
    changed = {(h, n) for h in before for n in before[h] if before[h][n] != after[h][n]}
    assert changed == {("spark3", "comfyui"), ("spark3", "ollama")}

    rc, out = playbook("rollback.yml")
    assert rc == 0, out[-3000:]
    assert {h: states(h) for h in ("spark1", "spark2", "spark3")} == before
    rc, out = playbook("rollback.yml")  # nothing left to restore
    assert rc == 0 and all(c["changed"] == 0 for c in recap(out).values())


def test_unlisted_or_serving_containers_are_refused_and_nothing_changes():
    before = {h: states(h) for h in ("spark1", "spark2", "spark3")}
    for actions in ([{"name": "grafana", "action": "pause"}],          # listed, not dispensable
                    [{"name": "uptime-kuma", "action": "stop"}],       # not listed at all
                    [{"host": "spark3", "name": "dsv41-worker", "action": "stop"}],
                    [{"name": "comfyui", "action": "rm"}]):
        rc, out = playbook("contention.yml", "-e", json.dumps({"contention_actions": actions}))
        assert rc != 0, actions
        assert "Refusing, nothing was changed" in out or "refusing, nothing was changed" in out, flat(out)[-800:]
    assert {h: states(h) for h in ("spark1", "spark2", "spark3")} == before


def test_default_target_is_opt_in_and_says_next_boot():
    rc, out = playbook("contention.yml", "--limit", "spark3", "-e", "contention_default_target=multi-user.target")
    assert rc == 0, out[-3000:]
    assert "This only affects the next boot" in flat(out)
    assert sh("spark3", "systemctl get-default").strip() == "multi-user.target"
    assert sh("spark3", "systemctl is-active display-manager.service").strip() == "active"
