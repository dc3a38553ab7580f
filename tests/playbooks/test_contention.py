"""Contention report on the lab in the report's state, opt-in pause/stop of spark3 containers, rollback.

Every rollback runs twice, and the fleet's containers (docker inspect on every host) must then be
exactly as they were before the first change.
"""
import json
import re

import pytest

from labhelpers import playbook, recap, sh


def states(host):
    out = sh(host, "docker ps -a --format '{{.Names}} {{.State}}'")
    return dict(line.split() for line in out.splitlines())


def flat(out):
    return " ".join(out.split())


RECORD = "/home/zurih/.local/state/dsv41-fleet/contention-actions.json"


def inspected():
    """{host: {container: (status, running, paused)}} from docker inspect of every container."""
    fmt = "'{{.Name}} {{.State.Status}} {{.State.Running}} {{.State.Paused}}'"
    result = {}
    for host in ("spark1", "spark2", "spark3"):
        out = sh(host, f"docker ps -aq | xargs docker inspect --format {fmt}")
        result[host] = {name.lstrip("/"): tuple(rest) for name, *rest in (line.split() for line in out.splitlines())}
    return result


def act(*actions):
    rc, out = playbook("contention.yml", "-e", json.dumps({"contention_actions": list(actions)}))
    assert rc == 0, out[-3000:]


def rollback_twice(before):
    """Roll back twice: the first restores exactly `before`, the second finds nothing left to do."""
    rc, out = playbook("rollback.yml")
    assert rc == 0, out[-3000:]
    assert inspected() == before
    assert sh("spark3", f"test -e {RECORD} && echo kept || echo cleared").strip() == "cleared"
    rc, out = playbook("rollback.yml")
    assert rc == 0, out[-3000:]
    assert all(c["changed"] == 0 for c in recap(out).values()), recap(out)
    assert inspected() == before


@pytest.mark.smoke
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
    # contention.yml acts on the whole fleet; a run on spark3 alone has to say so.
    rc, out = playbook("contention.yml", "--limit", "spark3", "-e", "allow_partial_fleet=true",
                       "-e", "contention_default_target=multi-user.target")
    assert rc == 0, out[-3000:]
    assert "This only affects the next boot" in flat(out)
    assert sh("spark3", "systemctl get-default").strip() == "multi-user.target"
    assert sh("spark3", "systemctl is-active display-manager.service").strip() == "active"


def test_paused_then_stopped_goes_back_to_running_and_a_second_rollback_changes_nothing():
    before = inspected()
    assert before["spark3"]["comfyui"][0] == "running" and before["spark3"]["ollama"][0] == "running"
    act({"name": "comfyui", "action": "pause"})
    act({"name": "comfyui", "action": "stop"}, {"name": "ollama", "action": "pause"})
    now = inspected()["spark3"]
    assert now["comfyui"][0] == "exited" and now["ollama"][0] == "paused"
    # The record keeps each container's state before its first change, not before the latest one.
    record = {e["name"]: e for e in json.loads(sh("spark3", f"cat {RECORD}"))}
    assert record["comfyui"]["before"] == "running" and record["comfyui"]["actions"] == ["pause", "stop"]
    assert record["ollama"]["before"] == "running" and record["ollama"]["actions"] == ["pause"]
    rollback_twice(before)


def test_a_container_its_owner_had_paused_is_paused_again_after_a_stop_is_rolled_back():
    sh("spark3", "docker pause ollama")  # the owner's own state, before this project touches it
    try:
        before = inspected()
        act({"name": "ollama", "action": "stop"})
        assert inspected()["spark3"]["ollama"][0] == "exited"
        rollback_twice(before)
        assert inspected()["spark3"]["ollama"][0] == "paused"
    finally:
        sh("spark3", "docker unpause ollama", check=False)


def test_a_record_listing_a_container_twice_restores_its_first_before():
    # Records written before one entry per container was kept list each action with the state it found.
    before = inspected()
    sh("spark3", "docker pause comfyui && docker stop comfyui")
    old = [{"name": "comfyui", "action": "pause", "before": "running"},
           {"name": "comfyui", "action": "stop", "before": "paused"}]
    sh("spark3", f"mkdir -p $(dirname {RECORD}) && echo '{json.dumps(old)}' > {RECORD}", user="zurih")
    rollback_twice(before)
