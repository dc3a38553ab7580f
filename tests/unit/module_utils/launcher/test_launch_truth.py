"""The running containers against the launch predicted before the restart (module_utils/launcher/truth.py)."""
from ansible.module_utils.launcher import truth

IMAGE = {"Id": "sha256:ab", "Config": {"Env": ["PATH=/usr/local/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all",
                                                "LANG=C.UTF-8"]}}


def predicted(rank, host, **env):
    base = {"NODE_RANK": str(rank), "MASTER_ADDR": "10.0.0.1", "API_KEY": "***", "DSV41_CACHE_GIB": "0"}
    base.update(env)
    return {"name": "dsv41-head" if rank == 0 else "dsv41-worker", "host": host, "rank": rank, "env": base,
            "mounts": [{"source": "/home/zurih/dsv41-3x-spark/engram", "target": "/engram", "type": "bind",
                        "read_only": False},
                       {"source": "/srv/models", "target": "/models", "type": "bind", "read_only": True}]}


def running(rank, env=None, mounts=None, status="running", secret="sk-live-0123456789"):
    items = ["PATH=/usr/local/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "LANG=C.UTF-8",
             "NODE_RANK=%d" % rank, "MASTER_ADDR=10.0.0.1", "API_KEY=%s" % secret, "DSV41_CACHE_GIB=0"]
    for k, v in (env or {}).items():
        items = [i for i in items if not i.startswith(k + "=")] + ([] if v is None else ["%s=%s" % (k, v)])
    return {"Name": "/dsv41-head" if rank == 0 else "/dsv41-worker", "State": {"Status": status},
            "Config": {"Env": items},
            "Mounts": mounts if mounts is not None else [
                {"Type": "bind", "Source": "/home/zurih/dsv41-3x-spark/engram", "Destination": "/engram", "RW": True},
                {"Type": "bind", "Source": "/srv/models", "Destination": "/models", "RW": False}]}


def fleet(**by_rank):
    pred = {"containers": [predicted(0, "spark1"), predicted(1, "spark2"), predicted(2, "spark3")]}
    run = [{"rank": r, "host": "spark%d" % (r + 1), "container": by_rank.get("c%d" % r, running(r)), "image": IMAGE}
           for r in range(3)]
    return pred, run


def test_a_launch_as_predicted_has_no_difference():
    pred, run = fleet()
    assert truth.check_ranks(pred, run) == []


def test_image_env_is_not_the_launchs_unless_the_launch_changed_it():
    assert truth.compare(predicted(1, "spark2"), running(1, env={"LANG": "C"}), IMAGE) == [
        {"key": "env LANG", "predicted": "(absent)", "actual": "C"}]
    # the launch setting a key to the image's own value is the same container
    assert truth.compare(predicted(1, "spark2", LANG="C.UTF-8"), running(1), IMAGE) == []


def test_a_worker_that_got_another_value_names_rank_key_and_both_values():
    pred, run = fleet(c1=running(1, env={"DSV41_CACHE_GIB": "4"}))
    assert truth.check_ranks(pred, run) == [
        "rank 1 (spark2, dsv41-worker): env DSV41_CACHE_GIB predicted '0', actual '4'"]


def test_missing_and_extra_keys_and_mounts():
    mounts = [{"Type": "bind", "Source": "/home/zurih/dsv41-engram", "Destination": "/engram", "RW": True}]
    pred, run = fleet(c2=running(2, env={"MASTER_ADDR": None, "SGLANG_X": "1"}, mounts=mounts))
    assert truth.check_ranks(pred, run) == [
        "rank 2 (spark3, dsv41-worker): env MASTER_ADDR predicted '10.0.0.1', actual '(absent)'",
        "rank 2 (spark3, dsv41-worker): env SGLANG_X predicted '(absent)', actual '1'",
        "rank 2 (spark3, dsv41-worker): mount /engram predicted '/home/zurih/dsv41-3x-spark/engram', "
        "actual '/home/zurih/dsv41-engram'",
        "rank 2 (spark3, dsv41-worker): mount /models predicted '/srv/models (ro)', actual '(absent)'"]


def test_secrets_are_compared_masked_and_never_printed():
    pred, run = fleet(c0=running(0, env={"HF_TOKEN": "hf_abcdefghijkl", "NOTE": "key sk-live-0123456789"}))
    out = truth.check_ranks(pred, run)
    assert out == ["rank 0 (spark1, dsv41-head): env HF_TOKEN predicted '(absent)', actual '***'",
                   "rank 0 (spark1, dsv41-head): env NOTE predicted '(absent)', actual 'key ***'"]
    assert not any("sk-live" in line or "hf_abc" in line for line in out)


def test_a_rank_not_running_or_missing():
    pred, run = fleet(c1=running(1, status="exited"), c2=None)
    assert truth.check_ranks(pred, run) == [
        "rank 1 (spark2, dsv41-worker): container is exited, not running",
        "rank 2 (spark3, dsv41-worker): predicted container dsv41-worker is not there"]
    pred["containers"] = pred["containers"][:1]
    assert truth.check_ranks(pred, run)[0] == (
        "rank 1 (spark2, dsv41-worker): the launch predicted no container for this rank")


def test_the_filter_reads_the_registered_inspections_of_the_restart():
    import json
    import launch_filters as launch
    pred, run = fleet(c1=running(1, env={"DSV41_CACHE_GIB": "4"}), c2=None)
    hostvars = dict(("spark%d" % (r + 1), {"dsv41_rank": r}) for r in range(3))
    containers = {"results": [
        {"item": "spark1", "rc": 0, "stdout": json.dumps([run[0]["container"]])},
        {"item": "spark2", "rc": 0, "stdout": json.dumps([run[1]["container"]])},
        {"item": "spark3", "rc": 1, "stdout": "[]", "stderr": "Error: No such object: dsv41-worker"}]}
    images = {"results": [{"item": {"item": h}, "rc": 0, "stdout": json.dumps([IMAGE])} for h in ("spark1", "spark2")]}
    assert launch.dsv41_launch_truth(pred, containers, images, hostvars) == [
        "rank 1 (spark2, dsv41-worker): env DSV41_CACHE_GIB predicted '0', actual '4'",
        "rank 2 (spark3, dsv41-worker): predicted container dsv41-worker is not there"]
