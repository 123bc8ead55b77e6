"""Shared test setup: the repository root and training_image/ are importable."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "training_image"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
