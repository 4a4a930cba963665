"""The training engine: many runs in one compiled program.

A *batch* is a flat list of B runs — (trial, H, η, σ₀) combinations that share one
``Program`` (everything static: shapes, options, logging schedule). ``train_batch`` runs
all of them in one XLA program: the batch axis is split over the devices of a one-axis
mesh (``jax.sharding`` + ``jax.shard_map``); each device runs its runs in chunks of
``width`` runs vmapped together; a run is a ``lax.scan`` over the logging segments around
a ``lax.fori_loop`` over the steps inside a segment, so there is no host round-trip per
step. Metrics are evaluated only at the logged steps; a non-finite loss or parameter is
detected per run inside the program.

Stored heads. A run holds S = ``Program.stored_heads`` heads and a weight per stored head;
Φ = c_H · Σ_{s<S} weight_s · f_s(X), with c_H computed from the run's H (a traced scalar).

- Fast path (θ(0) = 0, full key-query): S = 1 and weight = H. With zero init every head
  gets the same gradient at every step (SPEC §2), so all H heads stay equal to one
  representative head θ. Write L̃(θ) = L(θ, …, θ) for the loss as a function of the common
  value; by the chain rule ∇L̃ = Σ_h ∂L/∂θ_h = H·g, where g is the gradient each head
  receives in the H-head model. The engine feeds the optimiser g = ∇L̃ / H, the exact
  per-head gradient, so:
    * GD: θ ← θ − η·g, the same update every head makes.
    * Adam (optax defaults: b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 0): all state is
      per coordinate, m ← b1·m + (1−b1)·g, v ← b2·v + (1−b2)·g², θ ← θ − η·m̂/(√v̂ + eps).
      Every head's coordinates see the same sequence g, so they hold the same m, v and make
      the same update, and the representative head fed g reproduces it, eps included.
      (Feeding ∇L̃ = H·g instead would not be exact: m̂/(√v̂ + eps) would become
      m̂/(√v̂ + eps/H), a different eps for each H — which is why the gradient is divided.)
  The only difference to the H-head computation is float rounding (a sum of H equal terms
  versus H times one term). H enters as a traced scalar, so every H shares one compile.
- Full path: S ≥ H stored heads, weight 1 for the first H and 0 for padded heads. Padded
  heads start at 0 and get exactly zero gradient (their weight multiplies their output),
  so GD and Adam leave them at 0: a run padded to S heads is the H-head run. Padding lets
  several H share one compile (a "bucket", see ``sweep.bucket_heads``); without it S = H.

Compiler options: on the CPU the engine lets YNNPACK fuse only around dots
(``CPU_COMPILER_OPTIONS``): with jaxlib 0.10's default YNNPACK fusions a one-head step ran
about 1.7× slower, with YNNPACK off a many-head step ran up to 3× slower
(benchmarks/README.md). On a GPU the float32 matmuls are asked for full float32 precision
(no TF32), so results do not depend on the GPU generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dynamics import model as mdl
from dynamics.config import LR_SCALINGS, Config
from dynamics.losses import Loss, error_rate, mean_loss

METRICS = (
    "train_loss",
    "test_loss",
    "train_error",
    "test_error",
    "margin",
    "u_norm",
    "w_norm",
    "diversity",
    "attn_relevant",
)

# XLA:CPU options for the engine's programs: YNNPACK only for fusions around dots (see the
# module docstring; benchmarks/README.md has the measurements).
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
BATCH_AXIS = "batch"


class Data(NamedTuple):
    X_train: jax.Array  # ([trials,] n, T, d)
    y_train: jax.Array  # ([trials,] n) in {−1, +1}
    X_test: jax.Array  # ([trials,] n_test, T, d)
    y_test: jax.Array  # ([trials,] n_test)
    mask_test: jax.Array | None  # ([trials,] n_test, T) relevant tokens, None if unknown


class Batch(NamedTuple):
    """B runs of one program; every field has the batch axis first."""

    trial: jax.Array  # (B,) int32: which trial's data (ignored when the data is shared)
    key: jax.Array  # (B, 2) uint32: the init key
    n_heads: jax.Array  # (B,) float: H
    lr: jax.Array  # (B,) float: the step size η(H)
    init_scale: jax.Array  # (B,) float: σ₀ of a normal init


@dataclass(frozen=True)
class Program:
    """Everything that fixes the compiled program's shapes and code (hashable, static)."""

    stored_heads: int  # S: 1 on the fast path, else the largest H it runs (smaller H are padded)
    fast_path: bool  # one stored head of weight H (zero init) instead of masked heads
    d: int
    query: str
    norm: str
    key_query: str
    head_size: str | int
    init: str
    optimizer: str
    loss: str
    segments: tuple[int, ...]  # steps before each logged step: (0, s_1 − 0, s_2 − s_1, …)


def make_optimizer(name: str, lr: jax.Array) -> optax.GradientTransformation:
    if name == "gd":
        return optax.sgd(lr)
    if name == "adam":
        return optax.adam(lr)
    raise ValueError(f"optimizer={name!r} is not one of 'gd', 'adam'")


def step_size(cfg: Config, n_heads: int) -> float:
    """η(H) = η₀ · H^p (SPEC §4)."""
    return cfg.optim.lr * n_heads ** LR_SCALINGS[cfg.optim.lr_scaling]


def uses_fast_path(cfg: Config) -> bool:
    return cfg.sweep.fast_path and cfg.model.init == "zero" and cfg.model.key_query == "full"


def can_pad_heads(cfg: Config) -> bool:
    """Padding H up to a shared S keeps every shape except the head axis: not for split heads."""
    return cfg.model.key_query == "full" or cfg.model.head_size != "split"


def _tree_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]))


def _per_head(w: jax.Array, like: jax.Array) -> jax.Array:
    """(S,) -> shape (S, 1, …) broadcastable against a parameter with the head axis first."""
    return w.reshape(w.shape + (1,) * (like.ndim - 1))


def head_weights(prog: Program, n_heads: jax.Array) -> jax.Array:
    """(S,): H for the one fast-path head; else 1 for the first H stored heads, 0 for padding."""
    if prog.fast_path:
        return jnp.reshape(n_heads, (1,))
    return (jnp.arange(prog.stored_heads) < n_heads).astype(n_heads.dtype)


def logits(prog: Program, params: mdl.Params, X: jax.Array, n_heads: jax.Array, w: jax.Array) -> jax.Array:
    """Φ(X) = c_H Σ_s w_s f_s(X), shape (n,); equals ``model.logits`` of the H-head model."""
    f = mdl.head_outputs(params, X, prog.query)  # (n, S)
    return mdl.head_norm(n_heads, prog.norm) * jnp.sum(f * w[None, :], axis=-1)


def _head_diversity(params: mdl.Params, valid: jax.Array) -> jax.Array:
    """max over pairs of real heads of ‖θ_h − θ_h'‖ (exactly 0 for identical heads)."""
    flat = jnp.concatenate([p.reshape(p.shape[0], -1) for p in params.values()], axis=1)  # (S, P)
    diff = flat[:, None, :] - flat[None, :, :]  # (S, S, P)
    dist2 = jnp.sum(diff * diff, axis=-1)  # (S, S)
    pair = valid[:, None] & valid[None, :]  # (S, S)
    return jnp.sqrt(jnp.max(jnp.where(pair, dist2, 0.0)))


def evaluate(
    prog: Program, params: mdl.Params, n_heads: jax.Array, w: jax.Array, data: Data
) -> dict[str, jax.Array]:
    """All logged metrics of one run at one step (scalars)."""
    loss = mdl.parse_enum(Loss, prog.loss, "loss")
    z_train = data.y_train * logits(prog, params, data.X_train, n_heads, w)  # (n,)
    z_test = data.y_test * logits(prog, params, data.X_test, n_heads, w)  # (n_test,)
    W = mdl.key_query_matrix(params)  # (S, d, d)
    valid = w > 0  # (S,) real heads
    out = {
        "train_loss": mean_loss(z_train, loss),
        "test_loss": mean_loss(z_test, loss),
        "train_error": error_rate(z_train),
        "test_error": error_rate(z_test),
        "margin": jnp.min(z_train),
        # ‖·‖ over all H heads: a stored head of weight w stands for w equal heads.
        "u_norm": jnp.sqrt(jnp.sum(w * jnp.sum(params["U"] ** 2, axis=1))),
        "w_norm": jnp.sqrt(jnp.sum(w * jnp.sum(W**2, axis=(1, 2)))),
        "diversity": _head_diversity(params, valid),
    }
    if data.mask_test is None:
        out["attn_relevant"] = jnp.array(jnp.nan, dtype=z_test.dtype)
    else:
        A = mdl.attention(params, data.X_test, prog.query)  # (n, S, t) or (n, S, s, t)
        mask = data.mask_test.astype(A.dtype)
        mass = jnp.einsum("nh...t,nt->nh...", A, mask)  # attention on relevant tokens
        per_head = jnp.mean(mass.reshape(mass.shape[0], mass.shape[1], -1), axis=(0, 2))  # (S,)
        out["attn_relevant"] = jnp.sum(jnp.where(valid, per_head, 0.0)) / jnp.sum(valid)
    return out


def train_run(
    prog: Program,
    data: Data,
    key: jax.Array,
    n_heads: jax.Array,
    lr: jax.Array,
    init_scale: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array]:
    """One run: (metrics, each (L,), and the step at which it diverged, or steps + 1)."""
    w = head_weights(prog, n_heads)  # (S,)
    params = mdl.init_params(
        key,
        prog.stored_heads,
        prog.d,
        init=prog.init,
        scale=init_scale,
        key_query=prog.key_query,
        head_size=prog.head_size,
    )
    if not prog.fast_path:  # padded heads start (and stay) at exactly 0
        params = {k: p * _per_head(w, p) for k, p in params.items()}
    loss = mdl.parse_enum(Loss, prog.loss, "loss")
    opt = make_optimizer(prog.optimizer, lr)
    total = sum(prog.segments)

    def objective(p):
        return mean_loss(data.y_train * logits(prog, p, data.X_train, n_heads, w), loss)

    def one_step(t, carry):
        p, state, div_at = carry
        value, grads = jax.value_and_grad(objective)(p)
        if prog.fast_path:  # ∇L̃ = H·g: the representative head gets the per-head gradient g
            grads = jax.tree_util.tree_map(lambda g: g / _per_head(w, g), grads)
        updates, new_state = opt.update(grads, state, p)
        new_p = optax.apply_updates(p, updates)
        alive = div_at > total
        loss_ok = jnp.isfinite(value)
        params_ok = _tree_finite(new_p)
        div_at = jnp.where(alive & ~loss_ok, t, jnp.where(alive & ~params_ok, t + 1, div_at))
        keep = alive & loss_ok & params_ok
        new_p, new_state = jax.tree_util.tree_map(
            lambda a, b: jnp.where(keep, a, b), (new_p, new_state), (p, state)
        )
        return new_p, new_state, div_at

    def segment(carry, n_steps):
        p, state, div_at, t = carry
        p, state, div_at = jax.lax.fori_loop(t, t + n_steps, one_step, (p, state, div_at))
        return (p, state, div_at, t + n_steps), evaluate(prog, p, n_heads, w, data)

    # The first segment has 0 steps: step 0 is evaluated by the same (single) traced evaluate.
    carry = (params, opt.init(params), jnp.array(total + 1), jnp.array(0))
    (_, _, div_at, _), metrics = jax.lax.scan(segment, carry, jnp.array(prog.segments))
    return metrics, div_at


def _train_batch(prog: Program, data: Data, batch: Batch, shared_data: bool, mesh: Mesh, width: int):
    def local(data: Data, batch: Batch):  # one device's slice: chunks of ``width`` runs, vmapped
        def one(b: Batch):
            d = data if shared_data else jax.tree_util.tree_map(lambda a: a[b.trial], data)
            return train_run(prog, d, b.key, b.n_heads, b.lr, b.init_scale)

        return jax.lax.map(one, batch, batch_size=width)

    spec = PartitionSpec(BATCH_AXIS)
    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(PartitionSpec(), spec), out_specs=spec, check_vma=False
    )
    return sharded(data, batch)


_STATIC = ("prog", "shared_data", "mesh", "width")
_JIT = {
    "cpu": jax.jit(_train_batch, static_argnames=_STATIC, compiler_options=CPU_COMPILER_OPTIONS),
    "other": jax.jit(_train_batch, static_argnames=_STATIC),
}


def train_batch(
    prog: Program, data: Data, batch: Batch, *, mesh: Mesh, width: int, shared_data: bool = False
) -> tuple[dict[str, jax.Array], jax.Array]:
    """Run the B runs of ``batch``: (metrics, each (B, L), diverged_at (B,)).

    The batch axis is split over the devices of ``mesh`` (B must be a multiple of
    devices × ``width``); each device runs its runs in chunks of ``width``, vmapped, one
    chunk after the other. A run's numbers depend on ``width`` but not on which other runs
    share its batch, nor on the number of devices once there are two or more (one device
    is compiled unpartitioned, through another XLA pass order: last-bit differences).
    ``data`` has a leading trial axis that ``batch.trial`` indexes, or none if
    ``shared_data``.
    """
    platform = mesh.devices.flat[0].platform
    fn = _JIT["cpu" if platform == "cpu" else "other"]
    with jax.default_matmul_precision("highest"):
        return fn(prog, data, batch, shared_data=shared_data, mesh=mesh, width=width)


def program_for(cfg: Config, stored_heads: int, d: int, schedule: list[int]) -> Program:
    """The program that runs ``cfg`` with S = ``stored_heads`` (ignored on the fast path: S = 1)."""
    fast = uses_fast_path(cfg)
    return Program(
        stored_heads=1 if fast else stored_heads,
        fast_path=fast,
        d=d,
        query=cfg.model.query,
        norm=cfg.model.norm,
        key_query=cfg.model.key_query,
        head_size=cfg.model.head_size,
        init=cfg.model.init,
        optimizer=cfg.optim.optimizer,
        loss=cfg.optim.loss,
        segments=tuple(int(s) for s in np.diff([0, *schedule])),
    )


def float_dtype() -> np.dtype:
    """The working float type: float32, or float64 when x64 is on (``--x64``)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))


DEVICE_KINDS = ("auto", "cpu", "gpu")


def select_devices(kind: str = "auto") -> list[jax.Device]:
    """The devices a sweep shards over: all of JAX's default backend, or all CPU / GPU devices."""
    if kind == "auto":
        return jax.devices()
    if kind == "cpu":
        return jax.devices("cpu")
    if kind == "gpu":
        try:
            return jax.devices("gpu")
        except RuntimeError:
            raise ValueError(
                "device='gpu' but JAX sees no GPU (a CPU-only jaxlib, or no visible GPU): install "
                "jax[cuda12] on a GPU machine, or use --device cpu or auto"
            ) from None
    raise ValueError(f"device={kind!r} is not one of {', '.join(map(repr, DEVICE_KINDS))}")


class BatchPlacer:
    """Places batches and data on a one-axis device mesh and brings results back.

    The batch axis is sharded over all ``devices`` (its length a multiple of their number);
    the data is replicated. Works across hosts after
    ``jax.distributed.initialize()``: each process passes the same host arrays and keeps
    only its devices' slices, and results are all-gathered back to every process.
    """

    def __init__(self, devices: list[jax.Device] | None = None):
        self.devices = list(devices) if devices is not None else jax.devices()
        if not self.devices:
            raise ValueError("devices is empty: give at least one JAX device")
        self.mesh = Mesh(np.array(self.devices), (BATCH_AXIS,))
        self.sharded = NamedSharding(self.mesh, PartitionSpec(BATCH_AXIS))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.platform = self.devices[0].platform

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def _put(self, host: np.ndarray, sharding: NamedSharding) -> jax.Array:
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    def batch(self, batch: Batch) -> Batch:
        return Batch(*(self._put(np.asarray(x), self.sharded) for x in batch))

    def data(self, data: Data) -> Data:
        """Replicate the data on every device, floats in the working precision (float64 under x64;
        the data models draw in float32, so x64 simulates the same draws in float64)."""

        def host(x):
            x = np.asarray(x)
            return x.astype(float_dtype()) if np.issubdtype(x.dtype, np.floating) else x

        return Data(*(None if x is None else self._put(host(x), self.replicated) for x in data))

    def fetch(self, tree):
        """Device arrays -> numpy on this process (all-gathered when several processes share them)."""
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            tree = multihost_utils.process_allgather(tree, tiled=True)
        return jax.tree_util.tree_map(np.asarray, tree)


def mask_diverged(curves: dict[str, np.ndarray], steps: np.ndarray, div_at: np.ndarray) -> None:
    """Set every logged point at or after a run's divergence to NaN, in place (curves (..., L))."""
    dead = steps >= div_at[..., None]  # (..., L)
    for v in curves.values():
        v[dead] = np.nan
