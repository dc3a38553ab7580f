"""The import-hook reader on the shapes launcher hooks take, pinned, then checked against running them.

Fixtures (tests/unit/fixtures/hooks/): ``split_installs.py`` (adapters installed through several functions
imported from their module under ``install_<adapter>_<part>`` aliases, an adapter module whose hook name
differs, unaliased and bare ``install`` imports), ``tp_gated.py`` (the TP4 launcher read through a helper,
tested beside the module name in ``elif``, TP4-only finder modules, a module wrapped only under a switch, an
adapter file chosen by the launcher and one chosen from the engine's own source) and ``tp4_list_nested.py``
(the TP4 list in a nested finder test, the launcher read inline).

The execution tests run each hook for real in an isolated child (``hook_exec``: read-only filesystem, no
network, stand-in engine and adapter modules) under every switch alone and every two together, on TP3 and
TP4, and require the reader's ``installs`` and ``wrapped`` to match what ran. Hooks found in
``$HOOK_EXEC_REAL_DIR`` (default /tmp/hooks-real) are checked the same way; the test skips without them.
"""
import os
import sys
from pathlib import Path

import pytest

from ansible.module_utils.adapters import hook as H
from ansible.module_utils.adapters import arming as A
from modrun import run_module

import hook_exec as X

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "library"))
sys.path.insert(0, str(ROOT / "filter_plugins"))
import adapter_registry  # noqa: E402
import adapters_filters as F  # noqa: E402

HOOKS = Path(__file__).resolve().parents[2] / "fixtures" / "hooks"
REAL = Path(os.environ.get("HOOK_EXEC_REAL_DIR", "/tmp/hooks-real"))
LAB = {"report": ROOT / "lab" / "seed" / "sitecustomize-report.py",
       "ported": ROOT / "lab" / "seed" / "adapters" / "sitecustomize.py"}
M = "sglang.srt."
TP4 = {"DSV41_LAUNCHER": "tp4"}


def read(name):
    return H.read_hook((HOOKS / (name + ".py")).read_text())


def table(hook):
    return {name: (a["modules"], a["gates"], a["ungated"], a["tp4_only"]) for name, a in hook["adapters"].items()}


# ----------------------------------------------------------------------------------- several install functions

def test_one_adapter_through_several_install_functions():
    hook = read("split_installs")
    assert hook["finder"]["tp4_only"] == [] and len(hook["finder"]["modules"]) == 9
    t = table(hook)
    assert t["verify_cap"] == ([M + "models.deepseek_v4", M + "models.deepseek_v4_dspark",
                                M + "speculative.dspark_components.dspark_verify",
                                M + "speculative.dspark_components.dspark_draft",
                                M + "speculative.dspark_components.dspark_planner",
                                "sglang.kernels.ops.moe.moe_fused_gate"], ["DSV41_VERIFY_CAP"], False, False)
    assert hook["adapters"]["verify_cap"]["lines"] == [52, 57, 67, 72, 76], "five call sites, one adapter"
    assert t["wo_a_w8"] == ([M + "models.deepseek_v4", M + "models.deepseek_v4_dspark"], ["DSV41_WO_A_W8"],
                            False, False)
    # the hook's own name and the adapter module's name both answer
    assert t["folded_fence"] == t["result_fence"] == ([M + "speculative.dspark_components.dspark_verify"],
                                                      ["DSV41_FOLDED_FENCE"], False, False)
    # a bare install and unaliased imports name the adapter by its module
    assert t["engram_prefetch"] == ([M + "layers.engram"], [], True, False)
    assert t["chat_encoding"] == ([M + "entrypoints.openai.serving_chat"], [], True, False)
    assert sorted(t) == ["autotune_keep", "chat_encoding", "engram_prefetch", "engram_store", "folded_fence",
                         "result_fence", "verify_cap", "wo_a_w8"], "no entry point is taken for an adapter"
    gate = [i for i in hook["installs"] if i["function"] == "install_gate"]
    assert [(i["adapter"], i["sources"], i["modules"]) for i in gate] == [
        ("verify_cap", ["verify_cap"], ["sglang.kernels.ops.moe.moe_fused_gate"])]


@pytest.mark.parametrize("value, arms", [("1", True), ("conf:0.1", True), ("0", False), ("off", False)])
def test_the_cap_arms_through_any_of_its_functions(value, arms):
    hook = read("split_installs")
    assert A.arming(hook, "verify_cap", "DSV41_VERIFY_CAP", value)["arms"] is arms
    assert A.arming(hook, "verify_cap", "DSV41_VERIFY_CAP", value, launcher="tp4")["arms"] is arms


def test_the_dspark_entry_takes_only_the_confidence_form():
    hook = read("split_installs")
    dspark = M + "models.deepseek_v4_dspark"
    assert dspark not in A.installs(hook, {"DSV41_VERIFY_CAP": "1"})["verify_cap"]
    assert A.installs(hook, {"DSV41_VERIFY_CAP": "conf:0.1"})["verify_cap"][dspark] is True


def test_split_installs_register_what_the_role_expects():
    hook = read("split_installs")
    expected = {"verify_cap": "DSV41_VERIFY_CAP", "folded_fence": "DSV41_FOLDED_FENCE", "wo_a_w8": "DSV41_WO_A_W8",
                "autotune_keep": "DSV41_AUTOTUNE_KEEP", "engram_prefetch": "DSV41_ENGRAM_PREFETCH"}
    assert A.hook_problems(hook, expected, reads_switch={"engram_prefetch": True}) == []


# ----------------------------------------------------------------------------------- TP3/TP4 gating

TP4_ONLY = [M + "layers.attention.deepseek_v4_backend", M + "layers.linear", M + "models.deepseek_v2",
            "b12x.comm.roce.roce_oneshot"]


def test_tp4_only_modules_are_wrapped_on_tp4_alone():
    hook = read("tp_gated")
    assert hook["finder"]["modules"] == [M + "layers.engram", M + "model_loader.utils",
                                         M + "layers.quantization.fp8_utils", M + "models.deepseek_v4",
                                         M + "models.deepseek_v4_dspark",
                                         M + "speculative.dspark_components.dspark_verify"]
    assert hook["finder"]["tp4_only"] == TP4_ONLY
    loader_utils = M + "model_loader.utils"
    assert sorted(A.wrapped(hook, {})) == sorted(m for m in hook["finder"]["modules"] if m != loader_utils)
    assert sorted(A.wrapped(hook, {"DSV41_SERIAL_WEIGHT_LOAD": "1"})) == sorted(hook["finder"]["modules"])
    assert sorted(A.wrapped(hook, TP4)) == sorted([m for m in hook["finder"]["modules"] if m != loader_utils]
                                                  + TP4_ONLY)
    nested = read("tp4_list_nested")
    assert nested["finder"]["modules"] == [M + "models.deepseek_v4"]
    assert nested["finder"]["tp4_only"] == [M + "distributed.device_communicators.pynccl",
                                            M + "model_loader.weight_utils"]


def test_tp_gating_table():
    t = table(read("tp_gated"))
    backend = [M + "layers.attention.deepseek_v4_backend"]
    assert t["indexer_chunked"] == (backend, ["DSV41_INDEXER_CHUNKED"], False, True), "the elif tests the launcher"
    assert t["shared_pad"] == t["shared_pad_k"] == ([M + "layers.quantization.fp8_utils"], [], True, True)
    assert t["replicated_split"] == ([M + "layers.linear"], ["DSV41_REPLICATED_SPLIT"], False, True)
    assert t["l2_prefetch"] == ([M + "layers.engram", M + "models.deepseek_v2", "b12x.comm.roce.roce_oneshot"],
                                ["DSV41_L2_PREFETCH", "DSV41_L2_PREFETCH_ENGRAM"], False, True)
    assert t["prefill_sp"] == ([M + "models.deepseek_v4"], ["DSV41_PREFILL_SP", "DSV41_PREFILL_SP_DEBUG"], False,
                               True)
    assert t["draft_head_fp8"] == ([M + "models.deepseek_v4_dspark"], ["DSV41_DRAFT_HEAD_FP8"], False, False)
    assert t["draft_head_fp8_tp4"] == ([M + "models.deepseek_v4_dspark"],
                                       ["DSV41_DRAFT_HEAD_FP8", "DSV41_DRAFT_HEAD_FP8_IMPL"], False, True)
    assert t["verify_cap"] == ([M + "models.deepseek_v4", M + "speculative.dspark_components.dspark_verify"],
                               ["DSV41_VERIFY_CAP"], False, False)
    assert t["serial_load"] == ([M + "model_loader.utils"], [], True, False)
    assert all(not a["unwrapped"] for a in read("tp_gated")["adapters"].values())
    assert all(not a["unwrapped"] for a in read("tp4_list_nested")["adapters"].values()), \
        "a module wrapped on TP4 only is still wrapped"


def test_tp_gated_arming():
    hook = read("tp_gated")
    assert A.arming(hook, "indexer_chunked", "DSV41_INDEXER_CHUNKED") == {
        "arms": False, "reason": "install_indexer_chunked runs only on the TP4 launcher (DSV41_LAUNCHER=tp4)"}
    assert A.arming(hook, "indexer_chunked", "DSV41_INDEXER_CHUNKED", launcher="tp4")["arms"] is True
    # which of the two files is imported is decided by the engine's own source, not by the text
    assert A.arming(hook, "indexer_chunked_v3", "DSV41_INDEXER_CHUNKED", launcher="tp4") == {
        "arms": None, "reason": "a condition around install_indexer_chunked_v3 cannot be read from the text"}
    assert A.arming(hook, "draft_head_fp8", "DSV41_DRAFT_HEAD_FP8")["arms"] is True
    assert A.arming(hook, "draft_head_fp8_tp4", "DSV41_DRAFT_HEAD_FP8", launcher="tp4")["arms"] is False
    assert A.installs(hook, dict(TP4, DSV41_DRAFT_HEAD_FP8="1", DSV41_DRAFT_HEAD_FP8_IMPL="tp4")) == {
        "engram_prefetch": {M + "layers.engram": True}, "shared_pad": {M + "layers.quantization.fp8_utils": True},
        "shared_pad_k": {M + "layers.quantization.fp8_utils": True},
        "draft_head_fp8": {M + "models.deepseek_v4_dspark": True},
        "draft_head_fp8_tp4": {M + "models.deepseek_v4_dspark": True}}
    assert A.arming(hook, "verify_cap", "DSV41_VERIFY_CAP")["arms"] is True
    assert A.arming(hook, "shared_pad", "DSV41_SHARED_PAD_K", adapter_reads_switch=True)["arms"] is False
    assert A.arming(hook, "shared_pad", "DSV41_SHARED_PAD_K", launcher="tp4", adapter_reads_switch=True)["arms"]
    assert sorted(A.installs(hook, {})) == ["engram_prefetch"], "the serial loader is not wrapped without its switch"
    assert A.installs(hook, {"DSV41_SERIAL_WEIGHT_LOAD": "1"})["serial_load"] == {M + "model_loader.utils": True}
    assert sorted(A.installs(hook, dict(TP4, DSV41_L2_PREFETCH="1"))["l2_prefetch"]) == [
        "b12x.comm.roce.roce_oneshot", M + "models.deepseek_v2"], "the engram entry needs its second switch too"


def test_tp4_only_adapter_is_a_problem_on_tp3():
    hook = read("tp4_list_nested")
    assert A.hook_problems(hook, {"wo_a_w8": "DSV41_WO_A_W8", "roce_gather": "DSV41_ROCE_GATHER"}) == [
        "sitecustomize.py: adapter roce_gather: install_roce_gather runs only on the TP4 launcher "
        "(DSV41_LAUNCHER=tp4)"]


def test_module_reports_tp4_modules_and_sources(monkeypatch, capsys):
    path = HOOKS / "tp_gated.py"
    result = run_module(adapter_registry.main, {"path": str(path), "host_label": "spark1",
                                                "expected": {"verify_cap": "DSV41_VERIFY_CAP",
                                                             "indexer_chunked": "DSV41_INDEXER_CHUNKED"}})
    assert result["failed"] and result["finder"]["tp4_only"] == TP4_ONLY
    assert result["msg"] == ("spark1: %s: adapter indexer_chunked: install_indexer_chunked runs only on the TP4 "
                             "launcher (DSV41_LAUNCHER=tp4)" % path)
    chunked = [i for i in result["installs"] if i["function"] == "install_indexer_chunked"]
    assert [(i["adapter"], i["sources"], i["tp4_only"]) for i in chunked] == [
        ("indexer_chunked", ["indexer_chunked", "indexer_chunked_v3"], True)]
    assert F.adapters_registry_lines(result, {"indexer_chunked": "DSV41_INDEXER_CHUNKED"})[1] == (
        "indexer_chunked: modules sglang.srt.layers.attention.deepseek_v4_backend; gate DSV41_INDEXER_CHUNKED; "
        "TP4 launcher only; DSV41_INDEXER_CHUNKED=1 arms it: no (install_indexer_chunked runs only on the TP4 "
        "launcher (DSV41_LAUNCHER=tp4))")


# ----------------------------------------------------------------------------------- against execution

@pytest.fixture(scope="module")
def sandbox():
    problem = X.sandbox_problem()
    if problem:
        pytest.skip("hooks cannot be run isolated here: %s" % problem)


def compare(text):
    """(disagreements, unknown adapter names, scenarios run) between the reader and running ``text``."""
    hook = H.read_hook(text)
    runs = X.scenarios(X.hook_switches(text))
    results = X.run_isolated(text, X.hook_targets(text), [env for _, _, env in runs])
    wrong, unknown = [], set()
    for (label, tp, env), res in zip(runs, results):
        assert "failed" not in res and not res["errors"], (label, tp, res)
        ran = X.executed(res)
        said = A.installs(hook, env)
        for name, module in ran:
            if module not in said.get(name, {}):
                wrong.append("TP%d %s: %s installed for %s, the reader says not" % (tp, label, name, module))
        for name, per in said.items():
            for module, verdict in per.items():
                if verdict is None:
                    unknown.add(name)
                elif (name, module) not in ran:
                    wrong.append("TP%d %s: the reader says %s is installed for %s; it was not"
                                 % (tp, label, name, module))
        where = A.wrapped(hook, env)
        if sorted(where) != res["wrapped"] or None in where.values():
            wrong.append("TP%d %s: wraps %s, the reader says %s" % (tp, label, res["wrapped"], sorted(where)))
    return wrong, unknown, len(runs)


@pytest.mark.parametrize("name, unknown", [("split_installs", set()), ("tp_gated", {"indexer_chunked_v3"}),
                                           ("tp4_list_nested", set())])
def test_fixture_hooks_agree_with_execution(sandbox, name, unknown):
    wrong, unsure, runs = compare((HOOKS / (name + ".py")).read_text())
    assert wrong == [] and unsure == unknown and runs > 0


@pytest.mark.parametrize("name", sorted(LAB))
def test_lab_hooks_agree_with_execution(sandbox, name):
    wrong, unsure, _runs = compare(LAB[name].read_text())
    assert wrong == [] and unsure == set()


@pytest.mark.parametrize("name", ["masquerator.py", "miaai.py", "knapcio.py"])
def test_real_hooks_agree_with_execution(sandbox, name):
    path = REAL / name
    if not path.is_file():
        pytest.skip("%s is not here (a copy of a real launcher hook, kept outside the repository)" % path)
    wrong, unsure, _runs = compare(path.read_text())
    assert wrong == []
    # the only answer the text cannot give: the chunked-indexer port is chosen from the engine's source
    assert unsure <= {"indexer_chunked_v3"}
