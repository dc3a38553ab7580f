"""module_utils/launcher.py: .env parsing, start.sh forward lists, the settings rules, sitecustomize."""
import os

import pytest

from ansible.module_utils import launcher as L


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_SH = os.path.join(ROOT, "lab", "standins", "legacy", "start.sh")  # forward arrays
LAUNCHER_ENV = os.path.join(ROOT, "lab", "seed", "launcher.env")
HOME = {"HOME": "/home/mia"}


def read(path):
    with open(path) as fh:
        return fh.read()


def baseline(**changes):
    """The report's settings (lab/seed/launcher.env) with changes (None removes a key)."""
    env = L.parse_env(read(LAUNCHER_ENV), HOME)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ------------------------------------------------------------------------------------------ .env

ENV_CASES = """# launcher settings
MODEL_PATH=/srv/models/DeepSeek-V4.1-Flash
WORKER_USER=zurih
WORKER_DIR=/home/zurih/dsv41-3x-spark
ENGRAM_DIR=/home/mia/dsv41-engram
export API_KEY="sk-secret"
QUOTED='literal $HOME'
REF=${WORKER_DIR}/x
DEFAULTED=${UNSET_THING:-fallback}
PLAIN=$WORKER_USER
   INDENTED=1   # trailing comment
WORKER_HOSTS="spark2 spark3"
HOMEDIR=$HOME/dsv41-engram
SPACED=${UNSET_THING:-a b}/c
EMPTY=
"""


def test_parse_env_handles_quotes_exports_references():
    env = L.parse_env(ENV_CASES, HOME)
    assert env["API_KEY"] == "sk-secret"
    assert env["QUOTED"] == "literal $HOME"
    assert env["REF"] == "/home/zurih/dsv41-3x-spark/x"
    assert env["DEFAULTED"] == "fallback"
    assert env["PLAIN"] == "zurih" and env["INDENTED"] == "1"
    assert env["WORKER_HOSTS"] == "spark2 spark3" and env["HOMEDIR"] == "/home/mia/dsv41-engram"
    assert env["EMPTY"] == "" and "HOME" not in env and env["SPACED"] == "a b/c"


def test_parse_env_refuses_a_command_line_naming_it():
    with pytest.raises(L.EnvSyntaxError) as exc:
        L.parse_env(ENV_CASES + "not a line\n", HOME)
    assert str(exc.value) == (".env: line 16: a command word, not NAME=value: bash would run it (a .env holds "
                              "only assignments)")


def test_parse_env_bash_details():
    env = L.parse_env('A="x y" # note\nB="say \\"hi\\" \\$HOME"\nC=${NOPE-unset}\nD=${A-other}\nE=a"b c"\'d\'\n', HOME)
    assert env == {"A": "x y", "B": 'say "hi" $HOME', "C": "unset", "D": "x y", "E": "ab cd"}


def test_baseline_env_is_the_report():
    env = baseline()
    assert env["WORKER_HOSTS"] == "spark2 spark3" and env["MAX_TOTAL_TOKENS"] == "750000"
    assert env["MEM_FRACTION_STATIC"] == "0.95" and env["SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"] == "0"


@pytest.mark.parametrize("extra,host,is_head,user,expected", [
    ("", "spark1", True, "mia", "/home/mia/dsv41-engram"),
    ("", "spark2", False, "zurih", "/home/zurih/dsv41-3x-spark/engram"),
    ("WORKER_ENGRAM_DIR=/srv/engram\n", "spark3", False, "zurih", "/srv/engram"),
    ("WORKER_ENGRAM_DIR_SPARK2=/data/dsv41-engram\n", "spark2", False, "zurih", "/data/dsv41-engram"),
    ("WORKER_ENGRAM_DIR_SPARK2=/data/dsv41-engram\n", "spark3", False, "zurih", "/home/zurih/dsv41-3x-spark/engram"),
    ("ENGRAM_DIR=$HOME/other\n", "spark1", True, "mia", "/home/mia/other"),
])
def test_effective_engram_dir_follows_launcher_rules(extra, host, is_head, user, expected):
    text = ENV_CASES + extra
    assert L.effective_engram_dir(text, host, is_head, user) == expected
    parsed = L.parse_env(text, {"HOME": "/home/%s" % user})
    assert L.effective_engram_dir(parsed, host, is_head, user) == expected


def test_effective_engram_dir_defaults():
    assert L.effective_engram_dir("WORKER_USER=bob\n", "spark2", False, "zurih") == "/home/bob/dsv41-3x-spark/engram"
    assert L.effective_engram_dir("", "spark-4.lab", False, "zurih") == "/home/zurih/dsv41-3x-spark/engram"
    assert L.effective_engram_dir("WORKER_ENGRAM_DIR_SPARK_4_LAB=/x\n", "spark-4.lab", False, "zurih") == "/x"


# ------------------------------------------------------------------------------------------ start.sh

def test_forward_lists_of_the_lab_launcher():
    fl = L.parse_forward_lists(read(START_SH))
    assert fl["head"][0] == "API_KEY" and "API_KEY" not in fl["worker"]
    assert fl["worker"] == fl["head"][1:]
    for name in ("DSV41_AUTOTUNE_KEEP", "DSV41_ENGRAM_PREFETCH", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE",
                 "DSV41_VERIFY_CAP", "OFFLOAD_MODE"):
        assert name in fl["head"] and name in fl["worker"]
    assert len(fl["head"]) == 21 and len(fl["worker"]) == 20


def test_lab_launcher_drops_folded_sampling_and_prefetch_check_on_both_paths():
    fl = L.parse_forward_lists(read(START_SH))
    settings = baseline(SGLANG_DSPARK_FOLDED_SAMPLING="0", DSV41_ENGRAM_PREFETCH_CHECK="1",
                        DSV41_ENGRAM_PREFETCH="1")
    missing = L.unforwarded(settings, fl)
    assert missing == {"head": ["DSV41_ENGRAM_PREFETCH_CHECK", "SGLANG_DSPARK_FOLDED_SAMPLING"],
                       "worker": ["DSV41_ENGRAM_PREFETCH_CHECK", "SGLANG_DSPARK_FOLDED_SAMPLING"]}
    msgs = L.unforwarded_messages(missing)
    assert ("SGLANG_DSPARK_FOLDED_SAMPLING is set but the worker launch path does not forward it "
            "(start.sh WORKER_FORWARD)") in msgs
    assert ("DSV41_ENGRAM_PREFETCH_CHECK is set but the head launch path does not forward it "
            "(start.sh HEAD_FORWARD)") in msgs


def test_baseline_is_fully_forwarded_and_launcher_keys_are_exempt():
    fl = L.parse_forward_lists(read(START_SH))
    assert L.unforwarded(baseline(), fl) == {"head": [], "worker": []}
    # engine arguments and directories are consumed by start.sh itself
    extra = baseline(WORKER_ENGRAM_DIR_SPARK2="/data/x", DIST_PORT="20001", SERVE_TIMEOUT="300")
    assert L.unforwarded(extra, fl) == {"head": [], "worker": []}
    # unset / empty values are not "set"; an explicit 0 is
    assert L.unforwarded({"NEW_VAR": None, "OTHER": ""}, fl) == {"head": [], "worker": []}
    assert L.unforwarded({"NEW_VAR": 0}, fl) == {"head": ["NEW_VAR"], "worker": ["NEW_VAR"]}


def test_api_key_is_head_only():
    missing = L.unforwarded({"API_KEY": "sk-x"}, {"head": [], "worker": []})
    assert missing == {"head": ["API_KEY"], "worker": []}


def test_launcher_keys_match_the_engine_arguments_of_start_sh():
    text = read(START_SH)
    body = text[text.index("engine_args() {"):text.index("worker_run_command() {")]
    for key in ("TP_SIZE", "EP_SIZE", "MODEL_PATH", "API_PORT", "DSPARK_BLOCK_SIZE", "MAX_RUNNING_REQUESTS",
                "CHUNKED_PREFILL_SIZE", "MEM_FRACTION_STATIC", "MOE_RUNNER_BACKEND", "HEAD_HOST", "DIST_PORT",
                "MAX_TOTAL_TOKENS"):
        assert "$" + key in body and key in L.LAUNCHER_KEYS


FORWARD_VARIANT = """#!/bin/bash
COMMON=( A_ONE   # comment ) with a paren
  "A_TWO" 'A_THREE' A_FOUR
)
# HEAD_FORWARD=( NOT_THIS )
HEAD_FORWARD=(API_KEY "${COMMON[@]}")
declare -a WORKER_FORWARD=(
  "${COMMON[@]}" A_ONE
)
WORKER_FORWARD+=( EXTRA \\
  MORE )
f() { local -a args=(-e "$v"); ARGS+=(--x "$y"); }
"""


def test_forward_lists_tolerate_formatting():
    fl = L.parse_forward_lists(FORWARD_VARIANT)
    assert fl["head"] == ["API_KEY", "A_ONE", "A_TWO", "A_THREE", "A_FOUR"]
    assert fl["worker"] == ["A_ONE", "A_TWO", "A_THREE", "A_FOUR", "EXTRA", "MORE"]


@pytest.mark.parametrize("text, needle", [
    ("HEAD_FORWARD=(A B)\n", "start.sh has no WORKER_FORWARD=( ... ) block"),
    ("WORKER_FORWARD=(A)\n", "start.sh has no HEAD_FORWARD=( ... ) block"),
    ("HEAD_FORWARD=(A B\nWORKER_FORWARD=(A)\n", "unexpected '('"),
    ("HEAD_FORWARD=(A\n", "HEAD_FORWARD=( is not closed"),
    ("HEAD_FORWARD=(A $B)\nWORKER_FORWARD=(A)\n", "HEAD_FORWARD holds '$B', which is not a variable name"),
    ("HEAD_FORWARD=(\"${NOPE[@]}\")\nWORKER_FORWARD=(A)\n", "no NOPE=( ... ) array comes before it"),
    ("HEAD_FORWARD=('A)\nWORKER_FORWARD=(A)\n", "unterminated ' quote"),
])
def test_forward_list_errors_are_clear(text, needle):
    with pytest.raises(L.LauncherError) as err:
        L.parse_forward_lists(text)
    assert needle in str(err.value)


def test_real_start_sh_without_worker_block_fails():
    text = read(START_SH)
    start = text.index("WORKER_FORWARD=(")
    broken = text[:start] + text[text.index(")", start) + 1:]
    with pytest.raises(L.LauncherError) as err:
        L.parse_forward_lists(broken, source="/home/mia/dsv41-3x-spark/start.sh")
    assert str(err.value).startswith("/home/mia/dsv41-3x-spark/start.sh has no WORKER_FORWARD")


# ------------------------------------------------------------------------------------------ rules

def test_report_baseline_passes_with_no_errors():
    errors, warnings = L.validate_settings_full(baseline())
    assert errors == []
    assert L.validate_settings(baseline()) == []
    # the report's DSV41_CACHE_WAYS=4 with a zero cache is a note, not an error
    assert warnings == ["DSV41_CACHE_WAYS='4' has no effect while DSV41_CACHE_GIB is 0 "
                        "(ways matter only with a non-zero row cache)"]


# (rule id, changes to the baseline, keyword arguments, expected text in the message)
FORBIDDEN = [
    ("alloc_expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, {},
     "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' enables expandable_segments:True, which gives NaN logits"),
    ("alloc_expandable", {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6, Expandable_Segments : TRUE"},
     {}, "NaN logits"),
    ("moe_fused_finalize", {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": None}, {},
     "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE is unset: it must be set explicitly to 0"),
    ("moe_fused_finalize", {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "1"}, {},
     "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE='1' turns fused MoE finalize on: it must be 0"),
    ("moe_fused_finalize", {"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": ""}, {}, "is unset"),
    ("shared_pad_tp3", {"DSV41_SHARED_PAD_K": "576"}, {}, "DSV41_SHARED_PAD_K='576' enables shared-expert padding on TP3"),
    ("sps_table", {"DSPARK_SPS_TABLE": "/adapter/sps.json"}, {},
     "DSPARK_SPS_TABLE='/adapter/sps.json' enables ragged (SPS) verification"),
    ("offload_ram", {"OFFLOAD_MODE": "RAM"}, {}, "OFFLOAD_MODE='RAM': CPU offload creates no extra memory pool"),
    ("tp4_slots", {"MAX_RUNNING_REQUESTS": "16"}, {}, "MAX_RUNNING_REQUESTS='16' copies TP4's 16 slots"),
    ("tp4_kv_pool", {"MAX_TOTAL_TOKENS": "8000000"}, {}, "MAX_TOTAL_TOKENS='8000000' copies TP4's 8M-token KV pool"),
    ("tp4_kv_pool", {"MAX_TOTAL_TOKENS": 8388608}, {}, "MAX_TOTAL_TOKENS='8388608'"),
    ("tp4_fraction", {"MEM_FRACTION_STATIC": "0.80"}, {}, "MEM_FRACTION_STATIC='0.80' copies TP4's 0.80 memory fraction"),
    ("tp4_row_cache", {"DSV41_CACHE_GIB": "4"}, {}, "DSV41_CACHE_GIB='4' copies TP4's 4 GiB Engram row cache"),
    ("fraction_floor", {"MEM_FRACTION_STATIC": 0.9}, {}, "MEM_FRACTION_STATIC='0.9' is below 0.944, the TP3 floor"),
    ("fraction_value", {"MEM_FRACTION_STATIC": "95%"}, {}, "MEM_FRACTION_STATIC='95%' is not a fraction"),
    ("wo_a_needs_w8", {"DSV41_WO_A_W8_MID": "1"}, {}, "DSV41_WO_A_W8_MID='1' needs DSV41_WO_A_W8=1"),
    ("wo_a_needs_w8", {"DSV41_WO_A_W8_DROP": "1", "DSV41_WO_A_W8": "0"}, {"validated": {"wo_a_w8"}},
     "DSV41_WO_A_W8_DROP='1' needs DSV41_WO_A_W8=1 (it is 0)"),
    ("wo_a_drop_validated", {"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"}, {},
     "DSV41_WO_A_W8_DROP='1' before DSV41_WO_A_W8 is validated"),
    ("prefetch_packed", {"DSV41_ENGRAM_PREFETCH": "1"}, {"packed": False},
     "DSV41_ENGRAM_PREFETCH='1' needs packed Engram shards"),
    ("prefetch_check_timing", {"DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "1"},
     {"packed": True, "timing": True}, "DSV41_ENGRAM_PREFETCH_CHECK='1' is validation mode"),
    ("prefetch_check_needs_prefetch", {"DSV41_ENGRAM_PREFETCH_CHECK": "1"}, {},
     "DSV41_ENGRAM_PREFETCH_CHECK='1' without DSV41_ENGRAM_PREFETCH=1"),
    ("verify_cap_format", {"DSV41_VERIFY_CAP": "0.1", "DSPARK_BLOCK_SIZE": "5"}, {"validated": {"block5"}},
     "DSV41_VERIFY_CAP='0.1' is not of the form conf:<float>"),
    ("verify_cap_format", {"DSV41_VERIFY_CAP": "conf:abc", "DSPARK_BLOCK_SIZE": "5"}, {"validated": {"block5"}},
     "conf:<float>"),
    ("verify_cap_block5", {"DSV41_VERIFY_CAP": "conf:0.1"}, {"validated": {"block5"}},
     "DSV41_VERIFY_CAP='conf:0.1' is set while DSPARK_BLOCK_SIZE=3"),
    ("verify_cap_measured", {"DSV41_VERIFY_CAP": "conf:0.1", "DSPARK_BLOCK_SIZE": "5"}, {},
     "DSV41_VERIFY_CAP='conf:0.1' before k=5 alone was measured"),
    ("block_size", {"DSPARK_BLOCK_SIZE": "6"}, {}, "DSPARK_BLOCK_SIZE='6' is not an integer from 2 to 5"),
    ("block_size", {"DSPARK_BLOCK_SIZE": "3.5"}, {}, "DSPARK_BLOCK_SIZE='3.5' is not an integer"),
    ("draft_tau", {"DSV41_DRAFT_TAU": "warm"}, {}, "DSV41_DRAFT_TAU='warm' is not a float > 0"),
    ("draft_tau", {"DSV41_DRAFT_TAU": "-0.8"}, {}, "is not a float > 0"),
    ("folded_sampling_value", {"SGLANG_DSPARK_FOLDED_SAMPLING": "force"}, {},
     "SGLANG_DSPARK_FOLDED_SAMPLING='force' is not unset (AUTO), 0, 1 or 2"),
    ("folded_sampling_budget", {"SGLANG_DSPARK_FOLDED_SAMPLING": "2"}, {},
     "SGLANG_DSPARK_FOLDED_SAMPLING='2' forces folded sampling before its static buffers are budgeted"),
    ("switch_values", {"DSV41_FOLDED_FENCE": "yes"}, {}, "DSV41_FOLDED_FENCE='yes': a switch must be 0 or 1"),
    ("switch_values", {"DSV41_AUTOTUNE_KEEP": "2"}, {}, "DSV41_AUTOTUNE_KEEP='2': a switch must be 0 or 1"),
    ("tp_size", {"TP_SIZE": "4"}, {}, "TP_SIZE='4' but the inventory has tp_size 3"),
    ("ep_size", {"EP_SIZE": "2"}, {}, "EP_SIZE='2': expert parallel must be 3 (EP=TP) or 1"),
    ("integer_values", {"MAX_RUNNING_REQUESTS": "four"}, {}, "MAX_RUNNING_REQUESTS='four' is not a positive integer"),
    ("integer_values", {"DSV41_CACHE_GIB": "-1"}, {}, "DSV41_CACHE_GIB='-1' is not a size in GiB >= 0"),
    ("env_writable", {"IMAGE": "x\n$(touch /tmp/x)"}, {}, "IMAGE: the value holds a newline"),
]


@pytest.mark.parametrize("rule, changes, kwargs, text", FORBIDDEN,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(FORBIDDEN)])
def test_forbidden_setting_is_refused_with_a_clear_message(rule, changes, kwargs, text):
    findings = L.check_settings(baseline(**changes), **kwargs)
    hits = [f for f in findings if f.rule == rule]
    assert hits, "rule %s did not fire: %s" % (rule, findings)
    assert all(f.level == "error" for f in hits)
    assert any(text in f.message for f in hits), [f.message for f in hits]
    errors = L.validate_settings(baseline(**changes), **kwargs)
    assert any(text in e for e in errors)


def test_every_error_rule_has_a_refusal_case():
    covered = set(case[0] for case in FORBIDDEN)
    errors = set(r.id for r in L.RULES if r.level == "error")
    assert errors - covered == set()
    assert len(L.RULE_IDS) == len(set(L.RULE_IDS))
    for rule in L.RULES:
        assert rule.level in ("error", "warning") and rule.summary and callable(rule.check)


@pytest.mark.parametrize("changes, kwargs", [
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, {}),
    ({"DSV41_SHARED_PAD_K": "0"}, {}),
    ({"MAX_RUNNING_REQUESTS": "8"}, {}),
    ({"MAX_TOTAL_TOKENS": "1000000"}, {}),
    ({"MEM_FRACTION_STATIC": "0.944"}, {}),
    ({"MEM_FRACTION_STATIC": "0.98"}, {}),
    ({"DSV41_CACHE_GIB": "0.5", "DSV41_CACHE_WAYS": "16"}, {}),
    ({"DSV41_WO_A_W8": "1"}, {}),
    ({"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_MID": "1"}, {}),
    ({"DSV41_WO_A_W8": "1", "DSV41_WO_A_W8_DROP": "1"}, {"validated": ["wo_a_w8"]}),
    ({"DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "1"}, {"packed": True}),
    ({"DSV41_ENGRAM_PREFETCH": "1", "DSV41_ENGRAM_PREFETCH_CHECK": "0"}, {"packed": True, "timing": True}),
    ({"DSPARK_BLOCK_SIZE": "5", "DSV41_VERIFY_CAP": "conf:0.1"}, {"validated": {"block5"}}),
    ({"DSPARK_BLOCK_SIZE": "2"}, {}),
    ({"DSV41_VERIFY_CAP": "0"}, {}),
    ({"DSV41_DRAFT_TAU": "0.8"}, {}),
    ({"DSV41_DRAFT_TAU": "1"}, {}),
    ({"SGLANG_DSPARK_FOLDED_SAMPLING": "0"}, {}),
    ({"SGLANG_DSPARK_FOLDED_SAMPLING": "2"}, {"validated": {"folded_sampling_budget"}}),
    ({"DSV41_AUTOTUNE_KEEP": True, "DSV41_FOLDED_FENCE": 1, "DSV41_BLOCK_VERIFY": 0}, {}),
    ({"EP_SIZE": "1"}, {}),
    ({"TP_SIZE": None, "EP_SIZE": None}, {}),
])
def test_allowed_settings_pass(changes, kwargs):
    assert L.validate_settings(baseline(**changes), **kwargs) == []


def test_tp4_fleet_may_use_tp4_values():
    tp4 = baseline(TP_SIZE="4", EP_SIZE="4", MAX_RUNNING_REQUESTS="16", MAX_TOTAL_TOKENS="8000000",
                   MEM_FRACTION_STATIC="0.80", DSV41_CACHE_GIB="4", DSV41_SHARED_PAD_K="576")
    assert L.validate_settings(tp4, tp_size=4) == []
    assert "TP_SIZE='4' but the inventory has tp_size 3" in L.validate_settings(tp4, tp_size=3)


def test_unset_tp_size_uses_start_sh_default():
    errors = L.validate_settings(baseline(TP_SIZE=None), tp_size=4)
    assert "TP_SIZE='3' (unset: start.sh default 3) but the inventory has tp_size 4" in errors


def test_one_message_per_broken_rule_and_key():
    bad = baseline(DSV41_WO_A_W8_MID="1", DSV41_WO_A_W8_DROP="1", MEM_FRACTION_STATIC="0.80")
    found = L.check_settings(bad)
    assert [(f.rule, f.key) for f in found] == [
        ("tp4_fraction", "MEM_FRACTION_STATIC"),
        ("wo_a_needs_w8", "DSV41_WO_A_W8_MID"), ("wo_a_needs_w8", "DSV41_WO_A_W8_DROP"),
        ("wo_a_drop_validated", "DSV41_WO_A_W8_DROP"),
        ("cache_ways_without_cache", "DSV41_CACHE_WAYS")]


def test_warnings_are_separate():
    errors, warnings = L.validate_settings_full(baseline(DSV41_ENGRAM_DRM_NODE="/dev/dri/renderD128"))
    assert errors == []
    assert any(w.startswith("DSV41_ENGRAM_DRM_NODE='/dev/dri/renderD128' yields no cache slots") for w in warnings)
    errors, warnings = L.validate_settings_full(baseline(DSV41_CACHE_GIB="0.5"))
    assert errors == [] and warnings == []


def test_secret_values_are_masked():
    assert L.shown("API_KEY", "sk-123") == "API_KEY='***'"
    assert L.shown("HF_TOKEN", "hf_x") == "HF_TOKEN='***'"
    assert L.mask_settings({"API_KEY": "sk-1", "DB_PASSWORD": "p", "X": "1", "EMPTY_SECRET": ""}) == \
        {"API_KEY": "***", "DB_PASSWORD": "***", "X": "1", "EMPTY_SECRET": ""}
    assert not L.is_secret("DSV41_AUTOTUNE_KEEP") and not L.is_secret("MAX_TOTAL_TOKENS")
    assert L.is_secret("HUGGING_FACE_HUB_TOKEN") and L.is_secret("SECRET_KEY_BASE")
    # the names the three old rules disagreed on
    assert L.is_secret("hf_token") and L.is_secret("OPENAI_APIKEY") and L.is_secret("DB_PASSWORD2")
    assert L.shown("OPENAI_APIKEY", "sk-abcdef") == "OPENAI_APIKEY='***'"


def test_values_are_normalised_like_bash_strings():
    assert L.norm_value(True) == "1" and L.norm_value(False) == "0" and L.norm_value(0.95) == "0.95"
    assert L.norm_value(750000) == "750000" and L.norm_value("") is None and L.norm_value(None) is None
    assert L.norm_value(5.0) == "5"
    # no stripping: the rules judge what bash will hold (a quoted " 0" is not "0")
    assert L.norm_value("  ") == "  " and L.norm_value(" 0") == " 0"


@pytest.mark.parametrize("key,value,needle", [
    ("FOO;touch /tmp/x", "1", "'FOO;touch /tmp/x' is not a shell variable name"),
    ("1ABC", "1", "'1ABC' is not a shell variable name"),
    ("BASH_ENV", "/tmp/x.sh", "BASH_ENV is a variable of the shell or the program loader"),
    ("MODEL_PATH", "a\ntouch /tmp/x", "MODEL_PATH: the value holds a newline"),
    ("MODEL_PATH", "a\x00b", "MODEL_PATH: the value holds a NUL byte"),
    ("IMAGE", "a\rb", "IMAGE: the value holds a carriage return"),
    ("IMAGE", "bad\udcff", "IMAGE: the value is not valid UTF-8"),
])
def test_env_writable_rule_names_the_key(key, value, needle):
    found = [f for f in L.check_settings(baseline(**{key: value})) if f.rule == "env_writable"]
    assert len(found) == 1 and found[0].key == key and needle in found[0].message
    assert value not in found[0].message or key.startswith(("FOO", "1"))
