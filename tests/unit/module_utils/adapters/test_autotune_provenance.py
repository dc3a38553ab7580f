"""autotune_provenance: a rank's autotune cache kept only for the image and kernel it was tuned under; moved aside
(never deleted) when either changed, recorded after a boot. The logic directly, then the module entry point."""
import json
import os

import pytest

from ansible.module_utils.adapters import autotune_provenance as prov
from modrun import run_module
import autotune_provenance as module

OLD_IMAGE = "sha256:" + "a" * 64
NEW_IMAGE = "sha256:" + "b" * 64
KERNEL = "6.11.0-1016-nvidia"
FILES = ("0.6.18/sm121/05cc0d96dc7e28b8/rank_tp0_pp0_dp0.json",
         "0.6.18/sm121/05cc0d96dc7e28b8/rank_tp0_pp0_dp0.json.launch")


def cache(tmp_path, image_id=OLD_IMAGE, kernel=KERNEL, record=True):
    root = tmp_path / "autotune"
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text('{"tactics": {"moe_gemm_m1": 3}}\n')
    if record:
        prov.write(str(root), prov.document(image_id, kernel, "dsv41-sglang:tp3", list(FILES)))
    return root


def tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_a_cache_tuned_under_the_image_and_kernel_of_the_next_boot_is_kept(tmp_path):
    root = cache(tmp_path)
    state = prov.check(str(root), OLD_IMAGE, KERNEL)
    assert state["entries"] == list(FILES) and state["stale"] is False and state["reasons"] == []
    assert "kept" in state["note"]


def test_an_image_or_kernel_change_names_both_values(tmp_path):
    root = cache(tmp_path)
    reasons = prov.check(str(root), NEW_IMAGE, "6.14.0-1001-nvidia")["reasons"]
    assert reasons == ["image changed: tuned under sha256:aaaaaaaaaaaa (dsv41-sglang:tp3), the next boot runs "
                       "sha256:bbbbbbbbbbbb",
                       "kernel changed: tuned under 6.11.0-1016-nvidia, this rank runs 6.14.0-1001-nvidia"]


def test_a_cache_without_a_record_is_kept_and_an_empty_one_has_nothing_to_judge(tmp_path):
    root = cache(tmp_path, record=False)
    state = prov.check(str(root), NEW_IMAGE, KERNEL)
    assert state["stale"] is False and state["recorded"] is None and "no provenance recorded" in state["note"]
    assert prov.check(str(tmp_path / "none"), NEW_IMAGE, KERNEL)["note"] == "no cache: the next boot tunes"


def test_a_broken_record_is_named_and_a_symlinked_one_is_not_followed(tmp_path):
    root = cache(tmp_path)
    (root / prov.PROVENANCE_FILE).write_text('{"image_id": "sha256:')   # a half-written record
    with pytest.raises(prov.ProvenanceError, match=r"\.dsv41-provenance\.json is not a provenance record"):
        prov.check(str(root), OLD_IMAGE, KERNEL)
    (root / prov.PROVENANCE_FILE).unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"image_id": OLD_IMAGE, "kernel": KERNEL}))
    (root / prov.PROVENANCE_FILE).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(prov.ProvenanceError, match="cannot be read"):
        prov.check(str(root), OLD_IMAGE, KERNEL)


def test_invalidate_moves_everything_whole_beside_the_cache_and_never_over_an_earlier_move(tmp_path):
    root = cache(tmp_path)
    before = tree(root)
    dest = prov.invalidated_dir(str(root), "20261204T041500Z")
    assert dest == str(tmp_path / "autotune.invalidated" / "20261204T041500Z")
    prov.invalidate(str(root), dest)
    assert tree(root) == [] and tree(tmp_path / "autotune.invalidated" / "20261204T041500Z") == before
    cache(tmp_path)
    with pytest.raises(prov.ProvenanceError, match="already exists"):
        prov.invalidate(str(root), dest)
    assert tree(root) == before


def test_a_second_record_of_the_same_boot_is_the_same_record():
    a = prov.document(OLD_IMAGE, KERNEL, "dsv41-sglang:tp3", list(FILES), now=0)
    b = prov.document(OLD_IMAGE, KERNEL, "dsv41-sglang:tp3", list(FILES), now=3600)
    assert prov.same_record(a, b) and not prov.same_record(a, dict(b, kernel="6.14.0"))
    assert not prov.same_record(None, b)


# ----------------------------------------------------------------------------- the module entry point

def test_module_moves_a_stale_cache_aside_and_check_mode_only_says_so(tmp_path):
    root = cache(tmp_path)
    before = tree(root)
    args = {"state": "current", "cache_root": str(root), "image_id": NEW_IMAGE, "kernel": KERNEL,
            "stamp": "20261204T041500Z", "host_label": "spark2"}
    check = run_module(module.main, args, check_mode=True)
    assert check["changed"] is True and check["stale"] is True and tree(root) == before
    assert check["msg"].startswith("spark2: autotune cache %s would be moved to %s.invalidated/20261204T041500Z"
                                   % (root, root))
    res = run_module(module.main, args)
    assert res["changed"] is True and res["moved_to"] == str(root) + ".invalidated/20261204T041500Z"
    assert "image changed: tuned under sha256:aaaaaaaaaaaa" in res["msg"] and tree(root) == []
    assert tree(tmp_path / "autotune.invalidated" / "20261204T041500Z") == before
    again = run_module(module.main, args)
    assert again["changed"] is False and again["msg"] == "spark2: autotune cache %s: no cache: the next boot tunes" % root


def test_module_moves_a_valid_cache_with_the_others_when_told_why(tmp_path):
    root = cache(tmp_path)
    args = {"state": "current", "cache_root": str(root), "image_id": OLD_IMAGE, "kernel": KERNEL, "stamp": "s1"}
    assert run_module(module.main, args)["changed"] is False
    res = run_module(module.main, dict(args, force=True, why="spark3: kernel changed"))
    assert res["changed"] is True and res["stale"] is False
    assert "moved with the others: spark3: kernel changed" in res["msg"] and tree(root) == []


def test_module_records_what_the_boot_ran_once(tmp_path):
    root = cache(tmp_path, record=False)
    args = {"state": "present", "cache_root": str(root), "image_id": NEW_IMAGE, "kernel": KERNEL,
            "image": "dsv41-sglang:tp3"}
    assert run_module(module.main, args, check_mode=True)["changed"] is True
    assert not (root / prov.PROVENANCE_FILE).exists()
    res = run_module(module.main, args)
    assert res["changed"] is True and "2 file(s) tuned under sha256:bbbbbbbbbbbb" in res["msg"]
    doc = json.loads((root / prov.PROVENANCE_FILE).read_text())
    assert doc["image_id"] == NEW_IMAGE and doc["kernel"] == KERNEL and doc["entries"] == list(FILES)
    assert oct(os.stat(root / prov.PROVENANCE_FILE).st_mode & 0o777) == "0o644"
    assert run_module(module.main, args)["changed"] is False
    assert [p.name for p in root.iterdir() if "tmp" in p.name] == []


def test_module_resolves_the_image_on_the_rank_and_names_one_it_cannot_inspect(tmp_path):
    root = cache(tmp_path)
    inspected = json.dumps([{"Id": NEW_IMAGE, "RepoTags": ["dsv41-sglang:tp3"]}])
    res = run_module(module.main, {"state": "current", "cache_root": str(root), "image": "dsv41-sglang:tp3",
                                   "kernel": KERNEL, "stamp": "s2"},
                     run_command=lambda cmd, **kw: (0, inspected, ""))
    assert res["_calls"] == [["docker", "image", "inspect", "dsv41-sglang:tp3"]]
    assert res["image_id"] == NEW_IMAGE and res["stale"] is True
    res = run_module(module.main, {"state": "current", "cache_root": str(root), "image": "dsv41-sglang:gone",
                                   "kernel": KERNEL, "host_label": "spark1"},
                     run_command=lambda cmd, **kw: (1, "[]", "Error: No such image: dsv41-sglang:gone"))
    assert res["failed"] and res["msg"].startswith("spark1: image dsv41-sglang:gone cannot be inspected (rc 1")


def test_module_refuses_a_stamp_that_is_a_path_and_a_broken_record_moving_nothing(tmp_path):
    root = cache(tmp_path)
    before = tree(root)
    res = run_module(module.main, {"state": "current", "cache_root": str(root), "image_id": NEW_IMAGE,
                                   "kernel": KERNEL, "stamp": "../../etc", "host_label": "spark2"})
    assert res["failed"] and "stamp '../../etc' is not a plain directory name" in res["msg"] and tree(root) == before
    (root / prov.PROVENANCE_FILE).write_text("not json")
    res = run_module(module.main, {"state": "current", "cache_root": str(root), "image_id": NEW_IMAGE,
                                   "kernel": KERNEL, "host_label": "spark2"})
    assert res["failed"] and res["msg"].startswith("spark2: %s is not a provenance record" % (root / prov.PROVENANCE_FILE))
    assert tree(root) == before
