"""Make the repo's module_utils importable as ``ansible.module_utils.<name>`` and library/ importable.

Custom modules import shared code exactly as Ansible ships it to a host
(``from ansible.module_utils.engram.shard_format import ...``); pytest gets the same view.
"""
import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parent.parent
for sub in ("library", "filter_plugins"):
    path = str(ROOT / sub)
    if path not in sys.path:
        sys.path.insert(0, path)
if str(ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
