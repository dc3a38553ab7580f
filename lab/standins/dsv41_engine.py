#!/usr/bin/env python3
"""LAB STAND-IN for the DeepSeek-V4.1-Flash SGLang engine (TP3). Not the product; lab hosts only.

The entry file the lab ``docker`` stand-in starts for images ``dsv41-sglang:*``
(``python3 /usr/local/lib/dsv41-lab/dsv41_engine.py ARGS...``). The stand-in is the package ``lab_engine``
beside this file: its docstring says what the engine prints and serves, its ``knobs.py`` lists the lab knobs.
"""
import os
import sys

# lab_engine/ and labstate.py (the stand-ins' shared state and GPU model) sit beside this file, in lab/standins
# in the repository and in /usr/local/lib/dsv41-lab on a lab host.
_HERE = os.path.dirname(os.path.realpath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from lab_engine.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
