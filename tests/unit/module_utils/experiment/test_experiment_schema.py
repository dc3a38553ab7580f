"""experiment_schema / experiment_definition: the stage definitions load, and anything unknown is refused
naming the file and the key."""
import copy
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.experiment import schema as es
from ansible.module_utils.experiment import arms
from modrun import run_module
import experiment_definition

ROOT = Path(__file__).resolve().parents[4]
DEFS = sorted((ROOT / "experiments").glob("*.yml"))
WORKLOADS = sorted(p.stem for p in (ROOT / "roles" / "benchmark" / "files" / "prompts").glob("*.json"))


def load(path):
    return yaml.safe_load(path.read_text())


def stage_c():
    return load(ROOT / "experiments" / "stage_c_fence.yml")


def refused(doc, source="experiments/x.yml"):
    with pytest.raises(es.DefinitionError) as exc:
        es.validate(doc, source=source)
    return str(exc.value)


@pytest.mark.parametrize("path", DEFS, ids=[p.stem for p in DEFS])
def test_every_stage_definition_is_valid_and_names_its_file(path):
    defn = es.load_text(path.read_text(), source=str(path), stem=path.stem, known_workloads=WORKLOADS)
    assert defn["name"] == path.stem
    assert defn["arms"], path
    for arm in defn["arms"]:
        if arm["timed"]:
            assert arm["benchmark"]["repetitions"] >= 5
            assert arm["benchmark"]["warmups"] >= 1
        assert arm["settings"] or arm["hook"] or arm["image_pin"]


def test_the_stages_are_defined():
    assert {p.stem for p in DEFS} >= {"stage_c_fence", "stage_d_wo_a", "stage_e_prefetch", "stage_f_drop"}


def test_stage_c_arm_carries_shared_and_own_evidence():
    defn = es.validate(stage_c(), source="c.yml")
    fence = defn["arms"][0]
    assert fence["settings"] == {"DSV41_FOLDED_FENCE": "1"}
    ids = [line["id"] for line in fence["evidence"]["must"]]
    assert ids == ["fence_armed"]
    assert {line["id"] for line in fence["evidence"]["must_not"]} == {"engine_drifted", "nonfinite"}
    assert fence["evidence"]["must"][0]["ranks"] == "all" and fence["evidence"]["must"][0]["when"] == "boot"
    names = [c["name"] for c in fence["correctness"]]
    assert "greedy_concurrent_identical" in names
    conc = [c for c in fence["correctness"] if c["name"] == "greedy_concurrent_identical"][0]
    assert conc["args"] == {"concurrency": 4}
    assert fence["requires"]["engine_features"] == ["folded_fence"] and "packed" not in fence["requires"]
    assert defn["applicable_if"]["engine_features"] == ["folded_fence"]
    assert fence["acceptance"]["wins_required"] == "none"


def test_stage_e_check_phase_is_never_timed_and_timing_needs_it():
    defn = es.load_text((ROOT / "experiments" / "stage_e_prefetch.yml").read_text(), "e.yml")
    check, timed = defn["arms"]
    assert check["timed"] is False and check["benchmark"] is None
    assert timed["requires"]["arms_passed"] == ["prefetch_check"]
    assert timed["settings"]["DSV41_ENGRAM_PREFETCH_CHECK"] == "0"


def test_unknown_top_level_key_is_refused_naming_file_and_key():
    doc = stage_c()
    doc["benchmrk"] = {}
    msg = refused(doc, "experiments/stage_c_fence.yml")
    assert msg.startswith("experiments/stage_c_fence.yml: benchmrk: unknown key")


def test_unknown_nested_key_is_refused_with_its_path():
    doc = stage_c()
    doc["arms"][0]["evidence"]["must"][0]["rnks"] = "all"
    msg = refused(doc)
    assert "arms[0].evidence.must[0].rnks: unknown key" in msg


def test_unknown_correctness_check_is_refused():
    doc = stage_c()
    doc["correctness"].append("greedy_identical")
    msg = refused(doc)
    assert "correctness[%d]: unknown check 'greedy_identical'" % (len(doc["correctness"]) - 1) in msg


def test_unknown_evidence_check_and_unknown_parameter_are_refused():
    doc = stage_c()
    doc["evidence"]["checks"].append("pakced_all")
    assert "evidence.checks[4]: unknown check 'pakced_all'" in refused(doc)
    doc = stage_c()
    doc["correctness"][0] = {"greedy_repeat_identical": {"repeat": 3}}
    assert "correctness[0].greedy_repeat_identical.repeat: unknown parameter" in refused(doc)


def test_fewer_than_five_repetitions_is_refused():
    doc = stage_c()
    doc["benchmark"]["repetitions"] = 4
    assert "benchmark.repetitions: must be an integer >= 5" in refused(doc)


def test_an_arm_changes_exactly_one_kind_of_thing():
    doc = stage_c()
    doc["arms"][0]["hook"] = "clock_state"
    assert "arms[0]: an arm has exactly one of settings, hook or image_pin" in refused(doc)
    doc = stage_c()
    doc["arms"][0]["settings"] = {}
    assert "arms[0].settings: is empty" in refused(doc)


def test_switch_values_must_be_scalars_and_secrets_are_refused():
    doc = stage_c()
    doc["arms"][0]["settings"] = {"DSV41_FOLDED_FENCE": True}
    assert "arms[0].settings.DSV41_FOLDED_FENCE: must be a string or a number" in refused(doc)
    doc = stage_c()
    doc["arms"][0]["settings"] = {"API_KEY": "x"}
    assert "secrets never appear" in refused(doc)


def test_arms_passed_must_name_an_earlier_arm():
    doc = load(ROOT / "experiments" / "stage_e_prefetch.yml")
    doc["arms"].reverse()
    assert "arms[0].requires.arms_passed: 'prefetch_check' is not an earlier arm" in refused(doc)


def test_evidence_line_needs_exactly_one_of_text_or_pattern_and_a_valid_regex():
    doc = stage_c()
    del doc["arms"][0]["evidence"]["must"][0]["text"]
    assert "arms[0].evidence.must[0]: give exactly one of text" in refused(doc)
    doc = stage_c()
    doc["evidence"]["must_not"][0]["pattern"] = "([unclosed"
    assert "evidence.must_not[0].pattern: is not a valid regular expression" in refused(doc)


def test_name_must_match_the_file():
    with pytest.raises(es.DefinitionError, match="must equal the file name 'stage_x'"):
        es.validate(stage_c(), source="stage_x.yml", stem="stage_x")


def test_duplicate_yaml_key_is_refused():
    text = (ROOT / "experiments" / "stage_c_fence.yml").read_text() + "stage: D\n"
    with pytest.raises(es.DefinitionError, match="key 'stage' appears twice"):
        es.load_text(text, source="dup.yml")


def test_unknown_workload_is_refused_when_the_known_set_is_given():
    text = (ROOT / "experiments" / "stage_c_fence.yml").read_text().replace("[prose, code]", "[prose, poetry]")
    with pytest.raises(es.DefinitionError, match="benchmark.workloads.1.: unknown workload 'poetry'"):
        es.load_text(text, source="c.yml", known_workloads=["prose", "code"])


def test_arm_benchmark_overrides_shared_plan_key_by_key():
    doc = stage_c()
    doc["arms"][0]["benchmark"] = copy.deepcopy(doc["benchmark"])
    doc["arms"][0]["benchmark"]["concurrency"] = [2]
    doc["arms"][0]["labels"] = {"block_size": 5}
    arm = es.validate(doc, "c.yml")["arms"][0]
    assert arm["benchmark"]["concurrency"] == [2]
    assert arm["labels"] == {"block_size": 5}


def test_plan_lines_name_each_arm_and_its_change():
    lines = arms.plan_lines(es.validate(stage_c(), "c.yml"))
    assert any(line.startswith("arm fence: DSV41_FOLDED_FENCE=1;") and "5 reps after 1 warm-up" in line
               for line in lines)


# --------------------------------------------------------------------------- module entry point

def test_module_returns_the_normalised_definition(monkeypatch, capsys):
    out = run_module(experiment_definition.main,
                   {"path": str(ROOT / "experiments" / "stage_c_fence.yml"), "known_workloads": WORKLOADS})
    assert not out.get("failed") and out["changed"] is False
    assert out["definition"]["arms"][0]["name"] == "fence"
    assert any("DSV41_FOLDED_FENCE=1" in line for line in out["plan"])


def test_module_refuses_an_unknown_key_naming_file_and_key(monkeypatch, capsys, tmp_path):
    doc = stage_c()
    doc["name"] = "bad"
    doc["arms"][0]["evidnce"] = {}
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(doc))
    out = run_module(experiment_definition.main, {"path": str(path)})
    assert out["failed"]
    assert out["msg"].startswith("%s: arms[0].evidnce: unknown key" % path)


def test_module_names_a_missing_file(monkeypatch, capsys, tmp_path):
    out = run_module(experiment_definition.main, {"path": str(tmp_path / "none.yml")})
    assert out["failed"] and "none.yml: cannot read the experiment definition" in out["msg"]


def test_stage_f_memory_block_normalised_and_printed_in_the_plan():
    d = es.load_text((ROOT / "experiments" / "stage_f_drop.yml").read_text(), "stage_f_drop.yml", "stage_f_drop")
    assert d["memory"]["floor_gib"] == 1.0 and d["memory"]["compare_with"] == ["baseline", "twin_only"]
    assert {(r["arm"], r["vs"], r["mib"]) for r in d["memory"]["reference"]} == {
        ("twin_only", "baseline", 688), ("drop", "baseline", -688), ("drop", "twin_only", -1376),
        ("draft_head_fp8", "baseline", 210.6)}
    drop = [a for a in d["arms"] if a["name"] == "drop"][0]
    assert drop["requires"]["validations"] == ["wo_a_w8"]
    assert "memory ledger on every rank, floor 1.00 GiB for serving; differences against baseline, twin_only" \
        in arms.plan_lines(d)
    c = es.load_text((ROOT / "experiments" / "stage_c_fence.yml").read_text(), "c.yml", "stage_c_fence")
    assert c["memory"] == {"floor_gib": 0, "compare_with": ["baseline"], "reference": [], "cost_within_headroom": False}


@pytest.mark.parametrize("memory,where", [
    ({"floor": 1}, "memory.floor: unknown key"),
    ({"compare_with": ["twin"]}, "memory.compare_with[0]: 'twin' is not the baseline or an arm"),
    ({"reference": [{"arm": "fence", "vs": "baseline", "mib": "688"}]}, "memory.reference[0].mib: must be a number"),
    ({"reference": [{"arm": "drop", "vs": "baseline", "mib": 1}]}, "memory.reference[0].arm: 'drop' is not"),
    ({"floor_gib": -1}, "memory.floor_gib: must be a number >= 0"),
])
def test_memory_block_refuses_what_it_cannot_mean(memory, where):
    doc = stage_c()
    doc["memory"] = memory
    assert "experiments/x.yml: %s" % where in refused(doc)


def stage_i(name):
    return load(ROOT / "experiments" / ("stage_i_%s.yml" % name))


def test_cache_ways_only_with_a_non_zero_cache():
    doc = stage_i("row_cache")
    doc["arms"][0]["settings"] = {"DSV41_CACHE_WAYS": "16"}
    assert refused(doc) == ("experiments/x.yml: arms[0].settings.DSV41_CACHE_WAYS: ways matter only with a "
                            "non-zero DSV41_CACHE_GIB (the arm's cache is 0)")
    doc["arms"][0]["settings"] = {"DSV41_CACHE_WAYS": "16", "DSV41_CACHE_GIB": "0.25"}
    es.validate(doc, source="x.yml")
    doc["baseline"]["settings"]["DSV41_CACHE_GIB"] = "0.5"      # the baseline's cache counts too
    doc["arms"][0]["settings"] = {"DSV41_CACHE_WAYS": "16"}
    es.validate(doc, source="x.yml")


def test_report_metrics_follow_the_acceptance_metric_and_only_per_repetition_rates():
    defn = es.validate(stage_i("slots"), source="x.yml")
    assert defn["report"]["metrics"] == ["aggregate_tok_s", "per_stream_tok_s"]
    assert es.validate(stage_c(), source="x.yml")["report"]["metrics"] == ["aggregate_tok_s"]
    doc = stage_i("slots")
    doc["report"]["metrics"] = ["ttft_ms"]
    assert refused(doc).startswith("experiments/x.yml: report.metrics[0]: ")


def test_telemetry_is_asked_for_by_the_clocks_definition_only_and_is_a_boolean():
    assert es.validate(stage_i("clocks"), source="x.yml")["report"]["telemetry"] is True
    assert es.validate(stage_i("slots"), source="x.yml")["report"]["telemetry"] is False
    doc = stage_i("clocks")
    doc["report"]["telemetry"] = "yes"
    assert refused(doc).startswith("experiments/x.yml: report.telemetry: ")


def test_driver_requirement_is_a_list_of_versions():
    doc = stage_i("drm")
    assert es.validate(copy.deepcopy(doc), source="x.yml")["arms"][0]["requires"]["driver_version"] == ["580.173.02"]
    doc["arms"][0]["requires"]["driver_version"] = "580.173.02"
    assert refused(doc).startswith("experiments/x.yml: arms[0].requires.driver_version: ")


def test_only_hooks_the_role_runs_are_accepted():
    doc = stage_i("clocks")
    defn = es.validate(copy.deepcopy(doc), source="x.yml")
    assert defn["arms"][0]["hook"] == "clock_state" and defn["arms"][0]["settings"] == {}
    assert defn["arms"][0]["requires"]["clocks"] == "locked"
    doc["arms"][0]["hook"] = "image_pin"
    assert refused(doc).startswith("experiments/x.yml: arms[0].hook: ")


def _alias_bomb(levels=10, refs=60):
    """About 2.3 KB of nested anchors under ``description``: expanded, 10 * refs**(levels - 1) strings."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append("a%d: &a%d [%s]" % (i, i, ",".join(["*a%d" % (i - 1)] * refs)))
    return "description:\n" + "".join("  " + line + "\n" for line in lines)


def test_a_yaml_alias_bomb_is_refused_at_once_with_a_short_message():
    import time
    text = (ROOT / "experiments" / "stage_c_fence.yml").read_text().replace("description: >-", "old_description: >-")
    text += _alias_bomb()
    assert 2000 < len(_alias_bomb()) < 2600
    started = time.monotonic()
    with pytest.raises(es.DefinitionError) as err:
        es.load_text(text, source="bomb.yml")
    assert time.monotonic() - started < 2 and len(str(err.value)) < 1024
    assert "YAML alias *a0: anchors and aliases are not accepted here" in str(err.value)


@pytest.mark.parametrize("key, kind", [("[a, b]", "list"), ("{a: 1}", "mapping"), ("? [x]\n", "list")])
def test_a_list_or_mapping_as_a_key_is_refused_by_name(key, kind):
    text = (ROOT / "experiments" / "stage_c_fence.yml").read_text() + "%s: 1\n" % key
    with pytest.raises(es.DefinitionError, match="a %s as a key: keys are names" % kind):
        es.load_text(text, source="k.yml")


def test_a_huge_value_is_cut_in_the_refusal():
    doc = stage_c()
    doc["stage"] = "Z" * 100000
    with pytest.raises(es.DefinitionError) as err:
        es.validate(doc, source="big.yml", stem="stage_c_fence")
    assert len(str(err.value)) < 1024 and "more characters" in str(err.value)


def test_a_drm_arm_raising_the_global_budget_is_refused_naming_the_key(tmp_path):
    """The report: raising DSV41_CACHE_GIB also gives the non-DRM layer an ordinary cache; per-layer budgets."""
    doc = stage_i("drm")
    doc["arms"][0]["settings"] = {"DSV41_CACHE_GIB": "0.25", "DSV41_ENGRAM_DRM_NODE": "/dev/dri/renderD128"}
    assert refused(doc) == (
        "experiments/x.yml: arms[0].settings.DSV41_CACHE_GIB: 0.25 raises the global Engram budget with a DRM node: "
        "that also allocates an ordinary-RAM cache for the other layer; give per-layer budgets in "
        "DSV41_CACHE_LAYER_GIB (e.g. \"1:0,14:0.25\") and keep DSV41_CACHE_GIB 0")
    # and through the module, before any host is contacted
    path = tmp_path / "stage_i_drm.yml"
    path.write_text(yaml.safe_dump(doc))
    out = run_module(experiment_definition.main, {"path": str(path)})
    assert out["failed"] and "arms[0].settings.DSV41_CACHE_GIB: 0.25 raises the global Engram budget" in out["msg"]
    doc["arms"][0]["settings"]["DSV41_CACHE_LAYER_GIB"] = "1:0,14:0.25"
    doc["arms"][0]["settings"]["DSV41_CACHE_GIB"] = "0"
    es.validate(doc, source="x.yml")
    doc["arms"][0]["settings"].pop("DSV41_ENGRAM_DRM_NODE")
    assert "arms[0].requires.drm_probe: the DRM probe needs the arm's DSV41_ENGRAM_DRM_NODE" in refused(doc)


def test_the_drm_arm_takes_per_layer_budgets_and_probes_first():
    d = es.load_text((ROOT / "experiments" / "stage_i_drm.yml").read_text(), "drm", "stage_i_drm")
    a = d["arms"][0]
    assert a["settings"]["DSV41_CACHE_LAYER_GIB"] == "1:0,14:0.25" and a["settings"]["DSV41_CACHE_GIB"] == "0"
    assert a["requires"]["drm_probe"] == {"modeset": "Y"}
    assert a["requires"]["engine_features"] == ["engram_drm", "engram_layer_budget"]
    assert {m["id"] for m in a["evidence"]["must"]} >= {"drm_backed", "layer_budgets", "non_drm_layer_zero",
                                                       "drm_metadata_accounted"}
    assert d["memory"]["cost_within_headroom"] is True


def test_cost_within_headroom_needs_each_arms_stated_headroom_and_same_lines_are_checked():
    doc = stage_i("ep1")
    doc["arms"][0]["requires"].pop("memory_headroom_gib_per_rank")
    assert refused(doc) == ("experiments/x.yml: arms[0].requires: memory.cost_within_headroom judges each arm against "
                            "its stated memory_headroom_gib_per_rank, which ep1 does not give")
    doc = stage_i("ep1")
    doc["arms"][0]["evidence"]["same_as_baseline"][0]["text"] = "x"
    assert refused(doc).endswith("arms[0].evidence.same_as_baseline[0]: give exactly one of text (literal) or pattern "
                                 "(regex)")
    doc = stage_i("ep1")
    doc["arms"][0]["evidence"]["same_as_baseline"][0]["when"] = "run"
    assert "arms[0].evidence.same_as_baseline[0].when: unknown key" in refused(doc)
    d = es.load_text((ROOT / "experiments" / "stage_i_ep1.yml").read_text(), "ep1", "stage_i_ep1")
    assert d["report"]["accept_length"] is True
    assert any("each arm's cost against the baseline within its stated headroom" in line for line in arms.plan_lines(d))
