"""Adding forwards to the launcher as a managed edit (module_utils/launcher/edit.py, library/launcher_forward.py),
on every launcher shape: verified by evaluating the launch again, idempotent, check mode, rollback."""
import os

import pytest

from ansible.module_utils.launcher import edit as E
from ansible.module_utils.launcher.effective import effective_launch

import launcher_forward
from launcher_fixtures import BASELINE_ENV, VARIANTS, checkout, tree_hash
from modrun import run_module

FORWARD = {"SGLANG_DSPARK_FOLDED_SAMPLING": "0", "DSV41_ENGRAM_PREFETCH_CHECK": "1"}
WITH_KEYS = BASELINE_ENV + "SGLANG_DSPARK_FOLDED_SAMPLING=0\nDSV41_ENGRAM_PREFETCH_CHECK=1\n"


def read(path):
    with open(path) as fh:
        return fh.read()


def module(monkeypatch, capsys, script, home, **kw):
    args = {"launcher": script, "home": home, "head_host": "spark1", "forward": FORWARD}
    args.update(kw)
    return run_module(launcher_forward.main, args)


def test_blocks_are_found_and_mapped_to_the_ranks_they_feed(tmp_path):
    script, home = checkout(tmp_path, "explicit")
    text = read(script)
    blocks = E.find_blocks(text)
    assert [(b["kind"], b["name"]) for b in blocks] == [("array", "_a"), ("heredoc", "EOF")]
    feeds = E.coverage(script, text, BASELINE_ENV, home=home, head="spark1")
    assert feeds == {0: {0}, 1: {1, 2}}
    script, home = checkout(tmp_path / "p", "printf_array")
    assert E.coverage(script, read(script), BASELINE_ENV, home=home, head="spark1") == {0: {0}, 1: {1, 2}}


@pytest.mark.parametrize("variant, via", [(v, "auto") for v in VARIANTS] + [("extra_env", "script")])
def test_adding_forwards_reaches_both_paths_once_and_rolls_back(tmp_path, monkeypatch, capsys, variant, via):
    script, home = checkout(tmp_path, variant)
    # the EXTRA_CONTAINER_ENV launcher's own way is its .env line; every other shape is edited in the script
    target = script[:-len("start.sh")] + ".env" if variant.endswith("extra_env") and via == "auto" else script
    original, original_script = read(target), read(script)
    mode = os.stat(target).st_mode

    check = module(monkeypatch, capsys, script, home, via=via, _ansible_check_mode=True)
    assert check["changed"] is True and check["edited"] == target
    if target == script:
        assert "+    ${SGLANG_DSPARK_FOLDED_SAMPLING+-e " in check["diff_text"]
    else:
        assert ("+EXTRA_CONTAINER_ENV='DSV41_ENGRAM_PREFETCH_CHECK=1 SGLANG_DSPARK_FOLDED_SAMPLING=0'"
                in check["diff_text"])
    assert read(target) == original and E.backups(target) == []

    res = module(monkeypatch, capsys, script, home, via=via)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and sorted(res["added"]) == sorted(FORWARD)
    assert read(res["backup"]) == original and os.stat(target).st_mode == mode
    assert read(target).count(E.MARKER) >= (2 if target == script else 1)
    env = WITH_KEYS if target == script else read(target)
    launch = effective_launch(script, env_text=env, home=home, head="spark1")
    for c in launch["containers"]:
        assert c["env"]["SGLANG_DSPARK_FOLDED_SAMPLING"] == "0" and c["env"]["DSV41_ENGRAM_PREFETCH_CHECK"] == "1"
    if target == script:        # unset stays unset: the forward adds nothing when the .env does not set the key
        plain = effective_launch(script, env_text=BASELINE_ENV, home=home, head="spark1")
        assert all("SGLANG_DSPARK_FOLDED_SAMPLING" not in c["env"] for c in plain["containers"])
    else:
        assert read(script) == original_script

    edited = read(target)
    again = module(monkeypatch, capsys, script, home, via=via)
    assert again["changed"] is False and again["added"] == {} and read(target) == edited

    back = module(monkeypatch, capsys, script, home, state="rollback")
    assert back["changed"] is True and back["edited"] == target and read(target) == original
    assert module(monkeypatch, capsys, script, home, state="rollback")["changed"] is False


def test_a_launcher_without_an_editable_block_is_refused_and_left_alone(tmp_path, monkeypatch, capsys):
    script, home = checkout(tmp_path, "lab")
    before = tree_hash(tmp_path)
    res = module(monkeypatch, capsys, script, home)
    assert res["failed"] and res["changed"] is False
    assert "has no argument builder (a multi-line array of -e arguments) and no heredoc of -e lines" in res["msg"]
    assert tree_hash(tmp_path) == before


def test_a_rank_no_block_reaches_is_refused(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home" / "mia"
    co = home / "co"
    co.mkdir(parents=True)
    (co / "start.sh").write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\nsource ./.env\nargs=(\n  -e \"A=1\"\n)\n"
        "ssh zurih@spark2 \"docker run -d --name dsv41-worker -e NODE_RANK=1 img run\"\n"
        "docker run -d --name dsv41-head \"${args[@]}\" img run\n")
    before = tree_hash(tmp_path)
    res = module(monkeypatch, capsys, str(co / "start.sh"), str(home), env_text="X=1\n")
    assert res["failed"]
    assert "no block of -e arguments in the script reaches spark2 (rank 1), which do not receive" in res["msg"]
    assert tree_hash(tmp_path) == before


def test_rollback_without_a_backup_says_so(tmp_path, monkeypatch, capsys):
    script, home = checkout(tmp_path, "explicit")
    res = module(monkeypatch, capsys, script, home, state="rollback")
    assert res["failed"] and "no forward backup to restore" in res["msg"]
