"""Filters for the drift check (playbooks/drift.yml): the declared launcher .env split into what may be
shown and what is secret, by the one secret rule (module_utils/base/secrets.py)."""
from pathlib import Path

import ansible.module_utils

MODULE_UTILS = str(Path(__file__).resolve().parent.parent / "module_utils")  # the repo's, as Ansible ships them
if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)

from ansible.module_utils.base.secrets import is_secret  # noqa: E402


def dsv41_drift_env_split(settings, api_key=None):
    """{'public': the other settings, 'secrets': those secret by name or by the shape of their value (the
    one rule), plus API_KEY}.

    The secrets go to fleet_snapshot's no_log option: compared on the host, never returned or logged (a
    public option is echoed in the module's invocation, which the drift runner keeps in its job events)."""
    public, secrets = {}, {}
    for key, value in (settings or {}).items():
        if value is None:
            continue
        (secrets if is_secret(key, str(value)) else public)[key] = value
    if api_key not in (None, ""):
        secrets["API_KEY"] = api_key
    return {"public": public, "secrets": secrets}


def dsv41_drift_handoff(config, path):
    """Write ``config`` as JSON to ``path`` on the control node (created 0600, never through a link)
    and return the path: the drift runner's private hand-off of the notifier settings, the token among
    them, which must reach neither a host nor the event log. A filter, not a copy task, because it runs
    in the controller's templating (a copy task costs a module run; the check is timed against a ping)."""
    import json
    import os
    if not path or not os.path.isabs(str(path)):
        raise ValueError("dsv41_drift_handoff: %r is not an absolute path" % (path,))
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(config, handle)
    return str(path)


class FilterModule(object):
    def filters(self):
        return {"dsv41_drift_env_split": dsv41_drift_env_split, "dsv41_drift_handoff": dsv41_drift_handoff}
