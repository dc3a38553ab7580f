"""Run a custom module's main() with arguments, optionally faking AnsibleModule.run_command.

Shared by the module tests (the community.general way: patch _ANSIBLE_ARGS, catch SystemExit, read
the JSON the module printed). ``_calls`` in the result lists the commands the module ran.
"""
import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


def strip_bound(cmd):
    """``(limit, command)``: a command run under coreutils ``timeout --kill-after=.. N``, split."""
    cmd = list(cmd)
    if len(cmd) > 3 and cmd[0].endswith("/timeout") and cmd[1].startswith("--kill-after="):
        return cmd[2], cmd[3:]
    return None, cmd


def run_main(monkeypatch, capsys, main, args, run_command=None):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    if hasattr(basic, "_ANSIBLE_PROFILE"):      # ansible-core >= 2.19 needs a serialization profile
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    calls = []
    bounds = []
    if run_command is not None:
        def fake(self, cmd, *a, **kw):
            # Modules run external commands under coreutils `timeout`; the fake sees the command
            # itself, and the limit is recorded in ``_bounds``.
            limit, cmd = strip_bound(cmd)
            if limit:
                bounds.append(limit)
            calls.append(cmd)
            return run_command(cmd)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake)
    with pytest.raises(SystemExit):
        main()
    out = json.loads(capsys.readouterr().out)
    out["_calls"] = calls
    out["_bounds"] = bounds
    return out
