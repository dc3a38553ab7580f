"""The lab hosts' bytecode cache for AnsiballZ payloads (lab/standins/dsv41_lab_ansiballz_cache.py): a
payload's modules run exactly as uncached, a changed source is compiled again, and nothing else is cached."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

STANDINS = Path(__file__).resolve().parents[3] / "lab" / "standins"


def payload(path, answer):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "KIND = 'package'\n")
        z.writestr("pkg/sub/__init__.py", "")
        z.writestr("pkg/sub/mod.py", "def answer():\n    return %r\n" % answer)
    return path


def run(zip_path, cache):
    """A fresh interpreter with the hook loaded (as the .pth file loads it), importing from the zip."""
    code = ("import sys, dsv41_lab_ansiballz_cache; sys.path.insert(0, %r); import pkg, pkg.sub.mod; "
            "print(pkg.KIND, pkg.sub.mod.answer(), pkg.sub.mod.__file__)" % str(zip_path))
    env = dict(os.environ, PYTHONPATH=str(STANDINS), DSV41_LAB_ANSIBALLZ_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def cached(cache):
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


def inodes(cache):
    """Each entry's inode: a compile writes a new file (os.replace), a cache hit only reads."""
    return {p.name: p.stat().st_ino for p in cache.rglob("*") if p.is_file()}


def test_payload_modules_run_as_uncached_then_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    first = payload(tmp_path / "a" / "ansible_stat_payload.zip", 41)
    kind, answer, where = run(first, cache)
    assert (kind, answer) == ("package", "41") and where.startswith(str(first))
    entries = cached(cache)
    assert len(entries) == 3                      # pkg, pkg.sub, pkg.sub.mod
    assert all(not name.endswith(".tmp") for name in entries)
    written = inodes(cache)
    # the next task's payload: another temporary path, the same sources -> served from the cache
    (tmp_path / "b").mkdir()
    second = payload(tmp_path / "b" / "ansible_stat_payload.zip", 41)
    assert run(second, cache)[:2] == ["package", "41"]
    assert inodes(cache) == written               # read, not compiled and written again


def test_a_changed_source_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run(payload(tmp_path / "a" / "ansible_stat_payload.zip", 41), cache)[1] == "41"
    assert run(payload(tmp_path / "b" / "ansible_stat_payload.zip", 42), cache)[1] == "42"
    assert len(cached(cache)) == 4               # the changed module has its own entry


def test_other_zips_and_a_broken_entry_are_left_to_python(tmp_path):
    cache = tmp_path / "cache"
    assert run(payload(tmp_path / "library.zip", 7), cache)[:2] == ["package", "7"]
    assert not cache.exists()
    (tmp_path / "a").mkdir()
    zip_path = payload(tmp_path / "a" / "ansible_ping_payload.zip", 8)
    run(zip_path, cache)
    for entry in cache.rglob("*"):
        if entry.is_file():
            entry.write_bytes(b"not marshal data")
    assert run(zip_path, cache)[:2] == ["package", "8"]


def test_a_cache_directory_others_may_write_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    mine = cache / str(os.getuid())
    mine.mkdir(parents=True)
    mine.chmod(0o777)
    (tmp_path / "a").mkdir()
    assert run(payload(tmp_path / "a" / "ansible_ping_payload.zip", 9), cache)[:2] == ["package", "9"]
    assert cached(cache) == []


CONTROL = STANDINS.parent / "control_cache"


def _started_with(pythonpath, **extra):
    code = "import sys, os; print(any(h.__name__ == 'CachingZipImporter' for h in sys.path_hooks), os.environ.get('CHAINED'))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in pythonpath), **extra)
    env.pop("DSV41_LAB_ANSIBALLZ_CACHE", None)
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_control_node_loads_the_cache_only_when_the_test_runner_asks(tmp_path):
    # tests/run_lab_suites.py puts lab/control_cache first on PYTHONPATH and names a cache directory
    assert _started_with([CONTROL], DSV41_LAB_ANSIBALLZ_CACHE=str(tmp_path / "c")) == ["True", "None"]
    assert _started_with([CONTROL]) == ["False", "None"]       # no cache directory named: nothing installed
    assert _started_with([]) == ["False", "None"]


def test_the_sitecustomize_it_shadows_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    assert _started_with([CONTROL, other], DSV41_LAB_ANSIBALLZ_CACHE=str(tmp_path / "c")) == ["True", "yes"]
    assert _started_with([CONTROL, other]) == ["False", "yes"]


def test_a_cached_import_compiles_nothing_and_names_each_file_as_zipimport_does(tmp_path):
    """Python 3.11's zipimport compiles a module just to tell its file name (get_filename, asked for every
    module found); the hook answers the same name from the archive's table. A cache hit compiles nothing."""
    probe = ("import builtins, sys, zipimport, dsv41_lab_ansiballz_cache as c; compiled = []; real = builtins.compile\n"
             "def counting(source, name, *a, **k):\n"
             "    compiled.append(name); return real(source, name, *a, **k)\n"
             "builtins.compile = counting\n"
             "z = sys.argv[1]; sys.path.insert(0, z); import pkg, pkg.sub, pkg.sub.mod\n"
             "plain = zipimport.zipimporter(z + '/pkg/sub')\n"
             "names = [m.__spec__.origin for m in (pkg, pkg.sub, pkg.sub.mod)]\n"
             "assert names[2] == c.CachingZipImporter(z + '/pkg/sub').get_filename('pkg.sub.mod') == "
             "plain.get_filename('pkg.sub.mod'), names\n"
             "print(len([n for n in compiled if n.startswith(z)]), *names)\n")
    env = dict(os.environ, PYTHONPATH=str(STANDINS), DSV41_LAB_ANSIBALLZ_CACHE=str(tmp_path / "cache"))

    def imported(zip_path):
        out = subprocess.run([sys.executable, "-c", probe, str(zip_path)], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        count, *names = out.stdout.split()
        return int(count), names

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = payload(tmp_path / "a" / "ansible_stat_payload.zip", 41)
    count, names = imported(first)
    # only the plain zipimporter the probe built compiles (its get_filename), once per miss: three modules
    # compiled for the cache and one by the probe's own comparison
    assert count == 4
    assert names == [str(first / "pkg" / "__init__.py"), str(first / "pkg" / "sub" / "__init__.py"),
                     str(first / "pkg" / "sub" / "mod.py")]
    count, names = imported(payload(tmp_path / "b" / "ansible_stat_payload.zip", 41))
    assert count == 1          # the probe's plain zipimporter; the cached import itself compiled nothing
