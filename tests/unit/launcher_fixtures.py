"""Launcher checkouts for the tests: a fixture launcher of the real family's shape in a scratch home.

``tests/unit/fixtures/launchers/`` holds launchers shaped as SPEC section 3 describes the real ones:
``explicit.sh`` (explicit switch lists on both paths), ``extra_env.sh`` (adapter switches only through
``EXTRA_CONTAINER_ENV``), ``printf_array.sh`` (the worker arguments as an array printed with
``printf %q``) and ``indirect.sh`` (worker names by ``${!v}``, the worker start shipped with
``declare -f``). Variant ``lab`` is the lab's legacy launcher (``lab/standins/legacy/start.sh``: explicit
``HEAD_FORWARD``/``WORKER_FORWARD`` arrays and a per-host ``WORKER_ENGRAM_DIR_<HOST>``), the invented
conventions the rules must not trust.
"""
import hashlib
import os
import shutil

from lab_launchers import install_launcher

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "fixtures", "launchers")
FIXTURE_VARIANTS = ("explicit", "extra_env", "printf_array", "indirect")
# The lab's launchers (what the lab fleet serves with, as the seeder assembles them from lab/standins/launcher/)
# take the same shapes in longer scripts (status, logs, build, the lab's wait): every launcher check runs on
# both. Fixture variant -> the seeder's launcher variant.
LAB_VARIANTS = {"lab-explicit": "explicit", "lab-extra_env": "extra_env", "lab-printf_array": "printf_array",
                "lab-indirect": "indirect", "lab-family": "family"}
VARIANTS = FIXTURE_VARIANTS + tuple(LAB_VARIANTS)
# ``lab-family`` (the seeder's variant family, the fleet's own family) starts its workers through the
# checkout's own Python helper (scripts/remote.py, which runs ssh) and checks the image's architecture with
# ``docker image inspect -f``: a checkout of it gets the helper too (``checkout``).
LAB_PENDING_VARIANTS = {}
LAB_HELPERS = {"lab-family": {"scripts/remote.py": "scripts/remote.py"}}
LAB_START_SH = os.path.join(ROOT, "lab", "standins", "legacy", "start.sh")
API_KEY = "sk-lab-0000000000000000000000000000"

# The report's .env (lab/seed/launcher.env) as the real fleet writes it.
BASELINE_ENV = """MODEL_PATH=/srv/models/DeepSeek-V4.1-Flash
IMAGE=dsv41-sglang:tp3
WORKER_USER=zurih
WORKER_DIR=/home/zurih/dsv41-3x-spark
ENGRAM_DIR=/home/mia/dsv41-engram
TP_SIZE=3
DSPARK_BLOCK_SIZE=3
MAX_RUNNING_REQUESTS=4
MEM_FRACTION_STATIC=0.95
DSV41_MOE_DENSE_ROUTING=1
DSV41_CACHE_GIB=0
DSV41_CACHE_WAYS=4
SGLANG_FLASHINFER_MOE_FUSED_FINALIZE=0
API_KEY=%s
""" % API_KEY


def launcher_path(variant):
    """The file of a fixture launcher or of the lab's legacy one (the lab's variants are assembled: ``checkout``)."""
    if variant == "lab":
        return LAB_START_SH
    return os.path.join(FIXTURES, variant + ".sh")


def checkout(tmp_path, variant="explicit", env=BASELINE_ENV, example=None):
    """``(start.sh path, home)``: the launcher in ``<home>/dsv41-3x-spark`` with ``env`` as its .env
    (None: no .env) and ``example`` as its .env.example."""
    home = tmp_path / "home" / "mia"
    co = home / "dsv41-3x-spark"
    (co / "adapter").mkdir(parents=True)
    (co / "state").mkdir()
    lab_variants = dict(LAB_VARIANTS, **LAB_PENDING_VARIANTS)
    if variant in lab_variants:
        install_launcher(lab_variants[variant], co / "start.sh")
    else:
        shutil.copy(launcher_path(variant), str(co / "start.sh"))
    for name, dest in LAB_HELPERS.get(variant, {}).items():  # files the launcher needs beside it
        (co / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(ROOT, "lab", "standins", name), str(co / dest))
    lab = variant == "lab" or variant in LAB_VARIANTS or variant in LAB_PENDING_VARIANTS
    if lab:  # the lab's launchers take the hosts from the .env
        env = (env or "") + "WORKER_HOSTS='spark2 spark3'\nHEAD_HOST=spark1\nLAB_SERVE_POLL_SECONDS=0\n"
    if lab and variant != "lab":  # and, like a real fleet's .env, the site keys (addresses, worker names by index)
        with open(os.path.join(ROOT, "lab", "seed", "launcher.env.site")) as handle:
            env += handle.read()
    if env is not None:
        (co / ".env").write_text(env)
    if example is not None:
        (co / ".env.example").write_text(example)
    return str(co / "start.sh"), str(home)


def tree_hash(path):
    """sha256 over every name, mode and content under ``path`` (what 'nothing changed' means)."""
    digest = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(str(path))):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(base, name)
            st = os.lstat(full)
            digest.update(("%s %o\n" % (os.path.relpath(full, str(path)), st.st_mode)).encode())
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as fh:
                    digest.update(fh.read())
    return digest.hexdigest()
