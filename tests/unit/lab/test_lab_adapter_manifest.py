"""The lab inventory's adapter manifest is the sha256 of the lab's adapter files (and names the TP3 file)."""
import hashlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_lab_manifest_matches_the_source_files():
    group_vars = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "dsv41_ranks" / "main.yml").read_text())
    source = ROOT / "lab" / "seed" / "adapters"
    manifest = group_vars["dsv41_adapters_manifest"]
    for name, digest in manifest.items():
        assert hashlib.sha256((source / name).read_bytes()).hexdigest() == digest, name
    # the TP4 file never matches the local TP3 entry
    assert hashlib.sha256((source / "tp4" / "wo_a_w8.py").read_bytes()).hexdigest() != manifest["wo_a_w8.py"]
    assert set(group_vars["dsv41_adapters_enabled"]) | {"autotune_keep"} == {n[:-3] for n in manifest if n != "sitecustomize.py"}
