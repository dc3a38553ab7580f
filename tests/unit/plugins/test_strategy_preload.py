"""strategy_plugins/dsv41_guarded.py: every filter and test plugin (the project's included) is loaded in the
controller process before the first worker forks, so no worker loads and compiles them again
(bench/bench_controller.py measures what that saves)."""
from pathlib import Path

from ansible.plugins.loader import filter_loader, test_loader
from modrun import load_script

ROOT = Path(__file__).resolve().parents[3]


def strategy():
    return load_script("dsv41_guarded_preload", ROOT / "strategy_plugins" / "dsv41_guarded.py")


def test_the_preload_fills_both_jinja_loaders_with_builtin_and_project_plugins():
    filter_loader.add_directory(str(ROOT / "filter_plugins"))   # as ansible.cfg's filter_plugins does
    # _cached_non_collection_wrappers is the loaders' own cache (private): what a forked worker inherits
    filter_loader._clear_caches()
    test_loader._clear_caches()
    assert not filter_loader._cached_non_collection_wrappers
    strategy()._preload_jinja_plugins()
    filters = filter_loader._cached_non_collection_wrappers
    assert {"to_json", "dsv41_stage_a_estimate", "dsv41_experiment_probe_plan"} <= set(filters)
    assert "version" in test_loader._cached_non_collection_wrappers


def test_the_project_config_polls_results_every_10_ms():
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.getfloat("defaults", "internal_poll_interval") == 0.01
    assert cfg.get("defaults", "strategy") == "dsv41_guarded"


def test_objects_the_controller_holds_are_frozen_before_the_workers_fork():
    import gc
    mod = strategy()
    # what the controller holds when a play starts (containers of containers: the collector tracks them)
    held = [{"result": [i]} for i in range(3)]
    gc.unfreeze()
    try:
        tracked = {id(o) for o in gc.get_objects()}
        assert all(gc.is_tracked(obj) and id(obj) in tracked for obj in held)
        mod._freeze_before_forks()
        # a collection in a forked worker no longer walks them: they are in no generation, only frozen
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(obj) in tracked for obj in held)
        assert gc.get_freeze_count() >= len(held)
    finally:
        gc.unfreeze()
