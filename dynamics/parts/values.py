"""Values given as text or as lists: the flags' argument types and the parsers of the knobs
whose values have a form of their own (heads, a group's steps, the diagnostics). Imports nothing
of mhsim but its errors."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping

from dynamics.errors import ConfigError

# The most numbers of heads a range a:b:k may give (``heads_range``).
MAX_HEAD_COUNTS = 10_000

# Theory diagnostics along training (dynamics.theory.replay); off by default.
DIAGNOSTICS = ("sharpness", "kernel", "maxmargin")


def int_arg(text: str) -> int:
    """An integer flag value; the error names the text."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def float_arg(text: str) -> float:
    """A real flag value; the error names the text."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def comma_items(text: str) -> list[str] | None:
    """The stripped items of a comma list ('a, b' -> ['a', 'b']), or None when one is empty ('1,,2',
    '1,2,', '' or ' '): an empty item is a typo, never skipped (it would change the list's length)."""
    items = [p.strip() for p in str(text).split(",")]
    return None if "" in items else items


def floats_arg(text: str) -> tuple[float, ...]:
    """A comma list of reals ('1,0.7,0.5'); an empty item ('1,,2') is refused; the error names the text."""
    items = comma_items(text)
    try:
        if items is None:
            raise ValueError
        return tuple(float(p) for p in items)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of numbers (no empty item)") from None


def head_size_arg(text: str) -> str | int:
    """``--head-size``: 'split' (d // H) or an integer."""
    return text if text == "split" else int_arg(text)


def parse_heads(value) -> tuple[int, ...]:
    """'1,2,4', '1:8:4' (k log-spaced values from a to b, as the other counts take a range; each
    must be a whole number, none twice) or [1, 2, 4] -> (1, 2, 4); validated later."""
    if isinstance(value, str) and ":" in value:
        return heads_range(value)
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        try:
            if "" in parts:  # '1,,2' or '1,2,': an empty item is a typo, not a list of H
                raise ValueError
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(
                f"heads={value!r} must be a comma-separated list of positive integers"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, Mapping | set | frozenset | bytes):  # their order or items are not a list of H
        raise ConfigError(f"heads={value!r} must be a list of positive integers")
    try:
        return tuple(value)
    except TypeError:
        raise ConfigError(f"heads={value!r} must be a list of positive integers") from None


def heads_range(text: str) -> tuple[int, ...]:
    """'a:b:k' -> the k log-spaced head counts a·(b/a)^(i/(k-1)), i < k ('1:8:4' is 1, 2, 4, 8; k = 1
    gives a). Unlike a grid knob's integers, never rounded: a value that is not a whole number
    ('1:10:3' gives 3.16…), more counts than there are whole numbers from a to b ('1:3:4'), a
    repeat, or more than ``MAX_HEAD_COUNTS`` counts are refused in one line, as H must be a list
    of distinct counts."""
    form = f"heads={text!r} must be a:b:k (k log-spaced counts from a to b, e.g. 1:8:4 is 1,2,4,8)"
    ends = [p.strip() for p in text.split(":")]
    try:
        lo, hi, k = float(ends[0]), float(ends[1]), int(ends[2])
        if len(ends) != 3:
            raise ValueError
    except (ValueError, IndexError):
        raise ConfigError(form) from None
    if not (0 < lo < float("inf") and 0 < hi < float("inf")) or k < 1:
        raise ConfigError(f"{form}; a > 0, b > 0 and k >= 1")
    if k > abs(hi - lo) + 1:  # more counts than there are whole numbers from a to b
        raise ConfigError(f"heads={text!r}: {k} distinct whole numbers do not fit between {lo:g} and {hi:g}")
    if k > MAX_HEAD_COUNTS:  # a list that long is a typo, not a sweep: refused before it is built
        raise ConfigError(f"heads={text!r}: k={k} numbers of heads, more than {MAX_HEAD_COUNTS} in one sweep")
    values = [float(f"{lo * (hi / lo) ** (i / (k - 1)):.12g}") if k > 1 else lo for i in range(k)]
    shown = ", ".join(f"{v:g}" for v in values[:8]) + (f", … ({k} values)" if k > 8 else "")
    if not all(math.isfinite(v) and v == round(v) for v in values):  # (b/a overflows to inf: not a count)
        raise ConfigError(f"heads={text!r} gives {shown}: not all whole numbers of heads")
    counts = tuple(int(v) for v in values)
    if len(set(counts)) != len(counts):
        raise ConfigError(f"heads={text!r} gives {shown}: a number of heads twice")
    return counts


def parse_steps(value, name: str = "optim.readout_steps") -> tuple[int, int | None] | None:
    """A group's updates [start, stop): 'START:STOP' (either may be left out), [start, stop],
    [start] or None/'all' -> (start, stop) with stop None for 'to the end'; None for all updates.
    Types are checked here, values by ``validate``."""
    if value is None or (isinstance(value, str) and value.strip() in ("all", ":")):
        return None
    if isinstance(value, str) and value.count(":") == 1:
        ends = [p.strip() for p in value.split(":")]
        try:
            start, stop = (int(ends[0]) if ends[0] else 0), (int(ends[1]) if ends[1] else None)
        except ValueError:
            start = stop = "bad"
    elif isinstance(value, list | tuple) and len(value) in (1, 2):
        start, stop = value[0], value[1] if len(value) == 2 else None
    else:
        start = stop = "bad"
    ok = isinstance(start, int) and not isinstance(start, bool)
    ok = ok and (stop is None or (isinstance(stop, int) and not isinstance(stop, bool)))
    if not ok:
        raise ConfigError(
            f"{name}={value!r} must be START:STOP, the 0-based updates start <= t < stop in which the "
            f"group moves (e.g. 0:100; '100:' from update 100 on), or 'all'"
        )
    return None if (start, stop) == (0, None) else (start, stop)


def parse_diagnostics(value) -> tuple[str, ...]:
    """'sharpness,kernel', 'all', 'none' or a list of names -> a tuple of names; validated later."""
    if isinstance(value, str) and value.strip() and comma_items(value) is None:  # 'sharpness,,kernel'
        raise ConfigError(f"diagnostics={value!r} has an empty item; give a comma-separated list of names")
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",") if p.strip()]
        if value == ["all"]:
            return DIAGNOSTICS
        if value == ["none"]:
            return ()
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"diagnostics={value!r} must be a comma-separated list of {', '.join(DIAGNOSTICS)}")
