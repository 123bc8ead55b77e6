"""``docs/configuration.md`` is what ``stacks/config.py`` renders, and every setting there is documented.

The page is generated (:mod:`scripts.config_reference`), so a new setting cannot go undocumented and
a removed one cannot stay: the first test fails until the page is rendered again.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from scripts.config_reference import REFERENCE, REFRESH, attribute_entries, main, render, sections, undocumented
from stacks.config import PlatformConfig


def test_the_committed_reference_is_what_the_config_renders():
    committed = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert committed == render(), f"docs/configuration.md is out of date with stacks/config.py: run {REFRESH}"


def test_every_setting_has_a_docstring_entry_and_every_entry_a_setting():
    assert undocumented() == []


def test_every_setting_is_on_the_page_under_its_dotted_key():
    page = REFERENCE.read_text(encoding="utf-8")
    for key, cls in sections():
        for f in dataclasses.fields(cls):
            dotted = f"{key}.{f.name}" if key else f.name
            assert f"| `{dotted}` |" in page or f"## `gpu_training.{dotted}`" in page, dotted


@dataclasses.dataclass(frozen=True)
class _Inner:
    """A nested section.

    Attributes:
        size: How big. Default 1.
    """

    size: int = 1


@dataclasses.dataclass(frozen=True)
class _Outer:
    """A section with one undocumented field and one stale entry.

    Attributes:
        name: A name that runs
            over two lines.
        gone: A setting that was removed.
        inner: See :class:`_Inner`.

    Raises:
        Nothing: the next section ends the entries.
    """

    name: str = "x"
    count: Optional[int] = None
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_entries_are_read_across_lines_and_up_to_the_next_section():
    assert attribute_entries(_Outer) == {
        "name": "A name that runs over two lines.",
        "gone": "A setting that was removed.",
        "inner": "See :class:`_Inner`.",
    }


def test_a_missing_and_a_stale_entry_are_both_named():
    assert undocumented(_Outer) == [
        "_Outer.count: no entry in its Attributes: docstring",
        "_Outer.gone: documented but no such field",
    ]
    assert undocumented(_Inner) == [] and undocumented(PlatformConfig) == []


def test_check_says_the_refresh_command_and_writing_makes_it_pass(tmp_path, capsys):
    page = tmp_path / "configuration.md"
    page.write_text("# stale\n")
    assert main(["--check", "--output", str(page)]) == 1
    assert REFRESH in capsys.readouterr().out
    assert main(["--output", str(page)]) == 0
    assert main(["--check", "--output", str(page)]) == 0
