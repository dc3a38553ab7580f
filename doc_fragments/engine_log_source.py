# -*- coding: utf-8 -*-
"""The log-source options every engine-log module takes (module_utils/engine_log_source.SOURCE_ARGUMENT_SPEC)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  log_path:
    description:
      - Engine log file to read (a saved log). Its latest boot is found from the end of the file,
        so the time taken does not grow with the log. Mutually exclusive with I(container).
    type: path
  container:
    description:
      - Container whose log to read with C(docker logs --timestamps), e.g. C(dsv41-head) or
        C(dsv41-worker). Both streams are read (the engine logs to stderr, C(print) lines go to
        stdout) and merged back into log order by their timestamps.
      - Mutually exclusive with I(log_path).
    type: str
  docker_bin:
    description: Docker client to run for I(container).
    type: str
    default: docker
  docker_timestamps:
    description:
      - Pass C(--timestamps) to C(docker logs) and merge stdout/stderr by timestamp. Without it the
        two streams cannot be interleaved (stdout is read first, then stderr).
    type: bool
    default: true
  docker_timeout:
    description:
      - Seconds C(docker logs) may take (run under coreutils C(timeout) where it exists); a daemon
        that stops answering fails the task naming the container instead of holding the play.
    type: int
    default: 120
  count_boots:
    description:
      - Also count the boots in the whole log (C(boots_seen)); this reads every earlier boot's
        marker, so it costs a pass over the log. Off by default (C(boots_seen) is then null).
    type: bool
    default: false
"""
