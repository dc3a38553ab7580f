"""The contention role's decisions (filter_plugins/contention_filters.py): refusals, record, rollback, tables."""
import contention_filters as cf

INVENTORY = [{"name": "grafana", "owner": "ops", "dispensable": True},
             {"name": "redis", "dispensable": True},
             {"name": "cadvisor", "owner": "ops"}]
REPORT = [{"name": "grafana", "state": "running"}, {"name": "redis", "state": "paused"},
          {"name": "cadvisor", "state": "running"}, {"name": "dsv41-worker", "state": "running"}]


def test_only_listed_owned_existing_non_serving_containers_may_be_paused_or_stopped():
    actions = [{"name": "grafana", "action": "pause"}, {"name": "grafana", "action": "remove"},
               {"name": "redis"}, {"name": "dsv41-worker", "action": "stop"}, {"name": "cadvisor", "action": "stop"},
               {"name": "redis", "action": "stop"}, {"name": "ghost", "action": "stop"}]
    inventory = INVENTORY + [{"name": "ghost", "owner": "ops", "dispensable": True}]
    assert cf.dsv41_contention_refusals(actions, inventory, REPORT, "dsv41-") == [
        "grafana: action must be pause or stop, got remove",
        "redis: action must be pause or stop, got none",
        "dsv41-worker serves the model",
        "cadvisor is not listed as dispensable in contention_containers",
        "redis has no owner in contention_containers",
        "ghost does not exist on this node",
    ]
    assert cf.dsv41_contention_refusals([{"name": "grafana", "action": "stop"}], INVENTORY, REPORT, "dsv41-") == []


def test_changes_record_the_state_before_each_changed_action():
    results = [{"item": {"name": "grafana", "action": "pause"}, "changed": True},
               {"item": {"name": "redis", "action": "pause"}, "changed": False},
               {"item": {"name": "cadvisor", "action": "stop"}, "skipped": True}]
    assert cf.dsv41_contention_changes(results, REPORT) == [{"name": "grafana", "action": "pause", "before": "running"}]


def test_record_keeps_the_state_before_the_first_change_and_every_action():
    earlier = [{"name": "grafana", "before": "running", "actions": ["pause"]},
               {"name": "redis", "action": "pause", "before": "running"},      # older one-entry-per-action form
               {"name": "redis", "action": "stop", "before": "paused"}]
    now = [{"name": "grafana", "action": "stop", "before": "paused"}, {"name": "web", "action": "pause", "before": "running"}]
    assert cf.dsv41_contention_record(earlier, now) == [
        {"name": "grafana", "before": "running", "actions": ["pause", "stop"]},
        {"name": "redis", "before": "running", "actions": ["pause", "stop"]},
        {"name": "web", "before": "running", "actions": ["pause"]},
    ]
    assert cf.dsv41_contention_record([], []) == []


def _inspect(name, before, now, rc=0):
    return {"item": {"name": name, "before": before}, "rc": rc, "stdout": now + "\n"}


def test_restore_steps_from_each_current_state_and_nothing_twice():
    results = [_inspect("a", "running", "paused"), _inspect("b", "running", "exited"),
               _inspect("c", "paused", "exited"), _inspect("d", "exited", "running"),
               _inspect("e", "running", "running"), _inspect("gone", "running", "", rc=1)]
    steps = cf.dsv41_contention_restore_steps(results)
    assert [(s["name"], s["verb"]) for s in steps] == [("a", "unpause"), ("b", "start"), ("c", "start"),
                                                       ("c", "pause"), ("d", "stop")]
    assert steps[0] == {"name": "a", "verb": "unpause", "now": "paused", "before": "running"}
    # After the steps ran, every container reads its recorded state: a second rollback does nothing.
    again = [_inspect(s["name"], s["before"], s["before"]) for s in steps]
    assert cf.dsv41_contention_restore_steps(again) == []


def test_not_restored_names_each_container_in_another_state():
    results = [_inspect("a", "running", "running"), _inspect("b", "running", "paused")]
    assert cf.dsv41_contention_not_restored(results) == ["b is paused, was running"]


def test_container_rows_fill_the_printable_columns():
    rows = cf.dsv41_contention_container_rows([
        {"name": "grafana", "owner": "ops", "cpu_percent": 0.5, "mem_bytes": 141 * 1048576 + 600000},
        {"name": "redis", "owner": None, "cpu_percent": None, "mem_bytes": None}])
    assert [(r["owner"], r["cpu_percent"], r["mem_human"]) for r in rows] == [("ops", 0.5, "142 MiB"),
                                                                            ("unknown", "-", "-")]
    assert rows[0]["name"] == "grafana"


def test_summary_rows_one_per_host():
    report = {"serving": ["dsv41-worker"], "non_serving_count": 19, "non_serving_running_count": 3,
              "non_serving_mem_bytes": 10 * 2 ** 30 + 2 ** 28, "display_manager": {"unit": "gdm3.service", "active": True},
              "default_target": "graphical.target", "memory": {"mem_available_gib": 88.5},
              "psi": {"some": {"avg60": 1.25}}, "load": {"load1": 0.52},
              "gpu_pollers": [{"interval_s": 2}, {"interval_s": 0.2}], "nv_err_events": {"count": 4}}
    quiet = dict(report, display_manager={"unit": None, "active": False}, psi=None, load=None, gpu_pollers=[])
    (row, row2) = cf.dsv41_contention_summary_rows(["spark3", "spark1"], {"spark3": {"contention_report": report},
                                                                          "spark1": {"contention_report": quiet}})
    assert row == {"host": "spark3", "serving": "dsv41-worker", "others": 19, "others_running": 3,
                   "others_mem": "10.25 GiB", "dm": "gdm3.service active", "target": "graphical.target",
                   "avail": "88.5 GiB", "psi": "1.25%", "load": 0.52, "pollers": "2,0.2", "nv_err": 4}
    assert (row2["dm"], row2["psi"], row2["load"], row2["pollers"]) == ("- inactive", "n/a", "-", "-")
