"""Stage A's ways out for a rank short of space: the foreign-file survey of engram_plan (identified exactly as
engram_relocate identifies what it may move), the options and their free-space arithmetic with the report's
figures, the operator's choice, the filters that carry them to the play, and the module options the
relocation in stage A uses (create_dirs, bandwidth_limit, dst_active_dir, restore per source host)."""
import json
import os
import shlex
import sys
import time

import pytest

import engram_pack_filters as pf
import engram_plan
import engram_relocate as relocate_module
from modrun import run_module
from test_engram_relocate import (DST, FULL_ROWS, MAGIC, REPORT_TP2_BYTES, SRC, Hosts, distinct_hosts,  # noqa: F401
                                  fake_ssh, fleet, sha256_of, ssh_log, write_shard)
from ansible.module_utils.engram import foreign as engram_foreign, choice as pack_choice, options as pack_options
from ansible.module_utils.engram.relocate_plan import copy_need, plan_move
from ansible.module_utils.engram.relocate_runner import RelocateError

REPORT_FREE = 64906600448
REPORT_NEED = 67586019080
MARGIN = 2 * 2 ** 30
REPORT_DEFICIT = 4826902280
TP2_SIZES = {layer: 4096 + (rows - rows // 2) * 264 for layer, rows in FULL_ROWS.items()}
PREFIX = "ansible-playbook stage_a_pack.yml -i inventory/lab"


# --------------------------------------------------------------------------- the survey (engram_plan)

@pytest.fixture
def node(tmp_path):
    """One node's home: the active Engram destination and the old TP2 shards beside it (same filesystem)."""
    home = tmp_path / "home" / "zurih"
    dest, old = home / "dsv41-3x-spark" / "engram", home / "dsv41-engram"
    for d in (dest, old):
        d.mkdir(parents=True)
    shards = {}
    for layer, rows in ((1, 30001), (14, 20003)):
        path = str(old / ("engram-l%d-r1of2.bin" % layer))
        shards[path] = write_shard(path, layer, 1, 2, rows, seed=layer)
    return {"home": str(home), "dest": str(dest), "old": str(old), "shards": shards}


def test_survey_lists_foreign_shards_identified_as_engram_relocate_does(node):
    bad = os.path.join(node["old"], "engram-l1-r0of2.bin")
    write_shard(bad, 1, 1, 2, 3000)                                  # rank 1's rows under rank 0's name
    own = os.path.join(node["old"], "engram-l1-r1of3.bin")
    write_shard(own, 1, 1, 3, 3000)                                  # the fleet's own TP size, elsewhere
    odd = os.path.join(node["old"], "engram-old.bin")
    open(odd, "wb").write(b"x" * 10)                                 # named like a shard, not of the form
    link = os.path.join(node["home"], "engram-l14-r0of2.bin")
    os.symlink(next(iter(node["shards"])), link)
    inside = os.path.join(node["dest"], "engram-l1-r0of2.bin")
    write_shard(inside, 1, 0, 2, 3000)                               # in the destination: not searched
    open(os.path.join(node["old"], "notes.txt"), "w").write("not named like a shard")
    got = engram_foreign.survey(node["dest"], 3, [node["home"]])
    by = {f["path"]: f for f in got["foreign"]}
    assert set(by) == set(node["shards"]) | {bad, own, odd, link}
    for path in node["shards"]:
        f = by[path]
        assert f["identified"] is True and "reason" not in f and (f["tp_size"], f["rank"]) == (2, 1)
        assert f["size"] == os.path.getsize(path) and f["allocated_bytes"] == min(f["size"], os.stat(path).st_blocks * 512)
    # The same files, judged by engram_relocate's own plan: the same verdicts, the same words.
    runner = Hosts(ssh_executable="/bin/false")
    plan = plan_move(sorted(by), None, None, "/nonexistent-dest", node["dest"], 3, runner)
    refused = {f["src_path"]: f["reason"] for f in plan["files"] if f["verdict"] == "refused"}
    assert refused == {p: f["reason"] for p, f in by.items() if not f["identified"]}
    assert "header rows [1500, 3000) are not rank 0 of 2's rows" in by[bad]["reason"]
    assert "fleet's own TP size (of3)" in by[own]["reason"] and "is a symlink" in by[link]["reason"]
    assert "is not named engram-l{layer}-r{rank}of{tp}.bin" in by[odd]["reason"]
    assert got["foreign_search"] == {"directories": [{"path": node["home"], "searched": True}], "depth": 4,
                                     "truncated": False, "max_entries": engram_foreign.MAX_ENTRIES}


def test_survey_depth_budget_and_other_filesystems(node, tmp_path):
    deep = os.path.join(node["home"], "a", "b", "c", "d", "e")
    os.makedirs(deep)
    write_shard(os.path.join(deep, "engram-l1-r0of2.bin"), 1, 0, 2, 3000)
    assert len(engram_foreign.survey(node["dest"], 3, [node["home"]])["foreign"]) == 2  # level 5 is below depth 4
    assert len(engram_foreign.survey(node["dest"], 3, [node["home"]], depth=5)["foreign"]) == 3
    cut = engram_foreign.survey(node["dest"], 3, [node["home"]], max_entries=2)
    assert cut["foreign_search"]["truncated"] is True
    missing = engram_foreign.survey(node["dest"], 3, [str(tmp_path / "nobody")])
    assert missing["foreign"] == [] and missing["foreign_search"]["directories"][0]["searched"] is False
    # A file on another filesystem than the destination frees nothing there: /dev/shm is a tmpfs.
    if os.path.isdir("/dev/shm") and os.stat("/dev/shm").st_dev != os.stat(node["dest"]).st_dev:
        other = engram_foreign.survey("/dev/shm", 3, [node["home"]])
        assert other["foreign"] == []


def test_rooms_measure_existing_and_missing_directories(node, tmp_path):
    rooms = [node["old"], os.path.join(node["home"], "dsv41-engram-archive", "x"), node["dest"] + "/sub",
             str(tmp_path / "file"), "/dev/shm/dsv41-archive"]
    open(rooms[3], "w").write("x")
    got = {r["path"]: r for r in engram_foreign.survey(node["dest"], 3, [], rooms)["rooms"]}
    assert got[rooms[0]]["exists"] and got[rooms[0]]["same_filesystem"] and got[rooms[0]]["problem"] is None
    missing = got[rooms[1]]
    assert missing["exists"] is False and missing["measured_at"] == node["home"] and missing["free_bytes"] > 0
    assert got[rooms[2]]["problem"] == "lies in the active Engram directory"
    assert got[rooms[3]]["problem"] == "is a regular, not a directory"
    if os.stat("/dev/shm").st_dev != os.stat(node["dest"]).st_dev:
        assert got[rooms[4]]["same_filesystem"] is False


@pytest.mark.parametrize("check_mode", [False, True])
def test_engram_plan_module_returns_foreign_and_rooms(node, tmp_path, check_mode):
    import ckpt_factory
    ckpt = ckpt_factory.make_checkpoint(str(tmp_path / "c"), rows={1: 4099, 14: 3001})["dir"]
    before = sorted(os.listdir(node["old"]))
    result = run_module(engram_plan.main, {"checkpoint": ckpt, "dest": node["dest"], "rank": 1, "tp_size": 3,
                                           "foreign_search": [node["home"]], "rooms": [node["home"] + "/archive"]},
                        check_mode=check_mode)
    assert result.get("failed") is not True, result
    assert result["changed"] is False and sorted(f["path"] for f in result["foreign"]) == sorted(node["shards"])
    assert result["rooms"][0]["exists"] is False and result["rooms"][0]["same_filesystem"] is True
    assert sorted(os.listdir(node["old"])) == before and os.listdir(node["dest"]) == []
    plain = run_module(engram_plan.main, {"checkpoint": ckpt, "dest": node["dest"], "rank": 1, "tp_size": 3})
    assert plain["foreign"] == [] and plain["rooms"] == []
    bad = run_module(engram_plan.main, {"checkpoint": ckpt, "dest": node["dest"], "rank": 1, "tp_size": 3,
                                        "foreign_depth": -1})
    assert bad["failed"] is True and "foreign_depth must be >= 0, got -1" in bad["msg"]


# --------------------------------------------------------------------------- the options, the report's figures

def _plan(free, to_write, foreign=(), rooms=(), reclaimable=0):
    deficit = max(0, to_write + MARGIN - free - reclaimable)
    return {"free_bytes": free, "to_write_bytes": to_write, "required_bytes": to_write, "margin_bytes": MARGIN,
            "reclaimable_bytes": reclaimable, "fits": deficit == 0, "deficit_bytes": deficit,
            "foreign": list(foreign), "rooms": list(rooms)}


def _tp2(path_dir="/home/zurih/dsv41-engram"):
    return [{"path": "%s/engram-l%d-r1of2.bin" % (path_dir, layer), "size": size, "allocated_bytes": size,
             "data_bytes": size, "extents": 1, "identified": True, "layer": layer, "rank": 1, "tp_size": 2}
            for layer, size in sorted(TP2_SIZES.items())]


def _room(path, free, same):
    return {"path": path, "exists": False, "free_bytes": free, "block": 4096, "same_filesystem": same,
            "problem": None, "measured_at": os.path.dirname(path)}


def report_fleet(spark3_free=481036337152):
    """The report's fleet: spark2 short by 4,826,902,280 with its TP2 shards beside the destination; spark1
    and spark3 with room (their archives on their Engram filesystems); spark2's spare volume /data."""
    rank_need = {0: 67586016968, 1: REPORT_NEED, 2: 67586024360}
    s1 = _room("/home/mia/dsv41-engram-archive", 412316860416, True)
    s2 = [_room("/home/zurih/dsv41-engram-archive", REPORT_FREE, True), _room("/data/dsv41-engram-archive", 256 * 2 ** 30, False)]
    s3 = _room("/home/zurih/dsv41-engram-archive", spark3_free, True)
    return [
        {"host": "spark1", "rank": 0, "target": None, "dest": "/home/mia/dsv41-engram",
         "plan": _plan(412316860416, rank_need[0], rooms=[s1]), "archive": s1, "spare": []},
        {"host": "spark2", "rank": 1, "target": "zurih@spark2", "dest": "/home/zurih/dsv41-3x-spark/engram",
         "plan": _plan(REPORT_FREE, REPORT_NEED, _tp2(), s2), "archive": s2[0], "spare": s2[1:]},
        {"host": "spark3", "rank": 2, "target": "zurih@spark3", "dest": "/home/zurih/dsv41-3x-spark/engram",
         "plan": _plan(spark3_free, rank_need[2], rooms=[s3]), "archive": s3, "spare": []},
    ]


def test_report_figures():
    assert sum(TP2_SIZES.values()) == REPORT_TP2_BYTES
    assert report_fleet()[1]["plan"]["deficit_bytes"] == REPORT_DEFICIT


def test_options_for_spark2_with_their_free_space_outcome_and_commands():
    opts = pack_options.options(report_fleet(), PREFIX)
    assert [(o["kind"], o.get("to")) for o in opts] == [("host", "spark3"), ("host", "spark1"), ("volume", "spark2"),
                                                       ("delete", None)]
    files = ["/home/zurih/dsv41-engram/engram-l1-r1of2.bin", "/home/zurih/dsv41-engram/engram-l14-r1of2.bin"]
    for o in opts:
        # Moving or deleting the TP2 shards leaves exactly the free space plus what they occupy: it fits.
        assert o["files"] == files and o["freed_bytes"] == REPORT_TP2_BYTES
        assert o["free_after_bytes"] == REPORT_FREE + REPORT_TP2_BYTES == 166285625104
        assert o["fits_after"] is True and o["deficit_after_bytes"] == 0 and o["possible"] is True
    spark3 = opts[0]
    need = sum(copy_need({"size": s, "data_bytes": s, "extents": 1, "allocated": s}, 4096) for s in TP2_SIZES.values())
    # each file rounded up to whole 4 KiB blocks, plus 0.1% for the filesystem's block maps
    assert spark3["need_bytes"] == need == sum(-(-s // 4096) * 4096 + s // 1024 for s in TP2_SIZES.values())
    assert spark3["dst_margin_bytes"] == 67586024360 + MARGIN and spark3["dst_own_pack"] is True
    assert spark3["dst_free_after_bytes"] == 481036337152 - need and spark3["dst_fits"] is True
    assert spark3["command"] == (
        PREFIX + " -e maintenance_window=true -e '{\"engram_relocate\": {\"to\": \"spark3\", \"files\": {\"spark2\": "
        "[\"/home/zurih/dsv41-engram/engram-l1-r1of2.bin\", \"/home/zurih/dsv41-engram/engram-l14-r1of2.bin\"]}}}'")
    assert json.loads(shlex.split(spark3["command"])[-1]) == {"engram_relocate": {"to": "spark3",
                                                                                 "files": {"spark2": files}}}
    volume = opts[2]
    assert volume["dest_dir"] == "/data/dsv41-engram-archive" and volume["dst_margin_bytes"] == MARGIN
    assert json.loads(shlex.split(volume["command"])[-1])["engram_relocate"]["dest_dir"] == "/data/dsv41-engram-archive"
    delete = opts[3]
    assert delete["hash_command"] == "on spark2: sha256sum " + " ".join(files)
    assert json.loads(shlex.split(delete["command"])[-1]) == {"engram_delete": {"spark2": [
        {"path": files[0], "sha256": "<sha256 of engram-l1-r1of2.bin>"},
        {"path": files[1], "sha256": "<sha256 of engram-l14-r1of2.bin>"}]}}
    lines = pack_options.option_lines(opts, ["rank 1: set WORKER_ENGRAM_DIR, ..."])
    assert lines[0].startswith("spark2 (rank 1), 64,906,600,448 free, short by 4,826,902,280: relocate 2 file(s) "
                               "(101,379,024,656 bytes) to spark3:/home/zurih/dsv41-engram-archive -> "
                               "166,285,625,104 free after (fits); spark3 keeps ")
    assert lines[1] == "    " + spark3["command"]
    assert "    1. on spark2: sha256sum " in "\n".join(lines) and lines[-1].startswith("another destination")


def test_a_destination_without_room_for_the_copies_and_its_own_pack_is_not_offered():
    opts = pack_options.options(report_fleet(spark3_free=150 * 10 ** 9), PREFIX)
    spark3 = next(o for o in opts if o.get("to") == "spark3")
    assert spark3["possible"] is False and spark3["dst_fits"] is False
    assert spark3["why_not"].startswith("spark3: /home/zurih/dsv41-engram-archive has 150,000,000,000 bytes free, "
                                        "the copies need ")
    assert "(its own pack still to write + margin)" in spark3["why_not"]
    assert [o["to"] for o in opts if o["kind"] == "host"] == ["spark1", "spark3"]  # the possible one first


def test_a_rank_without_foreign_files_gets_no_relocation():
    fleet = report_fleet()
    fleet[1]["plan"]["foreign"] = [dict(f, identified=False, reason="has no shard header") for f in _tp2()]
    opts = pack_options.options(fleet, PREFIX)
    assert [o["kind"] for o in opts] == ["none"] and "no identified foreign Engram file" in opts[0]["why_not"]


# --------------------------------------------------------------------------- the operator's choice

def _choice(to="spark3", files=None, **extra):
    files = files or {"spark2": [f["path"] for f in _tp2()]}
    return dict({"to": to, "files": files}, **extra)


def test_chosen_relocation_is_counted_on_both_sides():
    fleet = report_fleet()
    choice = pack_choice.parse_choice(_choice(), None, fleet)
    assert choice["errors"] == [] and len(choice["moves"]) == 1
    move = choice["moves"][0]
    assert move["src_target"] == "zurih@spark2" and move["dst_target"] == "zurih@spark3"
    assert move["dest_dir"] == "/home/zurih/dsv41-engram-archive" and move["same_filesystem"] is True
    assert move["active_dir"] == move["dst_active_dir"] == "/home/zurih/dsv41-3x-spark/engram"
    assert move["margin_bytes"] == 67586024360 + MARGIN
    view = pack_choice.outlook(fleet, choice)
    assert view["spark2"]["free_after_bytes"] == REPORT_FREE + REPORT_TP2_BYTES and view["spark2"]["fits_after"]
    assert view["spark2"]["verdict"] == "fits after relocating 2 file(s) (+101,379,024,656 bytes)"
    assert view["spark3"]["taken_bytes"] == move["need_bytes"] and view["spark3"]["fits_after"]
    assert view["spark3"]["verdict"].startswith("fits with the copies from spark2 (-101,")
    assert view["spark1"] == dict(pack_options.after(fleet[0]["plan"]), freed_bytes=0, taken_bytes=0, verdict="fits")
    # engram_relocate's own figure for the copies replaces the estimate when its check ran.
    checked = pack_choice.outlook(fleet, choice, {"spark2": {"destination": {"need_bytes": 5}}})
    assert checked["spark3"]["taken_bytes"] == 5


def test_relocating_to_the_head_and_two_moves_into_one_directory_add_up():
    fleet = report_fleet()
    fleet[2]["plan"]["foreign"] = _tp2("/home/zurih/old")
    files = {"spark2": [f["path"] for f in _tp2()], "spark3": [f["path"] for f in _tp2("/home/zurih/old")]}
    choice = pack_choice.parse_choice({"to": "spark1", "files": files}, None, fleet)
    first, second = choice["moves"]
    assert first["dst_target"] is None and first["dst_active_dir"] == "/home/mia/dsv41-engram"
    assert second["margin_bytes"] == first["margin_bytes"] + first["need_bytes"]


def test_a_chosen_deletion_frees_the_same_and_a_short_choice_says_so():
    fleet = report_fleet()
    sha = "ab" * 32
    delete = {"spark2": [{"path": f["path"], "sha256": sha.upper()} for f in _tp2()]}
    choice = pack_choice.parse_choice(None, delete, fleet)
    assert choice["deletes"][0]["files"][0]["sha256"] == sha and choice["deletes"][0]["target"] == "zurih@spark2"
    assert pack_choice.outlook(fleet, choice)["spark2"]["verdict"] == \
        "fits after deleting 2 file(s) (+101,379,024,656 bytes)"
    one = pack_choice.parse_choice(None, {"spark2": delete["spark2"][:1]}, fleet)
    verdict = pack_choice.outlook(fleet, one)["spark2"]["verdict"]
    assert verdict.startswith("fits after deleting 1 file(s)")  # one TP2 shard (50.7 GB) already covers 4.8 GB
    fleet[1]["plan"]["foreign"][0]["allocated_bytes"] = 10 ** 9
    short = pack_choice.outlook(fleet, one)["spark2"]["verdict"]
    assert short == "SHORT by 3,826,902,280 (3.564 GiB) even after deleting 1 file(s) (+1,000,000,000 bytes)"


@pytest.mark.parametrize("relocate, delete, error", [
    ("spark3", None, "engram_relocate must be a dict like"),
    ({"to": "spark9", "files": {"spark2": ["/a/engram-l1-r1of2.bin"]}}, None, "to 'spark9' is not a rank host"),
    ({"to": "spark3", "files": {"spark7": ["/a/b"]}}, None, "files: 'spark7' is not a rank host of this run"),
    ({"to": "spark3", "files": {"spark2": ["rel/x.bin"]}}, None, "spark2: ['rel/x.bin'] must be a non-empty list"),
    ({"to": "spark3", "files": {"spark2": ["/a/../b"]}}, None, "must be a non-empty list of absolute, normalised"),
    ({"to": "spark3", "files": {"spark2": ["/a"]}, "dest": "/x"}, None, "unknown key(s) dest (to, files, dest_dir)"),
    ({"to": "spark3", "files": {"spark2": ["/a"]}, "dest_dir": "x"}, None, "dest_dir 'x' must be an absolute"),
    ({"to": "spark2", "files": {"spark2": ["/a"]}}, None,
     "spark2 would move files within itself: name dest_dir (another volume of spark2: /data/dsv41-engram-archive)"),
    ({"to": "spark3", "files": []}, None, "files must map each source host"),
    (None, {"spark2": [{"path": "/a", "sha256": "12"}]}, "64-hex-digit sha256 (from sha256sum on spark2)"),
    (None, {"spark2": ["/a"]}, "engram_delete: spark2: ['/a'] must be a non-empty list of {path, sha256}"),
    (None, [1], "engram_delete must be a dict like"),
    ({"to": "spark3", "files": {"spark2": ["/a"]}}, {"spark2": [{"path": "/a", "sha256": "a" * 64}]},
     "spark2: /a is named both to relocate and to delete"),
])
def test_malformed_choices_name_the_variable_host_and_value(relocate, delete, error):
    got = pack_choice.parse_choice(relocate, delete, report_fleet())
    assert any(error in e for e in got["errors"]), got["errors"]


def test_summary_says_where_stage_a_stops_and_the_next_command():
    fleet = report_fleet()
    view = {h["host"]: pack_options.after(h["plan"]) for h in fleet}
    opts = pack_options.options(fleet, PREFIX)
    line = pack_choice.summary(fleet, view, opts, PREFIX, True, False)
    assert line == ("stage A stops at spark2 (short by 4,826,902,280 bytes). Next: %s (moves 101,379,024,656 bytes to "
                    "spark3:/home/zurih/dsv41-engram-archive; spark2 then has 166,285,625,104 free; add --check to "
                    "see it first)" % opts[0]["command"])
    fits = pack_choice.outlook(fleet, pack_choice.parse_choice(_choice(), None, fleet))
    assert pack_choice.summary(fleet, fits, [], PREFIX, True, True).startswith(
        "stage A preflight: every rank fits with the chosen room making. Next: the same command without --check")
    roomy = [dict(h, plan=dict(h["plan"], fits=True)) for h in fleet]
    assert pack_choice.summary(roomy, {h["host"]: {"fits_after": True} for h in roomy}, [], PREFIX, True, False) == \
        "stage A preflight: every rank fits. Next: %s -e maintenance_window=true" % PREFIX
    assert pack_choice.summary(fleet, fits, [], PREFIX, False, True) == (
        "stage A preflight: every rank fits with the chosen room making; this run goes on (room making, pack, restart, "
        "checks, record)")


def test_restore_groups_one_run_per_source_host():
    fleet = [{"host": "spark1", "target": None, "dest": "/home/mia/dsv41-engram"},
             {"host": "spark2", "target": "zurih@spark2", "dest": "/home/zurih/dsv41-3x-spark/engram"}]
    entries = [{"src_host": "zurih@spark2", "src_path": "/h/engram-l1-r1of2.bin", "dst_host": "zurih@spark3",
                "dst_path": "/a/engram-l1-r1of2.bin", "size": 5, "sha256": "s1", "state": "moved"},
               {"src_host": "zurih@spark2", "src_path": "/h/engram-l14-r1of2.bin", "state": "restored"},
               {"src_host": None, "src_path": "/m/engram-l1-r0of2.bin", "dst_path": "/x", "state": "moved"},
               {"src_host": "zurih@spark2", "src_path": "/h/engram-l9-r0of2.bin", "state": "deleted"},
               {"src_host": "zurih@spark9", "src_path": "/h/elsewhere.bin", "state": "moved"}]
    got = pack_choice.restore_groups({"entries": entries}, fleet)
    assert got["groups"] == [
        {"host": "spark1", "target": None, "active_dir": "/home/mia/dsv41-engram", "files": ["/m/engram-l1-r0of2.bin"]},
        {"host": "spark2", "target": "zurih@spark2", "active_dir": "/home/zurih/dsv41-3x-spark/engram",
         "files": ["/h/engram-l1-r1of2.bin"]}]
    assert got["errors"] == ["/h/elsewhere.bin was moved from zurih@spark9, which is not a rank host of this run"]
    assert "spark2: /h/engram-l1-r1of2.bin back from zurih@spark3:/a/engram-l1-r1of2.bin (5 bytes, sha256 s1)" \
        in got["lines"] and got["lines"][-1] == "Deleted, cannot be restored: /h/engram-l9-r0of2.bin"
    assert pack_choice.restore_groups(None, fleet)["lines"] == ["No relocation manifest on the head: nothing to restore."]
    done = pack_choice.restore_groups({"entries": entries[1:2]}, fleet)
    assert done["groups"] == [] and done["lines"][0].startswith("Nothing to restore") and "(1 restored earlier)" in \
        done["lines"][0]


# --------------------------------------------------------------------------- the filters, over hostvars

def _hostvars(fleet, **outlook):
    hv = {}
    for h in fleet:
        hv[h["host"]] = {"dsv41_rank": h["rank"], "engram_pack_plan": dict(h["plan"], required_gib=62.944,
                                                                             to_write_gib=62.944, free_gib=60.449,
                                                                             deficit_gib=4.495),
                         "engram_pack_destination": h["dest"],
                         "engram_pack_host": {"target": h["target"] or "", "dest": h["dest"],
                                              "archive_dir": h["archive"]["path"], "spare_count": str(len(h["spare"]))}}
        if outlook:
            hv[h["host"]]["engram_pack_outlook"] = outlook
    return hv


def test_filters_carry_the_fleet_from_hostvars():
    fleet = report_fleet()
    hosts = ["spark1", "spark2", "spark3"]
    hv = _hostvars(fleet)
    choice = pf.dsv41_pack_choice(hosts, hv, _choice(), None)
    assert choice["errors"] == [] and choice["moves"][0]["dst_target"] == "zurih@spark3"
    opts = pf.dsv41_pack_options(hosts, hv, PREFIX)
    assert opts == pack_options.options(fleet, PREFIX)
    checks = {"results": [{"item": choice["moves"][0], "plan": {"destination": {"need_bytes": 7}}}]}
    view = pf.dsv41_pack_outlook(hosts, hv, choice, checks)
    assert view["spark3"]["taken_bytes"] == 7
    counted = _hostvars(fleet, **view)
    rows = pf.dsv41_pack_plan_rows(hosts, counted)
    assert rows[1]["verdict"] == "fits after relocating 2 file(s) (+101,379,024,656 bytes)"
    assert pf.dsv41_pack_plan_short(hosts, counted) == [] and pf.dsv41_pack_options(hosts, counted, PREFIX) == []
    assert pf.dsv41_pack_plan_short(hosts, hv)[0].endswith("deficit 4,826,902,280 bytes (4.495 GiB)")
    lines = pf.dsv41_pack_foreign_lines(hosts, hv)
    assert lines[0] == ("spark2 (rank 1): /home/zurih/dsv41-engram/engram-l1-r1of2.bin, 50,688,818,272 bytes "
                        "(50,688,818,272 allocated): TP2 rank 1 layer 1 shard, may be relocated")
    summary = pf.dsv41_pack_summary(hosts, hv, {"moves": [], "deletes": []}, opts, PREFIX, True)
    assert summary.startswith("stage A stops at spark2 (short by 4,826,902,280 bytes). Next: " + PREFIX)
    assert pf.dsv41_pack_choice_lines(choice, checks)[0].startswith(
        "spark2 -> spark3:/home/zurih/dsv41-engram-archive: /home/zurih/dsv41-engram/engram-l1-r1of2.bin, ")


def test_rooms_and_command_filters():
    assert pf.dsv41_pack_rooms("~/dsv41-engram-archive", ["/data"], None, "spark2") == [
        "~/dsv41-engram-archive", "/data/dsv41-engram-archive"]
    chosen = {"to": "spark3", "dest_dir": "/scratch/tp2", "files": {}}
    assert pf.dsv41_pack_rooms("~/a", [], chosen, "spark3") == ["~/a", "/scratch/tp2"]
    assert pf.dsv41_pack_rooms("~/a", [], chosen, "spark2") == ["~/a"]
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="spark2: dsv41_spare_volumes must be a list of absolute paths; 'data'"):
        pf.dsv41_pack_rooms("~/a", ["data"], None, "spark2")
    with pytest.raises(AnsibleFilterError, match="'/data' is not"):
        pf.dsv41_pack_rooms("~/a", "/data", None, "spark2")
    assert pf.dsv41_pack_command(["/repo/inventory/lab"], "/repo") == PREFIX
    assert pf.dsv41_pack_command(["/repo/inventory/lab", "/tmp/x/roomy"], "/repo") == PREFIX + " -i /tmp/x/roomy"


# --------------------------------------------------------------------------- engram_relocate for stage A

def _args(fleet, **extra):
    args = {"action": "move", "files": list(fleet["files"]), "src_host": SRC, "dst_host": DST,
            "dest_dir": fleet["dest"], "active_dir": fleet["active"], "tp_size": 3,
            "manifest": fleet["manifest"].path, "ssh_executable": fleet["ssh"]["path"],
            "remote_python": sys.executable, "host_label": "spark2"}
    args.update(extra)
    return {k: v for k, v in args.items() if v is not None}


def test_create_dirs_reports_in_check_mode_and_creates_in_the_real_run(fleet, distinct_hosts):
    dest = os.path.join(fleet["dest"], "archive", "tp2")
    manifest = os.path.join(fleet["root"], "records", "new", "relocate.json")
    args = _args(fleet, dest_dir=dest, manifest=manifest)
    refused = run_module(relocate_module.main, args, check_mode=True)
    assert refused["failed"] is True and "destination %s does not exist" % dest in refused["msg"]
    assert "the manifest's directory %s does not exist" % os.path.dirname(manifest) in refused["msg"]
    check = run_module(relocate_module.main, dict(args, create_dirs=True), check_mode=True)
    assert check.get("failed") is not True, check
    assert check["plan"]["destination"]["created"] is True and check["changed"] is True
    assert not os.path.exists(os.path.dirname(dest)) and not os.path.exists(os.path.dirname(manifest))
    done = run_module(relocate_module.main, dict(args, create_dirs=True))
    assert done.get("failed") is not True, done
    assert done["plan"]["destination"]["created_dirs"] == [os.path.dirname(dest), dest]
    assert sorted(os.listdir(dest)) == ["engram-l1-r1of2.bin", "engram-l14-r1of2.bin"] and os.path.isfile(manifest)
    assert oct(os.stat(dest).st_mode & 0o777) == "0o755"


def test_create_dirs_refuses_a_destination_inside_the_active_directory(fleet, distinct_hosts):
    dest = os.path.join(fleet["active"], "archive")
    result = run_module(relocate_module.main, _args(fleet, dest_dir=dest, create_dirs=True), check_mode=True)
    assert result["failed"] is True
    assert "spark3: destination %s would lie in the active Engram directory" % dest in result["msg"]


def test_bandwidth_limit_paces_the_data(fleet, tmp_path):
    path = os.path.join(fleet["src"], "engram-l1-r0of4.bin")
    digest = write_shard(path, 1, 0, 4, 12000, sparse=False)            # 3,000 rows: 796,096 bytes of data
    from test_engram_relocate import move
    started = time.monotonic()
    plan, entries = move(fleet, [path], bandwidth_limit=400000)
    took = time.monotonic() - started
    assert took >= 1.5, took                                             # about 2 s at 400,000 bytes/s
    assert entries[0]["sha256"] == digest and sha256_of(entries[0]["dst_path"]) == digest
    sends = [c["words"] for c in ssh_log(fleet["ssh"]) if c["words"][0] == "send"]
    assert sends[0][-1] == "400000"


def test_bandwidth_limit_must_not_be_negative(fleet):
    result = run_module(relocate_module.main, _args(fleet, bandwidth_limit=-1))
    assert result["failed"] is True and "bandwidth_limit must be >= 0, got -1" in result["msg"]


def test_dst_active_dir_is_checked_on_the_destination(fleet, distinct_hosts):
    other = os.path.join(fleet["root"], "head-engram")
    os.mkdir(other)
    ok = run_module(relocate_module.main, _args(fleet, dst_active_dir=other), check_mode=True)
    assert ok.get("failed") is not True, ok
    bad = run_module(relocate_module.main, _args(fleet, dst_active_dir=other + "-absent"), check_mode=True)
    assert bad["failed"] is True and "spark3: active_dir %s-absent does not exist there" % other in bad["msg"]
    inside = run_module(relocate_module.main, _args(fleet, dst_active_dir=fleet["dest"]), check_mode=True)
    assert inside["failed"] is True and "lies in the active Engram directory" in inside["msg"]


def test_restore_of_one_source_host_leaves_the_others(fleet, distinct_hosts):
    first, second = list(fleet["files"])
    run_module(relocate_module.main, _args(fleet, files=[first]))
    run_module(relocate_module.main, _args(fleet, files=[second], src_host=None))  # "the head's" file
    only = run_module(relocate_module.main, _args(fleet, action="restore", files=None, dest_dir=None, tp_size=None,
                                                  src_host=None))
    assert only.get("failed") is not True, only
    assert sorted(e["src_host"] or "" for e in only["entries"]) == ["", SRC]
    run_module(relocate_module.main, _args(fleet, files=[first, second]))
    spark2 = run_module(relocate_module.main, _args(fleet, action="restore", files=None, dest_dir=None, tp_size=None,
                                                    src_host=SRC))
    assert [e["src_path"] for e in spark2["entries"]] == [first, second]
    again = run_module(relocate_module.main, _args(fleet, action="restore", files=None, dest_dir=None, tp_size=None,
                                                   src_host=SRC))
    assert again["changed"] is False and again["entries"] == []
    assert {p: sha256_of(p) for p in fleet["files"]} == fleet["files"]


def test_copy_need_counts_what_the_source_occupies():
    """A filesystem that allocates a file's holes (the lab's allocation model counts the TP2 stand-ins at their
    size) needs as much again at the destination: the copy is counted at least at the source's allocation."""
    sparse = {"size": TP2_SIZES[1], "data_bytes": 4096, "extents": 1}
    assert copy_need(sparse, 4096) == 4096 + 2 * 4096 + 4
    assert copy_need(dict(sparse, allocated=TP2_SIZES[1]), 4096) == TP2_SIZES[1] + 4


def test_relocate_error_is_an_engram_error():
    from ansible.module_utils.engram.shard_format import EngramError
    assert issubclass(RelocateError, EngramError) and MAGIC == 0x31344E4531565344


def test_refusals_are_read_from_check_results_whose_failed_flag_was_cleared():
    ok = {"item": {"src_host": "spark2"}, "plan": {"ok": True}, "failed": False, "changed": True}
    refused = {"item": {"src_host": "spark3"}, "plan": {"ok": False}, "failed": False,
               "msg": "spark3: x is a symlink; nothing would be done"}
    broken = {"item": {"host": "spark2"}, "failed": False, "msg": "spark2: active_dir /a must be absolute"}
    assert pf.dsv41_pack_refusals({"results": [ok, refused, {"skipped": True}]}, {"results": [broken]}) == [
        "spark3: x is a symlink; nothing would be done", "spark2: active_dir /a must be absolute"]
    assert pf.dsv41_pack_refusals({"results": [], "skipped": True}, {}) == []


def test_a_refused_real_run_leaves_no_manifest_directory_behind(fleet, distinct_hosts):
    manifest = os.path.join(fleet["root"], "records", "new", "deeper", "relocate.json")
    bad = _args(fleet, manifest=manifest, create_dirs=True, dest_dir=fleet["active"])
    result = run_module(relocate_module.main, bad)
    assert result["failed"] is True and "lies in the active Engram directory" in result["msg"]
    assert not os.path.exists(os.path.join(fleet["root"], "records", "new"))
