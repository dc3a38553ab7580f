#!/usr/bin/env python3
"""Every role: meta/argument_specs.yml matches defaults/main.yml, and every default is commented.

Checked per role:
- the role has defaults/main.yml, meta/argument_specs.yml (entry point `main`), a README.md;
- the same variable names in both files;
- a literal default equals the spec's `default` (templated defaults, `{{ ... }}`, are not compared:
  the spec documents their rendered type only);
- each spec option has a `type` and a `description`;
- each top-level variable in defaults/main.yml has a comment line directly above it.
Exit status 1 with one line per problem.
"""
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


def main():
    roles = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
    problems = [p for role in roles for p in check_role(role)]
    for problem in problems:
        print(problem)
    print(f"argument specs: {len(roles)} roles checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
