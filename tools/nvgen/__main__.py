"""python3 -m tools.nvgen: see gen.py."""

import sys

from .gen import main

sys.exit(main())
