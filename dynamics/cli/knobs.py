"""The command line's knob flags, generated from the knobs' declarations
(``dynamics.config.sections.declared``): one flag per knob, in a group per section, its help,
choices and type from the declaration; a grid knob (``grid``) takes several values."""

from __future__ import annotations

import argparse
import re
from typing import Any

from dynamics import parts
from dynamics.config.grid_axes import axis_name, list_arg
from dynamics.config.sections import SECTIONS, declared
from dynamics.errors import ConfigError
from dynamics.parts.knobs import Declared, fmt_default, text_type

# The order the flags' grid axes come in (the first outermost): optim, model, data, sweep.
AXIS_ORDER = ("optim", "model", "data", "sweep")


def knob_flags() -> list[Declared]:
    """Every knob that has a flag, by section in ``AXIS_ORDER``, each in declaration order."""
    knobs = declared()
    return [k for s in AXIS_ORDER for k in knobs if k.section == s and k.flag]


def help_of(k: Declared) -> str:
    """The knob's help and its default (a data model's parameter: per model, so none here); a
    part's followed by its registry's choices, each with its own help."""
    choices, text = k.spec.choices, k.help
    if isinstance(choices, parts.Registry):
        text = f"{text}: {choices.help()}" if text else choices.help()
    stated = re.search(r"\(default|default:|; default", text)
    if not (k.variants or k.spec.switch or stated) and k.default not in (None, ()):
        text = f"{text} (default {fmt_default(k.default)})"
    return text


def add_knobs(p: argparse.ArgumentParser) -> None:
    """One flag per knob, by section; the grid knobs (declared ``grid``) take several values."""
    groups = {s: p.add_argument_group(f"{s} knobs") for s in SECTIONS}
    for k in knob_flags():
        help_, choices, typ = help_of(k), k.spec.choices, text_type(k)
        if k.spec.grid is not None:  # several values: a grid axis
            axis = axis_name(k)
            typ, help_ = list_arg(axis, k.flag), f"{help_}; several: a,b,c or a:b:k (k log-spaced)"
            if k.spec.grid is str:  # categorical: names, each checked as the flag is read
                names = "{" + ",".join(choices.names) + "}" if isinstance(choices, parts.Registry) else ""
                help_ = f"{names} {help_.split('; several')[0]}; several: a,b,c (a grid over them)"
                typ, choices = _names_arg(typ, choices, k.key), None
        elif isinstance(choices, parts.Registry):
            typ = _part_arg(choices, k.key)
        elif k.spec.parse is not None:
            typ = _parsed_arg(typ)
        if k.spec.single:
            typ = _one_value_arg(typ, k.flag, k.spec.single)
        if k.spec.switch:  # present sets True
            groups[k.section].add_argument(k.flag, dest=k.key, action="store_const", const=True, help=help_)
            continue
        metavar = None if choices is not None else k.name.upper()
        group = groups[k.section]
        group.add_argument(
            k.flag, dest=k.key, type=typ, choices=choices, default=None, help=help_, metavar=metavar
        )


def _names_arg(parse, choices, field: str):
    """A categorical knob's names (``parse``: one name or a tuple of them), each one of ``choices``
    (a registry: a user part's "module:attribute" must import) or refused with the allowed ones."""

    def names(text: str):
        value = parse(text)
        for name in value if isinstance(value, tuple) else (value,):
            try:
                if isinstance(choices, parts.Registry):
                    choices.get(name, field)
                elif choices is not None and name not in choices:
                    raise ConfigError(f"{field}={name!r} is not one of {', '.join(map(repr, choices))}")
            except ConfigError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return value

    names.__name__ = parse.__name__
    return names


def _part_arg(registry: parts.Registry, field: str):
    """A part's name; a user part's ("module:attribute") that does not import is refused with why."""

    def part(text: str) -> str:
        if parts.registry.is_user_name(text) and text not in registry.names:
            try:
                registry.get(text, field)
            except ConfigError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return text

    return part


def _one_value_arg(parse, flag: str, why: str):
    """A knob that is no grid axis: text it cannot read that looks like several values is refused
    saying the knob takes one value, and why (its declared ``single``)."""

    def arg(text: str):
        try:
            return parse(text)
        except (argparse.ArgumentTypeError, ValueError) as err:
            if "," not in text:
                raise
            raise argparse.ArgumentTypeError(f"{err}; {flag} takes one value ({why})") from None

    arg.__name__ = getattr(parse, "__name__", "value")
    return arg


def _parsed_arg(parse):
    """A knob's own parser (``parse=``, e.g. ``--heads 1:8:4``) as a flag type: its one-line
    ConfigError is the flag's error message (argparse would print only 'invalid value')."""

    def arg(text: str):
        try:
            return parse(text)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    arg.__name__ = getattr(parse, "__name__", "value")
    return arg


def knob_values(args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The knobs the flags set: ({section: {field: value}}, {grid knob: values})."""
    overrides: dict[str, dict[str, Any]] = {}
    axes: dict[str, Any] = {}
    for k in knob_flags():
        value = getattr(args, k.key)
        if isinstance(value, tuple) and k.spec.grid is not None:
            axes[axis_name(k)] = value
        elif value is not None:
            overrides.setdefault(k.section, {})[k.name] = value
    return overrides, axes


def dest(flag: str) -> str:
    """The argparse dest of a knob's flag ('--n-train' -> 'data.n_train')."""
    return next(k.key for k in knob_flags() if k.flag == flag)
