"""filter_plugins/launch_filters.py: which launcher settings move a rank's /engram, and the advice built on it."""
import launch_filters as launch


EFFECTS = {"ENGRAM_DIR": {"effect": True, "engram_ranks": ["0"]},
           "WORKER_ENGRAM_DIR": {"effect": True, "engram_ranks": ["1", "2"]},
           "WORKER_ENGRAM_DIR_SPARK2": {"effect": False, "engram_ranks": []}}


def test_settings_that_move_a_rank():
    assert launch.dsv41_engram_settings(EFFECTS, 1) == [{"key": "WORKER_ENGRAM_DIR", "ranks": ["1", "2"]}]
    assert launch.dsv41_engram_settings(EFFECTS, "0") == [{"key": "ENGRAM_DIR", "ranks": ["0"]}]
    assert launch.dsv41_engram_settings({}, 1) == []


def test_advice_offers_only_what_the_launcher_can_express():
    assert launch.dsv41_engram_advice(EFFECTS, [1, 0]) == [
        "rank 1: set WORKER_ENGRAM_DIR, which the launcher uses for ranks 1, 2 alike: the new directory must have "
        "room on each of them",
        "rank 0: set ENGRAM_DIR (this rank only)"]
    # a per-host key the launcher does not read is never offered
    assert "SPARK2" not in " ".join(launch.dsv41_engram_advice(EFFECTS, [1]))
    assert launch.dsv41_engram_advice({}, 2) == [
        "rank 2: no setting the launcher reads moves its /engram; only a change to the launcher itself can give it "
        "another destination"]
    assert launch.FilterModule().filters()["dsv41_engram_advice"] is launch.dsv41_engram_advice


def test_launch_lines_show_each_container_in_order():
    result = {"containers": [{"order": 1, "host": "spark2", "rank": 1, "name": "dsv41-worker", "image": "img",
                              "engram_source": "/e", "env": {"A": "1", "API_KEY": "***"}},
                             {"order": 2, "host": "spark1", "rank": 0, "name": "dsv41-head", "image": "img",
                              "engram_source": None, "env": {}}]}
    assert launch.dsv41_launch_lines(result) == [
        "1. spark2 rank 1 dsv41-worker (img): /engram <- /e", "   A=1 API_KEY=***",
        "2. spark1 rank 0 dsv41-head (img): /engram <- nothing", "   "]


def test_worker_homes_keep_what_every_worker_of_a_user_has():
    from launch_filters import dsv41_worker_homes
    found = {"results": [
        {"item": "spark2", "files": [{"path": "/home/zurih/.ssh", "isdir": True},
                                     {"path": "/home/zurih/.ssh/authorized_keys", "isdir": False},
                                     {"path": "/home/zurih/nccl-2.30.7", "isdir": True},
                                     {"path": "/home/zurih/NewModels/DeepSeek-V4.1-Flash/config.json", "isdir": False}]},
        {"item": "spark3", "files": [{"path": "/home/zurih/.ssh", "isdir": True},
                                     {"path": "/home/zurih/.ssh/authorized_keys", "isdir": False},
                                     {"path": "/home/zurih/NewModels/DeepSeek-V4.1-Flash/config.json", "isdir": False}]},
        {"item": "spark4", "skipped": True},
        {"item": "spark5", "failed": True, "msg": "unreachable"}]}
    hostvars = {h: {"ansible_user": "zurih"} for h in ("spark2", "spark3", "spark4", "spark5")}
    # nccl-2.30.7 only on spark2: left out, so no worker's test of it is answered yes by mistake
    assert dsv41_worker_homes(found, hostvars) == {"zurih": [
        ".ssh/", ".ssh/authorized_keys", "NewModels/DeepSeek-V4.1-Flash/config.json"]}
    assert dsv41_worker_homes({"results": []}, hostvars) == {}


def test_worker_homes_from_one_find_per_host():
    from launch_filters import dsv41_worker_homes
    per_host = {"spark2": {"files": [{"path": "/home/zurih/nccl-2.30.7", "isdir": True}]},
                "spark3": {"files": [{"path": "/home/zurih/nccl-2.30.7", "isdir": True}]}}
    hostvars = {"spark2": {"ansible_user": "zurih"}, "spark3": {"ansible_user": "zurih"}}
    assert dsv41_worker_homes(per_host, hostvars) == {"zurih": ["nccl-2.30.7/"]}


HOSTVARS = {"spark1": {"dsv41_rank": 0}, "spark2": {"dsv41_rank": 1}, "spark3": {"dsv41_rank": "2"}}


def test_the_image_each_rank_runs_next_is_the_predicted_container_s_matched_by_rank():
    prediction = {"containers": [{"rank": 1, "host": "10.0.0.2", "image": "dsv41-sglang:canary"},
                                 {"rank": 0, "host": "spark1", "image": "dsv41-sglang:tp3"},
                                 {"rank": None, "host": "spark1", "image": "nfs-exporter:1"}]}
    hosts = ["spark1", "spark2", "spark3"]
    assert launch.dsv41_predicted_images(prediction, hosts, HOSTVARS, "dsv41-sglang:tp3") == {
        "spark1": "dsv41-sglang:tp3", "spark2": "dsv41-sglang:canary", "spark3": "dsv41-sglang:tp3"}
    # no prediction (check mode): the .env's image on every rank
    assert set(launch.dsv41_predicted_images({}, hosts, HOSTVARS, "dsv41-sglang:tp3").values()) == {"dsv41-sglang:tp3"}


def test_the_image_id_each_rank_runs_is_read_from_its_inspected_container():
    running = {"results": [{"item": "spark1", "rc": 0, "stdout": '[{"Image": "sha256:aaa", "Name": "/dsv41-head"}]'},
                           {"item": "spark2", "rc": 1, "stdout": ""},
                           {"item": "spark3", "skipped": True}]}
    assert launch.dsv41_running_image_ids(running) == {"spark1": "sha256:aaa"}
    assert launch.dsv41_running_image_ids({}) == {}
