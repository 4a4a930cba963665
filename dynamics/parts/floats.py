"""What a run's float arithmetic holds: the upper bound of a real knob from the power at which its
value enters the arithmetic (``held``), per precision (float32 by default, float64 with
``sweep.x64``), and the declared products of knobs that one run forms (``PRODUCTS``: η₀·β₀², …),
each refused in one line naming its knobs when the precision cannot hold it (``check_products``).

The rule: a value v that enters the arithmetic at power p (a token scale enters a gradient of the
squared loss to the 4th power) is held when v^p, summed over up to 1/ε terms (the sums over
examples, tokens and width that a run forms), stays below the largest finite number: v^p ≤ max·ε.
float32 (max 3.4e38, ε = 2⁻²³): max·ε ≈ 4.1e31, so v ≤ 4e31, 6e15, 3e10, 7e7 for p = 1 to 4;
float64 (max 1.8e308, ε = 2⁻⁵²): max·ε ≈ 4.0e292, so v ≤ 3e292, 1e146, 1e97, 1e73 (each rounded
down to one digit). No JAX: float32's limits are written out (``jnp.finfo(jnp.float32)``),
float64's are Python's own.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping

from dynamics.errors import ConfigError

FLOAT32_MAX = 3.4028234663852886e38  # jnp.finfo(jnp.float32).max
FLOAT32_EPS = 2.0**-23  # jnp.finfo(jnp.float32).eps
FLOAT32_TINY = 2.0**-126  # jnp.finfo(jnp.float32).tiny: the smallest normal float32 (1.18e-38)
_LIMITS = {False: (FLOAT32_MAX, FLOAT32_EPS), True: (sys.float_info.max, sys.float_info.epsilon)}
POWERS = {1: "as it is", 2: "squared", 3: "cubed", 4: "to the 4th power"}


def precision(x64: bool) -> str:
    return "float64" if x64 else "float32"


def held(power: int, x64: bool = False) -> float:
    """The largest v (one significant digit, rounded down) with v^power ≤ max·ε in the run's
    precision: a sum of up to 1/ε such terms stays finite."""
    largest, eps = _LIMITS[bool(x64)]
    log10 = (math.log10(largest) + math.log10(eps)) / power
    exponent = math.floor(log10)
    return float(f"{math.floor(10 ** (log10 - exponent))}e{exponent}")


def smallest(x64: bool = False, drawn: bool = False) -> float:
    """The smallest magnitude a nonzero value keeps in the run's precision (its smallest normal
    number; below it a value loses digits, and below 1e-45 in float32 it is 0). A data model's
    knob (``drawn``) is drawn in float32 whatever the run's precision."""
    return FLOAT32_TINY if drawn or not x64 else sys.float_info.min


def held_drawn(power: int, x64: bool = False) -> float:
    """``held`` for a data model's knob: the data are drawn in float32 whatever the run's precision
    (float64 runs convert them after the draw), so the value must also be one float32 holds as it
    is (``held(1)``), with ``x64`` too."""
    return min(held(power, x64), held(1, False))


def bound_text(power: int, x64: bool, drawn: bool = False) -> str:
    """Why a knob's bound is what it is, for its one-line refusal (``drawn``: a data model's knob)."""
    if drawn and held_drawn(power, x64) < held(power, x64):
        return "the most float32 holds of a value the data are drawn with (in float32, --x64 or not)"
    wider = held_drawn(power, True) if drawn else held(power, True)
    other = "" if x64 else f" (float64 runs, --x64: up to {wider:g})"
    return f"the most {precision(x64)} arithmetic holds of a value entering it {POWERS[power]}{other}"


@dataclasses.dataclass(frozen=True)
class Product:
    """A product of powers of knobs (``section.field``) that one run's arithmetic forms: refused
    where it exceeds ``held(1)`` of the run's precision. ``symbol``: the product as the docs write
    it; ``why``: where the run forms it."""

    factors: tuple[tuple[str, int], ...]
    symbol: str
    why: str


# The products the first updates form (docs/user-guide.md, "Ranges"). ∂L/∂W carries β (the chain
# rule through β·s, s = xᵀWx), ∂L/∂U does not; so one update moves W by η·β·(…) and U by η·(…).
PRODUCTS = (
    Product(
        (("optim.lr", 1), ("model.temperature", 2)),
        "η₀·β₀²",
        "from a random θ(0) one update moves W by η·β·(…), and the next scores β·xᵀWx hold η·β²",
    ),
    Product(
        (("optim.lr", 2), ("model.temperature", 1)),
        "η₀²·β₀",
        "from θ(0) = 0 the first update makes U ∝ η and the second W ∝ η·β·U ∝ η²·β",
    ),
    Product(
        (("optim.lr", 2), ("model.temperature", 2)),
        "η₀²·β₀²",
        "from θ(0) = 0 the scores β·xᵀWx after two updates hold η²·β²",
    ),
    Product(
        (("model.temperature_decay", 1), ("optim.steps", 1)),
        "c·steps",
        "β_t = β₀/(1 + c·t) forms c·t up to the last update",
    ),
)


def _power_text(log10: float) -> str:
    """10^log10 as a number's text (1e+44), without overflowing a float."""
    exponent = math.floor(log10)
    return f"{10 ** (log10 - exponent):.3g}e{exponent:+03d}"


def check_products(values: Mapping[str, float], x64: bool = False) -> None:
    """Every declared product of ``values`` (``section.field`` -> its value, each already in its
    own range) held in the run's precision; else one line naming both knobs, their values, the
    product and the largest it may be."""
    for rule in PRODUCTS:
        numbers = [(key, p, values[key]) for key, p in rule.factors]
        if any(v == 0 for _, _, v in numbers):
            continue  # a zero product is held
        log10 = sum(p * math.log10(abs(v)) for _, p, v in numbers)
        top = held(1, x64)
        if log10 > math.log10(top):
            named = " and ".join(f"{key}={v!r}" for key, _, v in numbers)
            other = "" if x64 else f" (float64 runs, --x64: up to {held(1, True):g})"
            raise ConfigError(
                f"{named} form {rule.symbol} = {_power_text(log10)}, more than {precision(x64)} holds: "
                f"{rule.symbol} must be <= {top:g}{other}, since {rule.why}"
            )
