"""The channel manifest: example counts and shapes recorded once, so training starts without a scan.

A manifest is ``.trainer-manifest.json`` in the channel's directory (hidden, so discovery never
takes it for data). ``trainer.datasets.synthetic`` writes one with every dataset; for other data,
``python -m trainer.datasets.manifest CHANNEL_DIR`` scans the files once and writes it. Format (version 1)::

    {
      "manifest_version": 1,
      "data_format": "csv",            # or "tfrecord"
      "num_features": 64,              # values per example
      "num_classes": 8,                # largest label + 1
      "files": [                       # every data file, paths relative to the channel directory
        {"path": "part-00000.csv", "examples": 10000, "bytes": 5762906, "header": true}
      ]
    }

``bytes`` lets the trainer notice a file that changed after the manifest was written: it then
scans the channel as if there were no manifest (and says so), so stale counts never decide how
many steps an epoch has.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = ".trainer-manifest.json"
VERSION = 1
# What the processing transform writes beside the shards (mean/std, class counts): metadata,
# never data, so channel discovery leaves it out like the manifests.
STATISTICS_NAME = "statistics.json"


@dataclass(frozen=True)
class FileEntry:
    """One data file as the manifest records it.

    Attributes:
        path: Relative to the channel directory.
        examples: Examples in the file.
        bytes: The file's size when the manifest was written.
        header: Whether the first line of a CSV file is a header.
    """

    path: str
    examples: int
    bytes: int
    header: bool = False


@dataclass(frozen=True)
class Manifest:
    """A channel's recorded counts and shapes.

    Attributes:
        data_format: ``csv`` or ``tfrecord``.
        num_features: Values per example.
        num_classes: Largest label + 1.
        files: Every data file of the channel.
    """

    data_format: str
    num_features: int
    num_classes: int
    files: tuple[FileEntry, ...]

    def to_json(self) -> str:
        """The file's text."""
        body: dict[str, Any] = {
            "manifest_version": VERSION,
            "data_format": self.data_format,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "files": [vars(entry) for entry in self.files],
        }
        return json.dumps(body, indent=1) + "\n"


def write(directory: Path, manifest: Manifest) -> Path:
    """Writes ``directory/.trainer-manifest.json`` atomically; returns its path."""
    path = directory / MANIFEST_NAME
    partial = directory / f"{MANIFEST_NAME}.partial"
    partial.write_text(manifest.to_json(), encoding="utf-8")
    partial.replace(path)
    return path


def read(directory: Path) -> Manifest | None:
    """The channel's manifest, or None if it has none.

    Raises:
        ValueError: the file is not a manifest this trainer can read (the message says why).
    """
    path = directory / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if body.get("manifest_version") != VERSION:
            raise ValueError(f"manifest_version is {body.get('manifest_version')!r}, this trainer reads {VERSION}")
        return Manifest(
            data_format=str(body["data_format"]),
            num_features=int(body["num_features"]),
            num_classes=int(body["num_classes"]),
            files=tuple(
                FileEntry(str(f["path"]), int(f["examples"]), int(f["bytes"]), bool(f.get("header", False)))
                for f in body["files"]
            ),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a valid manifest: {err}") from err


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.datasets.manifest CHANNEL_DIR``: scan the channel once and write its manifest."""
    parser = argparse.ArgumentParser(prog="python -m trainer.datasets.manifest", description=main.__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--data-format", default="auto", choices=("auto", "csv", "tfrecord"))
    args = parser.parse_args(argv)
    import dataclasses

    from trainer.contract.environment import resolve_paths
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.datasets import tabular as data

    directory = args.directory.resolve()
    paths = dataclasses.replace(resolve_paths({}), data_dir=directory.parent)
    config = TrainingConfig.from_hyperparameters({"data_format": args.data_format, "train_channel": directory.name})
    spec = data.scan_channel(data.discover_channel(paths, config, {}, channel=directory.name), 0)
    path = write(args.directory, data.manifest_of(spec))
    print(f"[manifest] wrote {path}: {len(spec.files)} files, {spec.examples} examples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
