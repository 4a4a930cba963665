"""θ(0): ``init_params`` (a model's parameters, checked) and the parts' draws it and the engine
call per head (``dynamics.parts.INITS`` points here: ``init_heads``, ``init_sphere``,
``init_icl``); a head's arrays (``head_shapes``) and the trainable scalars (``param_count``).
Head h of a run is drawn from ``fold_in(key, h)`` alone, so a run starts the same whatever
shares its pack.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import parts
from dynamics.core.model import Init, KeyQuery, Params, Query, _check_positive
from dynamics.errors import ConfigError
from dynamics.parts import boundary


def _positive_int(name: str, value) -> int:
    """``value`` as an int >= 1 (a Python or numpy integer, not a bool), else a ValueError naming it."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _check_key(key) -> None:
    """A JAX PRNG key: a raw (2,) uint32 key (``jax.random.PRNGKey``) or a typed key (``jax.random.key``)."""
    if isinstance(key, jax.core.Tracer):
        return
    typed = isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    raw = isinstance(key, jax.Array | np.ndarray) and key.shape == (2,) and key.dtype == np.uint32
    if not (typed and key.shape == ()) and not raw:
        raise TypeError(
            f"key={key!r} must be a JAX PRNG key: jax.random.PRNGKey(seed) or jax.random.key(seed)"
        )


def init_params(
    key: jax.Array,
    n_heads: int,
    d: int,
    *,
    init: Init | str = Init.ZERO,
    scale: float | jax.Array | None = None,
    key_query: KeyQuery | str = KeyQuery.FULL,
    head_size: str | int | None = None,
    query: Query | str = Query.FIRST,
    bias: bool = False,
    outputs: int = 1,
    tokens: int | None = None,
    readout: str = "direct",
) -> Params:
    """θ(0): zeros, or entries N(0, scale²/d) for every head's array (U, W; U, Q, K; U, Q for the
    tied Q_h Q_hᵀ; or U, k for the learned query); the bias b (``bias=True``) starts at 0 in every
    init.

    ``scale`` (default 1) only for a random init and ``head_size`` (default ``"split"``) only for
    factored heads: given where they have no effect, they are refused.

    Head h is drawn from ``fold_in(key, h)`` alone (``init_heads``), so the first H heads of
    an H' > H head model start where the H-head model does, and a head's draw does not
    depend on how many heads are stored beside it (the engine packs several runs together).
    Factored and tied heads cannot start at zero: θ = 0 is a saddle where Q and K get no gradient.
    ``outputs`` o > 1: a matrix readout U_h (d, o) (``check_outputs``); ``query="position"``
    needs ``tokens`` T, its logits a_h (T,) drawn as k_h is. ``readout="factored"``: V_h (d, d) and
    O_h (d,) in place of U_h (``dynamics.parts.READOUTS``), drawn as the other arrays;
    ``readout="value"``: V_h (d, d) alone, drawn as the factored V_h, for sequence outputs.
    """
    init = parts.INITS.get(init, "init")
    layout = parts.KEY_QUERIES.get(key_query, "key_query")
    learned = parts.QUERIES.get(query, "query").learned
    positions = _check_query(parts.QUERIES.get(query, "query"), layout, head_size, tokens, init.name)
    if not isinstance(bias, bool | np.bool_):
        raise TypeError(f"bias={bias!r} must be True or False")
    if scale is not None and not init.random:
        raise ValueError(f"scale={scale!r} has no effect with init={init.name!r} (θ(0) = 0): drop it")
    if head_size is not None and not layout.factored:
        raise ValueError(f"head_size={head_size!r} has no effect with key_query={layout.name!r}: drop it")
    scale = 1.0 if scale is None else scale
    head_size = "split" if head_size is None else head_size
    n_heads = _positive_int("n_heads", n_heads)
    d = _positive_int("d", d)
    outputs = check_outputs(outputs, init=init.name, bias=bias)
    values = parts.READOUTS.get(readout, "readout").values  # a sequence output's V_h: a factored V_h, no O_h
    factored = parts.READOUTS.get(readout, "readout").factored or values
    if values and (outputs > 1 or bias):
        raise ValueError(f"readout={readout!r} (sequence outputs) has no matrix readout U and no bias b")
    try:
        parts.check_readout(readout, init.name, vector_targets=outputs > 1)
        parts.check_factors_init(init.name, parts.QUERIES.get(query).name, layout.name, readout)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    if n_heads * d * d > 2**31:
        raise ValueError(f"n_heads·d² = {n_heads}·{d}² is more than 2^31 parameters (8 GiB of float32)")
    _check_positive("scale", scale)
    if jnp.ndim(scale) != 0 and jnp.shape(scale) != (n_heads,):
        raise ValueError(f"scale has shape {jnp.shape(scale)}; expected a number or ({n_heads},)")
    if init.random:
        _check_key(key)
    if init.symmetric and not layout.fast_path:
        raise ValueError(
            f"key_query={layout.name!r} needs init='normal': zero is a saddle point of {layout.product}"
        )
    if layout.tied and init.per_layer:
        raise ValueError(f"init={init.name!r} masks W_h's context side; key_query='tied' has none of its own")
    a = layout.head_size(head_size, d, n_heads)
    shapes = head_shapes(d, a, learned, outputs, positions, layout.tied, factored)
    if not init.random:
        params = {name: jnp.zeros((n_heads, *shape)) for name, shape in shapes.items()}
    else:
        keys = jnp.broadcast_to(key, (n_heads, *jnp.shape(key)))
        extra = _draw_options(n_heads if init.per_layer else None, outputs, positions, layout.tied, factored)
        params = drawn(init, shapes, keys, jnp.arange(n_heads), d, scale, a, learned, **extra)
    if values:  # f(X)_s = c_H Σ_h Σ_t σ_st V_hᵀ x_t (``dynamics.core.sequence``): no output row
        del params["O"]
    if bias:
        params["b"] = jnp.zeros((), params["U"].dtype)
    return params


def drawn(init: Init, shapes: dict[str, tuple[int, ...]], keys: jax.Array, *args, **extra) -> Params:
    """``init``'s draw of one head per row of ``keys`` (its ``impl(keys, *args, **extra)``), checked
    against one head's ``shapes`` at trace time: a user's init that ignores the layout (U and W
    where the model has U, Q and K, say) is refused in one line before anything runs."""
    shapes = {name: (keys.shape[0], *shape) for name, shape in shapes.items()}
    return boundary.check_drawn(f"model.init={init.name!r}", init.load()(keys, *args, **extra), shapes)


def _draw_options(
    n_heads: int | None, outputs: int, positions: int | None, tied: bool = False, factored: bool = False
) -> dict:
    """The keyword arguments an init's draw takes beyond the plain ones (only those it needs)."""
    extra = {} if n_heads is None else {"n_heads": n_heads}
    extra |= {"factored_readout": True} if factored else {}
    extra |= {"outputs": outputs} if outputs > 1 else {}
    extra |= {"tied": True} if tied else {}
    return extra | ({"positions": positions} if positions is not None else {})


def _check_query(part, layout, head_size, tokens, init: str) -> int | None:
    """The query's layout checks of ``init_params``; T of the position logits (``tokens``), or None."""
    if not part.matrix and (layout.factored or head_size is not None):
        what = "a vector k per head" if part.learned else "a logit per position"
        raise ValueError(f"query={part.name!r} has {what}, no key-query matrix: drop key_query")
    if part.positional != (tokens is not None):
        raise ValueError(
            f"tokens={tokens!r}: query='position' needs tokens=T (one logit per position), "
            "no other query takes it"
        )
    if part.positional and init not in VECTOR_INITS:
        raise ValueError(f"init={init!r} needs a key-query matrix or a learned query, not query='position'")
    return None if tokens is None else _positive_int("tokens", tokens)


def head_shapes(
    d: int,
    head_size: int | None = None,
    learned: bool = False,
    outputs: int = 1,
    positions: int | None = None,
    tied: bool = False,
    factored_readout: bool = False,
) -> dict[str, tuple[int, ...]]:
    """One head's arrays: U (d,) and W (d, d), U, Q, K (d, d_h) for ``head_size`` d_h (U, Q alone
    when ``tied``: W_h = Q_h Q_hᵀ), U, k (d,) for the learned query, or U, a (T,) for positional
    attention over ``positions`` T; U is (d, o) for ``outputs`` o > 1 (vector targets);
    ``factored_readout``: V (d, d) and O (d,) after the attention's arrays in place of U
    (U_h = V_hᵀ O_h)."""
    if factored_readout:
        if outputs > 1:
            raise ValueError(f"a factored readout has one output row O_h; outputs={outputs} need U_h (d, o)")
        shapes = head_shapes(d, head_size, learned, outputs, positions, tied)
        del shapes["U"]
        return shapes | {"V": (d, d), "O": (d,)}
    u = (d,) if outputs == 1 else (d, outputs)
    if positions is not None:
        return {"U": u, "a": (positions,)}
    if learned:
        return {"U": u, "k": (d,)}
    if head_size is None:
        return {"U": u, "W": (d, d)}
    if tied:
        return {"U": u, "Q": (d, head_size)}
    return {"U": u, "Q": (d, head_size), "K": (d, head_size)}


# The inits that draw a vector target's matrix readout U_h (d, o): the plain draws. The sphere
# init keeps a unit vector U_h and the in-context init masks U_h's y channel: both read U_h as
# one vector, so they are refused for o > 1, as is the bias (one scalar added to Φ).
VECTOR_INITS = ("zero", "normal")


def check_outputs(outputs, *, init: str = "zero", bias: bool = False) -> int:
    """o, the number of outputs (targets y ∈ R^o), as an int >= 1; for o > 1 the init must be one
    of ``VECTOR_INITS`` and the model has no bias. A one-line ValueError otherwise."""
    outputs = _positive_int("outputs", outputs)
    if outputs > 1 and init not in VECTOR_INITS:
        raise ValueError(
            f"init={init!r} has no matrix readout: vector targets (o={outputs} outputs) need init "
            f"{' or '.join(map(repr, VECTOR_INITS))}"
        )
    if outputs > 1 and bias:
        raise ValueError(
            f"bias=True is one scalar added to Φ: vector targets (o={outputs} outputs) have no bias"
        )
    return outputs


def _drawn_heads(keys: jax.Array, index: jax.Array, shapes: dict[str, tuple[int, ...]], sample) -> Params:
    """Each array of ``shapes`` for head s from ``fold_in(keys[s], index[s])`` split one key per
    array, by ``sample(key, shape, float32)``: drawn as float32 numbers in any precision (with x64
    on, JAX would draw other numbers), then used in the working precision (--x64 changes the
    arithmetic only)."""
    dtype = jnp.zeros(()).dtype

    def one(key, h):
        ks = jax.random.split(jax.random.fold_in(key, h), len(shapes))
        return {
            name: sample(k, shape, jnp.float32).astype(dtype)
            for k, (name, shape) in zip(ks, shapes.items(), strict=True)
        }

    return jax.vmap(one)(keys, index)


def init_heads(
    keys: jax.Array,
    index: jax.Array,
    d: int,
    scale: float | jax.Array,
    head_size: int | None = None,
    learned: bool = False,
    outputs: int = 1,
    positions: int | None = None,
    tied: bool = False,
    factored_readout: bool = False,
) -> Params:
    """Normal heads, one per row of ``keys`` (S, 2) and ``index`` (S,): head s is drawn from
    ``fold_in(keys[s], index[s])``, entries N(0, scale²/d) (``scale`` scalar or (S,)); U_h of
    shape (d, o) for ``outputs`` o > 1, position logits a_h (T,) for ``positions`` T, no K_h when
    ``tied`` (W_h = Q_h Q_hᵀ), V_h (d, d) and O_h (d,) for a factored readout."""
    shapes = head_shapes(d, head_size, learned, outputs, positions, tied, factored_readout)
    dtype = jnp.zeros(()).dtype
    draw = _drawn_heads(keys, index, shapes, jax.random.normal)
    std = jnp.asarray(scale, dtype) / math.sqrt(d)
    return {name: per_head(std, x) * x for name, x in draw.items()}


def init_icl(
    keys: jax.Array,
    index: jax.Array,
    d: int,
    scale: float | jax.Array,
    head_size: int | None = None,
    learned: bool = False,
    *,
    n_heads: float | jax.Array,
) -> Params:
    """The in-context init of Zhang, Singh, Latham, Saxe (2025), in this model's layout: every
    array N(0, σ₀²/m) with m the entries of its whole layer over the run's H heads (U: the value
    layer's H·d² entries, of which U_h is the row that writes the output's y channel; Q and K:
    H·d·d_h each; W: H·d²), then the last channel (y) masked: the context side of the scores
    (Q_h's last row, W_h's last row: x_tᵀ W_h x_q never reads y_t) and U_h's first d − 1 entries
    (the readout reads only the y channel) are 0. Head s is drawn from ``fold_in(keys[s],
    index[s])`` as ``init_heads`` draws; ``scale`` and ``n_heads`` are scalars or (S,)."""
    if learned:
        raise ValueError("init 'icl' needs a key-query matrix (W, or Q and K), not a learned query")
    unit = init_heads(keys, index, d, math.sqrt(d), head_size, learned)  # entries N(0, 1)
    dtype = unit["U"].dtype
    layer = {"U": d * d, "W": d * d, "Q": d * (head_size or 0), "K": d * (head_size or 0)}
    y_row = jnp.arange(d) == d - 1  # the y channel
    out = {}
    for name, x in unit.items():
        std = jnp.asarray(scale, dtype) / jnp.sqrt(jnp.asarray(n_heads, dtype) * layer[name])
        x = per_head(std, x) * x
        if name == "U":
            x = jnp.where(y_row, x, 0.0)
        elif name in ("Q", "W"):  # rows index the context token's channels
            x = jnp.where(y_row[:, None], 0.0, x)
        out[name] = x
    return out


def init_torch(
    keys: jax.Array,
    index: jax.Array,
    d: int,
    scale: float | jax.Array,
    head_size: int | None = None,
    learned: bool = False,
    *,
    n_heads: float | jax.Array,
    factored_readout: bool = False,
    tied: bool = False,
) -> Params:
    """PyTorch's default init of nn.Linear (kaiming-uniform with a = √5: uniform in ±1/√fan_in),
    times σ₀ (``scale``), for the factors of He et al.'s heads: Q_h, K_h and V_h read a token
    (fan-in d), O_h reads the H heads' values concatenated (fan-in H·d: one output layer
    Linear(H·d, 1)). Only factors: a free W_h, a direct U_h, k_h have no fan-in (refused). Head s
    is drawn from ``fold_in(keys[s], index[s])``, one key per array; ``scale`` and ``n_heads`` are
    scalars or (S,)."""
    if learned or head_size is None or not factored_readout:
        raise ValueError(
            "init 'torch' draws linear layers by their fan-in: it needs a factored key-query (Q, K) "
            "and a factored readout (V, O)"
        )
    shapes = head_shapes(d, head_size, learned, 1, None, tied, factored_readout=True)  # Q (K); V; O
    dtype = jnp.zeros(()).dtype
    uniform = functools.partial(jax.random.uniform, minval=-1.0, maxval=1.0)
    draw = _drawn_heads(keys, index, shapes, uniform)  # entries uniform in [-1, 1)
    scale = jnp.asarray(scale, dtype)
    fan_in = {"O": jnp.asarray(n_heads, dtype) * d}  # the output layer over the H heads
    return {
        name: per_head(scale / jnp.sqrt(fan_in.get(name, jnp.asarray(d, dtype))), x) * x
        for name, x in draw.items()
    }


# The parameters the sphere init and constraint keep at norm 1, one vector per head.
SPHERE_PARAMS = parts.CONSTRAINTS["sphere"].params  # ("U", "k")


def unit_rows(x: jax.Array) -> jax.Array:
    """Each head's vector (the rows of ``x`` (S, d)) divided by its norm; a zero row stays 0."""
    norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
    return jnp.where(norm > 0, x / jnp.where(norm > 0, norm, 1.0), x)


def init_sphere(
    keys: jax.Array,
    index: jax.Array,
    d: int,
    scale: float | jax.Array,
    head_size: int | None = None,
    learned: bool = False,
) -> Params:
    """``init_heads``'s draw with U_h (and k_h) divided by their norms: a normal vector over its
    norm is uniform on the unit sphere, so U_h, k_h are uniform there (σ₀ leaves them alone)
    and the other arrays (W, or Q and K) are drawn exactly as ``normal`` draws them."""
    params = init_heads(keys, index, d, scale, head_size, learned)
    return {k: unit_rows(v) if k in SPHERE_PARAMS else v for k, v in params.items()}


def per_head(v: jax.Array | float, like: jax.Array) -> jax.Array:
    """A scalar as is (as an array), or a per-head (S,) vector reshaped to (S, 1, …) to broadcast
    against ``like``, an array with the head axis first."""
    v = jnp.asarray(v)
    return v if v.ndim == 0 else v.reshape(v.shape + (1,) * (like.ndim - 1))


def param_count(
    n_heads: int,
    d: int,
    key_query: KeyQuery | str = KeyQuery.FULL,
    head_size: str | int | None = None,
    *,
    query: Query | str = Query.FIRST,
    bias: bool = False,
    outputs: int = 1,
    tokens: int | None = None,
) -> int:
    """Trainable scalars of θ: H·d·o (U; o outputs, 1 for a scalar target) plus H·d² (full W),
    2·H·d·d_h (factored Q, K), H·d·d_h (tied Q), H·d (the learned query's k) or H·T (``tokens``
    T: the position logits), plus 1 for the bias.

    With ``head_size="split"`` the factored count is H·d + 2·H·d·(d // H), about d + 2d² for
    any H dividing d: adding heads shrinks them. A fixed d_h makes it grow as H·d·(1 + 2 d_h).
    """
    layout = parts.KEY_QUERIES.get(key_query, "key_query")
    learned = parts.QUERIES.get(query, "query").learned
    n_heads = _positive_int("n_heads", n_heads)
    d = _positive_int("d", d)
    if head_size is not None and not layout.factored:
        raise ValueError(f"head_size={head_size!r} has no effect with key_query={layout.name!r}: drop it")
    if learned and layout.factored:
        raise ValueError("query='learned' has a vector k per head, no key-query matrix: drop key_query")
    d_h = layout.head_size("split" if head_size is None else head_size, d, n_heads)
    if parts.QUERIES.get(query, "query").positional:
        key_part = n_heads * _positive_int("tokens", tokens)
    elif learned:
        key_part = n_heads * d
    elif not layout.factored:
        key_part = n_heads * d * d
    else:
        key_part = (1 if layout.tied else 2) * n_heads * d * d_h
    outputs = _positive_int("outputs", outputs)
    return n_heads * d * outputs + key_part + int(bool(bias))
