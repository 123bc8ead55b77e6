"""Reversible attribute patches, so the emulator's workarounds live only as long as the emulator.

moto's classes are process-wide: other code in the same process (the operator scripts' tests
use moto's in-process ``mock_aws``) must see moto as shipped once the emulator has stopped.
"""

from __future__ import annotations

import threading
from typing import Any

_MISSING = object()


class Patcher:
    """Sets attributes and remembers what was there, to put it back in reverse order."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``setattr(owner, name, value)``, remembering the attribute ``owner`` itself held."""
        with self._lock:
            self._saved.append((owner, name, vars(owner).get(name, _MISSING)))
            setattr(owner, name, value)

    @property
    def active(self) -> bool:
        """Whether any patch is in place."""
        return bool(self._saved)

    def revert(self) -> None:
        """Undo every patch, newest first."""
        with self._lock:
            while self._saved:
                owner, name, previous = self._saved.pop()
                if previous is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, previous)


PATCHES = Patcher()
"""The patches of :mod:`scripts.emulator.gaps` and :mod:`scripts.emulator.custom_resources`."""
