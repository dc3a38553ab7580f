"""Every custom module's DOCUMENTATION parses and documents exactly the options its argument_spec takes."""
import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible.module_utils.engine_log import SOURCE_ARGUMENT_SPEC

ROOT = Path(__file__).resolve().parents[2]
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
