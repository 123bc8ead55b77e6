"""What a plot written by scripts.watch must be: a real PNG of the figure's size, with ink on it."""

from __future__ import annotations

from pathlib import Path


def assert_plot(path: Path) -> None:
    """The file is a PNG of 800x750 pixels (8x7.5 in at 100 dpi) and not blank."""
    import matplotlib.image as mpimg
    import numpy as np

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pixels = mpimg.imread(path)
    assert pixels.shape[:2] == (750, 800), pixels.shape
    # Three panels of lines, axes and labels: far from a uniform image.
    assert float(np.std(pixels[..., :3])) > 0.05
