"""One-layer multi-head attention classifier (docs/model.md).

    Φ(X; θ) = c_H · Σ_h U_hᵀ Xᵀ softmax(X W_h x_q)                 query = "first" (x_q = x_1)
    Φ(X; θ) = c_H · Σ_h (1/T) Σ_s U_hᵀ Xᵀ softmax(X W_h x_s)        query = "all"

Parameters are a dict pytree: ``{"U": (H, d), "W": (H, d, d)}`` for a free
key-query matrix, ``{"U": (H, d), "Q": (H, d, d_h), "K": (H, d, d_h)}`` for the
factored head W_h = Q_h K_hᵀ (Bhojanapalli et al., 2020), ``{"U": (H, d), "Q": (H, d, d_h)}`` for
the tied head W_h = Q_h Q_hᵀ (Cui et al., 2024), ``{"U": (H, d), "k": (H, d)}``
for the learned query (scores s_h = X k_h), or ``{"U": (H, d), "a": (H, T)}`` for positional
attention (scores s_h,t = a_h,t, a learned logit per position); any of them may add a bias
``"b"``, one learned scalar of the model (shape (); (R,) for the R runs of an engine pack),
added to Φ and never divided by H. Vector targets y ∈ R^o (o > 1) take a matrix readout
U_h ∈ R^{d×o} (``"U"`` of shape (H, d, o)) and Φ ∈ R^o; o = 1 keeps U_h ∈ R^d and a scalar Φ
(the arrays, and so the numbers, of the scalar model). Sequence outputs have no U: value identity,
or a learned value ``"V"`` (H, d, d) (``dynamics.core.sequence``). Dimension letters:
``n`` examples, ``t``/``s`` tokens, ``h`` heads, ``d``/``e`` width, ``a`` head size, ``o`` outputs.

The one home of the model's math: Φ for any set of heads with per-head weights (``logits``;
a stored head standing for H identical ones, empty slots, a run's own heads among a pack's)
and head diversity (``head_diversity``). The engine, the demos and the benchmark baseline
all call it; tests check it against an independent float64 reference, so keep it plain
einsums over the dimension letters above. The attention activations σ (softmax with its
derivative exact at saturation) are ``dynamics.core.activations``'; θ(0), the inits' draws and
``param_count`` are ``dynamics.core.inits``'.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import parts
from dynamics.core import sequence
from dynamics.core.norms import held_norm

Params = dict[str, jax.Array]


def _enum(name: str, registry) -> type[enum.Enum]:
    """An enum of a registry's built-in names (``Query.FIRST`` is ``"first"``): spelling aids for
    Python users. The registry is the one home of a part; strings and members are accepted alike."""
    return enum.Enum(name, {n.upper(): n for n in registry}, module=__name__)


Query = _enum("Query", parts.QUERIES)  # FIRST: x_1 queries; ALL: every token, mean-pooled
Norm = _enum("Norm", parts.NORMS)  # SQRT 1/√H (default), MEAN 1/H, SUM 1
KeyQuery = _enum("KeyQuery", parts.KEY_QUERIES)  # FULL W_h free; FACTORED Q_h K_hᵀ
Init = _enum("Init", parts.INITS)  # ZERO (heads stay identical); NORMAL N(0, σ₀²/d)


def parse_enum(cls: type[enum.Enum], value, field: str) -> enum.Enum:
    """Look up ``value`` in ``cls`` with an error naming the field and the allowed values."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except (ValueError, TypeError):  # TypeError: an unhashable value (a list)
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"{field}={value!r} is not one of {allowed}") from None


# The parts' math (the registries in dynamics.parts point here).


def c_sqrt(n_heads):
    return 1.0 / jnp.sqrt(n_heads) if isinstance(n_heads, jax.Array) else 1.0 / math.sqrt(n_heads)


def c_mean(n_heads):
    return 1.0 / n_heads


def c_sum(n_heads):
    return jnp.ones(jnp.shape(n_heads)) if jnp.ndim(n_heads) else 1.0


def scores_first(W: jax.Array, X: jax.Array) -> jax.Array:
    """x_tᵀ W_h x_1: (n, h, t)."""
    Wx = jnp.einsum("hde,ne->nhd", W, X[:, 0])  # (n, h, d): W_h x_1
    return jnp.einsum("ntd,nhd->nht", X, Wx)  # (n, h, t): x_tᵀ W_h x_1


def scores_last(W: jax.Array, X: jax.Array) -> jax.Array:
    """x_tᵀ W_h x_T: (n, h, t)."""
    Wx = jnp.einsum("hde,ne->nhd", W, X[:, -1])  # (n, h, d): W_h x_T
    return jnp.einsum("ntd,nhd->nht", X, Wx)  # (n, h, t): x_tᵀ W_h x_T


def scores_outside(W: jax.Array, X: jax.Array) -> jax.Array:
    """x_tᵀ W_h x_T for the context tokens t < T only (the query x_T is not a key): (n, h, t − 1)."""
    Wx = jnp.einsum("hde,ne->nhd", W, X[:, -1])  # (n, h, d): W_h x_T
    return jnp.einsum("ntd,nhd->nht", X[:, :-1], Wx)  # (n, h, t - 1): x_tᵀ W_h x_T, t < T


def keys_of(X: jax.Array, A: jax.Array) -> jax.Array:
    """The tokens the attention ``A`` weighs, (n, T_A, …): all of X (or a mask (n, T)), or, for a
    query outside the keys, its first T_A = T − 1 tokens (the context)."""
    return X if A.shape[-1] == X.shape[1] else X[:, : A.shape[-1]]


def scores_all(W: jax.Array, X: jax.Array) -> jax.Array:
    """x_tᵀ W_h x_s for every query s: (n, h, s, t)."""
    XW = jnp.einsum("ntd,hde->nhte", X, W)  # (n, h, t, e): x_tᵀ W_h
    return jnp.einsum("nhte,nse->nhst", XW, X)  # (n, h, s, t): x_tᵀ W_h x_s


def scores_tied(Q: jax.Array, X: jax.Array, part) -> jax.Array:
    """x_tᵀ Q_h Q_hᵀ x_q through the factor, (x_t Q_h)·(x_q Q_h), for the query ``part`` (its
    ``token``, ``all_tokens`` or ``outside``): the scores of ``part.impl`` on W_h = Q_h Q_hᵀ without
    forming the d×d matrix."""
    P = jnp.einsum("ntd,hda->nhta", X, Q)  # (n, h, t, r): x_tᵀ Q_h
    if part.all_tokens:
        return jnp.einsum("nhta,nhsa->nhst", P, P)  # (n, h, s, t)
    q = P[:, :, -1] if part.outside else P[:, :, part.token]  # (n, h, r): the query's x_qᵀ Q_h
    keys = P[:, :, :-1] if part.outside else P  # the query outside the keys: tokens 1..T-1
    return jnp.einsum("nhta,nha->nht", keys, q)


def scores_learned(k: jax.Array, X: jax.Array) -> jax.Array:
    """x_tᵀ k_h for a learned query vector k_h per head: (n, h, t)."""
    return jnp.einsum("ntd,hd->nht", X, k)


def scores_position(a: jax.Array, X: jax.Array) -> jax.Array:
    """a_h,t, a learned logit per head and position, the same for every example: (n, h, t)."""
    return jnp.broadcast_to(a[None, :, :], (X.shape[0], *a.shape))


def _check_positive(name: str, value) -> None:
    """A number or concrete array that must be finite and > 0 (a traced value passes unchecked)."""
    if isinstance(value, jax.core.Tracer):
        return
    if isinstance(value, bool | np.bool_ | str | bytes | list | tuple | dict | complex) or value is None:
        raise TypeError(f"{name}={value!r} must be a finite number > 0 (or an array of them)")
    if np.iscomplexobj(value):
        raise TypeError(f"{name}={value!r:.80} must be real, not complex")
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name}={value!r:.80} must be a finite number > 0") from None
    if v.size == 0 or not (np.all(np.isfinite(v)) and np.all(v > 0)):
        raise ValueError(f"{name}={value!r} must be a finite number > 0")


def _check_beta(beta) -> None:
    """The temperature: a finite real number, or a traced real scalar (the engine's schedule)."""
    if isinstance(beta, jax.core.Tracer):
        if beta.ndim != 0 or not jnp.issubdtype(beta.dtype, jnp.floating):
            raise TypeError(f"beta must be a real scalar, got a {beta.dtype} of shape {beta.shape}")
        return
    real = int | float | np.integer | np.floating | jax.Array
    if isinstance(beta, bool | np.bool_) or not isinstance(beta, real):
        raise TypeError(f"beta={beta!r:.80} must be a real number (the temperature)")
    if np.ndim(beta) != 0 or np.iscomplexobj(beta) or not np.isfinite(float(beta)):
        raise ValueError(f"beta={beta!r:.80} must be a finite real number (the temperature)")


def head_norm(n_heads: int | jax.Array, norm: Norm | str) -> jax.Array | float:
    """The head normalisation c_H (docs/model.md); ``n_heads`` may be traced."""
    c = parts.NORMS.get(norm, "norm").load()
    _check_positive("n_heads", n_heads)
    if isinstance(n_heads, np.ndarray):
        n_heads = jnp.asarray(n_heads)
    return c(n_heads)


def resolve_head_size(head_size: str | int, d: int, n_heads: int) -> int:
    """d_h for the factored layout: ``"split"`` gives d // H (the standard layout), an int is fixed."""
    return parts.KEY_QUERIES["factored"].head_size(head_size, d, n_heads)


def outputs_of(params: Params) -> int:
    """o of a model's parameters: 1 for a vector readout U (H, d), o for a matrix one (H, d, o)."""
    U = params.get("U", params.get("O"))  # a factored readout has one output row O_h
    return 1 if U.ndim == 2 else int(U.shape[-1])


_KEY_PARTS = ({"W"}, {"Q", "K"}, {"k"}, {"a"}, {"Q"})  # the attention's arrays ({"Q"}: the tied Q_h Q_hᵀ)
# a head's arrays: a readout (U, its factors V and O, or a sequence output's value V) with a key
# part; "b" may be added to any
_LAYOUTS = tuple({*r, *k} for r in ({"U"}, {"V", "O"}, {"V"}) for k in _KEY_PARTS)


def check_params(params: Params, *, readout: bool = True) -> tuple[int, int]:
    """(H, d) of well-formed parameters: ``{"U": (H, d), "W": (H, d, d)}``, ``{"U": (H, d),
    "Q": (H, d, a), "K": (H, d, a)}``, ``{"U": (H, d), "Q": (H, d, a)}`` (tied) or ``{"U": (H, d),
    "k": (H, d)}``, each with an optional bias
    ``"b"`` (a scalar, or (R,) for an engine pack); U may be left out where only attention is
    computed (``readout=False``). A ValueError/TypeError naming what is wrong otherwise."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of arrays (U, W; U, Q, K; U, k), got {type(params).__name__}")
    keys = set(params) - {"b"}
    allowed = list(_LAYOUTS) + ([] if readout else list(_KEY_PARTS))
    if keys not in allowed:
        raise ValueError(
            f"params has keys {sorted(params)}; expected one of {[sorted(a) for a in allowed]}, maybe with b"
        )
    shapes = {}
    for name, value in params.items():
        dtype = getattr(value, "dtype", None)
        if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(f"params[{name!r}] must be a floating JAX or numpy array, got {value!r:.80}")
        shapes[name] = tuple(value.shape)
    if "O" in shapes:  # a factored readout: V (H, d, d) and O (H, d) stand for U_h = V_hᵀ O_h (H, d)
        shapes["U"] = _factored_readout_shape(shapes["V"], shapes["O"])
    elif "V" in shapes:  # a sequence output's learned value V (H, d, d): checked as W is, below
        if "b" in shapes:
            raise ValueError(
                "params has a value V (sequence outputs) and a bias b: sequence outputs have no bias"
            )
    if "b" in shapes and len(shapes["b"]) > 1:
        raise ValueError(f"params['b'] has shape {shapes['b']}; expected () (one bias) or (R,) (one per run)")
    if "a" in shapes:  # position logits (H, T): d is U's
        if len(shapes["a"]) != 2 or 0 in shapes["a"]:
            raise ValueError(f"params['a'] has shape {shapes['a']}; expected (H, T) with sizes >= 1")
        if "U" not in shapes:
            return shapes["a"][0], None
        kq = (shapes["a"][0], shapes["U"][1] if len(shapes["U"]) >= 2 else 0)
    elif "k" in shapes:
        kq = shapes["k"]
        if len(kq) != 2 or 0 in kq:
            raise ValueError(f"params['k'] has shape {kq}; expected (H, d) with sizes >= 1")
    else:
        kq = shapes.get("W", shapes.get("Q"))
        if len(kq) != 3 or 0 in kq:
            raise ValueError(f"key-query arrays have shape {kq}; expected (H, d, d) or (H, d, a), sizes >= 1")
    H, d = kq[:2]
    for name in ("W", "V") if "O" not in shapes else ("W",):  # (a factored readout's V: checked above)
        if name in shapes and shapes[name] != (H, d, d):
            raise ValueError(f"params[{name!r}] has shape {shapes[name]}; expected (H, d, d) = {(H, d, d)}")
    if "K" in shapes and shapes["K"] != shapes["Q"]:
        raise ValueError(f"params['Q'] {shapes['Q']} and params['K'] {shapes['K']} must have the same shape")
    if "U" in shapes and len(shapes["U"]) == 3 and shapes["U"][:2] == (H, d) and shapes["U"][2] >= 2:
        if "b" in shapes:
            raise ValueError(
                "params has a matrix readout U (H, d, o) and a bias b: vector targets have no bias"
            )
    elif "U" in shapes and shapes["U"] != (H, d):
        kq_name = next(n for n in ("W", "Q", "k", "a") if n in shapes)
        raise ValueError(
            f"params['U'] has shape {shapes['U']}; expected (H, d) = {(H, d)} (or (H, d, o), o >= 2 "
            f"outputs) as params[{kq_name!r}] {kq}: every array needs the same number of heads H and width d"
        )
    return H, d


def _factored_readout_shape(V: tuple, O: tuple) -> tuple[int, int]:
    """(H, d) of U_h = V_hᵀ O_h from V (H, d, d) and O (H, d); a ValueError naming them otherwise."""
    if len(V) != 3 or V[1] != V[2] or len(O) != 2 or O != V[:2]:
        raise ValueError(f"params['V'] {V} and params['O'] {O}: expected V (H, d, d) and O (H, d)")
    return O


def readout_vector(params: Params) -> jax.Array:
    """U_h per head, (H, d) (or (H, d, o) for a matrix readout): U itself, or V_hᵀ O_h for a factored
    readout (Φ reads the attended token through O_h V_h, He et al.'s value and output layers)."""
    if "U" in params:
        return params["U"]
    return jnp.einsum("he,hed->hd", params["O"], params["V"])  # (h, d): Σ_e O_h,e V_h,e,d


def head_arrays(params: Params) -> Params:
    """The per-head arrays of ``params`` (every one but the bias b), each with the head axis first."""
    return {k: v for k, v in params.items() if k != "b"}


def check_tokens(X: jax.Array, d: int | None) -> None:
    """X must be a real array (n, T, d) of the parameters' width d (None: any), n and T >= 1."""
    dtype = getattr(X, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"X must be a floating JAX or numpy array (n, T, d), got {X!r:.80}")
    if X.ndim != 3 or (d is not None and X.shape[2] != d) or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X has shape {tuple(X.shape)}; expected (n, T, d={d}) with n, T >= 1")


def key_query_matrix(params: Params) -> jax.Array:
    """W_h, (H, d, d): the free matrix, Q_h K_hᵀ for factored heads or Q_h Q_hᵀ for tied ones (the
    learned query has none)."""
    check_params(params, readout=False)
    if "k" in params or "a" in params:
        raise ValueError(
            "params has a learned query k or position logits a per head and no key-query matrix W"
        )
    if "W" in params:
        return params["W"]
    K = params.get("K", params["Q"])  # tied: the keys' side is the queries'
    return jnp.einsum("hda,hea->hde", params["Q"], K)  # (h, d, d)


def key_part(params: Params) -> jax.Array:
    """Each head's key-query part as one row: W_h (Q_h K_hᵀ for factored heads), k_h (the learned
    query) or a_h (the position logits), flattened: (H, P)."""
    if "k" in params or "a" in params:
        return params["k" if "k" in params else "a"]
    W = key_query_matrix(params)
    return W.reshape(W.shape[0], -1)  # (h, d·d)


def key_norm2(params: Params, scale: jax.Array | None = None) -> jax.Array:
    """‖W_h‖_F² (Q_h K_hᵀ for factored heads), ‖k_h‖² (the learned query) or ‖a_h‖² (the position
    logits): (H,); of the part divided by ``scale`` (H,) when given."""
    if scale is not None:
        return jnp.sum((key_part(params) / scale[:, None]) ** 2, axis=1)
    if "k" in params:
        return jnp.sum(params["k"] ** 2, axis=1)
    if "a" in params:
        return jnp.sum(params["a"] ** 2, axis=1)
    return jnp.sum(key_query_matrix(params) ** 2, axis=(1, 2))


def attention_scores(params: Params, X: jax.Array, query: Query | str = Query.FIRST) -> jax.Array:
    """Pre-activation scores: x_tᵀ W_h x_q (n, H, T) for queries "first"/"last", x_tᵀ k_h (n, H, T)
    for "learned", a_h,t (n, H, T) for "position", (n, H, T_query, T) for "all"."""
    part = parts.QUERIES.get(query, "query")
    _, d = check_params(params, readout=False)
    check_tokens(X, d)
    if part.learned != ("k" in params) or part.positional != ("a" in params):
        need = (
            "a vector k per head" if part.learned else "position logits a (H, T)" if part.positional else None
        )
        need = need or "a key-query matrix (W, or Q and K)"
        raise ValueError(f"query={part.name!r} needs {need}; params has {sorted(params)}")
    if part.outside and X.shape[1] < 2:
        raise ValueError(f"query={part.name!r} needs T >= 2 tokens (one query, at least one key); X has T=1")
    if part.positional:
        if params["a"].shape[1] != X.shape[1]:
            raise ValueError(f"params['a'] has {params['a'].shape[1]} positions; X has T={X.shape[1]} tokens")
        return part.load()(params["a"], X)
    if part.learned:
        return part.load()(params["k"], X)
    if part.tied_scores and "Q" in params and "K" not in params:  # tied: the rank-r factor alone
        return scores_tied(params["Q"], X, part)
    return part.load()(key_query_matrix(params), X)


def attention(
    params: Params,
    X: jax.Array,
    query: Query | str = Query.FIRST,
    activation: str = "softmax",
    beta: float | jax.Array = 1.0,
) -> jax.Array:
    """Attention weights σ(β·s): (n, H, T) for query "first", (n, H, T_query, T) for "all".
    ``activation`` a name of ``dynamics.parts.ACTIVATIONS``, ``beta`` the temperature β (a
    number: β = 1 leaves the scores as they are)."""
    part = parts.ACTIVATIONS.get(activation, "attention")
    _check_beta(beta)
    scores = attention_scores(params, X, query)
    if isinstance(beta, int | float) and beta == 1.0:
        return part.load()(scores)
    return part.load_scaled()(beta * scores)  # β·s: the softmaxes' form that holds a fused shift


def head_outputs(
    params: Params,
    X: jax.Array,
    query: Query | str = Query.FIRST,
    activation: str = "softmax",
    beta: float | jax.Array = 1.0,
) -> jax.Array:
    """f_h(X) = U_hᵀ Xᵀ σ(β·X W_h x_q) (mean over queries for "all"), shape (n, H); (n, H, o) for
    a matrix readout U_h (d, o); without U, value identity (``readout``)."""
    check_params(params, readout=False)
    return readout(params, X, attention(params, X, query, activation, beta))


def readout(params: Params, X: jax.Array, A: jax.Array) -> jax.Array:
    """Head outputs from attention weights A ((n, H, T) or (n, H, T, T), as ``attention``): (n, H),
    or (n, H, o) for a matrix readout U (H, d, o); params without a readout: value identity, each query
    its own output (``dynamics.core.sequence``), (n, H, d) or (n, H, T·d), through a learned value V
    (H, d, d) where params has one without O."""
    if "U" not in params and "O" not in params:  # no readout: each query its own output
        return (
            sequence.identity_values(A, X)
            if "V" not in params
            else sequence.learned_values(A, X, params["V"])
        )
    U = readout_vector(params)  # (h, d) or (h, d, o)
    if U.ndim == 3:  # the attended token first: T times fewer products than U_hᵀ x_t for all t
        X = keys_of(X, A)
        if A.ndim == 3:
            Xa = jnp.einsum("nht,ntd->nhd", A, X)  # (n, h, d): Σ_t A_t x_t
        else:
            Xa = jnp.einsum("nhst,ntd->nhd", A, X) / X.shape[1]
        return jnp.einsum("nhd,hdo->nho", Xa, U)
    X = keys_of(X, A)  # (n, t, d): the tokens A weighs (the context alone for a query outside them)
    # (n, t, h), not (n, h, t): X stays the left operand of the matmul X·Uᵀ; the other order
    # makes XLA:CPU transpose all of X on every training step (measured: half a DM1 step).
    XU = jnp.einsum("ntd,hd->nth", X, U)  # (n, t, h): U_hᵀ x_t
    if A.ndim == 3:  # query "first"
        return jnp.einsum("nht,nth->nh", A, XU)
    return jnp.einsum("nhst,nth->nh", A, XU) / X.shape[1]


def combine_heads(
    f: jax.Array,
    *,
    norm: Norm | str = Norm.SQRT,
    weight: jax.Array | None = None,
    member: jax.Array | None = None,
    n_heads: int | jax.Array | None = None,
) -> jax.Array:
    """Φ from the stored heads' outputs f (n, S): Φ = c_H · Σ_s w_s f_s.

    Stored head s has weight w_s (default 1): it stands for w_s identical heads (with zero
    init all heads stay identical, so one stored head of weight H is the exact H-head model:
    the engine's fast path), or is an empty slot (w_s = 0, never read).

    - ``member`` None: one model of H = ``n_heads`` heads (default Σ_s w_s); Φ has shape (n,).
    - ``member`` (S, R) bool: R models sharing the S slots (the engine's packs), run r made of
      the slots with ``member[s, r]``, H_r = ``n_heads[r]`` (R,); Φ has shape (n, R). A select,
      not a product, picks each run's slots, so a non-finite head of one run never reaches
      another.

    Vector outputs f (n, S, o) give Φ (n, o) or (n, R, o): each output combined as above.
    """
    if jnp.ndim(f) == 3:

        def one(g):  # (n, S) -> (n,) or (n, R)
            return combine_heads(g, norm=norm, weight=weight, member=member, n_heads=n_heads)

        return jax.vmap(one, in_axes=2, out_axes=-1)(f)
    parts.NORMS.get(norm, "norm")
    try:
        if weight is not None and not isinstance(weight, jax.Array):
            weight = jnp.asarray(weight)  # a list or a numpy array of per-head weights
        if member is not None and not isinstance(member, jax.Array):
            member = jnp.asarray(member)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"weight and member must be numeric arrays, one entry per stored head: {err}"
        ) from None
    _check_combine(f, weight, member, n_heads)
    if weight is not None and member is None:  # a select: a weight-0 (empty) slot is never read,
        f = jnp.where(weight[None, :] > 0, f * weight[None, :], 0.0)  # its NaN or inf included
    elif weight is not None:
        f = f * weight[None, :]  # (n, S); the runs' select below keeps each run's slots only
    if member is None:
        if n_heads is None:
            n_heads = f.shape[-1] if weight is None else jnp.sum(weight)
        return head_norm(n_heads, norm) * jnp.sum(f, axis=-1)
    c = jnp.broadcast_to(jnp.asarray(head_norm(n_heads, norm), f.dtype), jnp.shape(n_heads))  # (R,)
    return c[None, :] * jnp.sum(jnp.where(member[None, :, :], f[..., None], 0.0), axis=-2)  # (n, R)


def _check_combine(f, weight, member, n_heads) -> None:
    """The shapes ``combine_heads`` needs (static: checked under tracing too)."""
    n, S = f.shape
    if weight is not None and jnp.shape(weight) != (S,):
        raise ValueError(f"weight has shape {jnp.shape(weight)}; expected (S,) = ({S},), one per stored head")
    if weight is not None and not jnp.issubdtype(weight.dtype, jnp.floating):
        raise TypeError(
            f"weight has dtype {weight.dtype}; expected floats (the heads each stored head stands for)"
        )
    if weight is not None and not isinstance(weight, jax.core.Tracer):
        w = np.asarray(weight)
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and (member is not None or w.sum() > 0)):
            raise ValueError(f"weight={w.tolist()!r:.80} must be finite and >= 0, with at least one head")
    if member is not None and member.dtype != jnp.bool_:
        raise TypeError(f"member has dtype {member.dtype}; expected bool (slot s belongs to run r)")
    if member is None:
        if n_heads is not None and jnp.ndim(n_heads) != 0:
            raise ValueError(f"n_heads has shape {jnp.shape(n_heads)}; expected a number (member is None)")
        if weight is None and n_heads is not None and not isinstance(n_heads, jax.core.Tracer):
            if float(n_heads) != S:  # c_H of another H than the heads there: give their weights
                raise ValueError(
                    f"n_heads={n_heads!r} with {S} stored heads and no weight: Φ would use c_H of "
                    f"{n_heads} heads but sum {S}; give weight (the heads each stands for) or drop n_heads"
                )
        return
    if jnp.ndim(member) != 2 or jnp.shape(member)[0] != S:
        raise ValueError(f"member has shape {jnp.shape(member)}; expected (S, R) with S = {S}")
    R = jnp.shape(member)[1]
    if n_heads is None or jnp.shape(n_heads) != (R,):
        raise ValueError(f"n_heads must have shape (R,) = ({R},) with member (S, R); got {n_heads!r:.80}")


def logits(
    params: Params,
    X: jax.Array,
    *,
    query: Query | str = Query.FIRST,
    norm: Norm | str = Norm.SQRT,
    weight: jax.Array | None = None,
    member: jax.Array | None = None,
    n_heads: int | jax.Array | None = None,
    activation: str = "softmax",
    beta: float | jax.Array = 1.0,
) -> jax.Array:
    """Φ(X; θ) of the stored heads ``params`` (S heads), shape (n,), or (n, R) for R runs
    sharing them ((n, o), (n, R, o) for a matrix readout): ``combine_heads`` of ``head_outputs``.
    With the defaults, the S-head model with softmax attention at temperature β = 1; plus the bias
    b when ``params`` has one."""
    f = head_outputs(params, X, query, activation, beta)
    phi = combine_heads(f, norm=norm, weight=weight, member=member, n_heads=n_heads)
    return add_bias(phi, params)


def add_bias(phi: jax.Array, params: Params) -> jax.Array:
    """Φ + b when the model has a bias (b scalar, or (R,) against Φ (n, R)); Φ as is otherwise."""
    if "b" not in params:
        return phi
    b = params["b"]
    if jnp.ndim(b) != 0 and (phi.ndim != 2 or jnp.shape(b) != phi.shape[1:]):
        raise ValueError(f"params['b'] has shape {jnp.shape(b)}; Φ has shape {phi.shape}: one bias per run")
    return phi + (b[None, :] if jnp.ndim(b) else b)


def head_diversity(params: Params, member: jax.Array) -> jax.Array:
    """max over pairs of heads h, h' of a model of ‖θ_h − θ_h'‖ (exactly 0 for identical heads),
    each distance without a square's overflow (``held_norm``: √Σx² as written in its plain range,
    so the same numbers there, to the bit, as the square root of the largest Σx²).

    ``member`` (S,) bool marks the stored heads of one model (a scalar result), or (S, R) those
    of R models sharing the slots (an (R,) result).
    """
    arrays = head_arrays(params).values()
    flat = jnp.concatenate([p.reshape(p.shape[0], -1) for p in arrays], axis=1)  # (S, P)

    def to_head(f_h):  # (P,) -> (S,): ‖θ_s − θ_h‖ for every s
        diff = flat - f_h[None, :]  # (S, P)

        def total(scale):  # Σ (diff / scale)² per s (scale None: as written)
            return jnp.sum(diff * diff if scale is None else (diff / scale[:, None]) ** 2, axis=-1)

        return held_norm(total, jnp.max(jnp.abs(diff), axis=-1))

    # one head h at a time: O(S·P) memory, not the O(S²·P) of every pair's difference at once
    # (dist is symmetric, so this row-by-row matrix is the all-pairs one, to the bit); the largest
    # of the square roots is the square root of the largest (a correctly rounded √ is monotone)
    dist = jax.lax.map(to_head, flat)  # (S, S)
    pair = member[:, None, ...] & member[None, :, ...]  # (S, S[, R])
    if member.ndim == 2:
        dist = dist[..., None]
    return jnp.max(jnp.where(pair, dist, 0.0), axis=(0, 1))
