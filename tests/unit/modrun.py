"""Run a custom module's main() with arguments: the one module harness of the unit tests.

Arguments go in through ansible-core's own ``patch_module_args`` (the serialization the controller
uses), the JSON the module prints on exit_json/fail_json is read back, and ``run_command`` can be
faked. ``_calls`` in the result lists the commands the module ran, ``_bounds`` the coreutils
``timeout`` limits they ran under and ``_kwargs`` the keyword arguments of each run_command call.
Commands a module streams (``command_stream.open_stream``: ``docker logs``) are answered by the same
fake, their whole output delivered at once, and listed in ``_calls`` too.

``load_script`` loads a file that is not an importable module (``bin/fleet-drift``, a strategy plugin) the way
the tests call its functions.
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import json
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.base import command_stream
from ansible.module_utils.testing import patch_module_args


def load_script(name, path):
    """The file at ``path`` executed as a fresh module called ``name`` (each call a new module, so module-level
    code, such as an option default read from the environment, runs again)."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def strip_bound(cmd):
    """``(limit, command)``: a command run under coreutils ``timeout --kill-after=.. N``, split."""
    cmd = list(cmd)
    if len(cmd) > 3 and cmd[0].endswith("/timeout") and cmd[1].startswith("--kill-after="):
        return cmd[2], cmd[3:]
    return None, cmd


def stream_opener(run_command, calls=None, bounds=None):
    """A ``command_stream.open_stream`` answering each streamed command with ``run_command(cmd)``."""
    def open_stream(args, timeout):
        if calls is not None:
            calls.append(list(args))
        if bounds is not None:
            bounds.append("%ds" % int(timeout))
        return command_stream.opener_over(run_command)(args, timeout)
    return open_stream


def run_module(main, args, check_mode=False, run_command=None):
    """The result dict of ``main()`` run with ``args`` (``failed`` set when the module failed).

    ``run_command(cmd)`` answers ``(rc, stdout, stderr)`` for each command the module runs, seen
    without its ``timeout`` wrapper; without it the module runs commands for real.
    """
    module_args = dict(args)
    # each module run is its own process on a host: no warning of an earlier run in this test process may
    # stand in for (or hide) this one's (Ansible keeps them in process-wide registries)
    from ansible.module_utils.common import warnings as _warnings
    for registry in ("_global_warnings", "_global_deprecations"):
        if isinstance(getattr(_warnings, registry, None), (dict, list)):
            getattr(_warnings, registry).clear()
    if check_mode:
        module_args["_ansible_check_mode"] = True
    calls, bounds, kwargs = [], [], []
    stdout = io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(patch_module_args(module_args))
        if run_command is not None:
            def fake(self, cmd, *a, **kw):
                limit, cmd = strip_bound(cmd)
                if limit:
                    bounds.append(limit)
                calls.append(cmd)
                kwargs.append(kw)
                return run_command(cmd)
            stack.enter_context(mock.patch.object(basic.AnsibleModule, "run_command", fake))
            stack.enter_context(mock.patch.object(command_stream, "open_stream",
                                                  stream_opener(run_command, calls, bounds)))
        # a module runs on a target host, never in the controller: a test of this process that imported controller
        # code (a Templar, an InventoryManager) flips ansible's is_controller, which would send the module's
        # warnings to the controller's display instead of its result
        from ansible.module_utils import _internal
        stack.enter_context(mock.patch.object(_internal, "is_controller", False))
        stack.enter_context(contextlib.redirect_stdout(stdout))
        with pytest.raises(SystemExit):     # exit_json and fail_json both end the process
            main()
    out = json.loads(stdout.getvalue())
    out.update(_calls=calls, _bounds=bounds, _kwargs=kwargs)
    return out
