"""docker inspect's Config.Env as a dict (filter_plugins/run_record_filters.py)."""
import run_record_filters as rf


def test_env_list_splits_on_the_first_equals_only():
    assert rf.dsv41_docker_env(["A=1", "URL=http://x/?a=b", "EMPTY=", "BARE"]) == {
        "A": "1", "URL": "http://x/?a=b", "EMPTY": "", "BARE": ""}
    assert rf.dsv41_docker_env(None) == {}
