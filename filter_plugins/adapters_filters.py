"""Filters of the adapters role: the manifest checks of the source files and of the image, as plain Python.

Each returns one message per file that is missing or whose sha256 differs from the inventory's
manifest (``dsv41_adapters_manifest``), so the role fails in one task with every problem listed.

``wo_a_w8.py`` follows the fleet's TP size (``tp_size``, the inventory's): on TP3 it is the local TP3
generalisation (four local output groups), and the downstream TP4 file (two groups per rank; it asserts a
tensor-parallel size of 4) is refused; on TP4 that TP4 file is the right one, byte-identical to the pinned
revision like the six others. A TP size the adapters know nothing about is an error naming it.
"""
from ansible.errors import AnsibleFilterError

WO_A = "wo_a_w8.py"
# What a wo_a_w8.py that differs from the manifest must be, per TP size (quoted with the difference).
WO_A_HINTS = {
    3: " (the local TP3 generalisation; never replace it with the TP4 file)",
    4: " (on TP4 the downstream TP4 file of the pinned revision, never the TP3 generalisation)",
}


def _tp(tp_size):
    """The TP size as an int when the adapters know it (WO_A_HINTS), else a filter error naming it."""
    tp = tp_size if isinstance(tp_size, int) and not isinstance(tp_size, bool) else (
        int(tp_size) if isinstance(tp_size, str) and tp_size.isdigit() else None)
    if tp not in WO_A_HINTS:
        raise AnsibleFilterError("tp_size %r: the adapters know which wo_a_w8.py a fleet runs on %s only"
                                 % (tp_size, " and ".join("TP%d" % n for n in sorted(WO_A_HINTS))))
    return tp


def _hint(name, tp):
    return WO_A_HINTS[tp] if name == WO_A else ""


def adapters_source_problems(stat_results, manifest, source_dir, tp_size):
    """Messages for the control-node source files (``stat`` results with sha256 checksums, one per file);
    ``tp_size`` says which ``wo_a_w8.py`` the fleet runs (quoted with a difference)."""
    tp = _tp(tp_size)
    out = []
    for res in stat_results or []:
        name = res.get("item")
        stat = res.get("stat") or {}
        want = (manifest or {}).get(name) or ""
        if not stat.get("exists"):
            out.append("%s/%s: missing" % (source_dir, name))
        elif not want:
            out.append("%s: no sha256 in the manifest (adapters_manifest)" % name)
        elif stat.get("checksum") != want:
            out.append("%s/%s: sha256 %s, manifest expects %s%s"
                       % (source_dir, name, stat.get("checksum"), want, _hint(name, tp)))
    return out


def adapters_manifest_proposal(stat_results, manifest, source_dir, tp_size, pinned_results=None, pinned_dir=""):
    """The manifest the source files prove (``stat`` results with sha256 checksums, one per deployed file),
    compared with the inventory's (``manifest``) and, for the adapters the report calls byte-identical to the
    pinned downstream revision, with that revision's copies (``pinned_results``: ``stat`` results of the
    files under ``pinned_dir``, each with ``item`` the local file name). The pinned revision's ``wo_a_w8.py``
    is its TP4 file: on a TP4 fleet (``tp_size``) the local one must be byte-identical to it like the six
    others; on TP3 the local one must differ from it (the TP3 generalisation), and being it is a problem.
    Returns ``manifest`` (name -> sha256 of every file present), ``problems`` (a file missing, a pinned adapter
    that is not byte-identical, the TP4 ``wo_a_w8.py`` on TP3), ``changes`` (what committing the proposal would
    change in the inventory's manifest), ``lines`` (for the operator) and ``yaml`` (the inventory lines to
    commit)."""
    tp = _tp(tp_size)
    manifest = manifest or {}
    proposed, problems = {}, []
    for res in stat_results or []:
        name, stat = res.get("item"), res.get("stat") or {}
        if stat.get("exists") and stat.get("isreg", True) and stat.get("checksum"):
            proposed[name] = stat["checksum"]
        else:
            problems.append("%s/%s: missing (or not a regular file)" % (source_dir, name))
    identical, tp3_wo_a = [], []
    pinned_results = [r for r in pinned_results or [] if not r.get("skipped")]   # no pinned_dir: not compared
    for res in pinned_results:
        name, stat = res.get("item"), res.get("stat") or {}
        path = stat.get("path") or ((res.get("invocation") or {}).get("module_args") or {}).get("path")
        if name == WO_A and tp == 3:    # the pinned copy is the TP4 file: the TP3 one must not be it
            if stat.get("exists") and name in proposed and stat.get("checksum") == proposed[name]:
                problems.append("%s/%s: sha256 %s is the pinned revision's TP4 file %s: a TP3 fleet runs the local "
                                "TP3 generalisation (four local groups), never the TP4 file"
                                % (source_dir, name, proposed[name], path))
            elif stat.get("exists") and name in proposed:
                tp3_wo_a.append(name)
            continue
        if not stat.get("exists"):
            problems.append("%s: the pinned revision's copy %s is missing" % (name, path))
        elif name in proposed and stat.get("checksum") != proposed[name]:
            problems.append("%s/%s: sha256 %s, not byte-identical to the pinned revision's %s (%s)"
                            % (source_dir, name, proposed[name], path, stat.get("checksum")))
        elif name in proposed:
            identical.append(name)
    changes = []
    for name in sorted(proposed):
        if name not in manifest or not manifest.get(name):
            changes.append("%s: added (%s)" % (name, proposed[name]))
        elif manifest[name] != proposed[name]:
            changes.append("%s: %s -> %s%s" % (name, manifest[name], proposed[name], _hint(name, tp)))
    for name in sorted(set(manifest) - set(proposed)):
        if not any(p.startswith("%s/%s:" % (source_dir, name)) for p in problems):
            changes.append("%s: in the inventory's manifest but not deployed (kept; remove it by hand if unused)" % name)
    lines = ["%d file(s) hashed in %s" % (len(proposed), source_dir)]
    if pinned_results:
        lines.append("byte-identical to the pinned revision: %s" % (", ".join(sorted(identical)) or "none"))
        lines += ["%s: not the pinned revision's TP4 file (the local TP3 generalisation)" % n for n in tp3_wo_a]
    lines += ["problem: %s" % p for p in problems]
    lines += (["the inventory's manifest (dsv41_adapters_manifest) differs; committing the proposal changes:"]
              + ["  " + c for c in changes]) if changes else ["the inventory's manifest (dsv41_adapters_manifest) "
                                                               "already equals the files"]
    text = "dsv41_adapters_manifest:\n" + "".join("  %s: %s\n" % (n, proposed[n]) for n in sorted(proposed))
    return {"manifest": proposed, "problems": problems, "changes": changes, "identical": sorted(identical),
            "lines": lines, "yaml": text}


def adapters_image_hashes(stdout_lines):
    """``{file name: sha256}`` from ``sha256sum`` output lines (``<hash>  <path>``)."""
    out = {}
    for line in stdout_lines or []:
        parts = line.split()
        if len(parts) >= 2:
            out[parts[-1].rsplit("/", 1)[-1]] = parts[0]
    return out


def adapters_image_problems(stdout_lines, files, manifest, image_dir):
    """Messages for the files inside the image (``sha256sum`` output run in it) against the manifest."""
    seen = adapters_image_hashes(stdout_lines)
    out = []
    for name in files or []:
        if name not in seen:
            out.append("%s/%s: missing in the image" % (image_dir, name))
        elif seen[name] != (manifest or {}).get(name):
            out.append("%s/%s: sha256 %s, manifest expects %s"
                       % (image_dir, name, seen[name], (manifest or {}).get(name)))
    return out


def adapters_registry_lines(registry, expected):
    """One line per expected adapter from an ``adapter_registry`` result: hooked modules, gate, verdict."""
    finder = (registry or {}).get("finder") or {}
    gate = finder.get("gate")
    out = ["finder: %d wrapped engine module(s), inserted %s" % (
        len(finder.get("modules") or []),
        "only when %s is set" % " and ".join(gate) if gate else ("always" if gate == [] else "never"))]
    adapters = (registry or {}).get("adapters") or {}
    for name in sorted(expected or {}):
        a = adapters.get(name) or {}
        gates = ", ".join(a.get("gates") or []) or "none"
        if a.get("ungated"):
            gates += " (an ungated call too)"
        out.append("%s: modules %s; gate %s%s; %s=%s arms it: %s (%s)" % (
            name, ", ".join(a.get("modules") or []) or "none", gates,
            "; TP4 launcher only" if a.get("tp4_only") else "",
            a.get("switch", expected[name]), a.get("value", "1"),
            {True: "yes", False: "no", None: "unknown"}[a.get("arms")], a.get("reason", "")))
    return out


class FilterModule(object):
    def filters(self):
        return {
            "adapters_source_problems": adapters_source_problems,
            "adapters_image_hashes": adapters_image_hashes,
            "adapters_image_problems": adapters_image_problems,
            "adapters_registry_lines": adapters_registry_lines,
            "adapters_manifest_proposal": adapters_manifest_proposal,
        }
