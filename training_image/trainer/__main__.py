"""Lets ``python -m trainer [train]`` run the entrypoint (the image's ENTRYPOINT)."""

import sys

from trainer.entrypoint import main

sys.exit(main())
