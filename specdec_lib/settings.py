"""Command-line flags generated from settings dataclasses (fields made by :func:`setting`), typed
by annotation: ``int``, ``float``, ``str``, ``bool`` (``--flag``/``--no-flag``), ``list``/``tuple``
(several values) and ``X | None`` (``none``). Validation stays in the dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable
from typing import Any

__all__ = ["add_arguments", "command_line", "from_arguments", "from_command_line", "setting"]


def setting(default: Any, help: str, *, choices: Iterable[Any] | None = None) -> Any:
    """A settings field with its flag's help and choices (a list default is copied per instance)."""
    meta = {"help": help, "choices": tuple(choices) if choices is not None else None}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shape(annotation: Any) -> tuple[type, bool, bool]:
    """``(element type, several values, None allowed)`` of a field's annotation."""
    args = typing.get_args(annotation)
    optional = (
        typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
    )
    if optional:
        annotation = next(a for a in args if a is not type(None))
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return typing.get_args(annotation)[0], True, optional
    return annotation, False, optional


def _parse(element: type, optional: bool):
    def parse(text: str) -> Any:
        if optional and text.strip().lower() == "none":
            return None
        try:
            return element(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {element.__name__}{' or none' if optional else ''}, got {text!r}"
            ) from None

    parse.__name__ = element.__name__
    return parse


def _fields(cls: type) -> list[tuple[dataclasses.Field, tuple[type, bool, bool]]]:
    hints = typing.get_type_hints(cls)
    return [(f, _shape(hints[f.name])) for f in dataclasses.fields(cls) if f.init]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one flag per field of settings dataclass ``cls`` (``--max-new-tokens``)."""
    for f, (element, several, optional) in _fields(cls):
        default = _default(f)
        help_ = f.metadata.get("help", "")
        shown = default if not isinstance(default, (list, tuple)) else " ".join(map(str, default))
        suffix = "" if default is None else f" (default: {shown})"
        kwargs: dict[str, Any] = {"default": default, "help": help_ + suffix}
        if element is bool and not several:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parse(element, optional)
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            if several:
                kwargs["nargs"] = "+"
        parser.add_argument(flag(f.name), dest=f.name, **kwargs)


def from_arguments(cls: type, args: argparse.Namespace) -> Any:
    """``cls`` built from parsed flags (``[none]`` for an optional sequence is ``None``)."""
    values = {}
    for f, (_element, several, optional) in _fields(cls):
        v = getattr(args, f.name)
        if several and isinstance(v, list):
            if optional and v == [None]:
                v = None
            elif isinstance(_default(f), tuple):
                v = tuple(v)
        values[f.name] = v
    return cls(**values)


def from_command_line(cls: type, argv: Iterable[str]) -> Any:
    """``cls`` from a stored command line; flags that are not fields of ``cls`` are skipped."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_arguments(parser, cls)
    args, _rest = parser.parse_known_args(list(argv))
    return from_arguments(cls, args)


def command_line(cls: type, record: dict[str, Any], skip: Iterable[str] = ()) -> list[str]:
    """The flags that rebuild ``record`` (``dataclasses.asdict`` of ``cls``): non-default values,
    in field order."""
    parts: list[str] = []
    skip = set(skip)
    for f, (_element, several, _optional) in _fields(cls):
        if f.name in skip or f.name not in record:
            continue
        value, default = record[f.name], _default(f)
        if several and value is not None:
            value = list(value)
            default = list(default) if default is not None else None
        if value == default:
            continue
        if value is None:
            parts.append(f"{flag(f.name)} none")
        elif isinstance(value, bool):
            parts.append(flag(f.name) if value else "--no-" + f.name.replace("_", "-"))
        elif several:
            parts.append(f"{flag(f.name)} {' '.join(map(str, value))}")
        else:
            parts.append(f"{flag(f.name)} {value}")
    return parts
