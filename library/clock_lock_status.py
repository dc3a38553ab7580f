#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: is the GPU clock lock in force on this node, as far as anything can tell?"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: clock_lock_status
short_description: Verdict on a node's GPU clock lock, established from the journal of the current boot
description:
  - Read-only. The 560/580 drivers cannot report a clock lock (no C(Locked Clocks) lines in
    C(nvidia-smi -q -d CLOCK), no NVML getter), so the module establishes it from what can be seen
    in the current boot - the clock-lock unit's last successful run (its C(GPU clocks set to
    "(gpuClkMin MIN, gpuClkMax MAX)") line in the journal, the unit active with result success) and
    no later C(nvidia-smi -rgc), C(-lgc) or GPU reset by anyone (sudo's C(COMMAND=) lines, runs of
    the clock-reset unit, C(GPU clocks set to) lines of other units).
  - "Verdicts: C(locked), C(unlocked), C(drift) (positive evidence against the declared state) and
    C(unknown) (the evidence is missing). C(message) is one line such as C(locked (unit applied 0,2200
    at 2026-11-30 14:24:59 UTC this boot, no later manual clock command)) or C(drift (manual -rgc by zurih
    (sudo) at ... after the unit's run))."
  - Every result carries C(cannot_verify), the plain list of what no check on a real Spark can see.
  - Parsing is done by C(module_utils/host/clock_lock.py) and the files it names; commands run without a shell.
version_added: "0.1.0"
author: TP3 fleet config repo
options:
  state:
    description: The declared state the verdict is measured against.
    type: str
    choices: [locked, unlocked]
    default: locked
  unit:
    description: The systemd unit that runs C(nvidia-smi -lgc MIN,MAX) at boot.
    type: str
    default: nvidia-clock-lock.service
  reset_unit:
    description: The systemd unit that runs C(nvidia-smi -rgc) for the clocks experiment (its runs count as resets).
    type: str
    default: nvidia-clock-reset.service
  min_mhz:
    description: Declared lower bound of the lock, MHz.
    type: int
    default: 0
  max_mhz:
    description: Declared upper bound of the lock, MHz.
    type: int
    default: 2200
  nvidia_smi:
    description: nvidia-smi binary, for one SM clock sample (a reading above I(max_mhz) contradicts a lock).
    type: path
    default: /usr/bin/nvidia-smi
  sample_clock:
    description: Take the SM clock sample.
    type: bool
    default: true
  settle_seconds:
    description:
      - Right after a unit was started, read again (every half second, up to this long) until the verdict is
        I(state) or the unit's run failed - journald writes a unit's lines a moment after C(systemctl) returns.
    type: int
    default: 0
notes:
  - Supports check mode; the module never changes anything (C(changed) is always false).
  - Run with become, or as a member of C(systemd-journal); otherwise the journal is partial and the verdict C(unknown).
"""

EXAMPLES = r"""
- name: Is the lock in force?
  clock_lock_status:
    state: locked
    min_mhz: 0
    max_mhz: 2200
  become: true
  register: clock

- name: Say so
  ansible.builtin.debug:
    msg: "{{ [clock.message] + clock.cannot_verify }}"
"""

RETURN = r"""
verdict: {description: "locked, unlocked, drift or unknown", returned: always, type: str}
in_state: {description: The verdict equals I(state), returned: always, type: bool}
message: {description: "One line: the verdict and its evidence or reasons", returned: always, type: str}
reasons: {description: Why the verdict is drift or unknown (empty otherwise), returned: always, type: list, elements: str}
desired: {description: I(state), returned: always, type: str}
declared: {description: "{min, max} as declared", returned: always, type: dict}
unit_run:
  description: The clock-lock unit's last successful run this boot that printed its C(GPU clocks set to) line (null if none).
  returned: always
  type: dict
  contains:
    time: {description: When the lock was applied (UTC), type: str}
    result: {description: "systemd's job result (done)", type: str}
    exit_status: {description: Exit status systemd logged, type: int}
    invocation: {description: systemd invocation id, type: str}
    output: {description: What the unit printed, type: list, elements: str}
    set: {description: "{min, max, gpu} from the GPU clocks set to line", type: dict}
    permission_denied: {description: nvidia-smi said the caller may not change clocks, type: bool}
    failure: {description: "One sentence naming a failed run (null for a successful one)", type: str}
last_run: {description: "The unit's latest run this boot (same fields as unit_run), null if none", returned: always, type: dict}
reset_run: {description: "The reset unit's latest run this boot (same fields as unit_run), null if none", returned: always, type: dict}
failure:
  description: >-
    When the verdict is not I(state) and the latest run of the unit that should have brought it (the lock unit
    for C(locked), the reset unit for C(unlocked)) failed - one sentence with its time, exit status and what
    nvidia-smi printed (e.g. the permission message). Null otherwise.
  returned: always
  type: str
later_events:
  description: Clock changes after the unit's run (manual sudo commands, reset-unit runs, other units' locks).
  returned: always
  type: list
  elements: dict
  contains:
    kind: {description: lock or reset, type: str}
    source: {description: "sudo, reset-unit, other-unit", type: str}
    who: {description: The sudo user or the unit, type: str}
    command: {description: "e.g. -rgc, -lgc 0,1500, -r (GPU reset)", type: str}
    min: {description: Lock minimum (lock only), type: int}
    max: {description: Lock maximum (lock only), type: int}
    time: {description: When (UTC), type: str}
events: {description: Every visible clock change this boot (same fields as later_events), returned: always, type: list, elements: dict}
opaque_root_sessions:
  description: "Root sessions through sudo since the unit's run whose commands the journal does not show: {shell, ansible}."
  returned: always
  type: dict
cannot_verify: {description: What cannot be seen on a real Spark, in plain words (blind_spots + unseen_sessions), returned: always, type: list, elements: str}
blind_spots: {description: What no check can see on a real Spark (the same on every node), returned: always, type: list, elements: str}
unseen_sessions:
  description: This node's root sessions through sudo (shells, Ansible tasks) whose commands the journal does not show, in words.
  returned: always
  type: list
  elements: str
manager_start_us: {description: "systemd's UserspaceTimestampMonotonic (entries before it belong to no lock in force)", returned: always, type: int}
unit_state: {description: "systemctl show of the unit (ActiveState, SubState, Result, UnitFileState, InvocationID ...)", returned: always, type: dict}
sm_clock_mhz: {description: The SM clock sample (null when not taken or unreadable), returned: always, type: int}
journal_entries: {description: Journal entries read, returned: always, type: int}
readings: {description: How many times the journal was read (more than one only with I(settle_seconds)), returned: always, type: int}
notes: {description: What could not be looked at, returned: always, type: list, elements: str}
host: {description: The node's hostname, returned: always, type: str}
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.clock_lock import ClockLockError, gather
from ansible.module_utils.base.probe import make_runner
from ansible.module_utils.host.unit_journal import JournalError
from ansible.module_utils.base.host_label import host_label


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["locked", "unlocked"], default="locked"),
            unit=dict(type="str", default="nvidia-clock-lock.service"),
            reset_unit=dict(type="str", default="nvidia-clock-reset.service"),
            min_mhz=dict(type="int", default=0),
            max_mhz=dict(type="int", default=2200),
            nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"),
            sample_clock=dict(type="bool", default=True),
            settle_seconds=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host = host_label()
    try:
        res = gather(make_runner(module), p["state"], p["unit"], p["min_mhz"], p["max_mhz"],
                     reset_unit=p["reset_unit"], nvidia_smi=p["nvidia_smi"], sample_clock=p["sample_clock"],
                     settle_seconds=p["settle_seconds"])
    except (ClockLockError, JournalError) as exc:
        module.fail_json(msg="%s: %s" % (host, exc), host=host)
    module.exit_json(changed=False, host=host, **res)


def main():
    run_module()


if __name__ == "__main__":
    main()
