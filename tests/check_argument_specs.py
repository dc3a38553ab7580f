#!/usr/bin/env python3
"""Every role: meta/argument_specs.yml matches defaults/main.yml, and every default is commented.

Checked per role:
- the role has defaults/main.yml, meta/argument_specs.yml (entry point `main`), a README.md;
- the same variable names in both files, except facts handed over by another role (options named
  after another role, without a default: validated when the role starts);
- a literal default equals the spec's `default` (templated defaults, `{{ ... }}`, are not compared:
  the spec documents their rendered type only);
- each spec option has a `type` and a `description`;
- each top-level variable in defaults/main.yml has a comment line directly above it;
- every task file reached through `tasks_from` (playbooks/, roles/, molecule scenarios) has its own
  entry point, whose options are either role variables (same default as defaults/main.yml) or
  required facts handed over by another role or entry point (no default: the caller must provide them).
Exit status 1 with one line per problem.
"""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def check_role(role_dir):
    problems = []
    name = role_dir.name
    defaults_file = role_dir / "defaults" / "main.yml"
    specs_file = role_dir / "meta" / "argument_specs.yml"
    for required in (defaults_file, specs_file, role_dir / "README.md"):
        if not required.exists():
            problems.append(f"{name}: missing {required.relative_to(ROOT)}")
    if problems:
        return problems
    defaults = yaml.safe_load(defaults_file.read_text()) or {}
    specs = (yaml.safe_load(specs_file.read_text()) or {}).get("argument_specs", {})
    if "main" not in specs:
        return [f"{name}: {specs_file.relative_to(ROOT)} has no 'main' entry point"]
    options = specs["main"].get("options") or {}
    for var in sorted(set(defaults) - set(options)):
        problems.append(f"{name}: default '{var}' is not in meta/argument_specs.yml")
    for var in sorted(set(options) - set(defaults)):
        # a fact another role hands over (preflight_*, contention_report...) is an option without a default
        if var.startswith(name + "_") or "default" in (options[var] or {}):
            problems.append(f"{name}: argument spec '{var}' has no default in defaults/main.yml")
    for var, spec in options.items():
        spec = spec or {}
        if "type" not in spec:
            problems.append(f"{name}: argument spec '{var}' has no type")
        if not spec.get("description"):
            problems.append(f"{name}: argument spec '{var}' has no description")
        if var in defaults and not (isinstance(defaults[var], str) and "{{" in defaults[var]):
            if "default" not in spec:
                problems.append(f"{name}: argument spec '{var}' does not state its default {defaults[var]!r}")
            elif spec["default"] != defaults[var]:
                problems.append(f"{name}: '{var}' default {defaults[var]!r} but argument spec says {spec['default']!r}")
    lines = defaults_file.read_text().splitlines()
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and not line.startswith(("#", "---")) and ":" in line:
            previous = lines[i - 1].strip() if i else ""
            if not previous.startswith("#"):
                problems.append(f"{name}: defaults/main.yml line {i + 1} ('{line.split(':')[0]}') has no comment above it")
    return problems


TASKS_FROM = re.compile(r"name:\s*(\w+)\s*\n\s*tasks_from:\s*([\w.]+)")


def check_entry_points(roles):
    """Every tasks_from target has an entry point; its options are role variables or required facts."""
    problems = []
    used = set()
    for path in list((ROOT / "playbooks").rglob("*.yml")) + list((ROOT / "roles").rglob("*.yml")):
        for role, target in TASKS_FROM.findall(path.read_text()):
            used.add((role, target, path.relative_to(ROOT)))
    for role, entry, where in sorted(used):
        if entry.endswith(".yml"):
            # Ansible picks the entry point by the exact tasks_from value: `plan.yml` never matches `plan`.
            problems.append(f"{role}: {where} uses tasks_from {entry}; write {entry[:-4]} so its entry point is validated")
            continue
        specs_file = ROOT / "roles" / role / "meta" / "argument_specs.yml"
        specs = (yaml.safe_load(specs_file.read_text()) or {}).get("argument_specs", {}) if specs_file.exists() else {}
        if entry not in specs:
            problems.append(f"{role}: {where} uses tasks_from {entry} but meta/argument_specs.yml has no '{entry}' entry point")
    for role_dir in roles:
        specs_file = role_dir / "meta" / "argument_specs.yml"
        defaults_file = role_dir / "defaults" / "main.yml"
        if not (specs_file.exists() and defaults_file.exists()):
            continue
        defaults = yaml.safe_load(defaults_file.read_text()) or {}
        for entry, spec in ((yaml.safe_load(specs_file.read_text()) or {}).get("argument_specs") or {}).items():
            if entry == "main":
                continue
            for var, opt in (spec.get("options") or {}).items():
                opt = opt or {}
                where = f"{role_dir.name}: entry point '{entry}' option '{var}'"
                if "type" not in opt or not opt.get("description"):
                    problems.append(f"{where} needs a type and a description")
                if var in defaults:
                    literal = not (isinstance(defaults[var], str) and "{{" in defaults[var])
                    if "default" not in opt or (literal and opt["default"] != defaults[var]):
                        problems.append(f"{where}: default must be defaults/main.yml's {defaults[var]!r}")
                elif "default" in opt and not var.startswith(role_dir.name + "_"):
                    problems.append(f"{where}: a fact from another role has no default (mark it required)")
    return problems


def main():
    roles = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
    problems = [p for role in roles for p in check_role(role)] + check_entry_points(roles)
    for problem in problems:
        print(problem)
    print(f"argument specs: {len(roles)} roles checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
