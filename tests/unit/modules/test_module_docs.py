"""Every custom module's DOCUMENTATION parses and documents exactly the options its argument_spec takes."""
import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible.module_utils.engine_log.source import SOURCE_ARGUMENT_SPEC

ROOT = Path(__file__).resolve().parents[3]
MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))


@pytest.fixture(scope="module")
def docs():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    ansible_doc = shutil.which("ansible-doc")
    assert ansible_doc, "ansible-doc is not on PATH (put the project venv's bin on PATH)"
    out = subprocess.run([ansible_doc, "--json", "-t", "module", "-M",
                          str(ROOT / "library"), *MODULES], env=env, cwd=ROOT, check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out)


def _descriptions(node, where):
    """Every description in a doc tree, with where it is: YAML turns an unquoted ``text: more`` line into
    a dict, which ansible-doc then cannot print."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description":
                for item in value if isinstance(value, list) else [value]:
                    yield where, item
            yield from _descriptions(value, f"{where}.{key}")
    elif isinstance(node, list):
        for item in node:
            yield from _descriptions(item, where)


def source_doc(path):
    """DOCUMENTATION of a module, read from the source as YAML (no import)."""
    import yaml
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    return None


def spec_keys(path):
    """Top-level keys of the argument_spec=dict(...) call, read from the source (no import)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Call):
            keys = {kw.arg for kw in node.value.keywords}
            for arg in node.value.args:  # dict(SHARED_SPEC, extra=...) style
                if isinstance(arg, ast.Attribute) and arg.attr == "SOURCE_ARGUMENT_SPEC" or \
                        isinstance(arg, ast.Name) and arg.id == "SOURCE_ARGUMENT_SPEC":
                    keys |= set(SOURCE_ARGUMENT_SPEC)
            return keys
    return None


@pytest.mark.parametrize("name", MODULES)
def test_documentation_matches_argument_spec(docs, name):
    doc = docs[name]["doc"]
    assert doc["short_description"] and docs[name]["examples"] and docs[name]["return"] is not None
    keys = spec_keys(ROOT / "library" / f"{name}.py")
    assert keys is not None, f"{name}: no argument_spec=dict(...) found"
    assert set(doc.get("options") or {}) == keys, name


def test_log_source_fragment_documents_the_shared_argument_spec():
    """The doc fragment the engine-log modules extend documents exactly SOURCE_ARGUMENT_SPEC."""
    import importlib.util
    import yaml
    spec = importlib.util.spec_from_file_location("frag", ROOT / "doc_fragments" / "engine_log_source.py")
    frag = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frag)
    options = yaml.safe_load(frag.ModuleDocFragment.DOCUMENTATION)["options"]
    assert set(options) == set(SOURCE_ARGUMENT_SPEC)
    for name, arg in SOURCE_ARGUMENT_SPEC.items():
        assert options[name]["type"] == arg["type"], name
        assert options[name].get("default") == arg.get("default"), name


@pytest.mark.parametrize("name", MODULES)
def test_every_description_is_text(docs, name):
    bad = [(where, item) for part in ("doc", "return") for where, item in _descriptions(docs[name][part] or {}, part)
           if not isinstance(item, str)]
    assert bad == [], f"{name}: descriptions that YAML read as something else (quote them): {bad}"


def test_ansible_doc_prints_every_module():
    """What an operator types: ``ansible-doc -M library <module>`` (text, not --json) for each module."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    ansible_doc = shutil.which("ansible-doc")
    res = subprocess.run([ansible_doc, "-M", str(ROOT / "library"), *MODULES], env=env, cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    missing = [name for name in MODULES if f"> MODULE {name} " not in res.stdout]
    assert missing == [], missing


@pytest.mark.parametrize("name", MODULES)
def test_log_source_options_come_from_the_fragment(name):
    """A module taking the shared log-source options documents them through the fragment, never inline."""
    path = ROOT / "library" / f"{name}.py"
    doc = source_doc(path)
    uses_source = "SOURCE_ARGUMENT_SPEC" in path.read_text()
    fragments = doc.get("extends_documentation_fragment") or []
    assert ("engine_log_source" in fragments) == uses_source, name
    if uses_source:
        assert not set(doc.get("options") or {}) & set(SOURCE_ARGUMENT_SPEC), f"{name} documents shared options inline"
