"""The lab launcher variants assembled from their parts (lab/standins/launcher/) by lab/seed/host_seed.py.

A lab host gets one start.sh per variant, as a real fleet has one launcher file that the roles read and edit
as one: the assembly must give exactly the launcher each variant was as its own file, one self-contained
script, and a missing or wrong part must stop the seeder with an error that names it.
"""
import hashlib
import re
import shutil
import subprocess
import sys

import pytest

from lab_launchers import ROOT, assembled_variants, host_seed

PARTS = ROOT / "lab" / "standins" / "launcher"
# sha256 and size of each variant's start.sh as it was kept as its own file (lab/standins/start.sh and
# start-<variant>.sh, last changed in commit 1d2e03b): the assembly changes no byte of what a host runs. A
# deliberate change to a launcher changes its figures here.
BEFORE_THE_SPLIT = {
    "explicit": ("0756c348c6456ca8e2ea5cad4d465553c2a10a77ce76b1558eafed4a6b52d3c3", 14522),
    "extra_env": ("372a7b316b70a478c7058fee0dd4b8eb73b1faf5507305f238d616cc3b69f5ea", 13820),
    "printf_array": ("0f0efdef2c539b59727593bd08a951322ab66459fb62a076280527ecb1fb0812", 14727),
    "indirect": ("db2e1fcf32a6f5b9b51a997e9f955ed488cd3b26a12c16d66a7d4909af827c64", 15169),
    "family": ("a62518632d22213b720702ad3f284f8f6586d9c2181686f3ba1334e79aaadae8", 17915),
}
# A line of each variant's own (in none of the others): the assembly puts each variant's pieces in its file.
OWN_LINE = {
    "explicit": 'variant "explicit": every switch is listed',
    "extra_env": 'EXTRA_CONTAINER_ENV="${EXTRA_CONTAINER_ENV:-}"',
    "printf_array": 'worker_args wargs "$ip" "$GID" "$rank"',
    "indirect": "  for h in $(worker_hosts); do",
    "family": "  check_image_arch",
}


@pytest.fixture
def seeder():
    return host_seed()


def test_every_variant_is_assembled(seeder):
    assert assembled_variants() == ("explicit", "extra_env", "printf_array", "indirect", "family")
    assert sorted(BEFORE_THE_SPLIT) == sorted(assembled_variants())
    assert sorted(p.name for p in (PARTS / "variants").iterdir()) == sorted(v + ".sh" for v in assembled_variants())
    assert seeder.LAUNCHER_VARIANTS == assembled_variants() + ("legacy",)


@pytest.mark.parametrize("variant", sorted(BEFORE_THE_SPLIT))
def test_assembly_is_the_launcher_as_it_was(seeder, variant):
    data = seeder.launcher_text(variant)
    assert (hashlib.sha256(data).hexdigest(), len(data)) == BEFORE_THE_SPLIT[variant]
    lines = data.decode().splitlines()
    assert [v for v, own in sorted(OWN_LINE.items()) if any(own in line for line in lines)] == [variant]


@pytest.mark.parametrize("variant", sorted(BEFORE_THE_SPLIT))
def test_assembly_is_one_self_contained_script(seeder, variant, tmp_path):
    text = seeder.assemble_launcher(variant)
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash" and text.count("#!/usr/bin/env bash") == 1
    assert text.endswith("\n")
    assert not [ln for ln in lines if ln.startswith("#@")], "no directive reaches start.sh"
    assert "@@" not in text
    assert not re.search(r"core_(head|launch|commands)|variants/|launcher/", text), "nothing names the parts"
    # the only file the script reads in is its .env
    sourced = re.findall(r"^\s*(?:source|\.)\s+(\S+)", text, re.M)
    assert sourced == ['"$ENV_FILE"']
    start = tmp_path / "start.sh"
    start.write_text(text)
    syntax = subprocess.run(["bash", "-n", str(start)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    # alone in a directory (no parts anywhere near), it defines every command and runs nothing
    (tmp_path / ".env").write_text("WORKER_HOSTS='spark2 spark3'\n")
    probe = subprocess.run(["bash", "-c", "START_SH_LIB_ONLY=1 source ./start.sh && declare -F"], cwd=tmp_path,
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                                "LAB_LAUNCHER_KNOBS": str(tmp_path / "none")})
    assert probe.returncode == 0, probe.stderr
    defined = {ln.split()[-1] for ln in probe.stdout.splitlines()}
    assert {"cmd_serve", "cmd_stop", "cmd_status", "cmd_logs", "cmd_build", "start_workers", "start_head",
            "remote_on", "wait_ready"} <= defined
    assert ("worker_hosts" in defined) == (variant == "indirect")
    assert ("check_image_arch" in defined) == (variant == "family")


def test_legacy_stays_its_own_file(seeder):
    assert seeder.launcher_text("legacy") == (ROOT / "lab" / "standins" / "legacy" / "start.sh").read_bytes()
    with pytest.raises(seeder.LauncherPartsError, match="launcher variant legacy is not assembled from parts"):
        seeder.assemble_launcher("legacy")


def copy_parts(tmp_path):
    parts = tmp_path / "launcher"
    shutil.copytree(PARTS, parts)
    return parts


@pytest.mark.parametrize("part", ["core_head.sh", "core_launch.sh", "core_commands.sh", "variants/family.sh"])
def test_a_missing_part_fails_naming_it(seeder, tmp_path, part):
    parts = copy_parts(tmp_path)
    (parts / part).unlink()
    with pytest.raises(seeder.LauncherPartsError) as err:
        seeder.assemble_launcher("family", parts)
    assert str(err.value).startswith("launcher variant family: part %s missing" % (parts / part))


@pytest.mark.parametrize("standins", ["standins", "."], ids=["repo-layout", "image-layout"])
def test_the_seeder_installs_the_assembly_and_stops_on_a_missing_part(tmp_path, standins):
    """host_seed.py with the parts where the repo keeps them (lab/standins/launcher) or where the lab image
    copies them (lab/Containerfile: standins/ into the lab directory, seed/ below it): it installs the assembled
    launcher; without a part it stops before writing start.sh, naming the part."""
    lab = tmp_path / "lab"
    (lab / "seed").mkdir(parents=True)
    shutil.copy(ROOT / "lab" / "seed" / "host_seed.py", lab / "seed" / "host_seed.py")
    parts = lab / standins / "launcher"
    shutil.copytree(PARTS, parts)
    root = tmp_path / "root"
    args = [sys.executable, str(lab / "seed" / "host_seed.py"), "--host", "spark2", "--root", str(root),
            "--launcher-only", "--launcher-variant", "explicit"]
    subprocess.run(args, check=True, capture_output=True, text=True)
    start = root / "home/zurih/dsv41-3x-spark/start.sh"
    assert hashlib.sha256(start.read_bytes()).hexdigest() == BEFORE_THE_SPLIT["explicit"][0]
    shutil.rmtree(root)
    (parts / "core_launch.sh").unlink()
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 1
    assert "host_seed: launcher variant explicit: part %s missing" % (parts / "core_launch.sh") in r.stderr
    assert not start.exists() and not (root / "etc/dsv41-lab/launcher.variant").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda t: t + "#@ piece nowhere\necho\n", "piece nowhere in {own} has no slot or default block in the core parts"),
    (lambda t: t.replace("#@ piece about\n", "#@ piece usage\n"), "{own} lacks the required piece about"),
    (lambda t: t.replace("#@ piece about\n", "#@ piece about\n#@ piece about\n"),
     "{own} line 4: piece about given twice"),
    (lambda t: "echo stray\n" + t, "{own} line 1: a script line before the first piece"),
    (lambda t: t + "#@ slot extra\n", "{own} line 6: slot is not for a variant's part"),
    (lambda t: t + "#@slot about\n", "{own} line 6: not a launcher directive: '#@slot about'"),
    (lambda t: "#@ set nowhere 1\n" + t, "{own} sets nowhere, which no core part uses"),
    (lambda t: t + "  echo @@unset@@\n", "@@unset@@ has no value"),
    (lambda t: t + "#@ insert nothing\n", "insert nothing names no default block of the core parts"),
], ids=["piece-without-place", "no-about", "piece-twice", "script-line-outside", "core-directive",
        "not-a-directive", "unused-value", "value-missing", "insert-unknown"])
def test_a_wrong_variant_part_fails_naming_it(seeder, tmp_path, edit, message):
    parts = copy_parts(tmp_path)
    own = parts / "variants" / "explicit.sh"
    own.write_text(edit(own.read_text()))
    with pytest.raises(seeder.LauncherPartsError) as err:
        seeder.assemble_launcher("explicit", parts)
    assert str(err.value).startswith("launcher variant explicit: ")
    assert message.format(own=own) in str(err.value)


def test_a_wrong_core_part_fails_naming_it(seeder, tmp_path):
    parts = copy_parts(tmp_path)
    core = parts / "core_launch.sh"
    text = core.read_text()
    core.write_text(text.replace("#@ end worker_run\n", ""))
    no_end = "%s: default block worker_run has no end" % re.escape(str(core))
    with pytest.raises(seeder.LauncherPartsError, match=no_end):
        seeder.assemble_launcher("explicit", parts)
    core.write_text(text.replace("#@ slot head_mounts\n", "#@ slot head_mounts\n#@ slot head_mounts\n"))
    with pytest.raises(seeder.LauncherPartsError, match="head_mounts is named twice in the core parts"):
        seeder.assemble_launcher("explicit", parts)


def test_slots_defaults_inserts_and_values(seeder, tmp_path):
    """The assembly's rules on small parts: an empty slot adds nothing, a piece replaces its default block
    (blank lines included), an insert repeats a block as the variant has it, @@NAME@@ takes the variant's value."""
    parts = tmp_path / "launcher"
    (parts / "variants").mkdir(parents=True)
    (parts / "core_head.sh").write_text("#!/usr/bin/env bash\n#@# a note\n#@ slot about required\n"
                                        "#@ set who core\n#@ slot unused\n")
    (parts / "core_launch.sh").write_text("#@ default list\na\n#@ default inner\nb\n#@ end inner\n#@ end list\n")
    (parts / "core_commands.sh").write_text("echo @@who@@\n#@ insert list\n")
    (parts / "variants" / "explicit.sh").write_text("#@# notes first\n\n#@ piece about\n# about\n"
                                                    "#@ piece inner\nB\n\n#@ set who variant\n")
    assert seeder.assemble_launcher("explicit", parts) == "#!/usr/bin/env bash\n# about\na\nB\n\necho variant\na\nB\n\n"
    (parts / "variants" / "explicit.sh").write_text("#@ piece about\n#@ piece list\nL\n")
    assert seeder.assemble_launcher("explicit", parts) == "#!/usr/bin/env bash\nL\necho core\nL\n"
