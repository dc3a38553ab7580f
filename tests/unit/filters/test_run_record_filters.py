"""docker inspect's Config.Env as a dict (filter_plugins/run_record_filters.py)."""
import run_record_filters as rf


def test_env_list_splits_on_the_first_equals_only():
    assert rf.dsv41_docker_env(["A=1", "URL=http://x/?a=b", "EMPTY=", "BARE"]) == {
        "A": "1", "URL": "http://x/?a=b", "EMPTY": "", "BARE": ""}
    assert rf.dsv41_docker_env(None) == {}


def test_baseline_diff_declares_only_what_the_inventory_does_not_yet():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[3] / "inventory" / "common" / "launcher_baseline.yml").read_text()
    diff = rf.dsv41_baseline_diff(text, {"DSV41_AUTOTUNE_KEEP": 1}, {"MEM_FRACTION_STATIC": "0.95"})
    assert diff.startswith("--- a/inventory/common/launcher_baseline.yml")
    assert [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")] == [
        '+  DSV41_AUTOTUNE_KEEP: "1"']
    # declared already (as the inventory renders it): nothing to commit
    assert rf.dsv41_baseline_diff(text, {"DSV41_AUTOTUNE_KEEP": 1}, {"DSV41_AUTOTUNE_KEEP": "1"}) == ""
