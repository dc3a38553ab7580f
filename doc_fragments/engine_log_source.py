# -*- coding: utf-8 -*-
"""The log-source options every engine-log module takes (module_utils/engine_log/source.SOURCE_ARGUMENT_SPEC)."""
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
        stdout) and merged back into log order by their timestamps; a message docker split at
        16 KiB into partial records is made whole again.
      - The time taken does not grow with the container's uptime. The boot is read from the
        container's start (C(docker inspect) C(State.StartedAt)) until it is Ready (on a rank that
        prints no Ready, its first periodic Engram line; at the latest two hours into the boot) and
        256 KiB more, then the latest 2,000 records;
        days of periodic lines between the two are not read (C(read.gap) in the facts says so).
        A fresh boot is read whole.
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
      - Seconds the reads of the container's boot (C(docker inspect), then C(docker logs), streamed)
        may take together; a daemon that stops answering fails the task naming the container
        instead of holding the play, and the C(docker logs) it started is killed.
    type: int
    default: 120
  count_boots:
    description:
      - Also count the boots in the whole log (C(boots_seen); a log without any marker counts 0);
        this reads every earlier boot's marker, so it costs a pass over the whole log (for a
        container, every record since it was created, streamed). Off by default (C(boots_seen) is
        then null).
    type: bool
    default: false
"""
