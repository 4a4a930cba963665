"""Knobs: a config field declared once, with what every surface needs to know about it.

A knob is a field of a config section (``dynamics.config.sections``) or of a data model's
parameter schema (``dynamics.parts.data``) declared with ``knob(default, help, ...)``. From
these declarations come the command line's flags (``dynamics.cli.knobs``), the API's keywords
(``dynamics.api``), the grid axes (``dynamics.config.grid_axes.GRID_KNOBS``), the TOML keys (the
field names) and the grid-knob list of docs/grids.md (``grid_knob_list``). A value given as text (a
flag, a keyword string) is read by the knob's ``parse``; every value given (flags, TOML,
keywords) goes through its ``coerce``, which refuses a wrong type in one line; ``idle`` says why
a given value would have no effect in a config (it is then refused).

It sits with the parts (below the config layer) and imports nothing of mhsim but its errors and
the text parsers beside it: the parts declare their own knobs with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dynamics.errors import ConfigError
from dynamics.parts import floats
from dynamics.parts.values import float_arg, int_arg

MISSING = dataclasses.MISSING


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a Knob's baseline not given: the field's default


@dataclasses.dataclass(frozen=True)
class Knob:
    """What a field is as a knob. ``flag``: its command-line flag (default ``--field-name``);
    ``parse``: text -> value (flags; keywords given as text), None for a switch (a bool knob) or
    text; ``choices``: a registry or a tuple of names; ``grid``: float, int or str when the knob
    takes several values (a grid axis; str: a categorical knob, a list of names); ``single``: why a
    knob of the data, model or optim section is not one (every other is: tests/test_knobs.py);
    ``traced``: the
    engine takes it per run, as a number of the batch (η₀, σ₀), so grid points that differ only
    in traced knobs share one program and one batch (a categorical knob never is: its points are
    planned as their configurations alone, bit for bit); ``unit``: its symbol in
    tables; ``coerce``: every value
    given, checked and normalised (a wrong type refused in one line); ``idle(cfg)``: why a
    value given explicitly has no effect in ``cfg`` (None: it has one); ``hashed``: 'always'
    for the fields of the first results files (written in the hashed document even at their
    default, so every hash from before the rule is kept), else 'changed' (left out at
    ``baseline``, by default the field's default, or None); ``switch``: a bool knob. ``lo``,
    ``hi``: the range of a number (each value of a tuple; None and text pass), ``lo`` itself
    refused with ``lo_open``; int bounds make it an integer knob (``dynamics.parts.value_checks.within``);
    ``power``: the power at which a real value enters the run's float arithmetic, which bounds |value|
    by what the run's precision holds (``dynamics.parts.floats.held``; ``upper``)."""

    help: str
    flag: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: Any = None
    grid: type | None = None
    single: str = ""
    traced: bool = False
    unit: str | None = None
    coerce: Callable[[str, Any], Any] | None = None
    idle: Callable[[Any], str | None] | None = None
    hashed: str = "changed"
    baseline: Any = UNSET
    switch: bool = False
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    power: int | None = None

    def upper(self, x64: bool = False) -> float | None:
        """The largest value: ``hi``, or less where the run's precision holds less (``power``)."""
        if self.power is None:
            return self.hi
        top = floats.held(self.power, x64)
        return top if self.hi is None else min(self.hi, top)


def knob(
    default: Any = MISSING, help: str = "", *, default_factory: Any = MISSING, within: str = "", **meta: Any
):
    """A dataclass field declared as a knob (``Knob``'s attributes as keywords; ``within``: its range
    as an interval, ``"(0.0, 1e30]"``, ``"[1, 4096]"``, ``"[1, inf)"``: ``lo``, ``lo_open``, ``hi``)."""
    if within:
        meta = {**interval(within), **meta}
    if isinstance(default, bool) or meta.get("switch"):
        meta = {"switch": True, "coerce": strict_bool, **meta}
    elif isinstance(default, float):
        meta = {"coerce": as_float, **meta}
    spec = Knob(help, **meta)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"knob": spec})


def interval(text: str) -> dict[str, Any]:
    """``lo``, ``lo_open`` and ``hi`` of an interval ``"[lo, hi]"`` (``(`` excludes lo; hi ``inf)``:
    none); a bound written as an integer makes the knob an integer knob."""
    left, right = text[0], text[-1]
    lo, hi = (part.strip() for part in text[1:-1].split(","))

    def number(part: str) -> Any:
        return int(part) if part.lstrip("-").isdigit() else float(part)

    if left not in "[(" or right not in "])" or (hi == "inf") != (right == ")"):
        raise ValueError(f"within={text!r} must be '[lo, hi]', '(lo, hi]', '[lo, inf)' or '(lo, inf)'")
    return {"lo": number(lo), "lo_open": left == "(", "hi": None if hi == "inf" else number(hi)}


def knob_of(f: dataclasses.Field) -> Knob | None:
    return f.metadata.get("knob")


def strict_bool(name: str, value: Any) -> bool:
    """A switch takes True or False only: "False", "no", 0 or 1 would silently mean something.
    None is "not set" (a results file lists another data model's parameters as None)."""
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be True or False (a bool, not a string or a number)")
    return value


def as_float(name: str, value: Any) -> Any:
    """A real knob given an int (TOML's ``lr = 1``, a keyword ``lr=1``) holds the float it means:
    1 and 1.0 are one setting, so one config hash on every surface. Anything else is left for
    validation (a bool is refused there, not read as 0 or 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@dataclasses.dataclass(frozen=True)
class Declared:
    """One knob where it is declared: ``section.field``, and for a data model's parameter
    (``data.NAME``) the declarations of every model that has it, ``variants`` ((models, Knob), ...):
    ``r`` is the mixture's number of relevant tokens and the sparse-token model's marked
    positions, one flag ``--relevant`` whose help names both."""

    section: str
    name: str
    spec: Knob
    variants: tuple[tuple[tuple[str, ...], Knob], ...] = ()
    default: Any = None

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def flag(self) -> str:
        """The command-line flag ('' for a field set through another flag)."""
        return "--" + self.name.replace("_", "-") if self.spec.flag is None else self.spec.flag

    @property
    def keyword(self) -> str:
        """The API's keyword: the flag's name with '_' for '-' (``--lr-scaling`` is ``lr_scaling``)."""
        return self.flag[2:].replace("-", "_")

    @property
    def help(self) -> str:
        """The help of the knob, a data model's parameter's prefixed by the models that have it."""
        if not self.variants:
            return self.spec.help
        return "; ".join(f"{', '.join(models)}: {spec.help}" for models, spec in self.variants)


def text_type(k: Declared):
    """How a knob's flag reads its text: its declared ``parse``, else by its default's type."""
    if k.spec.parse is not None:
        return k.spec.parse
    if isinstance(k.default, int) and not isinstance(k.default, bool):
        return int_arg
    return float_arg if isinstance(k.default, float) else str


def is_grid_value(text: str) -> bool:
    return "," in text or ":" in text


def fmt_default(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def grid_knob_list(knobs: list[Declared]) -> str:
    """The grid knobs as docs/grids.md lists them (between its ``grid-knobs`` markers): the
    numeric ones, then the categorical ones (``grid=str``)."""
    items = [
        f"`{k.flag}`" + (f" ({k.spec.unit})" if k.spec.unit and k.flag[2:] != k.name else "")
        for k in knobs
        if k.spec.grid is not None and k.spec.grid is not str
    ]
    names = [f"`{k.flag}`" for k in knobs if k.spec.grid is str]
    return (
        "Grid knobs: " + ", ".join(items) + "; `--heads` stays the list of H as before. "
        "Categorical grid knobs (a list of names): " + ", ".join(names) + "."
    )
