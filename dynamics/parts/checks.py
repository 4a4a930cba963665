"""Value checks shared by the config and the parts' own parameter checks: one-line
``ConfigError`` messages naming the field, the value and what is allowed. No JAX."""

from __future__ import annotations

import difflib
import math

from dynamics.errors import ConfigError


def suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choice(field_name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{field_name}={value!r} is not one of {', '.join(map(repr, allowed))}"
            f"{suggest(str(value), allowed)}"
        )


# Upper bounds that catch typos (an extra zero or three) before a compile that would never end.
MAXIMA = {
    "data.n_train": 10**7,
    "data.n_test": 10**7,
    "data.T": 4096,
    "data.d": 4096,
    "data.teacher_heads": 4096,
    "sweep.heads": 4096,
    "optim.steps": 10**8,
    "sweep.trials": 10**5,
    "sweep.seed": 2**32 - 1,
    "sweep.log_points": 10**5,
}
MAX_LOGGED_STEPS = 10**6  # with log_every: the curves keep every logged step of every run


def positive_int(field_name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{field_name}={value!r} must be an integer >= {minimum}")
    maximum = MAXIMA.get(field_name)
    if maximum is not None and value > maximum:
        raise ConfigError(f"{field_name}={value!r} must be <= {maximum}")


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
