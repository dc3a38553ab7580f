"""The import-hook reader (module_utils/adapters/hook.py) and adapter_registry, on hooks of the real shape.

Real hooks insert a finder into sys.meta_path only when DSV41_SOURCE is set, wrap a fixed list of engine
modules, and call install_<adapter>(module) in the loader: gated by a switch, ungated (the adapter reads
its switch itself), TP4-only, and one adapter hooking several modules. The reader's verdicts are checked
against what the hook really does when Python runs it with stand-in engine modules.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible.module_utils.adapters import hook as H
from ansible.module_utils.adapters import arming as A
from modrun import run_module

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "library"))
sys.path.insert(0, str(ROOT / "filter_plugins"))
import adapter_registry  # noqa: E402
import adapters_filters as F  # noqa: E402

REPORT_HOOK = ROOT / "lab" / "seed" / "sitecustomize-report.py"   # the hook as the report found it
PORTED_HOOK = ROOT / "lab" / "seed" / "adapters" / "sitecustomize.py"  # + the retention adapter (stage B)
ADAPTERS = ROOT / "lab" / "seed" / "adapters"

SEVEN = {"engram_prefetch": "DSV41_ENGRAM_PREFETCH", "draft_head_fp8": "DSV41_DRAFT_HEAD_FP8",
         "draft_tau": "DSV41_DRAFT_TAU", "block_verify": "DSV41_BLOCK_VERIFY", "verify_cap": "DSV41_VERIFY_CAP",
         "folded_fence": "DSV41_FOLDED_FENCE", "wo_a_w8": "DSV41_WO_A_W8"}
M = "sglang.srt."
CAP_MODULES = [M + "models.deepseek_v4", M + "speculative.dspark_components.dspark_verify",
               M + "speculative.dspark_components.dspark_draft", M + "speculative.dspark_worker",
               M + "model_executor.cuda_graph_runner"]

# Another real-shaped hook, written differently: a helper gate, a set of names, elif on a tuple, the
# finder gated through a module-level name, an install in an else branch, and a TP4-only adapter.
OTHER_SHAPE = '''
import os, sys, importlib.abc
_SRC = os.environ.get("DSV41_SOURCE", "")
HOOKED = frozenset({"sglang.srt.layers.engram", "sglang.srt.models.deepseek_v4",
                    "sglang.srt.model_executor.runner.flashinfer_autotune"})

def _on(var):
    return os.environ.get(var, "0") not in ("0", "", "off", "false")

class Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner
    def exec_module(self, module):
        self.inner.exec_module(module)
        if module.__name__ in ("sglang.srt.models.deepseek_v4",):
            if os.environ.get("DSV41_LAUNCHER", "tp3") == "tp4":
                install_wo_a_w8_tp4(module)
            else:
                install_wo_a_w8(module)
            install_folded_fence(module)
        elif module.__name__ == "sglang.srt.model_executor.runner.flashinfer_autotune":
            if _on("DSV41_AUTOTUNE_KEEP"):
                install_autotune_keep(module)
            if os.environ.get("DSV41_CAP_TYPO", "0") != "0":
                install_verify_cap(module)

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in HOOKED:
            return None

if _SRC:
    sys.meta_path.insert(0, Finder())
'''


def table(hook):
    return {name: (a["modules"], a["gates"], a["ungated"], a["tp4_only"]) for name, a in hook["adapters"].items()}


def test_report_hook_table():
    hook = H.read_hook(REPORT_HOOK.read_text())
    assert hook["finder"]["gate"] == ["DSV41_SOURCE"] and hook["finder"]["class"] == "_Finder"
    assert len(hook["finder"]["modules"]) == 6 and M + "model_executor.runner.flashinfer_autotune" not in \
        hook["finder"]["modules"]
    assert table(hook) == {
        "engram_prefetch": ([M + "layers.engram"], ["DSV41_ENGRAM_PREFETCH"], False, False),
        "wo_a_w8": ([M + "models.deepseek_v4"], ["DSV41_WO_A_W8"], False, False),
        "draft_head_fp8": ([M + "models.deepseek_v4"], ["DSV41_DRAFT_HEAD_FP8"], False, False),
        "verify_cap": (CAP_MODULES, ["DSV41_VERIFY_CAP"], False, False),
        "shared_pad": ([M + "models.deepseek_v4"], ["DSV41_SHARED_PAD_K"], False, True),
        "block_verify": ([M + "speculative.dspark_components.dspark_verify"], ["DSV41_BLOCK_VERIFY"], False, False),
        "folded_fence": ([M + "speculative.dspark_components.dspark_verify"], ["DSV41_FOLDED_FENCE"], False, False),
        "draft_tau": ([M + "speculative.dspark_components.dspark_draft"], [], True, False),
    }
    assert len(hook["adapters"]["verify_cap"]["lines"]) == 4, "four call sites, five modules (one elif of two)"


def test_seven_arm_on_their_switch_and_the_retention_adapter_only_in_the_ported_hook():
    report, ported = H.read_hook(REPORT_HOOK.read_text()), H.read_hook(PORTED_HOOK.read_text())
    reads = {a: A.reads_switch((ADAPTERS / (a + ".py")).read_text(), s) for a, s in SEVEN.items()}
    assert reads["draft_tau"] is True
    assert A.hook_problems(report, SEVEN, reads_switch=reads) == []
    assert A.hook_problems(ported, dict(SEVEN, autotune_keep="DSV41_AUTOTUNE_KEEP"), reads_switch=reads) == []
    assert A.hook_problems(report, {"autotune_keep": "DSV41_AUTOTUNE_KEEP"}) == [
        "sitecustomize.py: adapter autotune_keep is not registered (no install_autotune_keep call in the loader "
        "of any wrapped module)"]
    assert table(ported)["autotune_keep"] == ([M + "model_executor.runner.flashinfer_autotune"],
                                              ["DSV41_AUTOTUNE_KEEP"], False, False)


@pytest.mark.parametrize("value, arms", [("1", True), ("on", True), ("true", True), ("0", False), ("yes", False)])
def test_prefetch_gate_takes_only_its_own_values(value, arms):
    hook = H.read_hook(REPORT_HOOK.read_text())
    assert A.arming(hook, "engram_prefetch", "DSV41_ENGRAM_PREFETCH", value)["arms"] is arms


def test_tp4_only_and_gates_by_value():
    hook = H.read_hook(REPORT_HOOK.read_text())
    assert A.arming(hook, "shared_pad", "DSV41_SHARED_PAD_K", "1") == {
        "arms": False, "reason": "install_shared_pad runs only on the TP4 launcher (DSV41_LAUNCHER=tp4)"}
    assert A.arming(hook, "shared_pad", "DSV41_SHARED_PAD_K", "1", launcher="tp4")["arms"] is True
    assert A.arming(hook, "verify_cap", "DSV41_VERIFY_CAP", "conf:0.1")["arms"] is True
    for off in ("0", "", "off", "false"):
        assert A.arming(hook, "verify_cap", "DSV41_VERIFY_CAP", off)["arms"] is False
    # ungated: installed whatever the value, so the adapter's own reading of the switch decides
    assert A.arming(hook, "draft_tau", "DSV41_DRAFT_TAU", "1")["arms"] is None, "the adapter file was not read"
    assert A.arming(hook, "draft_tau", "DSV41_DRAFT_TAU", "1", adapter_reads_switch=False) == {
        "arms": False, "reason": "install_draft_tau runs on every boot and draft_tau.py never reads DSV41_DRAFT_TAU: "
                                 "the switch does not control it"}


def test_other_shape():
    hook = H.read_hook(OTHER_SHAPE)
    assert hook["finder"] == {"class": "Finder", "gate": ["DSV41_SOURCE"], "tp4_only": [], "modules": [
        M + "layers.engram", M + "models.deepseek_v4", M + "model_executor.runner.flashinfer_autotune"]}
    t = table(hook)
    assert t["wo_a_w8_tp4"] == ([M + "models.deepseek_v4"], [], True, True)
    assert t["wo_a_w8"] == ([M + "models.deepseek_v4"], [], True, False), "the else of the TP4 test: TP3"
    assert t["folded_fence"] == ([M + "models.deepseek_v4"], [], True, False)
    assert t["autotune_keep"] == ([M + "model_executor.runner.flashinfer_autotune"], ["DSV41_AUTOTUNE_KEEP"], False,
                                  False)
    problems = A.hook_problems(hook, {"autotune_keep": "DSV41_AUTOTUNE_KEEP", "verify_cap": "DSV41_VERIFY_CAP",
                                      "folded_fence": "DSV41_FOLDED_FENCE", "block_verify": "DSV41_BLOCK_VERIFY"},
                               reads_switch={"folded_fence": False})
    assert problems == [
        "sitecustomize.py: adapter block_verify is not registered (no install_block_verify call in the loader of "
        "any wrapped module)",
        "sitecustomize.py: adapter folded_fence: install_folded_fence runs on every boot and folded_fence.py never "
        "reads DSV41_FOLDED_FENCE: the switch does not control it",
        "sitecustomize.py: adapter verify_cap: install_verify_cap is gated by DSV41_CAP_TYPO, not armed by "
        "DSV41_VERIFY_CAP=1"]


def test_finder_never_inserted_and_not_python():
    hook = H.read_hook(REPORT_HOOK.read_text().replace("sys.meta_path.insert(0, _Finder())", "pass"))
    assert hook["finder"]["gate"] is None
    assert "sitecustomize.py: the finder is never inserted into sys.meta_path" in A.hook_problems(hook, SEVEN)
    with pytest.raises(H.HookError) as err:
        H.read_hook("if x:\n  from adapter import\n", source="/adapter/sitecustomize.py")
    assert str(err.value).startswith("/adapter/sitecustomize.py: not valid Python (line 2")


# ----------------------------------------------------------------------------------- the hook, executed

RUNNER = """
import importlib, json, os, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
print(json.dumps(open(os.environ["REC"]).read().split() if os.path.exists(os.environ["REC"]) else []))
"""


@pytest.fixture
def sandbox(tmp_path):
    """An engine package with every wrapped module, and adapters that record their install()."""
    engine = tmp_path / "engine"
    hook = H.read_hook(PORTED_HOOK.read_text())
    for name in hook["finder"]["modules"]:
        parts = name.split(".")
        for i in range(1, len(parts)):
            pkg = engine.joinpath(*parts[:i])
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").touch()
        engine.joinpath(*parts[:-1], parts[-1] + ".py").write_text("LOADED = True\n")
    src = tmp_path / "src"
    (src / "adapter").mkdir(parents=True)
    for adapter in list(hook["adapters"]):
        (src / "adapter" / (adapter + ".py")).write_text(
            "import os\ndef install():\n    open(os.environ['REC'], 'a').write(%r + '\\n')\n" % adapter)
    (src / "adapter" / "sitecustomize.py").write_text(PORTED_HOOK.read_text())
    return {"engine": engine, "src": src, "hook": hook, "rec": tmp_path / "rec.txt"}


def run_hook(sb, env):
    sb["rec"].unlink(missing_ok=True)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("DSV41_", "PYTHON"))}
    full.update(env, PYTHONPATH="%s:%s" % (sb["src"] / "adapter", sb["engine"]), REC=str(sb["rec"]))
    res = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(sb["hook"]["finder"]["modules"])], env=full,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("env", [
    {},
    {"DSV41_AUTOTUNE_KEEP": "1", "DSV41_VERIFY_CAP": "conf:0.1"},
    {"DSV41_SOURCE": "{src}"},
    {"DSV41_SOURCE": "{src}", "DSV41_AUTOTUNE_KEEP": "1", "DSV41_VERIFY_CAP": "conf:0.1", "DSV41_WO_A_W8": "off",
     "DSV41_ENGRAM_PREFETCH": "on", "DSV41_SHARED_PAD_K": "1"},
    {"DSV41_SOURCE": "{src}", "DSV41_LAUNCHER": "tp4", "DSV41_SHARED_PAD_K": "1", "DSV41_BLOCK_VERIFY": "true",
     "DSV41_FOLDED_FENCE": "false", "DSV41_ENGRAM_PREFETCH": "yes"},
])
def test_reader_predicts_what_the_hook_installs(sandbox, env):
    env = {k: v.format(src=sandbox["src"]) for k, v in env.items()}
    installed = run_hook(sandbox, env)
    hook = sandbox["hook"]
    predicted = []
    if "DSV41_SOURCE" in env:
        for adapter, info in hook["adapters"].items():
            if info["ungated"]:     # installed on every boot (the stub adapters here read no switch)
                verdict = A.arming(hook, adapter, "UNUSED", "0", adapter_reads_switch=True,
                                   launcher=env.get("DSV41_LAUNCHER", "tp3"))
            else:
                switch = info["gates"][0]
                verdict = A.arming(hook, adapter, switch, env.get(switch, "0"),
                                   launcher=env.get("DSV41_LAUNCHER", "tp3"))
            if verdict["arms"]:
                predicted.append(adapter)
    assert sorted(set(installed)) == sorted(predicted)
    if "DSV41_VERIFY_CAP" in env and "DSV41_SOURCE" in env:
        assert installed.count("verify_cap") == 5, "the cap hooks five modules"


# ----------------------------------------------------------------------------------- the module


def test_module_reports_per_adapter(monkeypatch, capsys):
    result = run_module(adapter_registry.main, {"path": str(PORTED_HOOK), "expected": dict(
        SEVEN, autotune_keep="DSV41_AUTOTUNE_KEEP"), "values": {"DSV41_VERIFY_CAP": "conf:0.1"}})
    assert not result.get("failed"), result
    cap = result["adapters"]["verify_cap"]
    assert cap["modules"] == CAP_MODULES and cap["gates"] == ["DSV41_VERIFY_CAP"] and cap["value"] == "conf:0.1"
    assert cap["arms"] is True
    tau = result["adapters"]["draft_tau"]
    assert tau["ungated"] and tau["arms"] and "reads DSV41_DRAFT_TAU itself" in tau["reason"]
    assert result["adapters"]["shared_pad"]["tp4_only"] and "arms" not in result["adapters"]["shared_pad"]
    assert result["finder"]["gate"] == ["DSV41_SOURCE"]
    assert all(set(i) == {"function", "adapter", "sources", "line", "modules", "module_named", "gate", "tp4_only"}
               for i in result["installs"])
    assert all(i["sources"] == [] for i in result["installs"]), "the lab hook defines its install functions"
    assert result["finder"]["tp4_only"] == []


def test_module_enabled_adapter_missing_is_named(monkeypatch, capsys):
    result = run_module(adapter_registry.main, {"path": str(REPORT_HOOK), "host_label": "spark2",
                                                "expected": {"autotune_keep": "DSV41_AUTOTUNE_KEEP"}})
    assert result["failed"] and result["missing"] == ["autotune_keep"]
    assert result["msg"] == ("spark2: %s: adapter autotune_keep is not registered (no install_autotune_keep call "
                             "in the loader of any wrapped module)" % REPORT_HOOK)


def test_module_ungated_adapter_that_ignores_its_switch(monkeypatch, capsys, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(REPORT_HOOK.read_text())
    (tmp_path / "draft_tau.py").write_text("def install():\n    pass\n")
    result = run_module(adapter_registry.main,
                      {"path": str(tmp_path / "sitecustomize.py"), "host_label": "spark1",
                       "expected": {"draft_tau": "DSV41_DRAFT_TAU"}})
    assert result["failed"] and "draft_tau.py never reads DSV41_DRAFT_TAU" in result["msg"]
    assert result["adapters"]["draft_tau"]["arms"] is False


def test_module_unreadable_hook_fails_naming_it(monkeypatch, capsys, tmp_path):
    result = run_module(adapter_registry.main,
                      {"path": str(tmp_path / "nope.py"), "_ansible_check_mode": True})
    assert result["failed"] and "nope.py" in result["msg"]
    (tmp_path / "bad.py").write_text("def (:\n")
    result = run_module(adapter_registry.main,
                      {"path": str(tmp_path / "bad.py"), "host_label": "spark3"})
    assert result["failed"] and result["msg"].startswith("spark3: cannot read the import hook %s: %s: not valid Python"
                                                         % (tmp_path / "bad.py", tmp_path / "bad.py"))


# ----------------------------------------------------------------------------------- the role's filters

def test_source_problems():
    manifest = {"a.py": "1" * 64, "wo_a_w8.py": "2" * 64}
    results = [{"item": "a.py", "stat": {"exists": True, "checksum": "1" * 64}},
               {"item": "wo_a_w8.py", "stat": {"exists": True, "checksum": "3" * 64}},
               {"item": "b.py", "stat": {"exists": True, "checksum": "4" * 64}},
               {"item": "c.py", "stat": {"exists": False}}]
    assert F.adapters_source_problems(results, manifest, "/src", 3) == [
        "/src/wo_a_w8.py: sha256 %s, manifest expects %s (the local TP3 generalisation; never replace it with the "
        "TP4 file)" % ("3" * 64, "2" * 64),
        "b.py: no sha256 in the manifest (adapters_manifest)",
        "/src/c.py: missing"]
    # a TP4 fleet's manifest names the downstream TP4 file: a difference says that is what it must be
    assert F.adapters_source_problems(results[:2], manifest, "/src", "4") == [
        "/src/wo_a_w8.py: sha256 %s, manifest expects %s (on TP4 the downstream TP4 file of the pinned revision, "
        "never the TP3 generalisation)" % ("3" * 64, "2" * 64)]
    with pytest.raises(AnsibleFilterError, match="tp_size 5: the adapters know which wo_a_w8.py a fleet runs on "
                                                 "TP3 and TP4 only"):
        F.adapters_source_problems(results, manifest, "/src", 5)


def test_image_problems():
    lines = ["%s  /sgl-workspace/adapter/a.py" % ("1" * 64), "%s  /sgl-workspace/adapter/b.py" % ("5" * 64)]
    assert F.adapters_image_hashes(lines) == {"a.py": "1" * 64, "b.py": "5" * 64}
    assert F.adapters_image_problems(lines, ["a.py", "b.py", "c.py"], {"a.py": "1" * 64, "b.py": "2" * 64},
                                     "/sgl-workspace/adapter") == [
        "/sgl-workspace/adapter/b.py: sha256 %s, manifest expects %s" % ("5" * 64, "2" * 64),
        "/sgl-workspace/adapter/c.py: missing in the image"]


def test_registry_lines(monkeypatch, capsys):
    expected = {"draft_tau": "DSV41_DRAFT_TAU", "wo_a_w8": "DSV41_WO_A_W8"}
    unread = run_module(adapter_registry.main, {"path": str(REPORT_HOOK), "expected": expected})
    assert unread["failed"] and unread["adapters"]["draft_tau"]["arms"] is None, "no draft_tau.py beside that hook"
    result = run_module(adapter_registry.main, {"path": str(REPORT_HOOK), "expected": expected,
                                                "adapter_dir": str(ADAPTERS)})
    assert F.adapters_registry_lines(result, {"wo_a_w8": "DSV41_WO_A_W8", "draft_tau": "DSV41_DRAFT_TAU"}) == [
        "finder: 6 wrapped engine module(s), inserted only when DSV41_SOURCE is set",
        "draft_tau: modules sglang.srt.speculative.dspark_components.dspark_draft; gate none (an ungated call too); "
        "DSV41_DRAFT_TAU=1 arms it: yes (installed on every boot; the adapter reads DSV41_DRAFT_TAU itself)",
        "wo_a_w8: modules sglang.srt.models.deepseek_v4; gate DSV41_WO_A_W8; DSV41_WO_A_W8=1 arms it: yes "
        "(install_wo_a_w8 runs when DSV41_WO_A_W8=1)"]


def test_an_adapters_file_is_the_module_its_install_is_imported_from(tmp_path):
    # install_folded_fence comes from folded_result_fence.py: that file is read for the switch, there is no
    # folded_fence.py to find.
    from pathlib import Path
    from ansible.module_utils.adapters import hook as import_hook, arming as import_hook_arming
    fixture = Path(__file__).parents[1] / "fixtures" / "image_hook"
    hook = import_hook.read_hook((fixture / "sitecustomize.py").read_text(), source="sitecustomize.py")
    assert import_hook_arming.adapter_modules(hook, "folded_fence") == ["folded_result_fence"]
    (tmp_path / "folded_result_fence.py").write_text(
        "import os\nON = os.environ.get('DSV41_FOLDED_FENCE', '0') == '1'\n")
    switch = {"folded_fence": "DSV41_FOLDED_FENCE"}
    assert import_hook_arming.adapter_reads(str(tmp_path), switch, hook) == {"folded_fence": True}
    assert import_hook_arming.adapter_reads(str(tmp_path), switch) == {"folded_fence": None}   # no folded_fence.py
    assert import_hook_arming.adapter_reads(str(fixture), switch, hook) == {"folded_fence": False}
