"""Run a custom module's main() with arguments, optionally faking AnsibleModule.run_command.

Shared by the module tests (the community.general way: patch _ANSIBLE_ARGS, catch SystemExit, read
the JSON the module printed). ``_calls`` in the result lists the commands the module ran.
"""
import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


def run_main(monkeypatch, capsys, main, args, run_command=None):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    if hasattr(basic, "_ANSIBLE_PROFILE"):      # ansible-core >= 2.19 needs a serialization profile
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    calls = []
    if run_command is not None:
        def fake(self, cmd, *a, **kw):
            calls.append(cmd)
            return run_command(cmd)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake)
    with pytest.raises(SystemExit):
        main()
    out = json.loads(capsys.readouterr().out)
    out["_calls"] = calls
    return out
