"""filter_plugins/container_env_filters.py: the logic the container_env role's tasks use."""
import pytest

import container_env_filters as F
from ansible.module_utils import _internal as module_utils_internal


@pytest.fixture(autouse=True)
def stay_a_module_process():
    """Importing AnsibleFilterError (controller code) marks the process as the controller; module tests
    run later in the same pytest process must still see module behaviour (as tests/unit/filters/test_fleet_filters.py)."""
    was = module_utils_internal.is_controller
    yield
    module_utils_internal.is_controller = was


def test_forward_request_asks_once_per_key_with_the_declared_value():
    settings = {"A": "1", "B_2": 0, "C": "conf:0.1", "D": "x"}
    assert F.dsv41_forward_request(settings, {"head": ["A", "B_2"], "worker": ["C", "A"]}) == \
        {"A": "1", "B_2": "0", "C": "conf:0.1"}
    assert F.dsv41_forward_request(settings, {"head": [], "worker": []}) == {}
    assert F.dsv41_forward_request(settings, None) == {}


def test_forward_request_adds_keys_that_stay_unset_where_a_path_lacks_them():
    lists = {"head": ["A", "DSV41_DRAFT_TAU"], "worker": ["A"]}
    # unset is AUTO for folded sampling: requested with an empty value, the managed forward passes nothing
    assert F.dsv41_forward_request({"A": "1"}, {"head": [], "worker": []}, lists,
                                   ["SGLANG_DSPARK_FOLDED_SAMPLING", "A"]) == {"SGLANG_DSPARK_FOLDED_SAMPLING": ""}
    # declared null (removed from the .env) counts as unset; forwarded on one path only: still requested
    assert F.dsv41_forward_request({"DSV41_DRAFT_TAU": None}, {"head": [], "worker": []}, lists,
                                   ["DSV41_DRAFT_TAU"]) == {"DSV41_DRAFT_TAU": ""}
    # forwarded on both paths already: nothing to do
    assert F.dsv41_forward_request({}, {"head": [], "worker": []}, {"head": ["X"], "worker": ["X"]}, ["X"]) == {}
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match=r"unset_keys: '\$\(id\)' is not a shell variable name"):
        F.dsv41_forward_request({}, {}, lists, ["$(id)"])


@pytest.mark.parametrize("bad", ["A B", "$(id)", "X)", "", 3])
def test_forward_request_refuses_what_is_not_a_name(bad):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="unforwarded.head: .* is not a shell variable name"):
        F.dsv41_forward_request({"OK": "1"}, {"head": ["OK", bad], "worker": []})


def test_forward_request_refuses_a_key_nothing_declares():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="names no declared setting: GHOST"):
        F.dsv41_forward_request({"OK": "1"}, {"head": ["OK"], "worker": ["GHOST"]})


def test_null_keys_are_the_removals_in_order():
    assert F.dsv41_null_keys({"A": None, "B": 0, "C": "", "D": None}) == ["A", "D"]
    assert F.dsv41_null_keys({}) == [] and F.dsv41_null_keys(None) == []


def test_report_names_kept_and_removed_keys():
    assert F.dsv41_env_report({"changes": []}) == ["no change: the fleet runs exactly the declared settings"]
    lines = F.dsv41_env_report({"changes": ["A: 1 -> 2"], "kept_undeclared": ["HEAD_IP", "HCA_LIST"],
                                "removed": ["OLD"], "removed_stale": ["DSV41_AUTOTUNE_KEEP"]})
    assert lines[0] == "A: 1 -> 2"
    assert lines[1].startswith("kept 2 key(s) the inventory does not declare") and lines[1].endswith("HEAD_IP, HCA_LIST")
    assert lines[2] == "removed, written by an earlier run and no longer declared: DSV41_AUTOTUNE_KEEP"
    assert lines[3] == "removed as listed in container_env_remove_keys: OLD"


def test_filters_are_registered():
    assert set(F.FilterModule().filters()) == {"dsv41_forward_request", "dsv41_null_keys", "dsv41_env_report"}
