"""The training engine: many runs in one compiled program.

A *batch* is a list of B *packs* that share one ``Program`` (everything static: shapes,
options, logging schedule; hashable, so one compile per distinct ``Program``) and are fed as
a traced ``Batch`` (data, H, η, σ₀, keys: changing them never recompiles). This static /
traced split is what lets every H, step size and trial of a sweep share one compile.
A pack is R runs — (H, η, σ₀) combinations of one trial, so
one data set — whose heads fill the program's S head slots side by side. ``train_batch``
runs the whole batch in one XLA program: the batch axis is split over the devices of a
one-axis mesh (``jax.sharding`` + ``jax.shard_map``); each device runs its packs in chunks
of ``chunk`` packs vmapped together; a pack is a ``lax.scan`` over the logging segments
around a ``lax.fori_loop`` over the steps inside a segment, so there is no host round-trip
per step. Metrics are evaluated only at the logged steps; a non-finite loss or margin is
detected per run inside the program. With full-batch training at a constant temperature
(``fused_logging``) the training set's loss, error and margin at a logged step are those of
the next update's own forward pass (the same computation; the last logged step, which no
update follows, has a forward of its own), so a logged step adds only the test set's forward
and the metrics; every update is the same loop body whatever the schedule, so the curves do
not depend on it. The per-head view (per-head metrics, snapshots of θ) is logged at some of
the logged steps (``Program.head_log``), under a ``lax.cond``, into buffers of its own.

The parts around the loop have modules of their own: the static ``Program``, the traced
``Batch`` and how a pack's slots make up its runs (``Pack``; the fast and the full path) are
``dynamics.core.program``'s; θ(0) of the slots ``dynamics.core.start``'s; SGD's batches
``dynamics.core.sampling``'s. The step's rules (parameter groups, normalisation per run, the
sphere) are ``Program.rules()``, applied by ``update.update`` (``pack.member`` gives the runs).

Compiler options: on the CPU the engine lets YNNPACK fuse only around dots
(``CPU_COMPILER_OPTIONS``): with jaxlib 0.10's default YNNPACK fusions a one-head step ran
about 1.7× slower, with YNNPACK off a many-head step ran up to 3× slower
(benchmarks/README.md). On a GPU the float32 matmuls are asked for full float32 precision
(no TF32: ``executables.call`` traces every program under ``executables.exact_matmuls``), so
results do not depend on the GPU generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from dynamics import parts
from dynamics.core import heads, hooks
from dynamics.core import model as mdl
from dynamics.core import update as upd
from dynamics.core.losses import error_rate, mean_loss
from dynamics.core.program import Batch, Pack, Program, make_pack, per_run
from dynamics.core.sampling import logged_train_set, minibatch, minibatch_key
from dynamics.core.start import init_slots, world_start
from dynamics.infra import executables
from dynamics.parts.metrics import METRICS, REGRESSION_METRICS, is_per_slot, metric_names, snapshot_name  # noqa: F401

if TYPE_CHECKING:  # the engine reads the data's fields; it imports nothing above the model
    from dynamics.core.data import Data

# XLA:CPU options for the engine's programs: YNNPACK only for fusions around dots (see the
# module docstring; benchmarks/README.md has the measurements).
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
BATCH_AXIS = "batch"


def run_logits(prog: Program, pack: Pack, f: jax.Array) -> jax.Array:
    """Φ of every run of the pack from the slots' head outputs f (n, S): (n, R)."""
    return mdl.combine_heads(f, norm=prog.norm, weight=pack.weight, member=pack.member, n_heads=pack.n_heads)


def run_outputs(prog: Program, pack: Pack, params: mdl.Params, f: jax.Array) -> jax.Array:
    """Φ of every run of the pack, bias included, from the slots' head outputs f (n, S): (n, R)."""
    return mdl.add_bias(run_logits(prog, pack, f), params)


def loss_inputs(prog: Program, phi: jax.Array, y: jax.Array) -> jax.Array:
    """What the loss reads per example and run: the margin y·Φ (classification) or the residual
    Φ − y (regression). Φ (n, R), y (n,); vector targets: Φ (n, R, o), y (n, o), residuals (n, R, o)."""
    if y.ndim == 2:  # vector targets (regression only; refused for classification at the boundary)
        return phi - y[:, None, :]
    if parts.LOSSES[prog.loss].task == "regression":
        return phi - y[:, None]
    return y[:, None] * phi


def evaluate(
    prog: Program,
    params: mdl.Params,
    pack: Pack,
    data: Data,
    beta: float | jax.Array = 1.0,
    train: bool = True,
) -> dict[str, jax.Array]:
    """The logged metrics of every run of the pack at one step (``Program.losses_only``: the test
    loss alone, and the train loss), each (R,); ``beta`` the
    temperature of the last update (β₀ before the first). ``train`` False: all but the training
    set's (``train_metrics``), which the caller takes from the update's own forward pass. With the
    per-head metrics on, also the test set's attention weights under ``TEST_ATTENTION`` (not a
    metric: ``_with_view`` hands them to the per-head view of the same step and drops them)."""
    loss = prog.loss
    A_test = mdl.attention(params, data.X_test, prog.query, prog.attention, beta)  # (n, S, t) or (n, S, s, t)
    f_test = mdl.readout(params, data.X_test, A_test)
    z_test = loss_inputs(prog, run_outputs(prog, pack, params, f_test), data.y_test)

    out = {"test_loss": jax.vmap(mean_loss, (1, None))(z_test, loss)}
    if not prog.losses_only:
        out.update(
            run_norms(pack, params),
            diversity=mdl.head_diversity(params, pack.member),
            attn_relevant=_attention_on_relevant(prog, pack, A_test, data.mask_test, z_test),
        )
        if parts.LOSSES[loss].task == "regression":
            floor = getattr(data, "noise_floor", None)
            floor = jnp.nan if floor is None else floor
            out["excess_risk"] = out["test_loss"] - floor
        else:
            out["test_error"] = jax.vmap(error_rate, 1)(z_test)
    directions = getattr(data, "directions", None)  # the planted directions (P, d), or None
    if prog.user_metrics:  # one run per pack, its every head present (the fast path expanded)
        test = hooks.metric_data(data, directions, beta, prog.query, prog.attention, prog.norm)
        run = hooks.run_params(params, prog.fast_path, prog.metric_heads)
        out.update(hooks.user_metrics(prog.user_metrics, run, test, mdl.readout_vector(params).dtype))
    if prog.head_view and prog.head_metrics:
        out[TEST_ATTENTION] = A_test
    if train:
        f_train = mdl.head_outputs(params, data.X_train, prog.query, prog.attention, beta)
        z_train = loss_inputs(prog, run_outputs(prog, pack, params, f_train), data.y_train)  # (n, R)
        out.update(train_metrics(prog, z_train))
    return out


def run_norms(pack: Pack, params: mdl.Params) -> dict[str, jax.Array]:
    """‖U‖ (of U_h = V_hᵀ O_h for a factored readout) and the key-query norm of every run of the pack
    ((R,) each; a stored head of weight w counted w times), without a square's overflow where the
    parameters are finite (``held_norm``). Sequence outputs have no readout U (value identity, or a
    learned value V_h): ‖U‖ is NaN."""
    keys = mdl.key_part(params)  # (S, P)
    U = mdl.readout_vector(params) if ("U" in params or "O" in params) else None  # None: sequence outputs
    axes = tuple(range(1, U.ndim)) if U is not None else ()

    def run_top(per_slot):  # (S,) -> (R,): the largest |x| over each run's slots
        return jnp.max(jnp.where(pack.member, per_slot[:, None], 0.0), axis=0)

    def slot_scale(scale):  # (R,) -> (S,): each slot's run's scale, 1 for an empty slot
        return jnp.max(jnp.where(pack.member, scale[None, :], 1.0), axis=1)

    def per_run_sum(per_slot):  # (S,) -> (R,), a stored head of weight w counted w times
        return jnp.sum(per_run(pack, pack.weight * per_slot), axis=0)

    def u_total(scale):  # Σ (U / scale)² per run (scale None: as written)
        scaled = U if scale is None else U / slot_scale(scale).reshape((-1,) + (1,) * len(axes))
        return per_run_sum(jnp.sum(scaled**2, axis=axes))

    def key_total(scale):
        return per_run_sum(mdl.key_norm2(params, None if scale is None else slot_scale(scale)))

    return {
        "u_norm": upd.held_norm(u_total, run_top(jnp.max(jnp.abs(U), axis=axes)))
        if U is not None
        else jnp.full(pack.n_heads.shape, jnp.nan, keys.dtype),
        "w_norm": upd.held_norm(key_total, run_top(jnp.max(jnp.abs(keys), axis=1))),
    }


def train_metrics(prog: Program, z: jax.Array) -> dict[str, jax.Array]:
    """The training set's metrics from what the loss reads, z (n, R): the loss, and for
    classification (unless the program logs the losses only) the 0-1 error and the smallest
    margin; each (R,)."""
    out = {"train_loss": jax.vmap(mean_loss, (1, None))(z, prog.loss)}
    if parts.LOSSES[prog.loss].task != "regression" and not prog.losses_only:
        out["train_error"] = jax.vmap(error_rate, 1)(z)
        out["margin"] = jnp.min(z, axis=0)
    return out


def fused_logging(prog: Program) -> bool:
    """The training metrics at a logged step come from the next update's own forward pass (the same
    computation): full-batch training at a constant temperature. SGD logs the full training set (or
    online, the next batch), a temperature schedule logs at the last update's β: their own forward."""
    return not prog.batch_size and prog.temperature_decay == 0.0


# The key under which ``evaluate`` hands the test set's attention weights to the per-head view.
TEST_ATTENTION = "_test_attention"


def head_view(
    prog: Program, params: mdl.Params, data: Data, last_key: jax.Array, A_test: jax.Array | None
) -> tuple[dict[str, jax.Array], jax.Array]:
    """The per-head view at one logged step: (the per-head metrics per slot (S, …) and the snapshots
    of θ (per slot; the bias per run), the key directions (S, d)). ``last_key``: the key directions
    at the last step the view was logged, the power iteration's start (``heads.key_directions``).
    ``A_test``: the test set's attention weights at θ = ``params`` (the step's evaluation computed
    them, at the last update's β; None when the per-head metrics are off)."""
    out: dict[str, jax.Array] = {}
    keys = last_key
    if prog.head_metrics:  # per slot: (S, …), laid out per run and head by the sweep
        normalises = parts.ACTIVATIONS[prog.attention].normalises
        directions = getattr(data, "directions", None)  # the planted directions (P, d), or None
        features = getattr(data, "features_test", None)
        keys = heads.key_directions(params, last_key)
        metrics = heads.head_metrics(
            params, A_test, data.mask_test, directions, normalises, features, keys=keys, sims=prog.head_sims
        )
        out.update(metrics)
    if prog.save_params:  # snapshots: every head's arrays per slot, the bias per run
        out.update({snapshot_name(k): v for k, v in params.items()})
    return out, keys


def _attention_on_relevant(prog: Program, pack: Pack, A_test, mask_test, z_test) -> jax.Array:
    """Each run's mean attention on the test set's relevant tokens ((R,); NaN where unknown): the
    weights' mass there, or for an activation that does not normalise, the share Σ_rel |σ_t| / Σ_t |σ_t|."""
    if mask_test is None:
        return jnp.full(z_test.shape[1:2], jnp.nan, dtype=z_test.dtype)  # (R,)
    mask = mdl.keys_of(mask_test, A_test).astype(A_test.dtype)  # (n, t): of the keys A weighs
    if not parts.ACTIVATIONS[prog.attention].normalises:
        A_test = jnp.abs(A_test) / jnp.sum(jnp.abs(A_test), axis=-1, keepdims=True)
    mass = jnp.einsum("nh...t,nt->nh...", A_test, mask)  # attention on relevant tokens
    per_slot = jnp.mean(mass.reshape(mass.shape[0], mass.shape[1], -1), axis=(0, 2))  # (S,)
    count = jnp.sum(pack.member, axis=0)  # (R,) heads stored per run
    return jnp.sum(per_run(pack, per_slot), axis=0) / jnp.maximum(count, 1)


def per_slot_key(name: str) -> bool:
    """A logged array with one entry per head slot (S, …), not per run (R,): the per-head metrics and
    the heads' parameters (the bias is per run), as their metrics declare (``dynamics.parts.metrics``)."""
    return is_per_slot(name)


def train_pack(prog: Program, data: Data, b: Batch) -> tuple[dict[str, jax.Array], jax.Array]:
    """One pack of R runs: (metrics, each (R, L), and the step at which each run diverged, or
    steps + 1). The runs share the data and nothing else: run r's loss depends only on its
    slots, so the gradient of Σ_r L_r with respect to a slot is its own run's gradient."""
    body, carry, xs = pack_loop(prog, data, b)
    carry, metrics = jax.lax.scan(body, carry, jax.tree_util.tree_map(jnp.asarray, xs))
    return pack_outputs(prog, carry, metrics, jnp)


def pack_outputs(prog: Program, carry, metrics: dict, xp=jnp, lead: int = 0):
    """A pack's outputs from its loop's last carry and logged rows (L, …) (``lead`` leading batch
    axes, ``xp`` numpy or jax.numpy): (metrics, each (R, L), (S, L, …) per slot for the per-head
    metrics, (R, L, …) for a user metric; the step at which each run diverged (R,))."""
    if prog.head_view:  # the view's buffers (L_h + 1, …), their spare last row dropped
        carry, (bufs, _) = carry
        n_view = len(prog.head_log)
        metrics = {**metrics, **{k: v[(slice(None),) * lead + (slice(0, n_view),)] for k, v in bufs.items()}}
    div_at = carry[2][0]
    return {k: xp.moveaxis(v, lead, lead + 1) for k, v in metrics.items()}, div_at


def pack_loop(prog: Program, data: Data, b: Batch):
    """One pack's training loop as (body, first carry, xs): ``lax.scan(body, carry, xs)`` over the
    logged steps runs it (``train_pack``); ``xs`` (numpy, a leading axis of logged steps) is the
    same for every pack of the program, so the loop may also run a few logged steps at a time
    (``dynamics.core.resumable``)."""
    pack = make_pack(prog, b.slot_run, b.n_heads)
    params = init_slots(prog, b, outputs_of(data), data.X_train.shape[-2])
    params = world_start(prog, params, b, getattr(data, "world_init", None))
    loss = prog.loss
    direction, rules = upd.direction(prog.optimizer), prog.rules()
    batch_key = minibatch_key(b.data_key) if prog.batch_size else None
    slot_lr = jnp.sum(jnp.where(pack.member, b.lr[None, :], 0.0), axis=1)  # (S,): η of its run, 0 if empty
    lr = {k: (b.lr if k == "b" else slot_lr) for k in params}  # the bias: one per run, the run's η
    total = sum(prog.segments)

    reduce = parts.REDUCTIONS[prog.reduction].load()  # mean_loss, or the summed objective

    def objective(p, beta, X, y):
        f = mdl.head_outputs(by_position(prog, p), X, prog.query, prog.attention, beta)
        z = loss_inputs(prog, run_outputs(prog, pack, p, f), y)  # (n, R) or (n, R, o)
        per_run_loss = jax.vmap(reduce, (1, None))(z, loss)  # (R,): the mean (or sum) over examples
        finite = jnp.isfinite(per_run_loss) & jnp.all(jnp.isfinite(z), axis=_not_runs(z))  # (R,)
        return jnp.sum(jnp.where(pack.real, per_run_loss, 0.0)), finite

    watch = watches_zero_steps(prog)

    def apply(t, p, state, at, grads, finite):  # update t from its gradient; at: (div_at, zero_at)
        div_at, zero_at = at
        if prog.fast_path:  # ∇L̃ = H·g: the representative head gets the per-head gradient g
            grads = upd.per_head_gradient(grads, pack.weight)
        # η per head slot (per run for the bias b), the group rules of update t
        new, state = upd.update(p, grads, state, direction, lr, rules, t, pack.member)
        # A run diverges at the first step whose loss or margins (so its parameters) are not
        # finite (SGD: on its batch). Its heads are not frozen: they only touch their own run's
        # numbers, which are masked from that step on; the last update's parameters are checked
        # by the final evaluation (sweeps.execute.run_points).
        div_at = jnp.where((div_at > total) & ~finite, t, div_at)
        if watch:  # normalised GD: the first update that left a run where it was (a zero gradient)
            still = zero_step(prog, pack, p, new, t) & finite
            zero_at = jnp.where((zero_at > total) & still, t, zero_at)
        return new, state, (div_at, zero_at)

    def one_step(t, carry):
        p, state, at = carry
        X, y = minibatch(prog, data, batch_key, t)
        (_, finite), grads = jax.value_and_grad(objective, has_aux=True)(p, prog.beta(t), X, y)
        return apply(t, p, state, at, grads, finite)

    def segment(carry, n_steps):
        p, state, at, t = carry
        p, state, at = jax.lax.fori_loop(t, t + n_steps, one_step, (p, state, at))
        beta = prog.beta(jnp.maximum(t + n_steps - 1, 0))  # the last update's β (β₀ at step 0)
        logged = logged_train_set(prog, data, batch_key, t + n_steps)
        return (p, state, at, t + n_steps), evaluate(prog, by_position(prog, p), pack, logged, beta)

    # The first segment has 0 steps: step 0 is evaluated by the same (single) traced evaluate.
    never = jnp.full((prog.runs,), total + 1)
    carry = (params, direction.init(params), (never, never if watch else None), jnp.array(0))
    return _loop(prog, pack, data, apply, segment, carry)


def _loop(prog: Program, pack: Pack, data: Data, apply, segment, carry):
    """The training loop's scan (body, carry, xs) over the logged steps: with ``fused_logging``,
    logged step k then the updates to k + 1 (``apply`` makes one), else ``segment``: the updates
    to logged step k, then step k; normalised GD's zero steps watched; the per-head view at its
    own steps."""
    steps, before = loop_steps(prog), fused_logging(prog)
    body = _log_then_train(prog, pack, data, apply) if before else segment
    body = _watched(body) if watches_zero_steps(prog) else body
    if prog.head_view:
        return _with_view(prog, data, body, carry, steps, before)
    return body, carry, np.array(steps, dtype=jnp.array(steps).dtype)


def loop_steps(prog: Program) -> tuple[int, ...]:
    """The updates each iteration of the loop over the logged steps makes: with ``fused_logging``
    logged step k, then the steps to k + 1 (none after the last); else the steps to logged step k."""
    return (*prog.segments[1:], 0) if fused_logging(prog) else prog.segments


def _watched(body):
    """Normalised GD's scan body: each logged row also carries the first zero step so far (the
    carry's (div_at, zero_at) slot)."""

    def with_zero(carry, n_steps):
        carry, out = body(carry, n_steps)
        return carry, {**out, ZERO_STEP: carry[2][1].astype(out["train_loss"].dtype)}

    return with_zero


def _log_then_train(prog: Program, pack: Pack, data: Data, apply):
    """The scan body of ``fused_logging``: the metrics at the carry's step t, then the n updates to
    the next logged step (``apply(t, p, state, at, grads, finite)`` makes one), the training
    metrics from update t's own forward (after the last logged step, n = 0: from their own)."""

    def z_of(p):  # what the loss reads on the training set at θ = p (constant β)
        f = mdl.head_outputs(by_position(prog, p), data.X_train, prog.query, prog.attention, prog.beta(0))
        return loss_inputs(prog, run_outputs(prog, pack, p, f), data.y_train)  # (n, R)

    reduce = parts.REDUCTIONS[prog.reduction].load()

    def logged_objective(p):  # the objective (``train_pack``'s), with the metrics of its forward
        z = z_of(p)
        per_run_loss = jax.vmap(reduce, (1, None))(z, prog.loss)  # (R,)
        finite = jnp.isfinite(per_run_loss) & jnp.all(jnp.isfinite(z), axis=_not_runs(z))  # (R,)
        return jnp.sum(jnp.where(pack.real, per_run_loss, 0.0)), (finite, train_metrics(prog, z))

    def logged_step(t, carry):  # one update; the first of a segment (t = t0) keeps its metrics
        p, state, div_at, t0, kept = carry
        (_, (finite, train)), grads = jax.value_and_grad(logged_objective, has_aux=True)(p)
        kept = {k: jnp.where(t == t0, v, kept[k]) for k, v in train.items()}
        return (*apply(t, p, state, div_at, grads, finite), t0, kept)

    def train_metrics_of(p):
        return train_metrics(prog, z_of(p))

    def body(carry, n_steps):
        p, state, div_at, t = carry
        out = evaluate(prog, by_position(prog, p), pack, data, prog.beta(0), train=False)
        shapes = jax.eval_shape(train_metrics_of, p)
        kept = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
        p_next, state, div_at, _, kept = jax.lax.fori_loop(
            t, t + n_steps, logged_step, (p, state, div_at, t, kept)
        )
        train = jax.lax.cond(n_steps > 0, lambda k, q: k, lambda k, q: train_metrics_of(q), kept, p)
        return (p_next, state, div_at, t + n_steps), {**out, **train}

    return body


def _with_view(prog: Program, data: Data, segment, carry, steps: tuple[int, ...], before: bool):
    """The scan (body, carry, xs) of ``lax.scan(segment, carry, steps)`` with the per-head view
    logged at the logged steps ``prog.head_log``: computed under a ``lax.cond`` (the other logged
    steps skip it and give zeros) and written at the step's row of buffers (L_h + 1, …) carried
    along with the last key directions (the other steps write the spare last row, dropped);
    ``before``: iteration k logs step k before its segment's updates, else after them (the θ the
    segment's evaluation reads, whose test-set attention weights the view reuses). The scan's rows
    are the aggregate curves (L, …); its last carry holds the view's buffers (``pack_outputs`` takes
    their L_h rows)."""
    n_view = len(prog.head_log)
    at = np.full(len(prog.segments), n_view, np.int32)  # the spare row
    at[list(prog.head_log)] = np.arange(n_view)

    def view_at(p, last_key, A_test):  # A_test: the evaluation's, at the last update's β
        return head_view(prog, by_position(prog, p), data, last_key, A_test)

    params = carry[0]
    # the key directions' shape: (S, d), or (S, T) for position logits
    shape = jax.eval_shape(lambda p: heads.key_directions(by_position(prog, p)), params)
    key0 = jnp.zeros(shape.shape, shape.dtype)
    A0 = None
    if prog.head_metrics:  # the evaluation's test-set attention weights (n, S, …, t)
        A0 = jax.eval_shape(lambda p: _test_attention(prog, p, data), params)
    shapes, _ = jax.eval_shape(view_at, params, key0, A0)
    buffers = {k: jnp.zeros((n_view + 1, *v.shape), v.dtype) for k, v in shapes.items()}

    def log(at_step, view, i, A_test):  # the view at the carry ``at_step``, written at row i
        bufs, last_key = view
        skip = lambda p, k, a: (jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes), k)  # noqa: E731
        values, keys = jax.lax.cond(i < n_view, view_at, skip, at_step[0], last_key, A_test)
        return {k: jax.lax.dynamic_update_index_in_dim(bufs[k], values[k], i, 0) for k in bufs}, keys

    def step(full, xs):
        (inner, view), (n_steps, i) = full, xs
        logged = inner  # before: the carry the segment evaluates first, then updates
        inner, out = segment(inner, n_steps)
        out = dict(out)
        A_test = out.pop(TEST_ATTENTION, None)  # the evaluation's, at the view's θ
        view = log(logged if before else inner, view, i, A_test)
        return (inner, view), out

    xs = (np.array(steps, dtype=jnp.array(steps).dtype), at)
    return step, (carry, (buffers, key0)), xs


def _test_attention(prog: Program, params: mdl.Params, data: Data) -> jax.Array:
    """The test set's attention weights at θ (their shape for the per-head view's buffers)."""
    return mdl.attention(by_position(prog, params), data.X_test, prog.query, prog.attention, prog.beta(0))


# The first update t (0-based) at which a run of a normalising optimiser did not move (its gradient
# over the moving parameters exactly 0: a stationary point, or a float32 underflow), steps + 1 if
# none: an output of the engine that ``sweeps.execute`` takes out of the metrics and reports as a
# warning (``ZeroStepWarning``).
ZERO_STEP = "zero_step_at"


def watches_zero_steps(prog: Program) -> bool:
    """The program reports zero steps: its optimiser normalises the gradient (each step moves η)."""
    return parts.OPTIMIZERS[prog.optimizer].normalise_per_run


def zero_step(prog: Program, pack: Pack, old: mdl.Params, new: mdl.Params, t) -> jax.Array:
    """(R,) bool: run r's update t changed none of its parameters although a group was to move."""
    changed = jnp.zeros((prog.runs,), bool)
    for k, v in new.items():
        diff = v != old[k]
        if k in parts.PER_RUN_PARAMS:
            changed = changed | diff
        else:
            per_slot = jnp.any(diff.reshape(diff.shape[0], -1), axis=1)  # (S,)
            changed = changed | jnp.any(pack.member & per_slot[:, None], axis=0)
    rules = prog.rules()
    groups = [r for _, r in rules.groups if r.lr_factor != 0]
    moving = jnp.asarray(False)
    for r in groups:
        moving = moving | jnp.asarray(r.moving(t))
    return pack.real & moving & ~changed


def by_position(prog: Program, params: mdl.Params) -> mdl.Params:
    """θ as the model reads it: tied position logits a (S, G) spread to every position (S, T) by
    ``prog.tied_positions`` (the gradient of a shared logit sums its positions'); θ as is otherwise."""
    if not prog.tied_positions:
        return params
    return {**params, "a": params["a"][:, jnp.array(prog.tied_positions)]}


def outputs_of(data: Data) -> int:
    """o of one trial's targets: 1 for y (n,), o for vector targets y (n, o)."""
    return 1 if data.y_train.ndim == 1 else int(data.y_train.shape[-1])


def _not_runs(z: jax.Array) -> tuple[int, ...]:
    """The axes of z (n, R) or (n, R, o) other than the runs'."""
    return (0,) if z.ndim == 2 else (0, 2)


def _train_batch(prog: Program, data: Data, batch: Batch, shared_data: bool, mesh: Mesh, chunk: int):
    def local(data: Data, batch: Batch):  # one device's slice: chunks of ``chunk`` packs, vmapped
        def one(b: Batch):
            d = data if shared_data else jax.tree_util.tree_map(lambda a: a[b.trial], data)
            return train_pack(prog, d, b)

        return jax.lax.map(one, batch, batch_size=chunk)

    spec = PartitionSpec(BATCH_AXIS)
    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(PartitionSpec(), spec), out_specs=spec, check_vma=False
    )
    return sharded(data, batch)


_STATIC = ("prog", "shared_data", "mesh", "chunk")
_JIT = {
    "cpu": jax.jit(_train_batch, static_argnames=_STATIC, compiler_options=CPU_COMPILER_OPTIONS),
    "other": jax.jit(_train_batch, static_argnames=_STATIC),
}


def train_batch(
    prog: Program, data: Data, batch: Batch, *, mesh: Mesh, chunk: int, shared_data: bool = False
) -> tuple[dict[str, jax.Array], jax.Array]:
    """Run the B packs of ``batch``: (metrics, each (B, R, L), diverged_at (B, R)).

    The batch axis is split over the devices of ``mesh`` (B must be a multiple of
    devices × ``chunk``); each device runs its packs in chunks of ``chunk``, vmapped, one
    chunk after the other. A run's numbers depend on ``chunk`` and the program's shapes, not
    on the runs that share its pack or batch, nor on the number of devices once there are
    two or more (one device is compiled unpartitioned, through another XLA pass order:
    last-bit differences). ``data`` has a leading trial axis that ``batch.trial`` indexes,
    or none if ``shared_data``.
    """
    platform = mesh.devices.flat[0].platform
    kind = "cpu" if platform == "cpu" else "other"
    static = dict(prog=prog, shared_data=shared_data, mesh=mesh, chunk=chunk)
    arrays = {"data": data, "batch": batch}  # executables.call traces it with exact_matmuls
    return executables.call(_JIT[kind], f"engine.train_batch.{kind}", static, arrays)


def float_dtype() -> np.dtype:
    """The working float type: float32, or float64 when x64 is on (``--x64``)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))
