"""Inventory validation, launcher .env parsing and writing, redaction (filter_plugins/fleet_filters.py)."""
import copy

import pytest

import fleet_filters as fleet


GOOD_HOSTVARS = {
    "spark1": {"dsv41_rank": 0, "dsv41_login_user": "mia", "dsv41_launcher_dir": "/home/mia/dsv41-3x-spark",
               "dsv41_engram_dir": "/home/mia/dsv41-engram"},
    "spark2": {"dsv41_rank": 1, "dsv41_login_user": "zurih", "dsv41_launcher_dir": "/home/zurih/dsv41-3x-spark",
               "dsv41_engram_dir": "/home/zurih/dsv41-3x-spark/engram"},
    "spark3": {"dsv41_rank": 2, "dsv41_login_user": "zurih", "dsv41_launcher_dir": "/home/zurih/dsv41-3x-spark",
               "dsv41_engram_dir": "/home/zurih/dsv41-3x-spark/engram"},
}
for hv in GOOD_HOSTVARS.values():
    hv.update({"dsv41_tp_size": 3, "dsv41_checkpoint_dir": "/srv/models/DeepSeek-V4.1-Flash",
               "dsv41_head_container": "dsv41-head", "dsv41_worker_container": "dsv41-worker",
               "dsv41_fleet_name": "production"})
GOOD_GROUPS = {"dsv41_ranks": ["spark1", "spark2", "spark3"], "head": ["spark1"], "workers": ["spark2", "spark3"]}


def errors(mutate=None, groups=None):
    hostvars = copy.deepcopy(GOOD_HOSTVARS)
    if mutate:
        mutate(hostvars)
    return fleet.dsv41_inventory_errors(hostvars, groups or GOOD_GROUPS)


def test_the_report_fleet_is_valid():
    assert errors() == []


def test_two_hosts_at_rank_one_are_both_named():
    found = errors(lambda hv: hv["spark3"].update(dsv41_rank=1))
    assert "rank 1 is held by more than one host: spark2, spark3" in found
    assert "no host holds rank 2" in found


def test_head_must_be_rank_zero():
    found = errors(lambda hv: (hv["spark1"].update(dsv41_rank=2), hv["spark3"].update(dsv41_rank=0)))
    assert "spark1: is the head but dsv41_rank=2 (the head is rank 0)" in found


def test_exactly_one_head():
    groups = dict(GOOD_GROUPS, head=["spark1", "spark2"], workers=["spark3"])
    found = errors(groups=groups)
    assert any(e.startswith("group 'head' must hold exactly one host, has 2: spark1, spark2") for e in found)


def test_tp_size_must_equal_host_count():
    found = errors(lambda hv: [h.update(dsv41_tp_size=4) for h in hv.values()])
    assert "dsv41_tp_size=4 but 'dsv41_ranks' has 3 hosts (spark1, spark2, spark3)" in found


def test_rank_outside_range():
    found = errors(lambda hv: hv["spark3"].update(dsv41_rank=3))
    assert "spark3: dsv41_rank=3 is outside 0..2" in found
    assert "no host holds rank 2" in found


@pytest.mark.parametrize("var,value,message", [
    ("dsv41_rank", "1", "spark2: dsv41_rank='1' is not a non-negative integer"),
    ("dsv41_rank", True, "spark2: dsv41_rank=True is not a non-negative integer"),
    ("dsv41_login_user", "Zu rih", "spark2: dsv41_login_user='Zu rih' is not a login name like 'mia'"),
    ("dsv41_engram_dir", "engram", "spark2: dsv41_engram_dir='engram' is not an absolute path"),
    ("dsv41_engram_dir", "/home/zurih/../mia", "spark2: dsv41_engram_dir='/home/zurih/../mia' is not an absolute path"),
    ("dsv41_launcher_dir", None, "spark2: dsv41_launcher_dir=None is not an absolute path"),
])
def test_mistyped_variables_are_named(var, value, message):
    assert message in errors(lambda hv: hv["spark2"].update({var: value}))


def test_missing_variable_is_named():
    found = errors(lambda hv: hv["spark3"].pop("dsv41_engram_dir"))
    assert "spark3: dsv41_engram_dir is not set (want an absolute path)" in found


@pytest.mark.parametrize("value", ["..", ".", "../../etc", "lab/x", "Lab", "lab tp4", "-lab", "", 3, None,
                                   "drift", "experiments", "adopt-spark1", "x" * 64])
def test_a_fleet_name_that_is_not_one_safe_directory_under_records_is_refused_naming_it(value):
    found = errors(lambda hv: [h.update(dsv41_fleet_name=value) for h in hv.values()])
    # one line per host, naming the value (the rule: lowercase letters, digits, '-', '_'; no old layout name)
    assert [e for e in found if e.startswith("spark1: ")] == [found[0]]
    assert found[0].startswith("spark1: dsv41_fleet_name=%r is " % (value,)), found


@pytest.mark.parametrize("value", ["lab", "lab-tp4", "production", "tp4_example", "0fleet"])
def test_plain_fleet_names_are_valid(value):
    assert errors(lambda hv: [h.update(dsv41_fleet_name=value) for h in hv.values()]) == []


def test_the_fleet_name_is_required_and_one_for_the_whole_fleet():
    assert "spark2: dsv41_fleet_name is not set" in errors(lambda hv: hv["spark2"].pop("dsv41_fleet_name"))[0]
    found = errors(lambda hv: hv["spark3"].update(dsv41_fleet_name="lab"))
    assert found == ["hosts disagree on dsv41_fleet_name: 'lab', 'production' (one fleet, one value)"]


def test_the_lab_flag_is_a_boolean_the_same_on_every_rank():
    assert errors(lambda hv: [h.update(dsv41_fleet_is_lab=True) for h in hv.values()]) == []
    found = errors(lambda hv: [h.update(dsv41_fleet_is_lab="yes") for h in hv.values()])
    assert found[0].startswith("spark1: dsv41_fleet_is_lab='yes' is not a boolean")
    # absent counts as false: one host saying true makes the fleet disagree with itself
    assert errors(lambda hv: hv["spark1"].update(dsv41_fleet_is_lab=True)) == [
        "hosts disagree on dsv41_fleet_is_lab: False, True (one fleet, one value)"]


def test_host_in_neither_head_nor_workers():
    groups = dict(GOOD_GROUPS, workers=["spark2"])
    assert "spark3: is in 'dsv41_ranks' but in neither 'head' nor 'workers'" in errors(groups=groups)


def test_four_node_fleet_is_an_inventory_change():
    def add_spark4(hv):
        hv["spark4"] = dict(hv["spark3"], dsv41_rank=3)
        for h in hv.values():
            h["dsv41_tp_size"] = 4
    groups = {"dsv41_ranks": ["spark1", "spark2", "spark3", "spark4"], "head": ["spark1"],
              "workers": ["spark2", "spark3", "spark4"]}
    assert errors(add_spark4, groups) == []


def test_env_filters_use_the_hosts_launcher_parser():
    # The .env filters are the code of module_utils/envfile/parse.py and render.py, whose cases (against bash)
    # are in test_launcher_env.py; here: the filters reach it and give its answers on the controller.
    text = 'WORKER_USER=zurih\nexport API_KEY="sk-secret"\nWORKER_ENGRAM_DIR_SPARK2=/data/dsv41-engram\n'
    assert fleet.dsv41_env_parse(text) == {"WORKER_USER": "zurih", "API_KEY": "sk-secret",
                                           "WORKER_ENGRAM_DIR_SPARK2": "/data/dsv41-engram"}
    from ansible.module_utils.envfile import parse as envfile_parse, render as envfile_render
    assert fleet.parse is envfile_parse and fleet.render is envfile_render     # the very modules the hosts run


def test_env_filters_refuse_what_is_not_data_naming_the_line():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="line 2: \\$\\( ... \\) runs a command"):
        fleet.dsv41_env_parse("A=1\nB=$(touch /tmp/x)\n")
    with pytest.raises(AnsibleFilterError, match="line 1: a command word"):
        fleet.dsv41_env_parse("touch /tmp/x\n")


def test_env_render_filter_is_the_one_writer():
    text = fleet.dsv41_env_render({"MODEL_PATH": "$(touch /tmp/x)", "TP_SIZE": 3}, "sk-k'ey", ["a\nb"])
    assert text.splitlines()[3:] == ["MODEL_PATH='$(touch /tmp/x)'", "TP_SIZE=3", "API_KEY='sk-k'\\''ey'",
                                     "# a", "# b"]
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="'FOO;x' is not a shell variable name"):
        fleet.dsv41_env_render({"FOO;x": "1"})


def test_redact_filter():
    env = {"hf_token": "hf_abcdef", "OPENAI_APIKEY": 'sk-"x\\y', "MODEL_PATH": "/m", "URL": "http://k:sk-api-1@h"}
    assert fleet.dsv41_redact(env, ["sk-api-1", ""]) == {"hf_token": "***", "OPENAI_APIKEY": "***",
                                                          "MODEL_PATH": "/m", "URL": "http://k:***@h"}
    assert fleet.dsv41_is_secret("DB_PASSWORD2") and not fleet.dsv41_is_secret("MAX_TOTAL_TOKENS")


def test_meminfo_and_gib():
    mem = fleet.dsv41_meminfo("MemTotal: 100 kB\nMemAvailable:    3219128 kB\nHugePages_Total: 0\n")
    assert mem["MemAvailable"] == 3219128 * 1024
    assert fleet.dsv41_bytes_gib(mem["MemAvailable"], 2) == 3.07
    assert fleet.dsv41_bytes_gib(67_586_019_080) == 62.944


def test_table_aligns_columns():
    lines = fleet.dsv41_table([{"a": "x", "b": 12345}], [("a", "host"), ("b", "n")])
    assert lines == ["host  n", "----  -----", "x     12345"]


def test_ansible_user_must_be_the_login_user():
    found = errors(lambda hv: hv["spark2"].update(ansible_user="root"))
    assert "spark2: ansible_user='root' differs from dsv41_login_user='zurih'" in found


def test_meminfo_gib_reads_each_host_s_slurped_meminfo():
    import base64
    slurped = base64.b64encode(b"MemTotal:       127535604 kB\nMemAvailable:    66002000 kB\n").decode()
    no_field = base64.b64encode(b"MemTotal:       127535604 kB\n").decode()
    got = fleet.dsv41_meminfo_gib({"spark1": slurped, "spark2": no_field, "spark3": ""})
    assert got == {"spark1": round(66002000 * 1024 / (1 << 30), 3), "spark2": None, "spark3": None}
    assert fleet.dsv41_meminfo_gib({"spark1": slurped}, "MemTotal") == {"spark1": 121.627}
    assert fleet.FilterModule().filters()["dsv41_meminfo_gib"] is fleet.dsv41_meminfo_gib
