"""The probes of the user parts: each kind's part called as the engine calls it, on a tiny input.

A registry declares its kind's ``Probe`` (``dynamics.parts.registry``): what a part of the kind is
called with and must return, in words, and ``check``, one function here by its dotted path. A
user's part (``"module:attribute"``) is probed once, when first named (``Registry.user_part``),
before anything is drawn or compiled: one that raises, returns None or returns another type or
shape is refused in one line naming the field, the user's name and what was expected
(``Probe.failed``, ``Probe.wrong``); a part that passes is used exactly as it came.

Each ``check(at, obj, part, probe)`` reads the part's rules (``part``: a learned query takes k,
not W) and calls ``obj`` with small sizes that differ from each other (n = 2, H = 3, T = 4, d = 5),
so a transposed or summed output is caught. Calls the engine makes inside its compiled program
are traced (``jax.eval_shape``: shapes and dtypes, nothing compiled or run); a loss, an
attention, a norm and an init are also called on numbers, since their values are what they are
checked for (elementwise, each query's own weights, c_H finite and > 0; finite values from finite
input, where NaN would read as every run diverging).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dynamics.errors import ConfigError
from dynamics.parts.training import PER_RUN_PARAMS

N, H, T, D = 2, 3, 4, 5  # examples, heads, tokens, width of the probes' inputs


def _jax() -> Any:
    """JAX, imported when a probe first runs: the parts' metadata (which names these checks by
    their dotted path) loads without it."""
    import jax  # lazy: the parts load no JAX at import (see the docstring)

    return jax


def _spec(*shape: int, dtype: Any = np.float32):
    return _jax().ShapeDtypeStruct(shape, dtype)


def _floating(a: Any) -> bool:
    jnp = _jax().numpy
    return hasattr(a, "dtype") and hasattr(a, "shape") and bool(jnp.issubdtype(a.dtype, jnp.floating))


def _got(out: Any) -> str:
    """What a part returned, in words: 'None', 'a list', 'shape (2, 3) of dtype int32'."""
    if out is None:
        return "None"
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return f"shape {tuple(out.shape)} of dtype {out.dtype}"
    return f"a {type(out).__name__}"


def _called(at: str, probe, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; what it raises becomes the probe's one-line refusal."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 -- a user's code may raise anything
        raise probe.failed(at, err) from None


def _traced(at: str, probe, fn: Any, *args: Any) -> Any:
    """``jax.eval_shape(fn, *args)``: the call traced as in the compiled program, nothing run."""
    return _called(at, probe, _jax().eval_shape, fn, *args)


def _array(at: str, probe, out: Any, shape: tuple[int, ...]) -> None:
    """``out`` a real floating array (or its traced shape) of exactly ``shape``."""
    if not _floating(out) or tuple(out.shape) != shape:
        raise probe.wrong(at, f"{_got(out)} (expected {shape} for n={N}, H={H}, T={T}, d={D})")


def query(at: str, obj: Any, part, probe) -> None:
    """Scores of the query (n, H, T), (n, H, T, T) where every token queries, from the head's key-query
    matrix W (H, d, d), learned vector k (H, d) or position logits a (H, T), and the tokens X (n, T, d)."""
    first = _spec(H, T) if part.positional else _spec(H, D) if part.learned else _spec(H, D, D)
    out = _traced(at, probe, obj, first, _spec(N, T, D))
    _array(at, probe, out, (N, H, T, T) if part.all_tokens else (N, H, T))


def norm(at: str, obj: Any, part, probe) -> None:
    """c_H of H = 2 (a number: the command line's and the theory's H) and of each run's H in a
    compiled pack (traced, (R,)): a finite real > 0, one per run or one for all."""
    c = _called(at, probe, obj, 2)
    try:
        value = float(np.asarray(c))  # a number, or an array of one
        ok = np.ndim(c) == 0 and not isinstance(c, bool) and np.isfinite(value) and value > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise probe.wrong(at, f"{c!r:.40} for H = 2")
    out = _traced(at, probe, obj, _spec(3))
    if not _floating(out) or tuple(out.shape) not in ((), (3,)):
        raise probe.wrong(at, f"{_got(out)} for a vector of 3 runs' H (traced)")


def init(at: str, obj: Any, part, probe) -> None:
    """θ(0) of S = 3 head slots, as ``dynamics.core.start`` draws them: ``impl(keys (S, 2) uint32,
    index (S,), d, scale (S,), head_size, learned, [n_heads=(S,)])`` -> {"U": (S, d), "W": (S, d, d)}
    for the full key-query layout (the model's own layout, Q and K or k, is checked where the
    program is traced: ``dynamics.core.inits.drawn``)."""
    if not part.random:
        raise ConfigError(
            f"{at} declares random = False: an init that draws nothing is the built-in 'zero', and the "
            "engine would never call this one; leave random out (True) or use model.init='zero'"
        )
    extra = {"n_heads": _spec(H)} if part.per_layer else {}

    def draw(keys, index, scale, extra):
        return obj(keys, index, D, scale, None, False, **extra)

    out = _traced(at, probe, draw, _spec(H, 2, dtype=np.uint32), _spec(H, dtype=np.int32), _spec(H), extra)
    want = {"U": (H, D), "W": (H, D, D)}
    if not isinstance(out, dict) or set(out) != set(want):
        got = f"a dict of {sorted(map(str, out))}" if isinstance(out, dict) else _got(out)
        raise probe.wrong(at, f"{got} (for the full layout: U and W)")
    for name, shape in want.items():
        _array(at, probe, out[name], shape)
    jax = _jax()  # and drawn once on numbers: a NaN θ(0) would read as every run diverging
    numbers = (
        jax.random.split(jax.random.PRNGKey(0), H),
        np.arange(H, dtype=np.int32),
        np.full(H, 0.1, np.float32),
    )
    drawn = _called(at, probe, draw, *numbers, {k: np.full(H, 2.0, np.float32) for k in extra})
    for name in want:
        _real_float(at, probe, drawn[name], name)


def optimizer(at: str, obj: Any, part, probe) -> None:
    """``impl()``: an optax ``GradientTransformation``; its ``init(params)`` and
    ``update(grads, state, params)`` traced on U (H, d) and W (H, d, d): a direction of each shape."""
    transform = _called(at, probe, obj)
    if not (callable(getattr(transform, "init", None)) and callable(getattr(transform, "update", None))):
        raise probe.wrong(at, f"{_got(transform)}, without init and update")
    params = {"U": _spec(H, D), "W": _spec(H, D, D)}

    def step(p):
        return transform.update(p, transform.init(p), p)

    out = _traced(at, probe, step, params)
    d = out[0] if isinstance(out, tuple | list) and len(out) == 2 else None
    if not isinstance(d, dict) or set(d) != set(params):
        raise probe.wrong(at, f"update(...) -> {_got(out)}, not (direction of the parameters, state)")
    for name, p in params.items():
        _array(at, probe, d[name], p.shape)


class _Data(NamedTuple):
    """The training arrays a sampling reads, named as ``dynamics.core.data.Data`` names them."""

    X_train: Any
    y_train: Any


def sampling(at: str, obj: Any, part, probe) -> None:
    """SGD's batch of update t: ``impl(data, key, t, B)`` traced, B = 2 of n = 4 examples, t traced:
    (X (B, T, d), y (B,))."""
    if part.fresh:
        raise ConfigError(
            f"{at} declares fresh = True: online batches are drawn by the data model's sample, so the "
            "engine would never call this one; use optim.sampling='online'"
        )
    data = _Data(_spec(2 * N, T, D), _spec(2 * N))
    key = _jax().random.key(0)

    def batch(data, t):
        return obj(data, key, t, N)

    out = _traced(at, probe, batch, data, _spec(dtype=np.int32))
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise probe.wrong(at, _got(out))
    _array(at, probe, out[0], (N, T, D))
    _array(at, probe, out[1], (N,))


# One probe shape per parameter of the groups (``GROUPS``; tests/test_user_probes.py checks it names each).
PARAMETERS = {
    "U": (H, D),
    "b": (1,),
    "W": (H, D, D),
    "Q": (H, D, 2),
    "K": (H, D, 2),
    "k": (H, D),
    "a": (H, T),
    "V": (H, D, D),
    "O": (H, D),
}


def constraint(at: str, obj: Any, part, probe) -> None:
    """``params``: the parameters it holds, a non-empty tuple of per-head ones (U, W, Q, K, k, a: the
    bias b is one per run, and a pack's runs must never mix); the projection ``impl(params, names)``
    after each update, traced on U, b and those: each array back (the engine hands it every
    parameter, those it does not hold included)."""
    held = part.params
    per_head = [name for name in PARAMETERS if name not in PER_RUN_PARAMS]
    if not isinstance(held, tuple) or not held or not set(held) <= set(per_head):
        raise ConfigError(
            f"{at} declares params={held!r}; a constraint holds a non-empty tuple of per-head parameters "
            f"among {', '.join(per_head)} (e.g. ('U', 'k')), projected back after each update"
        )
    params = {name: _spec(*PARAMETERS[name]) for name in ("U", "b", *held)}  # b: one it does not hold
    out = _traced(at, probe, lambda p: obj(p, held), params)
    if not isinstance(out, dict) or set(out) != set(params):
        got = f"a dict of {sorted(map(str, out))}" if isinstance(out, dict) else _got(out)
        raise probe.wrong(at, f"{got} for a dict of {sorted(params)}")
    for name, p in params.items():
        _array(at, probe, out[name], p.shape)


def lr_scaling(at: str, obj: Any, part, probe) -> None:
    """The exponent p of η(H) = η₀·H^p: a finite real (read, never called)."""
    p = obj.exponent
    if isinstance(p, bool) or not isinstance(p, int | float) or not np.isfinite(p):
        raise ConfigError(f"{at} has exponent={p!r}; {probe.why}")


def _real_float(at: str, probe, out: Any, what: str) -> np.ndarray:
    """``out`` as float64 numbers: a real floating array of finite values (the probes' inputs are
    finite and small, so a NaN or inf there would turn every run into a divergence)."""
    if not _floating(out):
        raise probe.wrong(at, f"{what} of {_got(out)}")
    a = np.asarray(out, np.float64)
    if not np.isfinite(a).all():
        raise probe.wrong(
            at, f"{what} with {np.size(a) - np.isfinite(a).sum()} non-finite values for finite input"
        )
    return a


def loss(at: str, fn: Any, part, probe) -> None:
    """A user loss maps each margin (or residual) to its loss, elementwise: probed on a vector of 7,
    its output must be a real (7,) array whose entry i is the loss of entry i alone."""
    jnp = _jax().numpy
    z = jnp.linspace(-2.0, 2.0, 7, dtype=jnp.float32)
    _traced(at, probe, fn, z)  # as the compiled program calls it (numpy's functions refuse a tracer)
    out = _called(at, probe, fn, z)
    single = [np.asarray(_called(at, probe, fn, z[i : i + 1])) for i in range(7)]
    a = _real_float(at, probe, out, "losses")
    if a.shape != (7,) or any(s.shape != (1,) for s in single):
        raise ConfigError(
            f"{at} returned shape {a.shape} for a vector of 7 margins; a loss is elementwise: "
            "ℓ(z) has z's shape (not jnp.mean(z) or a sum: mhsim averages)"
        )
    alone = np.concatenate(single)
    if not np.allclose(a, alone, rtol=1e-5, atol=1e-6, equal_nan=True):
        raise ConfigError(
            f"{at} is not elementwise: ℓ of a vector differs from ℓ of its entries one at a time "
            f"({a[0]:.6g} vs {alone[0]:.6g} at z=-2); a loss of one example reads that example's margin only"
        )


def reduction(at: str, fn: Any, part, probe) -> None:
    """A user reduction maps (z, the loss's name) to the objective, one real number: probed on 7
    residuals under the mse loss."""
    jnp = _jax().numpy
    z = jnp.linspace(-2.0, 2.0, 7, dtype=jnp.float32)
    a = _real_float(at, probe, _called(at, probe, fn, z, "mse"), "an objective")
    if a.shape != () or not np.isfinite(a):
        raise probe.wrong(at, f"{_got(a)} for 7 finite residuals (expected one finite real number)")


def attention(at: str, fn: Any, part, probe) -> None:
    """A user attention maps scores (…, T) to weights of the same shape, each query's weights from
    its own T scores: probed on scores of shape (2, 3, 5)."""
    jnp = _jax().numpy
    scores = jnp.asarray(np.linspace(-1.5, 2.0, 30, dtype=np.float32).reshape(2, 3, 5))
    _traced(at, probe, fn, scores)  # as the compiled program calls it (numpy's functions refuse a tracer)
    out = _called(at, probe, fn, scores)
    rows = [
        [np.asarray(_called(at, probe, fn, scores[i : i + 1, j : j + 1])) for j in range(3)] for i in range(2)
    ]
    a = _real_float(at, probe, out, "weights")
    if a.shape != (2, 3, 5):
        raise ConfigError(
            f"{at} returned weights of shape {a.shape} for scores of shape (2, 3, 5); the weights must "
            "have the scores' shape (..., T)"
        )
    alone = np.stack([np.concatenate([r.reshape(-1, 5) for r in row]) for row in rows])
    if alone.shape != a.shape or not np.allclose(a, alone, rtol=1e-5, atol=1e-6, equal_nan=True):
        raise ConfigError(
            f"{at} mixes queries: a query's weights must depend on its own T scores alone (normalise "
            "over the last axis)"
        )
