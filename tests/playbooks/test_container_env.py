"""container_env on the lab: the declared baseline is what the fleet runs; overrides, refusals, forwards;
hostile keys and values never run and bash sees exactly what was declared; secrets never in clear;
the .env rollback restores the recorded "before" exactly and twice equals once."""
import json
import os
import shlex
import subprocess
import tempfile

import pytest

from ansible.module_utils.launcher.edit import BACKUP_INFIX
from labhelpers import install_launcher, ROOT, LAB_INVENTORY, changed_tasks, env, playbook, sh

WRITE = "container_env : Write the launcher settings as data (this run's \"before\" kept as a recorded backup)"
SHOW = "Show what changed, key by key (as bash sees it, secrets redacted)"
VALIDATE = "Validate the settings and the launch paths"
DIR = "/home/mia/dsv41-3x-spark"
ENV = DIR + "/.env"
MARKER = "/tmp/dsv41-pwned"          # every hostile payload tries to create it

# The role alone (with the inventory check it needs): a few seconds per run instead of site.yml's minute.
# The last task keeps the role's registered results (what Ansible got from the modules) for the test.
CE_PLAY = """---
- name: Validate the inventory
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: preflight
- name: Launcher settings on the head
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: container_env
  post_tasks:
    - name: Keep the role's results for the test
      ansible.builtin.copy:
        content: "{{ {'write': container_env_result, 'check': _container_env_check} | to_json }}"
        dest: "{{ test_result_file }}"
        mode: "0600"
      delegate_to: localhost
      run_once: true
      check_mode: false
"""
PREFLIGHT_PLAY = CE_PLAY.split("- name: Launcher")[0]


# The .env writer's tests (hostile values, secrets, rollback) run on the lab's legacy launcher, which hands
# every value to the containers as array words: a value reaches the container exactly as bash holds it.
# The real-shaped launchers interpolate values into the workers' ssh command string, where such a value
# cannot be served at all: test_a_value_the_launcher_would_reparse_is_refused shows that refusal, and the
# forwarding test runs on the default (explicit) launcher.

# the launcher variant the lab reset seeds for this module (conftest.fresh_lab)
LAB_LAUNCHER_VARIANT = "legacy"


def env_text():
    return sh("spark1", f"cat {ENV}")


def env_state():
    """(bytes, 'mode uid gid') of the head's .env."""
    data = subprocess.run(["podman", "exec", _container(), "cat", ENV], stdout=subprocess.PIPE, check=True).stdout
    return data, sh("spark1", f"stat -c '%a %u %g' {ENV}").strip()


def _container():
    from labhelpers import lab_container
    return lab_container("spark1")


def launcher_dir():
    """{name: 'mode size'} of every file in the launcher checkout (backups and the record included)."""
    out = sh("spark1", f"cd {DIR} && for f in .[!.]* *; do [ -f \"$f\" ] && stat -c '%n %a %s' \"$f\"; done")
    return dict((line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in out.splitlines())


def marker_absent():
    return sh("spark1", f"test -e {MARKER} && echo present || echo absent").strip() == "absent"


def flat(out):
    return " ".join(out.split())


def overrides(**keys):
    return ["-e", json.dumps({"dsv41_launcher_overrides": keys})]


def run_play(text, *args):
    """Run a playbook given as text; (rc, stdout, stderr, the role's results or None).

    Results are printed as JSON (-v shows every task's result), so a test can read them as data.
    """
    with tempfile.TemporaryDirectory(prefix="dsv41-test-") as tmp:
        play = os.path.join(tmp, "play.yml")
        results = os.path.join(tmp, "results.json")
        with open(play, "w") as fh:
            fh.write(text)
        e = env()
        e["ANSIBLE_CALLBACK_RESULT_FORMAT"] = "json"
        res = subprocess.run(["ansible-playbook", play, "-i", str(LAB_INVENTORY), "-e", "test_result_file=" + results]
                             + list(args), cwd=ROOT, env=e, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=1800)
        data = None
        if os.path.exists(results):
            with open(results) as fh:
                data = json.load(fh)
    return res.returncode, res.stdout, res.stderr, data


def failure(out, task):
    """The JSON result of the failed task whose name contains ``task``."""
    section = out.split(task, 1)[1]
    start = section.index("FAILED! => ") + len("FAILED! => ")
    return json.JSONDecoder().raw_decode(section[start:])[0]


def bash_sees(keys):
    """{key: value} as ``set -a; source .env`` leaves them on the head (unset keys absent)."""
    names = " ".join(keys)
    script = (f"cd {DIR} && env -i HOME=/home/mia PATH=/usr/bin:/bin bash -c 'set -a; source ./.env; "
              f"for k in {names}; do [[ -v $k ]] && printf \"%s\\0%s\\0\" \"$k\" \"${{!k}}\"; done; true'")
    res = subprocess.run(["podman", "exec", "--user", "mia", _container(), "bash", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    assert res.stderr == b"", res.stderr
    items = res.stdout.decode("utf-8").split("\0")[:-1]
    return dict(zip(items[0::2], items[1::2]))


# --------------------------------------------------------------------------- baseline and rules

def test_baseline_converge_reports_no_change():
    before = launcher_dir()
    text = env_text()
    rc, out = playbook("site.yml")
    assert rc == 0, out[-3000:]
    assert WRITE not in changed_tasks(out)
    assert "no change: the fleet runs exactly the declared settings" in out
    assert env_text() == text and launcher_dir() == before          # no backup, no record when nothing changes


@pytest.mark.smoke
def test_check_diff_of_one_key_shows_only_that_key():
    before = env_text()
    rc, out = playbook("site.yml", "--check", "--diff", *overrides(DSPARK_BLOCK_SIZE=5))
    assert rc == 0, out[-3000:]
    diff = out.split(SHOW, 1)[1].split("TASK [", 1)[0]
    assert "DSPARK_BLOCK_SIZE: 3 -> 5" in diff
    assert diff.count(" -> ") == 1
    assert "sk-lab" not in out  # the API key never appears, not even in --diff
    assert "-DSPARK_BLOCK_SIZE=3" in out and "+DSPARK_BLOCK_SIZE=5" in out          # --diff: what bash sees
    assert env_text() == before


FORBIDDEN = [
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "PYTORCH_CUDA_ALLOC_CONF"),
    ({"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": 1}, "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"),
    ({"SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": None}, "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE"),
    ({"DSV41_SHARED_PAD_K": 576}, "DSV41_SHARED_PAD_K"),
    # judged by its effect: refused because the table exists where the head container reads it (/engram is
    # the head's ENGRAM_DIR; the file is created by the test below)
    ({"DSPARK_SPS_TABLE": "/engram/dspark_sps.json"}, "DSPARK_SPS_TABLE"),
    ({"OFFLOAD_MODE": "ram"}, "OFFLOAD_MODE"),
    ({"MAX_RUNNING_REQUESTS": 16}, "MAX_RUNNING_REQUESTS"),
    ({"MAX_TOTAL_TOKENS": 8000000}, "MAX_TOTAL_TOKENS"),
    ({"MEM_FRACTION_STATIC": "0.80"}, "MEM_FRACTION_STATIC"),
    ({"DSV41_CACHE_GIB": 4}, "DSV41_CACHE_GIB"),
    ({"MEM_FRACTION_STATIC": "0.93"}, "MEM_FRACTION_STATIC"),
    ({"DSV41_WO_A_W8_MID": 1}, "DSV41_WO_A_W8_MID"),
    ({"DSV41_WO_A_W8": 1, "DSV41_WO_A_W8_DROP": 1}, "DSV41_WO_A_W8_DROP"),
    ({"DSV41_ENGRAM_PREFETCH": 1}, "DSV41_ENGRAM_PREFETCH"),
    ({"DSV41_VERIFY_CAP": "conf:0.1"}, "DSV41_VERIFY_CAP"),
    ({"DSPARK_BLOCK_SIZE": 7}, "DSPARK_BLOCK_SIZE"),
]


@pytest.mark.parametrize("settings,key", FORBIDDEN, ids=[k for _, k in FORBIDDEN])
def test_forbidden_settings_are_refused_and_nothing_is_written(settings, key):
    if key == "DSPARK_SPS_TABLE":
        sh("spark1", "touch /home/mia/dsv41-engram/dspark_sps.json", user="mia")
    before = launcher_dir()
    text = env_text()
    try:
        rc, out, _err, _ = run_play(CE_PLAY, *overrides(**settings))
    finally:
        sh("spark1", "rm -f /home/mia/dsv41-engram/dspark_sps.json", user="mia")
    assert rc != 0
    assert key in failure(out, VALIDATE)["msg"]
    assert "Write the launcher settings" not in out.split("PLAY RECAP")[0].split(VALIDATE, 1)[1]
    assert env_text() == text and launcher_dir() == before


# --------------------------------------------------------------------------- hostile values

HOSTILE = [
    ("MODEL_PATH", f"$(touch {MARKER})"),
    ("IMAGE", f'x" ; touch {MARKER} ; "'),
    ("PYTORCH_CUDA_ALLOC_CONF", "http://h/?a=1&b=2"),
    ("WORKER_ENGRAM_DIR_H01", f"`touch {MARKER}`"),
    ("WORKER_ENGRAM_DIR_H02", "'"),
    ("WORKER_ENGRAM_DIR_H03", f"it's '; touch {MARKER}; '"),
    ("WORKER_ENGRAM_DIR_H04", "\\"),
    ("WORKER_ENGRAM_DIR_H05", "trailing\\"),
    ("WORKER_ENGRAM_DIR_H06", "$HOME"),
    ("WORKER_ENGRAM_DIR_H07", "${HOME:-x}"),
    ("WORKER_ENGRAM_DIR_H08", "a b"),
    ("WORKER_ENGRAM_DIR_H09", "*"),
    ("WORKER_ENGRAM_DIR_H10", "~"),
    ("WORKER_ENGRAM_DIR_H11", "!"),
    ("WORKER_ENGRAM_DIR_H12", "!!"),
    ("WORKER_ENGRAM_DIR_H13", "Grüße 🚀 ∂"),
    ("WORKER_ENGRAM_DIR_H14", "#not a comment"),
    ("WORKER_ENGRAM_DIR_H15", f"a;b|c&d>{MARKER}<f"),
    ("WORKER_ENGRAM_DIR_H16", "  spaces around  "),
    ("WORKER_ENGRAM_DIR_H17", ""),
    ("WORKER_ENGRAM_DIR_H18", "a\tb"),
    ("WORKER_ENGRAM_DIR_H19", "{a,b}"),
    ("WORKER_ENGRAM_DIR_H20", "$'x'"),
    ("WORKER_ENGRAM_DIR_H21", "x\u2028y"),
    ("WORKER_ENGRAM_DIR_H22", "a=b:~/c"),
]


@pytest.fixture(scope="module")
def hostile_runs():
    """--check --diff, then the real converge, with every hostile value; what bash sees; then roll back."""
    settings = dict(HOSTILE)
    before_state, before_dir = env_state(), launcher_dir()
    assert marker_absent()
    rc, out, err, checked = run_play(CE_PLAY, "--check", "--diff", *overrides(**settings))
    assert rc == 0, out[-3000:] + err
    after_check = (env_state(), launcher_dir())
    rc, out, err, applied = run_play(CE_PLAY, *overrides(**settings))
    assert rc == 0, out[-3000:] + err
    seen = bash_sees(list(settings))
    lib_only = sh("spark1", f"cd {DIR} && START_SH_LIB_ONLY=1 bash -c 'source ./start.sh; "
                            "printf \"%s\\0\" \"$MODEL_PATH\" \"$IMAGE\"'", user="mia").split("\0")[:2]
    marker_after = marker_absent()
    rc, out, err, _ = run_play(PREFLIGHT_PLAY + ROLLBACK_PLAY)
    assert rc == 0, out[-3000:] + err
    yield {"before": (before_state, before_dir), "after_check": after_check, "check": checked["write"],
           "applied": applied["write"], "seen": seen, "lib_only": lib_only, "marker_absent": marker_after,
           "restored": env_state()}


ROLLBACK_PLAY = """- name: Restore the .env
  hosts: dsv41_ranks
  gather_facts: false
  tasks:
    - name: Restore the recorded before
      ansible.builtin.include_role:
        name: container_env
        tasks_from: rollback
"""


def shown_for(changes, key):
    lines = [c for c in changes if c.startswith(key + ": ")]
    assert len(lines) == 1, changes
    old, _, new = lines[0][len(key) + 2:].partition(" -> ")
    return old, new


@pytest.mark.parametrize("key,value", HOSTILE, ids=[k for k, _ in HOSTILE])
def test_hostile_value_is_written_as_data_and_check_diff_agrees_with_bash(hostile_runs, key, value):
    r = hostile_runs
    assert r["after_check"] == r["before"]                                # --check wrote nothing
    assert r["check"]["changed"] and r["applied"]["changed"]
    assert r["seen"][key] == value                                        # bash holds exactly the declared value
    _old, shown = shown_for(r["check"]["changes"], key)
    assert shlex.split(shown) == [value]                                  # --check said what bash now sees
    assert [line for line in r["check"]["diff"]["after"].split("\n") if line.startswith(key + "=")] == \
        [key + "=" + shown]
    assert r["check"]["changes"] == r["applied"]["changes"]
    assert r["marker_absent"] and marker_absent()                          # nothing ran, on any path
    assert r["restored"] == r["before"][0]                                 # and the rollback undid it exactly


def test_start_sh_reads_the_hostile_values_as_data(hostile_runs):
    assert hostile_runs["lib_only"] == [dict(HOSTILE)["MODEL_PATH"], dict(HOSTILE)["IMAGE"]]


REFUSED = [
    ({"FOO;touch " + MARKER: "1"}, "'FOO;touch /tmp/dsv41-pwned' is not a shell variable name"),
    ({"1ABC": "1"}, "'1ABC' is not a shell variable name"),
    ({"A B": "1"}, "'A B' is not a shell variable name"),
    ({"ÄBC": "1"}, "'ÄBC' is not a shell variable name"),
    ({"BASH_ENV": "/tmp/evil.sh"}, "BASH_ENV is a variable of the shell or the program loader"),
    ({"PS4": "$(touch " + MARKER + ")"}, "PS4 is a variable of the shell or the program loader"),
    ({"LD_PRELOAD": "/tmp/evil.so"}, "LD_PRELOAD is a variable of the shell or the program loader"),
    ({"MODEL_PATH": "/srv\ntouch " + MARKER}, "MODEL_PATH: the value holds a newline"),
    ({"MODEL_PATH": "/srv\x00x"}, "MODEL_PATH: the value holds a NUL byte"),
    ({"IMAGE": "img\rtouch " + MARKER}, "IMAGE: the value holds a carriage return"),
    ({"IMAGE": "img\x1b]0;x\x07"}, "IMAGE: the value holds the control character U+001B"),
]


@pytest.mark.parametrize("settings,needle", REFUSED, ids=[n.split(":")[0].split(" is ")[0] for _, n in REFUSED])
def test_hostile_key_or_value_is_refused_with_nothing_written(settings, needle):
    before = env_state(), launcher_dir()
    rc, out, err, _ = run_play(CE_PLAY, *overrides(**settings))
    assert rc != 0
    assert needle in failure(out, VALIDATE)["msg"]
    assert (env_state(), launcher_dir()) == before and marker_absent()


def test_notes_and_api_key_cannot_break_out():
    key = f"sk-'$(touch {MARKER})\"\\`x`"
    notes = [f"tried 0.98\n$(touch {MARKER})\nMODEL_PATH=/evil", f"`touch {MARKER}`"]
    before = env_state()
    rc, out, err, data = run_play(CE_PLAY, "-v", "-e", json.dumps({"dsv41_api_key": key,
                                                                   "dsv41_launcher_notes": notes}))
    assert rc == 0, out[-3000:] + err
    text = env_text()
    assert "# $(touch /tmp/dsv41-pwned)\n# MODEL_PATH=/evil\n" in text
    seen = bash_sees(["API_KEY", "MODEL_PATH"])
    assert seen == {"API_KEY": key, "MODEL_PATH": "/srv/models/DeepSeek-V4.1-Flash"} and marker_absent()
    assert data["write"]["changes"] == ["API_KEY: (secret changed)"]
    for text in (json.dumps(data), out, err):
        assert key not in text and json.dumps(key)[1:-1] not in text and "touch /tmp/dsv41-pwned)\"" not in text
    rc, out, err, _ = run_play(PREFLIGHT_PLAY + ROLLBACK_PLAY)
    assert rc == 0, out[-3000:] + err
    assert env_state() == before


# --------------------------------------------------------------------------- rollback

RESTORE_TASK = "container_env : Restore the recorded \"before\" of the run (the latest recorded run unless one is named)"


def test_env_rollback_twice_equals_once_and_restores_bytes_mode_owner():
    sh("spark1", f"chmod 0644 {ENV}", user="mia")          # a hand-made mode the rollback must bring back
    original = env_state()
    rc, out, err, data = run_play(CE_PLAY, *overrides(DSPARK_BLOCK_SIZE=5, MODEL_PATH="/srv/models/other"))
    assert rc == 0, out[-3000:] + err
    res = data["write"]
    assert res["changed"] and res["backup_created"] and res["backup"].startswith(".env.dsv41-backup-")
    assert res["backup"].endswith("-" + res["run_id"])
    files = launcher_dir()
    assert files[res["backup"]].split()[0] == "600" and files[".env"].split()[0] == "600"  # first backup: 0600
    assert files[".env.dsv41-backups.json"].split()[0] == "600"
    changed_state = env_state()

    rc, out = playbook("rollback.yml", "--check", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert RESTORE_TASK in changed_tasks(out) and env_state() == changed_state and launcher_dir() == files

    rc, out = playbook("rollback.yml", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert RESTORE_TASK in changed_tasks(out)
    assert env_state() == original                         # bytes, mode 644, owner: before the change
    once = launcher_dir()
    record = sh("spark1", f"cat {ENV}.dsv41-backups.json")

    rc, out = playbook("rollback.yml", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert RESTORE_TASK not in changed_tasks(out)
    assert env_state() == original and launcher_dir() == once  # twice = once; nothing added to the pool
    assert sh("spark1", f"cat {ENV}.dsv41-backups.json") == record
    sh("spark1", f"chmod 0600 {ENV}", user="mia")          # the lab's seeded mode again


# --------------------------------------------------------------------------- secrets

SECRETS = {"hf_token": 'hf_"tok\\en-1111', "OPENAI_APIKEY": 'sk-"open\\ai-2222',
           "DB_PASSWORD2": 'p@ss"w\\rd-3333', "GITHUB_PAT": 'ghp_"pat\\4444'}
API = 'sk-"api\\key-5555'
PROBE = "dsv41-secret-probe"


def forms(value):
    """A secret as it may appear in output: as is, JSON-escaped, and its distinctive tail."""
    return [value, json.dumps(value)[1:-1], value[-9:]]


def assert_no_secret(text, where):
    for value in list(SECRETS.values()) + [API]:
        for form in forms(value):
            assert form not in text, "%s shows %r" % (where, form)


@pytest.fixture
def saved_start_sh():
    script = subprocess.run(["podman", "exec", _container(), "cat", DIR + "/start.sh"], stdout=subprocess.PIPE,
                            check=True).stdout
    yield
    subprocess.run(["podman", "exec", "-i", "--user", "mia", _container(), "bash", "-c",
                    f"cat > {DIR}/start.sh && rm -f {DIR}/start.sh.*~ {DIR}/start.sh{BACKUP_INFIX}*"],
                   input=script, check=True)


RECORD_PLAY = """---
- name: Validate the inventory
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: preflight
- name: A container with secret-like variables and a benchmark result that echoes them
  hosts: spark2
  gather_facts: false
  tasks:
    - name: Point the record at the probe container and give it the echoing benchmark result
      ansible.builtin.set_fact:
        preflight_container_name: %s
        benchmark_result: "{{ probe_benchmark_result }}"
      no_log: true  # the test's own input; what is checked is what the run record writes and prints
- name: Run record
  hosts: dsv41_ranks
  gather_facts: false
  roles:
    - role: run_record
      vars:
        run_record_stage: secrets
        run_record_root: "{{ probe_record_root }}"
        run_record_bench_host: spark2
""" % PROBE


def test_secret_like_names_never_appear_in_clear(saved_start_sh, tmp_path):
    """Module output, --check --diff, backups, run record and raw benchmark output: zero in clear."""
    extra = ["-e", json.dumps({"dsv41_api_key": API, "dsv41_launcher_overrides": SECRETS}),
             "-e", "container_env_add_forwards=true"]
    before = env_state()
    # module output and diff, check mode then for real
    rc, out, err, data = run_play(CE_PLAY, "--check", "--diff", "-v", *extra)
    assert rc == 0, out[-3000:] + err
    assert_no_secret(json.dumps(data) + out + err, "--check --diff")
    checked = data["write"]
    assert sorted(c for c in checked["changes"] if "secret" in c) == sorted(
        ["API_KEY: (secret changed)"] + ["%s: (unset) -> (secret)" % k for k in SECRETS])
    assert all("%s=***" % k in checked["diff"]["after"] for k in list(SECRETS) + ["API_KEY"])
    rc, out, err, data = run_play(CE_PLAY, "-v", *extra)
    assert rc == 0, out[-3000:] + err
    assert_no_secret(json.dumps(data) + out + err, "module output")
    first_run = data["write"]["run_id"]
    assert all(data["check"]["settings"][k] == "***" for k in SECRETS)
    assert bash_sees(list(SECRETS) + ["API_KEY"]) == dict(SECRETS, API_KEY=API)
    # backups holding secrets are private (the first one held the lab key; the next one holds these)
    rc, out, err, data = run_play(CE_PLAY, "-v", "-e", json.dumps({"dsv41_api_key": API + "-2",
                                                                  "dsv41_launcher_overrides": SECRETS}),
                                  "-e", "container_env_add_forwards=true")
    assert rc == 0, out[-3000:] + err
    assert_no_secret(json.dumps(data) + out + err, "module output (second run)")
    backups = dict((n, m) for n, m in launcher_dir().items() if n.startswith(".env.dsv41-"))  # not .env.example
    assert len([n for n in backups if ".dsv41-backup-" in n]) >= 2
    assert all(m.split()[0] == "600" for m in backups.values()), backups
    # run record and the raw benchmark output it keeps
    sh("spark2", f"docker rm -f {PROBE} >/dev/null 2>&1; docker run -d --name {PROBE} "
                 + " ".join("-e " + shlex.quote("%s=%s" % kv) for kv in list(SECRETS.items()) + [("API_KEY", API)])
                 + " busybox:latest sleep 600 >/dev/null", user="zurih")
    bench = {"url": "http://spark1:8888/v1/chat/completions", "raw_echo": "Bearer " + API,
             "events": [{"session_token": SECRETS["hf_token"], "text": "you sent " + SECRETS["GITHUB_PAT"]}],
             "headers": {"Authorization": "Bearer " + API}, "results": []}
    try:
        rc, out, err, _ = run_play(RECORD_PLAY, "-v", "-e", json.dumps({"dsv41_api_key": API,
                                                                        "probe_benchmark_result": bench,
                                                                        "probe_record_root": str(tmp_path)}))
        assert rc == 0, out[-3000:] + err
        assert_no_secret(out + err, "run record play output")
        written = {p.name: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
        assert {"spark2.json", "benchmark.json", "summary.md"} <= set(written)
        for name, text in written.items():
            assert_no_secret(text, name)
        node = json.loads(written["spark2.json"])
        assert node["container"]["name"] == PROBE
        assert all(node["container_env"][k] == "***" for k in list(SECRETS) + ["API_KEY"])
        raw = json.loads(written["benchmark.json"])
        assert raw["raw_echo"].endswith("***") and raw["events"][0]["session_token"] == "***"
        assert raw["events"][0]["text"] == "you sent ***" and raw["headers"]["Authorization"] == "***"
    finally:
        sh("spark2", f"docker rm -f {PROBE} >/dev/null", user="zurih")
        rc, out, err, _ = run_play(PREFLIGHT_PLAY + ROLLBACK_PLAY, "-e", "container_env_rollback_run=" + first_run)
        assert rc == 0, out[-3000:] + err
    assert env_state() == before                         # the named run's "before": the baseline


# --------------------------------------------------------------------------- forwarding (start.sh edited last)

def test_a_value_the_launcher_would_reparse_is_refused():
    """On a real-shaped launcher a value goes through the workers' ssh command string: one that breaks it
    (or would run there) is refused by the effective-launch check before the .env is written."""
    install_launcher("explicit")
    try:
        before = env_state()
        rc, out, err, _ = run_play(CE_PLAY, *overrides(IMAGE=f'x" ; touch {MARKER} ; "'))
        after = env_state()
    finally:
        install_launcher("legacy")
    assert rc != 0
    msg = " ".join(failure(out, VALIDATE)["msg"].split())
    # the workers' ssh string strips the quotes: they would run another image than the head (or fail to start)
    assert "IMAGE=" in msg and "the launcher does not pass the value through intact" in msg
    assert "Write the launcher settings" not in out.split("PLAY RECAP")[0].split(VALIDATE, 1)[1]
    assert after == before and marker_absent()
    for host in ("spark2", "spark3"):
        assert sh(host, f"test -e {MARKER} && echo present || echo absent").strip() == "absent"


def test_forwarding_gaps_are_reported_by_path_then_fixed_by_the_opt_in_block():
    install_launcher("explicit")  # launcher_forward edits the explicit shape's builder and heredoc
    settings = overrides(SGLANG_DSPARK_FOLDED_SAMPLING=1, DSV41_ENGRAM_PREFETCH=1, DSV41_ENGRAM_PREFETCH_CHECK=1)
    before = env_text()
    rc, out = playbook("site.yml", *settings, "-e", "container_env_packed=true")
    assert rc != 0
    text = flat(out)
    for var in ("SGLANG_DSPARK_FOLDED_SAMPLING", "DSV41_ENGRAM_PREFETCH_CHECK"):
        assert f"{var} is set but the head launch path does not forward it" in text
        assert f"{var} is set but the worker launch path does not forward it" in text
    assert env_text() == before
    script_before = sh("spark1", "cat /home/mia/dsv41-3x-spark/start.sh")
    rc, out = playbook("site.yml", *settings, "-e", "container_env_packed=true", "-e", "container_env_add_forwards=true")
    assert rc == 0, out[-3000:]
    script = sh("spark1", "cat /home/mia/dsv41-3x-spark/start.sh")
    # launcher_forward edited the argument builder and the worker heredoc in their own form, marked
    managed = [line for line in script.splitlines() if "dsv41-fleet managed forward" in line]
    assert managed and "dsv41-fleet managed forward" not in script_before
    assert any("SGLANG_DSPARK_FOLDED_SAMPLING" in line for line in managed)
    assert any("DSV41_ENGRAM_PREFETCH_CHECK" in line for line in managed)
    backups = sh("spark1", "ls -a /home/mia/dsv41-3x-spark").split()
    assert len([b for b in backups if b.startswith("start.sh" + BACKUP_INFIX)]) == 1  # backed up once
    assert "SGLANG_DSPARK_FOLDED_SAMPLING=1" in env_text()
    # rollback restores the previous .env
    rc, out = playbook("rollback.yml", "-e", "rollback_launcher_env=true")
    assert rc == 0, out[-3000:]
    assert env_text() == before
