"""adapter_registry through its entry point, on the lab's import hook and a variant missing an entry."""
import sys
from pathlib import Path

from modrun import run_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "library"))
import adapter_registry  # noqa: E402

HOOK = ROOT / "lab" / "seed" / "sitecustomize-report.py"


def test_registered_adapter_passes():
    result = run_module(adapter_registry.main, {"path": str(HOOK), "expected": {"wo_a_w8": "DSV41_WO_A_W8"}})
    assert not result.get("failed"), result
    assert result["registrations"]["wo_a_w8"]["finder"] and result["registrations"]["wo_a_w8"]["install"]


def test_enabled_adapter_missing_is_named(tmp_path):
    result = run_module(adapter_registry.main, {"path": str(HOOK), "host_label": "spark2",
                                                "expected": {"autotune_keep": "DSV41_AUTOTUNE_KEEP"}})
    assert result["failed"]
    assert result["missing"] == ["autotune_keep"]
    assert "spark2" in result["msg"] and "adapter autotune_keep is not registered" in result["msg"]
    assert str(HOOK) in result["msg"]


def test_unreadable_hook_fails_naming_it(tmp_path):
    result = run_module(adapter_registry.main, {"path": str(tmp_path / "nope.py")}, check_mode=True)
    assert result["failed"] and "nope.py" in result["msg"]
