"""``python -m scripts.emulator``: the main job (see :mod:`scripts.emulator.cli`)."""

import sys

from scripts.emulator.cli import main

sys.exit(main())
