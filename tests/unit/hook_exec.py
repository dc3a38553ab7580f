"""Run a ``sitecustomize.py`` import hook for real, isolated, and record what it installs.

The hook runs in a child Python inside a new user, mount, pid and network namespace (``unshare``): every
mount is remounted read-only, the only writable place is a tmpfs, and there is no network. In there the
child writes a stand-in engine package (every dotted module name the hook mentions, each module defining
the few symbols real hooks touch), loads the hook as ``sitecustomize``, then, once per scenario (a forked
process each), sets the environment, imports every engine module and records:

* ``wrapped``: the engine modules whose loader the hook replaced;
* ``calls``: every call the hook's own code makes while an engine module is being loaded, into an
  adapter module (any module nothing else provides: it is made up on the spot, each attribute a
  recording function) or into a hook function named ``install_*``. Each record has the engine module it
  ran for, the adapter module and function, and the names the hook's calling frame had bound to it.

:func:`call_names` turns a record into adapter names with the same rule the reader documents
(``module_utils/adapters/hook.py``): the adapter module's name, and for a function the hook imported under
an ``install_<name>`` alias, that name without the imported function's own ``install_`` suffix.

Standard library only; nothing is imported from the hook into the test process.
"""
import ast
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PREFIX = "install_"
SWITCH_RE = re.compile(r"^(?:DSV41|SGLANG|DSPARK)_[A-Z0-9_]+$")
LAUNCHER = "DSV41_LAUNCHER"
SOURCE = "DSV41_SOURCE"
# the values a scenario gives a switch ("1" unless the switch takes another kind of value)
ON_VALUES = {"DSV41_VERIFY_CAP": ("1", "conf:0.1"), "DSV41_DRAFT_TAU": ("0.8",),
             "DSV41_DRAFT_HEAD_FP8_IMPL": ("tp4",)}
MODULE_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}$")

ENGINE_STUB = '''"""Stand-in engine module (hook execution tests)."""


class PagedIndexerMetadata:
    compress_ratio = 0

    def __post_init__(self):
        pass


class DeepseekV4AttnBackend:
    def _low_ratio_index_topk_dense(self):
        return self.candidate_masks


def should_async_load(*args, **kwargs):
    return True
'''

CHILD = r'''
import importlib, importlib.abc, importlib.machinery, importlib.util, json, os, sys, types

job = json.loads(sys.stdin.read())
result_fd = os.dup(1)
os.dup2(2, 1)  # what the hook prints goes to stderr; the results alone to the saved stdout
work = job["work"]
engine = os.path.join(work, "engine")
hook_path = os.path.join(work, "hook", "sitecustomize.py")
os.makedirs(os.path.dirname(hook_path))
with open(hook_path, "w") as fh:
    fh.write(job["hook"])
targets = job["targets"]
for name in targets:
    parts = name.split(".")
    for i in range(1, len(parts)):
        d = os.path.join(engine, *parts[:i])
        os.makedirs(d, exist_ok=True)
        init = os.path.join(d, "__init__.py")
        if not os.path.exists(init):
            open(init, "w").close()
for name in targets:
    parts = name.split(".")
    d = os.path.join(engine, *parts)
    path = os.path.join(d, "__init__.py") if os.path.isdir(d) else d + ".py"
    with open(path, "w") as fh:
        fh.write(job["engine_stub"])
tops = set(n.split(".")[0] for n in targets)
state = {"phase": "setup", "calls": []}
target_set = set(targets)


def _target(frame):
    while frame is not None:
        if frame.f_code.co_filename == hook_path:
            for value in list(frame.f_locals.values()):
                if isinstance(value, types.ModuleType) and value.__name__ in target_set:
                    return value.__name__
        frame = frame.f_back
    return None


def _recorder(modname, fname):
    def record(*args, **kwargs):
        caller = sys._getframe(1)
        if state["phase"] == "import" and caller.f_code.co_filename == hook_path:
            bound = list(caller.f_locals.items()) + list(caller.f_globals.items())
            state["calls"].append({"kind": "adapter", "module": modname, "function": fname,
                                   "aliases": sorted(set(k for k, v in bound if v is record)),
                                   "target": _target(caller)})
        return None
    record.__name__ = record.__qualname__ = fname
    record.__module__ = modname
    return record


class _Made(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        fn = _recorder(self.__name__, attr)
        setattr(self, attr, fn)
        return fn


class _MakeAdapters(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: any module nothing else provides is a made-up adapter module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _Made(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _profile(frame, event, arg):
    if event == "call" and state["phase"] == "import" and frame.f_code.co_filename == hook_path \
            and frame.f_code.co_name.startswith("install_") and frame.f_back is not None \
            and frame.f_back.f_code.co_filename == hook_path:
        state["calls"].append({"kind": "hook_def", "name": frame.f_code.co_name, "target": _target(frame)})


def run(scenario):
    for key in list(os.environ):
        if key.startswith(("DSV41_", "SGLANG_", "DSPARK_")):
            del os.environ[key]
    os.environ.update(scenario)
    os.environ["DSV41_SOURCE"] = os.path.join(work, "src")
    sys.path[:0] = [engine]
    sys.meta_path.append(_MakeAdapters())
    state["phase"] = "hook"
    spec = importlib.util.spec_from_file_location("sitecustomize", hook_path)
    hook = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = hook
    spec.loader.exec_module(hook)
    state["phase"] = "import"
    sys.setprofile(_profile)
    errors = []
    for name in targets:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - recorded, the scenario goes on
            errors.append([name, "%s: %s" % (type(exc).__name__, exc)])
    sys.setprofile(None)
    wrapped = sorted(n for n in targets if n in sys.modules and getattr(
        getattr(sys.modules[n], "__spec__", None), "loader", None) is not None
        and type(sys.modules[n].__spec__.loader).__module__ == "sitecustomize")
    return {"wrapped": wrapped, "calls": state["calls"], "errors": errors}


def start(scenario):
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            res = run(scenario)
        except BaseException as exc:  # noqa: BLE001
            res = {"failed": "%s: %s" % (type(exc).__name__, exc)}
        data = json.dumps(res).encode()
        while data:
            data = data[os.write(wfd, data):]
        os._exit(0)
    os.close(wfd)
    return pid, rfd


def finish(pid, rfd):
    chunks = []
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    return json.loads(b"".join(chunks).decode()) if chunks else {"failed": "exit status %d" % status}


out, running, todo = [None] * len(job["scenarios"]), [], list(enumerate(job["scenarios"]))
width = max(1, min(8, os.cpu_count() or 1))
while todo or running:
    while todo and len(running) < width:
        i, scenario = todo.pop(0)
        running.append((i,) + start(scenario))
    i, pid, rfd = running.pop(0)
    out[i] = finish(pid, rfd)
data = json.dumps(out).encode()
while data:
    data = data[os.write(result_fd, data):]
'''

SANDBOX = r'''
set -e
mount -t tmpfs -o size=64m tmpfs "$1"
for m in $(findmnt -rno TARGET | sort -u); do
  case "$m" in "$1"|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
if touch /.hook-exec-probe 2>/dev/null; then echo "the root is still writable" >&2; exit 98; fi
exec "$2" -I -S -c "$3"
'''


def sandbox_problem():
    """None when hooks can be run isolated here, else why not."""
    for tool in ("unshare", "findmnt", "sh"):
        if shutil.which(tool) is None:
            return "%s is not installed" % tool
    try:
        out = run_isolated("", [], [{}])
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if out and "wrapped" in out[0] else "the isolated child returned %r" % (out,)


def run_isolated(hook_text, targets, scenarios, timeout=600):
    """Run ``hook_text`` once per scenario ({variable: value}; DSV41_SOURCE is always set) inside the
    namespaces; one result per scenario: ``wrapped``, ``calls``, ``errors`` (or ``failed``)."""
    mnt = tempfile.mkdtemp(prefix="hook-exec-")
    try:
        job = json.dumps({"work": mnt, "hook": hook_text, "targets": list(targets), "scenarios": scenarios,
                          "engine_stub": ENGINE_STUB})
        proc = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net",
             "sh", "-c", SANDBOX, "sh", mnt, sys.executable, CHILD],
            input=job, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError("isolated run failed (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-2000:]))
        return json.loads(proc.stdout)
    finally:
        os.rmdir(mnt)


def hook_strings(text):
    """The string constants of a hook (its text read as Python, not executed)."""
    return [n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def hook_targets(text):
    """Every dotted module name (three parts or more) the hook mentions."""
    return sorted(set(s for s in hook_strings(text) if MODULE_RE.match(s)))


def hook_switches(text):
    """The prefixed variables the hook mentions, launcher and source excepted."""
    return sorted(set(s for s in hook_strings(text) if SWITCH_RE.match(s)) - {LAUNCHER, SOURCE})


def scenarios(switches, pairs=True):
    """(label, tp, env) for TP3 (launcher unset) and TP4 (DSV41_LAUNCHER=tp4): nothing on, each switch on
    with each of its values, and (``pairs``) every two switches on together."""
    out = []
    for tp in (3, 4):
        base = {LAUNCHER: "tp4"} if tp == 4 else {}
        out.append(("none", tp, dict(base)))
        for s in switches:
            for v in ON_VALUES.get(s, ("1",)):
                out.append(("%s=%s" % (s, v), tp, dict(base, **{s: v})))
        if pairs:
            for a, b in itertools.combinations(switches, 2):
                va, vb = ON_VALUES.get(a, ("1",))[-1], ON_VALUES.get(b, ("1",))[-1]
                out.append(("%s=%s %s=%s" % (a, va, b, vb), tp, dict(base, **{a: va, b: vb})))
    return out


def call_names(call):
    """The adapter names one recorded call installs (the reader's naming rule, applied to what ran)."""
    if call["kind"] == "hook_def":
        return {call["name"][len(PREFIX):]}
    module, function = call["module"].rsplit(".", 1)[-1], call["function"]
    names = {module}
    for alias in call["aliases"]:
        if alias != function and alias.startswith(PREFIX) and len(alias) > len(PREFIX):
            name = alias[len(PREFIX):]
            own = function[len(PREFIX):] if function.startswith(PREFIX) else ""
            if own and name.endswith("_" + own) and len(name) > len(own) + 1:
                name = name[:-(len(own) + 1)]
            names.add(name)
    return names


def executed(result):
    """{(adapter name, engine module)} a scenario's result installed."""
    out = set()
    for call in result.get("calls", []):
        for name in call_names(call):
            out.add((name, call["target"]))
    return out
