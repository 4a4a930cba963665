"""The model's parts: query modes, attention activations, head normalisations c_H, key-query
layouts and inits. Metadata only (no JAX); each part's math is in ``dynamics.core.model``
(activations: ``dynamics.core.activations``; inits: ``dynamics.core.inits``).

Each part states the rules the engine relies on:

- ``fast_path``: with every head equal at θ(0) (a ``symmetric`` init), every head gets the same
  gradient at every step, so one stored head of weight H is the exact H-head model. This holds
  when each head's output depends on its own parameters only through the same function (true of
  every query mode, activation and normalisation here); a part that couples heads, or a layout
  whose θ = 0 is a saddle, says ``fast_path=False``.
- ``packs``: runs of different H may share one program's head slots when a head's shapes do not
  depend on H (``KeyQuery.packs_across_heads``).
- what scales with H: only c_H (``Norm``); the step size's H-scaling is an optimiser setting.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dynamics.errors import ConfigError
from dynamics.parts.registry import Part, Probe, Registry, import_object

_MODEL = "dynamics.core.model"
_ACTIVATIONS = "dynamics.core.activations"
_INITS = "dynamics.core.inits"
_PROBES = "dynamics.parts.probes"


@dataclasses.dataclass(frozen=True)
class Query(Part):
    """Which tokens query: ``impl`` maps (W (h, d, e), X (n, t, d)) to the scores."""

    all_tokens: bool = False  # every token queries and the head outputs are mean-pooled over queries
    first_token: bool = False  # x_1 alone queries (the attention SVM of --diagnostics maxmargin is posed so)
    learned: bool = False  # a learned vector k_h per head queries (``impl`` maps (k (h, d), X) instead)
    token: int | None = None  # the one token that queries (its index: 0 first, -1 last), None otherwise
    # a learned logit a_h,t per position, no token content (``impl`` maps (a (h, t), X))
    positional: bool = False
    # the last token queries from outside the keys (cross-attention): scores and values read the
    # context tokens 1..T-1 only, so the attention has T - 1 weights (``impl`` maps (W, X) to (n, h, T-1))
    outside: bool = False
    fast_path: bool = True
    # a tied key-query Q_h Q_hᵀ scores through its factor, (x_t Q_h)·(x_q Q_h), as ``token``,
    # ``all_tokens`` and ``outside`` say (``dynamics.core.model.scores_tied``): T·d·r per token, not
    # the T·d² of forming W_h. False: ``impl`` on W_h (a user's query part)
    tied_scores: bool = False

    @property
    def matrix(self) -> bool:
        """The scores read a key-query matrix (W, or Q and K): not the learned query, not position."""
        return not (self.learned or self.positional)


@dataclasses.dataclass(frozen=True)
class Activation(Part):
    """σ over the T scores of a query: ``impl`` maps scores (…, t) to weights (…, t)."""

    normalises: bool = True  # the weights of a query sum to 1 (attention mass is a share)
    fast_path: bool = True
    saddle_at_zero: bool = False  # σ(0) = 0: at θ = 0 every gradient vanishes (refuse a zero init)
    # "module:attribute" of σ for scores multiplied by β ≠ 1, where XLA fuses the product into the
    # softmax's shift (dynamics.core.activations); None: ``impl`` at every β
    scaled: str | None = None

    def load_scaled(self) -> Any:
        """σ for β·s with β ≠ 1: ``scaled`` where given, else ``impl``."""
        return import_object(self.scaled, f"{self.name!r}: {self.scaled!r}") if self.scaled else self.load()


@dataclasses.dataclass(frozen=True)
class Norm(Part):
    """c_H: ``impl`` maps H (a number or a traced scalar) to c_H; the only factor that scales with H."""

    fast_path: bool = True
    unit_at_one: bool = False  # c_1 = 1: with one head it is no factor (given at H = 1 alone: refused)


@dataclasses.dataclass(frozen=True)
class KeyQuery(Part):
    """The key-query matrix of a head: free W_h (d×d), factored Q_h K_hᵀ of head size d_h, or tied
    Q_h Q_hᵀ of rank d_h (one array Q_h, no K_h)."""

    factored: bool = False  # W_h is a product of d×d_h arrays (``head_size`` d_h)
    fast_path: bool = True  # False: θ = 0 is a saddle, so no symmetric init is allowed
    tied: bool = False  # the key side is the query side: W_h = Q_h Q_hᵀ (factored too)

    @property
    def product(self) -> str:
        """How W_h is made, for messages: "Q Qᵀ", "Q Kᵀ" or "W"."""
        return "Q Qᵀ" if self.tied else "Q Kᵀ" if self.factored else "W"

    def head_size(self, head_size: str | int, d: int, n_heads: int) -> int | None:
        """d_h of a factored head (``"split"``: d // H), None for a free W."""
        if not self.factored:
            if head_size != "split" and (isinstance(head_size, bool) or not isinstance(head_size, int)):
                raise ValueError(f"head_size={head_size!r} must be 'split' or a positive integer")
            return None
        if head_size == "split":
            if n_heads > d:
                raise ValueError(f"head_size='split' needs heads <= d, got heads={n_heads} > d={d}")
            return d // n_heads
        if isinstance(head_size, bool) or not isinstance(head_size, int) or head_size < 1:
            raise ValueError(f"head_size={head_size!r} must be 'split' or a positive integer")
        return head_size

    def packs_across_heads(self, head_size: str | int) -> bool:
        """May runs of different H share head slots? Not when d_h = d // H changes with H."""
        return not (self.factored and head_size == "split")


@dataclasses.dataclass(frozen=True)
class Readout(Part):
    """How a head reads the attended token: U_h ∈ R^d learned directly, or U_h = V_hᵀ O_h with a
    value matrix V_h (d×d) and an output row O_h (d,) trained as factors (the same functions, other
    dynamics for Adam or any step that is not linear in the parameters)."""

    factored: bool = False
    params: tuple[str, ...] = ("U",)  # the head's readout arrays
    # the model outputs (model.output) that take it, and why another is refused (one line)
    outputs: tuple[str, ...] = ("pooled", "sequence")
    refused: str = ""
    # sequence outputs read each token's value through ``params`` (V_hᵀ x_t); False: value identity
    # there (no readout arrays under sequence outputs)
    values: bool = False


@dataclasses.dataclass(frozen=True)
class Init(Part):
    """θ(0): ``symmetric`` inits start every head equal (the fast path's premise); ``random`` ones
    draw head h of a run from ``fold_in(key, h)`` with entries N(0, σ₀²/d) (``impl``)."""

    symmetric: bool = False
    random: bool = True
    per_layer: bool = False  # the draw's variance reads the run's H (``impl`` takes n_heads=)
    unit_params: tuple[str, ...] = ()  # arrays it draws on the unit sphere whatever σ₀
    # it draws only the factors of a linear layer, each with a fan-in (Q, K of a factored key-query,
    # V, O of a factored readout); a free W, a direct U, k or a have none and are refused
    factors_only: bool = False


QUERIES: Registry[Query] = Registry(
    "query",
    "model.query",
    (
        Query(
            "first",
            "x_1 queries (the papers' model)",
            f"{_MODEL}:scores_first",
            first_token=True,
            token=0,
            tied_scores=True,
        ),
        Query(
            "last",
            "x_T queries (the last token, as in-context learning reads a query)",
            f"{_MODEL}:scores_last",
            token=-1,
            tied_scores=True,
        ),
        Query(
            "all",
            "every token queries; outputs mean-pooled",
            f"{_MODEL}:scores_all",
            all_tokens=True,
            tied_scores=True,
        ),
        Query(
            "learned",
            "a learned vector k_h per head queries: s_h = X k_h (a learned query or prompt token)",
            f"{_MODEL}:scores_learned",
            learned=True,
        ),
        Query(
            "position",
            "a learned logit a_h,t per position: s_h,t = a_h,t, whatever the tokens' content",
            f"{_MODEL}:scores_position",
            positional=True,
        ),
        Query(
            "outside",
            "the last token [x_q; 0] queries from outside the keys (cross-attention): the keys and "
            "values are tokens 1..T-1",
            f"{_MODEL}:scores_outside",
            outside=True,
            tied_scores=True,
        ),
    ),
    probe=Probe(
        "scores(W (H, d, d), X (n, T, d)), k (H, d) for a learned query, a (H, T) for positions",
        "real scores (n, H, T), or (n, H, T, T) where every token queries (all_tokens)",
        f"{_PROBES}:query",
    ),
)
ACTIVATIONS: Registry[Activation] = Registry(
    "attention",
    "model.attention",
    (
        Activation(
            "softmax",
            "e^{βs_t} / Σ_t' e^{βs_t'} over the T tokens",
            f"{_ACTIVATIONS}:softmax",
            scaled=f"{_ACTIVATIONS}:softmax_scaled",
        ),
        Activation(
            "softmax1",
            "e^{βs_t} / (1 + Σ_t' e^{βs_t'}): a head may attend to nothing",
            f"{_ACTIVATIONS}:softmax1",
            normalises=False,
            scaled=f"{_ACTIVATIONS}:softmax1_scaled",
        ),
        Activation(
            "linear",
            "β·s_t, no normalisation",
            f"{_ACTIVATIONS}:identity",
            normalises=False,
            saddle_at_zero=True,
        ),
        Activation("sigmoid", "1 / (1 + e^{-βs_t}) per token", f"{_ACTIVATIONS}:sigmoid", normalises=False),
        Activation(
            "erf", "erf(β s_t) per token", f"{_ACTIVATIONS}:erf", normalises=False, saddle_at_zero=True
        ),
    ),
    probe=Probe(
        "sigma(scores) on scores (2, 3, 5)",
        "real weights of the scores' shape, each query's from its own T scores (the last axis)",
        f"{_PROBES}:attention",
    ),
)
NORMS: Registry[Norm] = Registry(
    "norm",
    "model.norm",
    (
        Norm(
            "sqrt",
            "c_H = 1/√H (keeps Φ O(1) at random init)",
            f"{_MODEL}:c_sqrt",
            label="1/√H",
            unit_at_one=True,
        ),
        Norm("mean", "c_H = 1/H", f"{_MODEL}:c_mean", label="1/H", unit_at_one=True),
        Norm("sum", "c_H = 1", f"{_MODEL}:c_sum", label="1", unit_at_one=True),
    ),
    probe=Probe(
        "c(H) with H = 2, and traced with one H per run (R,)",
        "c_H, a finite real > 0: one number, or one per run",
        f"{_PROBES}:norm",
    ),
)
KEY_QUERIES: Registry[KeyQuery] = Registry(
    "key-query layout",
    "model.key_query",
    (
        KeyQuery("full", "W_h ∈ R^{d×d} free"),
        KeyQuery("factored", "W_h = Q_h K_hᵀ of rank ≤ head_size", factored=True, fast_path=False),
        KeyQuery(
            "tied",
            "W_h = Q_h Q_hᵀ, Q_h ∈ R^{d×head_size}: symmetric, positive semidefinite, rank ≤ head_size",
            factored=True,
            fast_path=False,
            tied=True,
        ),
    ),
    probe=Probe(
        refuse="the engine builds W_h itself from the layout (a free W_h, or Q_h K_hᵀ) and calls no "
        "function of a key-query layout, so a user's one would run as 'full' or 'factored', its code "
        "never used; use model.key_query='full' or 'factored'"
    ),
)
INITS: Registry[Init] = Registry(
    "init",
    "model.init",
    (
        Init("zero", "θ(0) = 0, the papers' setting; heads stay identical", symmetric=True, random=False),
        Init("normal", "entries N(0, σ₀²/d); breaks head symmetry", f"{_INITS}:init_heads"),
        Init(
            "sphere",
            "U_h and k_h uniform on the unit sphere, the rest as normal (needs --query learned)",
            f"{_INITS}:init_sphere",
            unit_params=("U", "k"),
        ),
        Init(
            "icl",
            "Zhang et al.'s in-context init: each array N(0, σ₀²/entries of its whole layer), "
            "the last (y) channel unseen by the context side and read by U only",
            f"{_INITS}:init_icl",
            per_layer=True,
        ),
        Init(
            "torch",
            "PyTorch's default for nn.Linear: each factor uniform in ±σ₀/√fan_in (Q, K, V: d; O: H·d, the "
            "output layer over the H heads); needs --key-query factored and --readout factored",
            f"{_INITS}:init_torch",
            per_layer=True,
            factors_only=True,
        ),
    ),
    probe=Probe(
        "init(keys (S, 2) uint32, index (S,), d, scale (S,), head_size=None, learned=False) "
        "[n_heads=(S,) where per_layer]",
        "{'U': (S, d), 'W': (S, d, d)}, real arrays, for the full key-query layout",
        f"{_PROBES}:init",
    ),
)
READOUTS: Registry[Readout] = Registry(
    "readout",
    "model.readout",
    (
        Readout("direct", "U_h ∈ R^d learned directly (sequence outputs: value identity, no U)"),
        Readout(
            "factored",
            "U_h = V_hᵀ O_h: a value matrix V_h (d×d) and an output row O_h (d) trained as factors",
            factored=True,
            params=("V", "O"),
            outputs=("pooled",),
            refused="reads the attended token through V_h and O_h; sequence outputs have no output row "
            "(use 'value' for learned values, 'direct' for value identity)",
        ),
        Readout(
            "value",
            "sequence outputs only: a learned value V_h (d×d) per head, f(X)_s = c_H Σ_h Σ_t σ_st V_hᵀ x_t",
            params=("V",),
            outputs=("sequence",),
            refused="gives each token its own output through V_h; the pooled Φ reads one through U "
            "(use 'factored' for V_h and O_h)",
            values=True,
        ),
    ),
    probe=Probe(
        refuse="the readout is the model's own layout (U_h, its factors V_h and O_h, or a value V_h), "
        "built by the engine, which calls no function of a readout; use model.readout='direct', "
        "'factored' or 'value'"
    ),
)


def tied_head_flops(query: str, key_query: str, head_size, d: int, T: int, n_heads: int) -> float | None:
    """Forward and backward FLOPs of one head on one example where a tied Q_h Q_hᵀ of rank r is
    scored through its factor (``Query.tied_scores``): x_t Q_h for every token (2·T·d·r), the
    scores of its T_q queries (2·T_q·T·r) and their outputs (2·T_q·T·d), each once more backward;
    None for any other key-query (scored through W_h: the callers' d² count). The time estimates
    read it, so a part that scores through its factor is not estimated at d² per token."""
    q, kq = QUERIES.get(query, "query"), KEY_QUERIES.get(key_query, "key_query")
    if not (kq.tied and q.tied_scores):
        return None
    r = kq.head_size(head_size, d, n_heads) or d
    T_q = T if q.all_tokens else 1
    return 4.0 * (T * d * r + T_q * T * r + T_q * T * d)


def head_flops(query: str, key_query: str, head_size, d: int, T: int, n_heads: int) -> float:
    """Forward and backward FLOPs of one head on one example, the count every time estimate reads
    (the FLOP table of benchmarks/README.md): a tied key-query scored through its factor as
    ``tied_head_flops``; any other through W_h, 4·d² + 8·T·d + 4·T where one token queries
    (W_h x_q, the T scores and the readout, each once more backward), 4·T·d² + 4·T²·d + 4·T·d +
    4·T² where every token queries (``Query.all_tokens``)."""
    tied = tied_head_flops(query, key_query, head_size, d, T, n_heads)
    if tied is not None:
        return tied
    if QUERIES.get(query, "query").all_tokens:
        return 4.0 * (T * d * d + T * T * d + T * d + T * T)
    return 4.0 * (d * d + 2 * T * d + T)


def check_readout_output(readout: str, output: str) -> None:
    """A readout takes only the model outputs its declaration lists (``Readout.outputs``)."""
    part = READOUTS.get(readout)
    if output not in part.outputs:
        raise ConfigError(
            f"model.readout={readout!r} {part.refused}: model.output={output!r} does not take it"
        )


# The inits that draw a factored readout's V_h and O_h (the others read U_h as one vector, or
# start at θ = 0, a saddle of V_hᵀ O_h where neither factor gets a gradient).
FACTORED_READOUT_INITS = ("normal", "torch")


def check_factors_init(init: str, query: str, key_query: str, readout: str) -> None:
    """An init of factors only (``torch``) needs every array of the model to be a linear layer's
    factor: a factored key-query (Q_h, K_h) and a factored readout (V_h, O_h)."""
    if not INITS.get(init).factors_only:
        return
    why = None
    if not QUERIES.get(query).matrix:
        why = f"model.query={query!r} has no key-query matrix (k or a have no fan-in)"
    elif not KEY_QUERIES.get(key_query).factored:
        why = f"model.key_query={key_query!r}: a free W_h = Q_h K_hᵀ is no linear layer (use 'factored')"
    elif not READOUTS.get(readout).factored:
        why = f"model.readout={readout!r}: U_h = V_hᵀ O_h is no linear layer (use 'factored')"
    if why:
        raise ConfigError(f"model.init={init!r} draws each linear layer by its fan-in; {why}")


def check_readout(readout: str, init: str, init_from: bool = False, vector_targets: bool = False) -> None:
    """A readout is a built-in one (the model's layout: no user readouts); a factored one needs an
    init that draws V and O (not θ = 0: a saddle), scalar targets, and no θ(0) from a file (which
    holds U)."""
    if readout not in READOUTS.names:
        allowed = ", ".join(map(repr, READOUTS.names))
        raise ConfigError(
            f"model.readout={readout!r} is not one of {allowed}: the readout is the model's own layout "
            "(no user readouts)"
        )
    if not READOUTS.get(readout).factored:
        return
    if init_from:
        raise ConfigError(
            "model.readout='factored' draws V and O with model.init; model.init_from holds U: drop one"
        )
    if init not in FACTORED_READOUT_INITS:
        raise ConfigError(
            f"model.readout='factored' needs model.init {' or '.join(map(repr, FACTORED_READOUT_INITS))}: "
            f"model.init={init!r} "
            + (
                "starts at θ = 0, a saddle of V_hᵀ O_h (no factor gets a gradient)"
                if INITS.get(init).symmetric
                else "reads U_h as one vector"
            )
        )
    if vector_targets:
        raise ConfigError("model.readout='factored' has one output row O_h: vector targets need 'direct'")


# The query whose heads have a sphere to live on: a learned query vector k_h (with a key-query
# matrix W_h there is none). The sphere init and the sphere constraint need it.
SPHERE_QUERY = "learned"


def check_sphere(query: str, init: str, constraint: str = "none") -> None:
    """The sphere init and constraint need the learned-vector query; the constraint needs the
    sphere init too (the projection keeps a norm of 1, it does not reach it)."""
    for name, value in (("model.init", init), ("optim.constraint", constraint)):
        if value == "sphere" and query != SPHERE_QUERY:
            raise ConfigError(
                f"{name}='sphere' needs model.query={SPHERE_QUERY!r} (a learned query vector k_h on the "
                f"unit sphere); model.query={query!r} has a key-query matrix W_h, which has no sphere"
            )
    if constraint == "sphere" and init != "sphere":
        raise ConfigError(
            f"optim.constraint='sphere' needs model.init='sphere' (U_h, k_h start on the sphere); "
            f"got model.init={init!r}"
        )


def check_icl_init(query: str, init: str, key_query: str = "full") -> None:
    """The in-context init masks a key-query matrix's y row: the learned query has none, and the
    tied Q_h Q_hᵀ has no context side of its own (Q_h is on both sides)."""
    if init == "icl" and not QUERIES.get(query).matrix:
        raise ConfigError(
            f"model.init='icl' needs a key-query matrix (W, or Q and K): model.query={query!r} has "
            "none; use model.init='normal'"
        )
    if init == "icl" and KEY_QUERIES.get(key_query).tied:
        raise ConfigError(
            f"model.init='icl' masks the context side of W_h (Q_h's last row): model.key_query="
            f"{key_query!r} uses Q_h on both sides; use model.init='normal'"
        )


def check_init(key_query: str, init: str, attention: str = "softmax") -> None:
    """A symmetric init is refused where θ = 0 is a saddle (no gradient leaves it): a factored
    key-query layout, or an activation with σ(0) = 0 (linear, erf)."""
    if not INITS.get(init).symmetric:
        return
    layout = KEY_QUERIES.get(key_query)
    if not layout.fast_path:
        arrays = "Q" if layout.tied else "Q or K"
        raise ConfigError(
            f"model.key_query={key_query!r} needs model.init='normal': "
            f"θ = 0 is a saddle point of {layout.product} (no gradient reaches {arrays})"
        )
    if ACTIVATIONS.get(attention).saddle_at_zero:
        raise ConfigError(
            f"model.attention={attention!r} needs model.init='normal': θ = 0 is a saddle point "
            "(σ(0) = 0, so neither U nor W gets a gradient and training never starts)"
        )
