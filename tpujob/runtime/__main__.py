"""Entry point: `python -m tpujob.runtime CONFIG.yaml` (see main.py and docs/runtime.md)."""

import sys

from .main import main

sys.exit(main(sys.argv[1:]))
