"""A candidate engine image judged from its source (module_utils/adapters/engine_source.py and engine_image_checks.py,
the engine_image_check module) and
the pinned-image arm around it (experiment_checks.pin_images / image_facts / preconditions).

The images are served by a fake docker that answers `docker image inspect` and `docker run --rm ... cat`
from the lab's engine source layers (lab/seed/engine_src) and adapter files, so the engine side is the
shape the lab image carries and the adapters are the real-shaped lab ones; fixtures/image_hook is a hook whose
adapters are named otherwise than their files (install functions imported from a module of another name)."""
import json
import sys
from pathlib import Path

import pytest

from ansible.module_utils.adapters import image_checks as K
from ansible.module_utils.adapters import engine_source as E
from ansible.module_utils.experiment import checks as C
from ansible.module_utils.experiment import schema as S
from ansible.module_utils.adapters.hook import read_hook
from modrun import run_module

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "library"))
import engine_image_check  # noqa: E402

SRC = ROOT / "lab" / "seed" / "engine_src"
ADAPTERS = ROOT / "lab" / "seed" / "adapters"
G4_PORT = (ADAPTERS / "ported" / "wo_a_w8_g4_dispatch.py").read_text()
IMAGE_HOOK = Path(__file__).resolve().parents[1] / "fixtures" / "image_hook"
RUNNING, CANARY = "0.5.4.post1-dsv41", "0.5.6.dev0+f80c91a4b"
CANARY_ID = "sha256:" + "c" * 64


def layer_reader(version, overrides=None):
    def read(rel):
        if overrides and rel in overrides:
            return overrides[rel]
        for layer in (version, "common"):
            path = SRC / layer / "python" / rel
            if path.is_file():
                return path.read_text()
        return None
    return read


def engines(canary_overrides=None):
    return (E.Engine(layer_reader(CANARY, canary_overrides), "canary"), E.Engine(layer_reader(RUNNING), "tp3"))


def adapter_texts(extra_wo_a="", adapters=ADAPTERS):
    """The hook in ``adapters`` and the files of the adapters it installs on TP3, as the module reads them."""
    hook = read_hook((adapters / "sitecustomize.py").read_text())
    texts = {}
    for name in K.adapter_modules(hook):
        path = adapters / (name + ".py")
        texts[name] = path.read_text() + (extra_wo_a if name == "wo_a_w8" else "") if path.is_file() else None
    return hook, texts


def checks(canary_overrides=None, extra_wo_a="", groups=4, settings=None):
    hook, texts = adapter_texts(extra_wo_a)
    cand, ref = engines(canary_overrides)
    return K.image_checks(cand, ref, hook, texts, "sglang.srt.models.deepseek_v4",
                          "sglang.srt.layers.vocab_parallel_embedding", groups, 129280, 3, settings=settings)


# --- what an adapter touches -----------------------------------------------------------------------------

def test_the_w8_adapter_touches_the_attention_loader_and_the_tp_size():
    got = E.adapter_targets((ADAPTERS / "wo_a_w8.py").read_text(), "wo_a_w8.py")
    assert {E.dotted(t): how for t, how in got.items()} == {
        "sglang.srt.distributed.get_tensor_model_parallel_world_size": "read",
        "sglang.srt.models.deepseek_v4.DeepseekV4Attention.process_weights_after_loading": "patched"}


def test_aliases_getattr_setattr_and_import_as_are_followed():
    text = '''
import sglang.srt.speculative.dspark_worker as dw
from sglang.srt.layers import flashinfer_utils


def install():
    worker = dw.DSparkWorker
    original = getattr(worker, "propose")
    setattr(dw.DSparkDraftHead, "compute_logits", original)
    flashinfer_utils.load_autotune_cache("x")
    import json  # not the engine's
    json.dumps(1)
'''
    got = {E.dotted(t): how for t, how in E.adapter_targets(text, "x.py").items()}
    assert got == {"sglang.srt.speculative.dspark_worker.DSparkWorker.propose": "read",
                   "sglang.srt.speculative.dspark_worker.DSparkDraftHead.compute_logits": "patched",
                   "sglang.srt.layers.flashinfer_utils.load_autotune_cache": "read"}


def test_an_adapter_that_is_not_python_is_named():
    with pytest.raises(E.SourceError, match=r"^img:x.py: not valid Python \(line 1"):
        E.adapter_targets("def (:\n", "img:x.py")


# --- the engine side -------------------------------------------------------------------------------------

def test_a_symbol_is_found_through_a_package_star_reexport():
    cand, _ref = engines()
    node, where = cand.find(("sglang.srt.distributed", ("get_tensor_model_parallel_world_size",)))
    assert E.describe(node) == "def ()" and where.startswith("sglang/srt/distributed/parallel_state.py:")


def test_signatures_show_kinds_and_defaults_but_not_default_values():
    tree = E.parse("def f(a, /, b, c=1, *args, d, e=2, **kw): pass\nclass K: pass\nX = 3\n", "t.py")
    f, k, x = tree.body
    assert E.describe(f) == "def (a, /, b, c=…, *args, d, e=…, **kw)"
    assert (E.describe(k), E.describe(x)) == ("class", "value")
    assert E.describe(E.parse("def g(*, a): pass", "t.py").body[0]) == "def (*, a)"


def test_vocab_rows_per_rank_for_tp3():
    assert K.rows_per_rank(129280, 64, 3) == 43136       # the draft head's (43136, 5120)
    assert K.rows_per_rank(129280, 256, 3) == 43264
    assert K.rows_per_rank(129280, 64, 4) == 32320


# --- the three checks ------------------------------------------------------------------------------------

def test_the_lab_canary_fails_only_the_g4_guard():
    got = checks()
    assert got["hook_signatures"]["problems"] == [] and got["vocab_padding"]["problems"] == []
    assert got["g4_guard"]["problems"] == [
        "canary sglang/srt/models/deepseek_v4.py:13: DeepseekV4Attention.wo_a_forward enters its small-row path "
        "only for weights (2, 1024, 4096); TP3 has G=4 local groups and no adapter in the image replaces "
        "sglang.srt.models.deepseek_v4.DeepseekV4Attention.wo_a_forward (carry a G=4 dispatch)"]
    assert got["vocab_padding"]["rows"] == [{"image": "tp3", "padding": 64, "rows_per_rank": 43136},
                                            {"image": "canary", "padding": 64, "rows_per_rank": 43136}]


def test_an_adapter_that_replaces_the_guarded_dispatch_passes_the_g4_guard():
    got = checks(extra_wo_a="\n" + G4_PORT)
    assert [n for n in K.CHECKS if got[n]["problems"]] == []
    assert got["g4_guard"]["rows"] == [{"where": "sglang/srt/models/deepseek_v4.py:13",
                                        "function": "DeepseekV4Attention.wo_a_forward",
                                        "weights": "(2, 1024, 4096)", "verdict": "ok",
                                        "why": "replaced by an adapter (wo_a_w8)"}]
    # the TP4 group count is admitted by the same guard without any port
    assert checks(groups=2)["g4_guard"]["problems"] == []


def test_the_replacing_adapter_must_be_armed_by_the_settings_the_image_boots_with():
    on = checks(extra_wo_a="\n" + G4_PORT, settings={"DSV41_WO_A_W8": "1", "DSV41_CACHE_GIB": "0"})
    assert on["g4_guard"]["problems"] == []
    assert on["g4_guard"]["rows"][0]["why"] == "replaced by an adapter (wo_a_w8, armed by DSV41_WO_A_W8=1)"
    for settings in ({}, {"DSV41_WO_A_W8": "0"}, {"DSV41_WO_A_W8": "off"}, {"DSV41_WO_A_W8_MID": "1"}):
        off = checks(extra_wo_a="\n" + G4_PORT, settings=settings)
        value = settings.get("DSV41_WO_A_W8", "0")
        assert off["g4_guard"]["problems"] == [
            "canary sglang/srt/models/deepseek_v4.py:13: DeepseekV4Attention.wo_a_forward enters its small-row path "
            "only for weights (2, 1024, 4096); TP3 has G=4 local groups, and the adapter replacing "
            "sglang.srt.models.deepseek_v4.DeepseekV4Attention.wo_a_forward is not armed by the settings it boots "
            "with (wo_a_w8: install_wo_a_w8 is gated by DSV41_WO_A_W8, not armed by DSV41_WO_A_W8=%s): the run "
            "would time the G=2 dispatch" % value], settings
        assert off["g4_guard"]["rows"][0]["verdict"] == "FAIL"
        assert off["hook_signatures"]["problems"] == [] and off["vocab_padding"]["problems"] == []
    # settings do not make a guard without any replacing adapter pass
    assert len(checks(settings={"DSV41_WO_A_W8": "1"})["g4_guard"]["problems"]) == 1


def test_an_adapter_is_armed_by_its_gate_on_every_boot_or_not_at_all():
    hook, _texts = adapter_texts()
    assert K.adapter_armed(hook, "wo_a_w8", {"DSV41_WO_A_W8": "1"}) == (True, "armed by DSV41_WO_A_W8=1")
    assert K.adapter_armed(hook, "wo_a_w8", {"DSV41_WO_A_W8": 1})[0] is True, "a number is the text bash sees"
    # draft_tau is installed unconditionally (the adapter reads its switch itself)
    assert K.adapter_armed(hook, "draft_tau", {}) == (True, "installed on every boot")
    # shared padding is installed on the TP4 launcher only: its switch alone does not arm it on TP3
    armed, why = K.adapter_armed(hook, "shared_pad", {"DSV41_SHARED_PAD_K": "1"})
    assert armed is False and "TP4" in why, why
    assert K.adapter_armed(hook, "not_there", {}) == (False, "the image's import hook never installs not_there")
    # a gate the text alone cannot evaluate is not a pass
    odd = read_hook((ADAPTERS / "sitecustomize.py").read_text().replace(
        'if os.environ.get("DSV41_WO_A_W8", "0") not in ("0", "", "off", "false"):',
        'if os.environ.get("DSV41_WO_A_W8", "0") not in _read_offs():'))
    armed, why = K.adapter_armed(odd, "wo_a_w8", {"DSV41_WO_A_W8": "1"})
    assert armed is None and "cannot be read" in why, why


def test_the_running_image_guard_admits_any_group_count():
    _cand, ref = engines()
    assert E.shape_guards(ref.module("sglang.srt.models.deepseek_v4")[0]) == []


def test_a_changed_signature_a_gone_symbol_and_an_added_attribute():
    worker = layer_reader(CANARY)("sglang/srt/speculative/dspark_worker.py")
    drifted = worker.replace("def propose(self, batch)", "def propose(self, batch, state)") \
                    .replace("def load_weights(", "def load_weights_v2(")
    got = checks({"sglang/srt/speculative/dspark_worker.py": drifted}, extra_wo_a="\n" + G4_PORT)
    assert got["hook_signatures"]["problems"] == [
        "draft_head_fp8: sglang.srt.speculative.dspark_worker.DSparkDraftHead.load_weights is gone in canary "
        "(sglang/srt/speculative/dspark_worker.py has no DSparkDraftHead.load_weights)",
        "verify_cap: sglang.srt.speculative.dspark_worker.DSparkWorker.propose changed: def (self, batch) in tp3, "
        "def (self, batch, state) in canary"]
    fence = [r for r in got["hook_signatures"]["rows"] if r["adapter"] == "folded_fence"]
    assert [r["target"].rsplit(".", 1)[1] for r in fence] == ["_DSV41_FENCE", "fold_sampling_results",
                                                              "read_folded_results"]
    assert fence[0]["candidate"] == "(added by the adapter)", "state the adapter keeps is not the engine's"


def test_a_wrapped_module_the_canary_lacks_and_a_missing_adapter_file_are_named():
    hook, texts = adapter_texts()
    texts["block_verify"] = None
    cand, ref = engines({"sglang/srt/model_executor/cuda_graph_runner.py": None})
    cand.read = (lambda inner: lambda rel: None if rel.startswith("sglang/srt/model_executor/cuda_graph_runner")
                 else inner(rel))(cand.read)
    got = K.image_checks(cand, ref, hook, texts, "sglang.srt.models.deepseek_v4",
                         "sglang.srt.layers.vocab_parallel_embedding", 4, 129280, 3)
    assert got["hook_signatures"]["problems"][:2] == [
        "the import hook installs block_verify, but canary has no block_verify.py",
        "the import hook wraps sglang.srt.model_executor.cuda_graph_runner, which canary does not have (its "
        "adapters would never arm)"]


def test_a_changed_vocab_padding_and_an_unreadable_one():
    vocab = layer_reader(CANARY)("sglang/srt/layers/vocab_parallel_embedding.py")
    got = checks({"sglang/srt/layers/vocab_parallel_embedding.py": vocab.replace("= 64", "= 256")})
    assert got["vocab_padding"]["problems"] == [
        "canary pads the vocabulary of 129280 to 43264 rows a rank (DEFAULT_VOCAB_PADDING_SIZE 256), tp3 to 43136 "
        "(DEFAULT_VOCAB_PADDING_SIZE 64): the TP3 vocab split changes"]
    got = checks({"sglang/srt/layers/vocab_parallel_embedding.py": vocab.replace("= 64", "= int('64')")})
    assert got["vocab_padding"]["problems"] == [
        "canary: DEFAULT_VOCAB_PADDING_SIZE is not a positive int literal "
        "(sglang/srt/layers/vocab_parallel_embedding.py:4)"]


# --- the module, through its entry point -----------------------------------------------------------------

def fake_docker(images, calls=None, adapters=ADAPTERS):
    """run_command answering for images {ref: (version, extra text appended to wo_a_w8.py)}, the adapter
    files (hook included) taken from ``adapters``."""
    def run(cmd):
        if calls is not None:
            calls.append(cmd)
        if cmd[1:3] == ["image", "inspect"]:
            if cmd[3] not in images:
                return 1, "[]", "Error: No such image: %s" % cmd[3]
            return 0, json.dumps([{"Id": cmd[3] if cmd[3].startswith("sha256:") else "sha256:" + "1" * 64}]), ""
        assert cmd[1:7] == ["run", "--rm", "--network", "none", "--entrypoint", "cat"], cmd
        version, extra = images[cmd[7]]
        path = cmd[8]
        if not path.startswith(("/sgl-workspace/adapter/", "/sgl-workspace/sglang/python/")):
            return 1, "", "cat: %s: No such file or directory" % path
        if path.startswith("/sgl-workspace/adapter/"):
            f = adapters / path.rsplit("/", 1)[1]
            if not f.is_file():
                return 1, "", "cat: %s: No such file or directory" % path
            return 0, f.read_text() + (extra if f.name == "wo_a_w8.py" else ""), ""
        text = layer_reader(version)(path[len("/sgl-workspace/sglang/python/"):])
        return (0, text, "") if text is not None else (1, "", "cat: %s: No such file or directory" % path)
    return run


ARGS = {"image": CANARY_ID, "reference_image": "dsv41-sglang:tp3", "host_label": "spark1"}


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_reports_every_problem_without_failing_and_only_reads(check_mode):
    calls = []
    images = {CANARY_ID: (CANARY, ""), "dsv41-sglang:tp3": (RUNNING, "")}
    res = run_module(engine_image_check.main, ARGS, check_mode=check_mode, run_command=fake_docker(images, calls))
    assert not res.get("failed") and res["changed"] is False
    assert res["image_id"] == CANARY_ID
    assert [p.split(":")[0] for p in res["problems"]] == ["g4_guard"]
    assert all(c[1:3] == ["image", "inspect"] or c[1:3] == ["run", "--rm"] for c in calls)
    assert len(set(map(tuple, calls))) == len(calls), "each file is read once"
    # a class or function under a plain module file is never looked for as a file of its own
    reads = [c[-1] for c in calls if c[1] == "run"]
    assert not [r for r in reads if ".py/" in r or "/deepseek_v4/" in r or "/dspark_worker/" in r], reads


def test_module_passes_a_canary_that_carries_the_g4_dispatch():
    images = {CANARY_ID: (CANARY, "\n" + G4_PORT), "dsv41-sglang:tp3": (RUNNING, "")}
    res = run_module(engine_image_check.main, ARGS, run_command=fake_docker(images))
    assert res["problems"] == [] and sorted(res["checks"]) == sorted(K.CHECKS)
    # with the settings it boots with: passes with W8 on, fails naming the switch with W8 off
    res = run_module(engine_image_check.main, dict(ARGS, settings={"DSV41_WO_A_W8": "1"}),
                     run_command=fake_docker(images))
    assert res["problems"] == [] and not res.get("failed")
    res = run_module(engine_image_check.main, dict(ARGS, settings={"DSV41_WO_A_W8": "0", "EP_SIZE": "3"}),
                     run_command=fake_docker(images))
    assert not res.get("failed") and res["changed"] is False
    assert [p.split(":")[0] for p in res["problems"]] == ["g4_guard"]
    assert "not armed by DSV41_WO_A_W8=0" in res["problems"][0]


def test_module_fails_naming_the_host_when_the_image_is_not_there():
    res = run_module(engine_image_check.main, ARGS, run_command=fake_docker({"dsv41-sglang:tp3": (RUNNING, "")}))
    assert res["failed"]
    assert res["msg"] == ("spark1: image %s is not on spark1 (docker image inspect: Error: No such image: %s)"
                          % (CANARY_ID, CANARY_ID))
    assert res["problems"] == ["is not on spark1 (docker image inspect: Error: No such image: %s)" % CANARY_ID]


# --- adapters the hook names otherwise than their files --------------------------------------------------
# fixtures/image_hook: install_folded_fence imported from folded_result_fence.py (gated), install_g4_dispatch
# from wo_a_g4_dispatch.py (installed on every boot); neither folded_fence.py nor g4_dispatch.py exists.

def image_hook_checks(settings=None):
    hook, texts = adapter_texts(adapters=IMAGE_HOOK)
    cand, ref = engines()
    return hook, texts, K.image_checks(cand, ref, hook, texts, "sglang.srt.models.deepseek_v4",
                                       "sglang.srt.layers.vocab_parallel_embedding", 4, 129280, 3, settings=settings)


def test_an_adapter_file_is_the_module_its_install_is_imported_from():
    hook, texts, got = image_hook_checks()
    # the reader answers to the hook's name and to the module's; the file is the module's
    assert {"folded_fence", "folded_result_fence", "g4_dispatch", "wo_a_g4_dispatch"} == set(hook["adapters"])
    assert [(i["adapter"], i["sources"]) for i in hook["installs"]] == [
        ("g4_dispatch", ["wo_a_g4_dispatch"]), ("folded_fence", ["folded_result_fence"])]
    assert K.adapter_modules(hook) == ["wo_a_g4_dispatch", "folded_result_fence"]
    assert all(text is not None for text in texts.values())
    assert [n for n in K.CHECKS if got[n]["problems"]] == []
    fence = [r for r in got["hook_signatures"]["rows"] if r["adapter"] == "folded_result_fence"]
    assert [r["target"].rsplit(".", 1)[1] for r in fence] == ["_DSV41_FENCE", "fold_sampling_results",
                                                              "read_folded_results"]
    # arming follows the reader for every install from that module, whatever the hook calls it
    assert K.adapter_armed(hook, "folded_result_fence", {"DSV41_FOLDED_FENCE": "1"}) == \
        (True, "armed by DSV41_FOLDED_FENCE=1")
    assert K.adapter_armed(hook, "folded_fence", {"DSV41_FOLDED_FENCE": "on"}) == \
        (True, "armed by DSV41_FOLDED_FENCE=on")
    for settings in ({}, {"DSV41_FOLDED_FENCE": "0"}, {"DSV41_FOLDED_FENCE": None}):
        armed, why = K.adapter_armed(hook, "folded_result_fence", settings)
        assert armed is False and "not armed by DSV41_FOLDED_FENCE=0" in why, why


def test_an_ungated_adapter_known_by_its_module_alone_is_armed_on_every_boot():
    hook, _texts, got = image_hook_checks(settings={})
    info = hook["adapters"]["wo_a_g4_dispatch"]
    assert (info["gates"], info["ungated"], info["tp4_only"]) == ([], True, False)
    for settings in ({}, {"DSV41_FOLDED_FENCE": "1"}, {"DSV41_WO_A_W8": "0"}):
        assert K.adapter_armed(hook, "wo_a_g4_dispatch", settings) == (True, "installed on every boot")
    # so the G=2-only guard it replaces passes with every switch off
    assert got["g4_guard"]["problems"] == []
    assert got["g4_guard"]["rows"] == [{"where": "sglang/srt/models/deepseek_v4.py:13",
                                        "function": "DeepseekV4Attention.wo_a_forward",
                                        "weights": "(2, 1024, 4096)", "verdict": "ok",
                                        "why": "replaced by an adapter (wo_a_g4_dispatch, installed on every boot)"}]


def test_an_ungated_adapter_the_finder_wraps_only_under_a_switch_is_not_armed_without_it():
    text = (IMAGE_HOOK / "sitecustomize.py").read_text().replace(
        "        if fullname not in WRAPPED:\n",
        "        if fullname == 'sglang.srt.models.deepseek_v4' and os.environ.get('DSV41_G4_DISPATCH', '0') != '1':\n"
        "            return None\n"
        "        if fullname not in WRAPPED:\n")
    hook = read_hook(text)
    assert K.adapter_armed(hook, "wo_a_g4_dispatch", {"DSV41_G4_DISPATCH": "1"}) == (True, "installed on every boot")
    assert K.adapter_armed(hook, "wo_a_g4_dispatch", {}) == (
        False, "install_wo_a_g4_dispatch runs only for sglang.srt.models.deepseek_v4, which the finder does not "
               "wrap with these settings")


def test_module_reads_each_adapter_from_the_module_the_hook_imports_it_from():
    calls = []
    images = {CANARY_ID: (CANARY, ""), "dsv41-sglang:tp3": (RUNNING, "")}
    res = run_module(engine_image_check.main, dict(ARGS, settings={"DSV41_FOLDED_FENCE": "0"}),
                     run_command=fake_docker(images, calls, adapters=IMAGE_HOOK))
    assert not res.get("failed") and res["problems"] == []
    reads = sorted(c[-1].rsplit("/", 1)[1] for c in calls
                   if c[1] == "run" and c[-1].startswith("/sgl-workspace/adapter/"))
    assert reads == ["folded_result_fence.py", "sitecustomize.py", "wo_a_g4_dispatch.py"]


# --- the arm around it -----------------------------------------------------------------------------------

def canary_definition():
    path = ROOT / "experiments" / "stage_i_canary.yml"
    return S.load_text(path.read_text(), str(path), "stage_i_canary", ["prose", "code"])


@pytest.mark.parametrize("ref,problem", [
    (None, "arm canary: no image pinned as canary (set experiment_image_pins.canary to repo@sha256:<digest> in "
           "the inventory)"),
    ("dsv41-sglang:canary-f80c91a4b", "arm canary: experiment_image_pins.canary is dsv41-sglang:canary-f80c91a4b, "
                                      "not pinned by digest"),
    ("sha256:abc", "not pinned by digest"),
    ("registry.local:5000/dsv41-sglang@sha256:" + "A" * 64, "not pinned by digest"),
    ("registry.local:5000/dsv41-sglang@sha256:" + "a" * 64, None),
    (CANARY_ID, None),
])
def test_a_pin_must_be_immutable(ref, problem):
    resolved, problems = C.pin_images(canary_definition(), {"canary": ref} if ref else {})
    if problem is None:
        assert problems == []
        (arm,) = resolved["arms"]
        assert arm["settings"] == {"IMAGE": ref} and arm["requires"]["pinned_image"] == ref
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_an_arm_changes_one_thing_an_image_pin_counts_as_one():
    doc = {"schema_version": 1, "name": "x", "stage": "I", "description": "d",
           "benchmark": {"workloads": ["prose"], "concurrency": [1], "repetitions": 5},
           "acceptance": {"metric": "per_stream_tok_s", "rule": "separation"},
           "arms": [{"name": "a", "image_pin": "canary", "settings": {"EP_SIZE": "1"}}]}
    with pytest.raises(S.DefinitionError, match="exactly one of settings, hook or image_pin"):
        S.validate(doc, "x.yml")


def test_image_facts_and_the_precondition_name_missing_ranks_and_each_problem():
    facts = C.image_facts(
        {"spark1": [{"item": CANARY_ID, "rc": 0}], "spark2": [{"item": CANARY_ID, "rc": 1}],
         "spark3": [{"item": CANARY_ID, "rc": 0}]},
        [{"item": CANARY_ID, "failed": False, "problems": ["g4_guard: G=2 only"], "checks": {"g4_guard": {}},
          "image_id": CANARY_ID}])
    assert facts[CANARY_ID]["present"] == {"spark1": True, "spark2": False, "spark3": True}
    assert C.preconditions({"pinned_image": CANARY_ID}, {"images": facts}) == [
        "image %s is not on spark2 (pull it by digest on every rank first)" % CANARY_ID,
        "image %s g4_guard: G=2 only" % CANARY_ID]
    failed = C.image_facts({}, [{"item": CANARY_ID, "failed": True, "msg": "spark1: boom"}])
    assert failed[CANARY_ID]["problems"] == ["spark1: boom"]
    assert C.preconditions({"pinned_image": CANARY_ID}, {}) == ["image %s was not judged (no image check ran)" % CANARY_ID]


def test_a_rank_on_another_image_fails_the_pinned_arm():
    images = {CANARY_ID: {"image_id": CANARY_ID}}
    ids = {"spark1": CANARY_ID, "spark2": "sha256:" + "4" * 64, "spark3": ""}
    assert C.pinned_image_failures(ids, CANARY_ID, images) == [
        "pinned image: spark2 runs sha256:%s, not %s (%s)" % ("4" * 64, CANARY_ID, CANARY_ID),
        "pinned image: spark3 runs no readable container, not %s (%s)" % (CANARY_ID, CANARY_ID)]
    assert C.pinned_image_failures(ids, "", images) == [], "a condition that pins nothing is not judged"
    assert C.pinned_image_failures({"spark1": CANARY_ID}, CANARY_ID, {CANARY_ID: {}}) == [
        "pinned image: spark1 runs %s, not (unresolved) (%s)" % (CANARY_ID, CANARY_ID)]


def test_the_record_shows_each_pinned_image_and_its_checks():
    from ansible.module_utils.adapters import image_report as R
    got = checks(extra_wo_a="\n" + G4_PORT, settings={"DSV41_WO_A_W8": "1"})
    lines = R.markdown_tables({CANARY_ID: {"present": {"spark1": True, "spark2": False}, "problems": ["x | y"],
                                           "checks": got, "image_id": CANARY_ID}})
    text = "\n".join(lines)
    assert "## Image %s" % CANARY_ID in text and "on spark1; missing on spark2." in text
    assert "Verdict before any change: **refused**\n- x | y" in text
    assert "| sglang/srt/models/deepseek_v4.py:13 | DeepseekV4Attention.wo_a_forward | (2, 1024, 4096) | " \
           "replaced by an adapter (wo_a_w8, armed by DSV41_WO_A_W8=1) | ok |" in text
    assert "| tp3 | 64 | 43136 |" in text
    assert R.markdown_tables({}) == []


def test_module_names_the_adapter_dir_variable_when_the_image_has_no_hook():
    images = {CANARY_ID: (CANARY, ""), "dsv41-sglang:tp3": (RUNNING, "")}
    res = run_module(engine_image_check.main, dict(ARGS, adapter_dir="/opt/nowhere"),
                     run_command=fake_docker(images))
    assert res["failed"] and res["msg"] == (
        "spark1: image %s has no /opt/nowhere/sitecustomize.py (read on spark1): no adapter would arm in it (where "
        "the image keeps the launcher checkout's adapter/ elsewhere, set experiment_image_adapter_dir)" % CANARY_ID)


@pytest.mark.parametrize("guard,shapes", [
    ("list(w.shape) == [2, 1024, 4096]", [(2, 1024, 4096)]),
    ("w.shape != torch.Size((2, 1024, 4096))", [(2, 1024, 4096)]),
    ("tuple(w.size()) in ((2, 1024, 4096), (4, 1024, 4096))", [(2, 1024, 4096), (4, 1024, 4096)]),
    ("w.shape in {(2, 1024, 4096)}", [(2, 1024, 4096)]),
    ("w.shape[0] == 2", None),              # one dimension is not a weight-shape literal: not judged
    ("x.shape == (2, 4096)", None),         # the activation's 2-dim shape names no group count
])
def test_weight_shape_guards_are_read_in_their_usual_spellings(guard, shapes):
    tree = E.parse("class A:\n    def f(self, x, w):\n        if %s:\n            return 1\n" % guard, "m.py")
    got = E.shape_guards(tree)
    assert got == ([] if shapes is None else [(("A", "f"), 3, shapes)])


def test_a_guard_admitting_g4_among_other_shapes_passes():
    cand = E.Engine(lambda rel: "def f(w):\n    return tuple(w.shape) in ((2, 1024, 4096), (4, 1024, 4096))\n"
                    if rel == "sglang/m.py" else None, "the candidate")
    problems, rows = K.g4_guard(cand, "sglang.m", 4, {})
    assert problems == [] and rows[0]["why"] == "admits G=4"
    assert rows[0]["weights"] == "(2, 1024, 4096) or (4, 1024, 4096)"
    problems, rows = K.g4_guard(cand, "sglang.m", 3, {})
    assert rows[0]["why"] == "admits only G=2/4" and len(problems) == 1


def test_module_fails_naming_a_read_that_did_not_answer_rather_than_a_missing_file():
    images = {CANARY_ID: (CANARY, ""), "dsv41-sglang:tp3": (RUNNING, "")}
    inner = fake_docker(images)

    def stalled(cmd):
        if cmd[1] == "run" and cmd[-1].endswith("/deepseek_v4.py"):
            return 124, "", "docker: no answer within 120 s (killed)"
        return inner(cmd)
    res = run_module(engine_image_check.main, ARGS, run_command=stalled)
    assert res["failed"] and res["msg"] == (
        "spark1: image %s could not be judged: reading /sgl-workspace/sglang/python/sglang/srt/models/deepseek_v4.py "
        "in %s failed (docker: no answer within 120 s (killed))" % (CANARY_ID, CANARY_ID))
