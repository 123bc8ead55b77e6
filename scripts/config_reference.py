"""``docs/configuration.md``, rendered from ``stacks/config.py``: never written by hand.

Every setting under the ``gpu_training`` context key, section by section, with its dotted key, its
type, its default and the text of its entry in its dataclass's ``Attributes:`` docstring. A field
without an entry, or an entry without a field, is refused, so the page cannot leave a setting out
or keep one that is gone; ``tests/unit/test_config_reference.py`` fails while the committed page
differs from what this renders.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Optional, Sequence

from scripts.common import EXIT_FAILED, EXIT_OK, ROOT, OperatorError, help_epilog, run
from stacks.config import CONTEXT_KEY, PlatformConfig, json_type

REFERENCE = ROOT / "docs" / "configuration.md"
REFRESH = "python -m scripts.config_reference"
"""The one command that rewrites :data:`REFERENCE`."""

_ENTRY = re.compile(r"^    (\w+): ?(.*)$")
_ROLE = re.compile(r":(?:class|func|data|meth|attr):`~?([^`]+)`")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of the reference.

    Attributes:
        key: The dotted key under ``gpu_training``, e.g. ``cluster.node_count``.
        type: The JSON type ``cdk.json`` and ``-c`` take, e.g. ``integer``.
        default: The default as JSON, or ``required``.
        meaning: The setting's docstring entry, as Markdown on one line.
    """

    key: str
    type: str
    default: str
    meaning: str


def attribute_entries(cls: type) -> dict[str, str]:
    """Name -> text of each entry in ``cls``'s ``Attributes:`` docstring section, joined into one line."""
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    entries: dict[str, str] = {}
    if "Attributes:" not in lines:
        return entries
    name = None
    for line in lines[lines.index("Attributes:") + 1:]:
        if line.strip() and not line.startswith("    "):
            break  # the next section
        match = _ENTRY.match(line)
        if match:
            name = match.group(1)
            entries[name] = match.group(2)
        elif name and line.strip():
            entries[name] += " " + line.strip()
    return entries


def summary(cls: type) -> str:
    """The docstring's text before ``Attributes:``, its paragraphs kept."""
    text = inspect.cleandoc(cls.__doc__ or "").split("Attributes:", 1)[0].strip()
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def undocumented(cls: type = PlatformConfig) -> list[str]:
    """``Class.field`` of every field without a docstring entry and every entry without a field, nested sections included."""
    fields = {f.name for f in dataclasses.fields(cls)}
    entries = set(attribute_entries(cls))
    found = [f"{cls.__name__}.{name}: no entry in its Attributes: docstring" for name in sorted(fields - entries)]
    found += [f"{cls.__name__}.{name}: documented but no such field" for name in sorted(entries - fields)]
    for section in _sections(cls):
        found += undocumented(section)
    return found


def _sections(cls: type) -> list[type]:
    hints = typing.get_type_hints(cls)
    return [_section_type(hints[f.name]) for f in dataclasses.fields(cls) if _section_type(hints[f.name])]


def _section_type(tp: Any) -> Any:
    """The dataclass a field holds (``Optional`` unwrapped), or ``None`` for a plain setting."""
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_optional(tp) else [tp]
    return args[0] if dataclasses.is_dataclass(args[0]) else None


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if isinstance(value, types.MappingProxyType):
        value = dict(value)
    return json.dumps(value)


def _markdown(text: str) -> str:
    """Docstring markup as Markdown on one table line; a section's class is named by its key."""
    keys = {cls.__name__: f"{CONTEXT_KEY}.{key}" for key, cls in sections() if key}
    return _ROLE.sub(lambda m: f"``{keys.get(m.group(1), m.group(1))}``", text).replace("``", "`").replace("|", "\\|")


def settings(cls: type, prefix: str = "") -> list[Setting]:
    """The plain settings of one section (nested sections are their own, see :func:`sections`)."""
    hints = typing.get_type_hints(cls)
    entries = attribute_entries(cls)
    return [
        Setting(f"{prefix}{f.name}", json_type(hints[f.name]), _default(f), _markdown(entries[f.name]))
        for f in dataclasses.fields(cls)
        # A section that is always there gets only its own table; an optional one (default null) both.
        if not (_section_type(hints[f.name]) and f.default is not None)
    ]


def sections(cls: type = PlatformConfig, key: str = "") -> list[tuple[str, type]]:
    """``(dotted key, dataclass)`` of every section, depth first, the top first."""
    found = [(key, cls)]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        nested = _section_type(hints[f.name])
        if nested:
            found += sections(nested, f"{key}.{f.name}" if key else f.name)
    return found


def render() -> str:
    """The whole of ``docs/configuration.md``."""
    problems = undocumented()
    if problems:
        raise OperatorError(f"stacks/config.py: {'; '.join(problems)}")
    out = [
        "# Configuration reference",
        "",
        f"<!-- Generated from stacks/config.py by `{REFRESH}`: edit the docstrings there, not this page. -->",
        "",
        f"Every setting under the `{CONTEXT_KEY}` context key in `cdk.json`, read and validated once by",
        "`stacks/config.py` before CDK builds anything; an unknown or misspelled key is refused. Override",
        f"any one for a single command with its dotted key: `npx cdk synth -c {CONTEXT_KEY}.cluster.node_count=2`",
        f"(the `{CONTEXT_KEY}.` prefix may be left out). A value is read as JSON when it parses, else as a string.",
        "The defaults below are the code's; `cdk.json` in this repository sets some of them explicitly.",
    ]
    for key, cls in sections():
        out += ["", f"## `{CONTEXT_KEY}{'.' + key if key else ''}`", "", _markdown(summary(cls)), ""]
        out += ["| Setting | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
        for s in settings(cls, f"{key}." if key else ""):
            default = s.default if s.default == "required" else f"`{s.default}`"
            out.append(f"| `{s.key}` | {s.type} | {default} | {s.meaning} |")
    return "\n".join(out) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=REFRESH,
        description="Render docs/configuration.md, the reference of every gpu_training setting, from stacks/config.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            REFRESH,
            [("", "rewrite docs/configuration.md"), ("--check", "only say whether it is up to date")],
            credentials="none: it reads stacks/config.py and calls no AWS API.",
            done="the page was written, or (--check) is up to date",
            failed="(--check) the page differs from what stacks/config.py renders",
            cannot_proceed="configuration: a setting in stacks/config.py has no docstring entry, or an entry no setting",
        ),
    )
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--output", type=Path, default=REFERENCE, help="where the page goes (default: docs/configuration.md)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    page = render()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != page:
            print(f"{args.output} is out of date with stacks/config.py: run {REFRESH}")
            return EXIT_FAILED
        print(f"{args.output} is up to date")
        return EXIT_OK
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    print(f"wrote {args.output} ({sum(len(settings(c, 'x.')) for _, c in sections())} settings)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
