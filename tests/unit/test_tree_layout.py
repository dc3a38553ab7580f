"""The test tree mirrors the code: each unit test file lives under the directory of what it tests, and every test
file name is unique (tests/unit/conftest.py puts every directory of the tree on the import path, so a test module
that imports another's fixtures by name must find exactly one)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
LAYOUT = {"modules", "module_utils", "filters", "lab", "plugins", "inventory"}


def _test_files():
    return sorted(p for p in UNIT.rglob("test_*.py") if "__pycache__" not in p.parts and p.parent != UNIT)


def test_every_test_file_name_is_unique_across_the_test_trees():
    names = [p.name for p in _test_files()]
    assert len(names) > 80
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_unit_tests_sit_in_the_directory_of_their_subject():
    loose = [p.name for p in UNIT.glob("test_*.py") if p.name != Path(__file__).name]
    assert loose == [], "a unit test file belongs in one of %s" % sorted(LAYOUT)
    assert set(p.relative_to(UNIT).parts[0] for p in _test_files()) <= LAYOUT


def test_module_utils_tests_mirror_the_packages():
    packages = sorted(d.name for d in (ROOT / "module_utils").iterdir() if (d / "__init__.py").is_file())
    tested = sorted(d.name for d in (UNIT / "module_utils").iterdir() if d.is_dir() and d.name != "__pycache__")
    assert len(packages) >= 10 and set(tested) <= set(packages)
    assert all(os.path.getsize(ROOT / "module_utils" / p / "__init__.py") == 0 for p in packages), \
        "package __init__.py files stay empty: every name is imported from its defining file"


def test_filter_plugin_files_share_one_suffix_and_no_name_with_a_module():
    """The tests import filter plugins and modules by file name from one import path: a filter file named like a
    module (library/engram_pack.py) or the engine stand-in would shadow it, so every filter file ends _filters."""
    filters = sorted(p.stem for p in (ROOT / "filter_plugins").glob("*.py"))
    assert len(filters) >= 12
    assert [f for f in filters if not f.endswith("_filters")] == []
    modules = {p.stem for p in (ROOT / "library").glob("*.py")}
    assert modules and not modules & set(filters)
