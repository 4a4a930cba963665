"""Value checks shared by the config and the parts' own parameter checks: one-line
``ConfigError`` messages naming the field, the value and what is allowed. No JAX."""

from __future__ import annotations

import difflib
import math

from dynamics.errors import ConfigError
from dynamics.parts import floats


def suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choice(field_name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{field_name}={value!r} is not one of {', '.join(map(repr, allowed))}"
            f"{suggest(str(value), allowed)}"
        )


MAX_LOGGED_STEPS = 10**6  # with log_every: the curves keep every logged step of every run


def positive_int(field_name: str, value, minimum: int = 1, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{field_name}={value!r} must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{field_name}={value!r} must be <= {maximum}")


def within(field_name: str, value, spec, default=None, x64: bool = False, drawn: bool = False) -> None:
    """``value`` (each value of a tuple) in the range its knob ``spec`` (``dynamics.parts.knobs.Knob``)
    declares: an integer in [lo, hi] where the bounds are ints (upper bounds there catch typos, an
    extra zero or three, before a compile that would never end), else a finite number in [lo, hi]
    (lo excluded with ``lo_open``) whose size the run's precision holds (``Knob.power``; float64
    with ``x64``; a data model's knob, ``drawn``, at most what its float32 draw holds). A field's
    ``default`` of None or text (``'split'``) means "not set": that value passes."""
    if spec.lo is None and spec.hi is None and spec.power is None:
        return
    for v in value if isinstance(value, tuple) else (value,):
        if (default is None and v is None) or (isinstance(default, str) and v == default):
            continue
        if isinstance(spec.lo, int) and not isinstance(spec.lo, bool):
            positive_int(field_name, v, minimum=spec.lo, maximum=spec.hi)
        else:
            finite(field_name, v, lo=spec.lo, lo_open=spec.lo_open, hi=spec.hi)
            _held(field_name, v, spec, x64, drawn)


def _held(field_name: str, value, spec, x64: bool, drawn: bool = False) -> None:
    """|value| within what the run's precision holds of a value entering it at ``spec.power`` (a
    data model's knob, ``drawn``: and what its float32 draw holds)."""
    if spec.power is None:
        return
    top = floats.held_drawn(spec.power, x64) if drawn else floats.held(spec.power, x64)
    tiny = floats.smallest(x64, drawn)
    if value != 0 and abs(value) < tiny:  # 1e-50 is 0 in float32: a step size that moves nothing
        other = "" if x64 or drawn else f" (float64 runs, --x64: down to {floats.smallest(True):.4g})"
        raise ConfigError(
            f"{field_name}={value!r} is below {tiny:.4g}, the smallest normal {precision(x64, drawn)} "
            f"number, which the run would hold as 0 or without its digits; give "
            f"{'' if spec.lo_open else '0 or '}a value of at least that size{other}"
        )
    if abs(value) > top:
        allowed = f"<= {top:g}" if spec.lo is not None and spec.lo >= 0 else f"between {-top:g} and {top:g}"
        why = floats.bound_text(spec.power, x64, drawn)
        raise ConfigError(f"{field_name}={value!r} must be {allowed}, {why}")


def precision(x64: bool, drawn: bool = False) -> str:
    """The precision a knob's value is held in: its data's float32 draw for a data model's knob."""
    return floats.precision(bool(x64) and not drawn)


def finite(
    field_name: str, value, *, lo: float | None = None, lo_open: bool = False, hi: float | None = None
) -> None:
    try:
        finite = not isinstance(value, bool) and math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        finite = False
    if not finite:
        raise ConfigError(f"{field_name}={value!r} must be a finite number")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ConfigError(f"{field_name}={value!r} must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{field_name}={value!r} must be <= {hi}")
