"""A user's metrics, compiled into the run: ``run_sweep(cfg, metrics={"name": fn})``.

``fn(params, data) -> array`` is called inside the compiled program at every logged step, once
per run, with

- ``params``: that run's parameters with every head present, by name (``dynamics.core.model``'s
  layout: ``U`` (H, d), ``W`` (H, d, d) or ``Q``, ``K`` (H, d, d_h), ``k`` (H, d); the bias ``b``
  a scalar). On the zero-init fast path the one stored head is repeated H times, so ``fn`` sees
  the H-head model, never the representative head;
- ``data``: a :class:`TestSet`, the trial's test set (and what the run knows of it) and its
  training set (``X_train``, ``y_train``, ``mask_train``: the examples the logged train loss reads,
  with online sampling the batch of the logged step): with it
  ``dynamics.core.model.logits(params, data.X, query=data.query, norm=data.norm,
  activation=data.attention, beta=data.beta)`` is the run's Φ on the test set (``data.X_train``
  for the training set) and ``model.attention(params, data.X, data.query, data.attention,
  data.beta)`` its attention.

``fn`` must be traceable by JAX (``jax.numpy``, no Python branches on values) and return an array
of a fixed shape; the result is logged as the curve ``name`` with shape (n_heads, trials, L, …),
NaN after a run's divergence, exactly like the built-in metrics. ``name`` may not be one the
results already use (``dynamics.sweeps.arguments.metric_refs``): a built-in curve, or a column of the
results' frames or a grid knob (``dynamics.sweeps.sweep_result.reserved_columns``, derived from the frames).

A metric function is a static argument of the compiled program by identity (``MetricRef``): a
notebook cell run again defines a new function and gets a new program, never the old one's.
Programs with user metrics are not kept on disk (``dynamics.infra.executables``): the source
of a function defined in a notebook cannot be trusted to identify it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dynamics.parts import boundary


class TestSet(NamedTuple):
    """What a user metric reads of the trial: its test set, the run's context and its training set."""

    __test__ = False  # not a pytest test class

    X: jax.Array  # (n_test, T, d) tokens
    y: jax.Array  # (n_test,) labels or targets
    mask: jax.Array | None  # (n_test, T) relevant tokens, or None where the data model does not know
    directions: jax.Array | None  # (P, d) the planted directions (unit rows), or None
    beta: Any  # the temperature β of the last update (a number, or a traced scalar when it decays)
    query: str  # the query mode ("first", "last", "learned", …): ``model.attention``'s argument
    attention: str  # the activation ("softmax", "linear", …): ``model.attention``'s argument
    norm: str  # how heads combine (c_H): ``model.logits``'s argument
    X_train: jax.Array | None = None  # (n, T, d) the training set's tokens (online: the logged batch)
    y_train: jax.Array | None = None  # (n,) its labels or targets
    mask_train: jax.Array | None = None  # (n, T) its relevant tokens, or None


def metric_data(data: Any, directions: jax.Array | None, beta: Any, query: str, attention: str, norm: str):
    """The :class:`TestSet` a user metric reads of one trial's ``data`` (``dynamics.core.data.Data``,
    its training set the one the logged train loss reads)."""
    return TestSet(
        data.X_test, data.y_test, data.mask_test, directions, beta, query, attention, norm,
        data.X_train, data.y_train, data.mask_train,
    )  # fmt: skip


class MetricRef:
    """A user's metric function as a static argument: equal only to the same function object."""

    def __init__(self, fn, name: str):
        self.fn, self.name = fn, name

    def __eq__(self, other) -> bool:
        return isinstance(other, MetricRef) and other.fn is self.fn and other.name == self.name

    def __hash__(self) -> int:
        return hash((id(self.fn), self.name))

    def __repr__(self) -> str:
        return f"MetricRef({self.name!r}, {getattr(self.fn, '__qualname__', type(self.fn).__name__)})"


def run_params(params: dict[str, jax.Array], fast_path: bool, n_heads: int) -> dict[str, jax.Array]:
    """The parameters of a pack's one run (R = 1) with its H heads: the stored slots, or the fast
    path's one stored head repeated H times; the bias a scalar."""
    out = {}
    for k, v in params.items():
        if k == "b":
            out[k] = v[0]
        elif fast_path:
            out[k] = jnp.broadcast_to(v[:1], (n_heads, *v.shape[1:]))
        else:
            out[k] = v[:n_heads]
    return out


def user_metrics(metrics, params: dict[str, jax.Array], data: TestSet, dtype) -> dict[str, jax.Array]:
    """Each user metric of the one run of a pack, as (1, …) (the pack's run axis), in ``dtype``."""
    out = {}
    for ref in metrics:
        try:
            value = ref.fn(params, data)
        except Exception as err:
            err.add_note(f"raised by the user metric {ref.name!r} ({ref!r}), traced in the run's program")
            raise
        boundary.check_metric(ref.name, value)  # real numbers: a complex value is refused, not cast
        value = jnp.asarray(value)
        out[ref.name] = value.astype(dtype)[None]
    return out
