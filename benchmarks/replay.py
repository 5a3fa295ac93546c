"""Replay benchmark: jaxrl_par.replay against flashbax 0.1.3, side by side in one run.

Ops: add (batch 256, 4096), sample (256, 1024), update_priorities (256, 1024), at
capacity 2^17 and 2^20, for CartPole-sized and MinAtar-sized transitions. Every op is
jitted (state donated where the op returns it), compiled apart (`lower().compile()`),
then timed with `block_until_ready`; ours and flashbax's calls alternate within each
repeat and the figure is the median over repeats of the per-repeat median.

    taskset -c 0 python benchmarks/replay.py            # full run
    python benchmarks/replay.py --quick                 # smoke run (2^17, CartPole)
    taskset -c 0 python benchmarks/replay.py --capacities 1048576 --kinds cartpole
    taskset -c 0 python benchmarks/replay.py --in-scan --scan-length 64   # in-scan rows

--in-scan times the same ops the way the algorithms run them: L iterations inside one
jitted `lax.scan` (state carried and donated, per-iteration keys / indices / priorities as
scan inputs, every draw kept live), reported per iteration (call time / L). Per-call
times include a fixed dispatch cost that both libraries pay and that does not exist
inside a scan.

In the add rows both libraries know the add size: flashbax's buffers are made with their
(mandatory) `add_batch_size`, ours with the optional one, which makes its adds aligned
writes (`jaxrl_par.replay.storage.init`); --in-scan also times ours without it ("ours, any
size").

--copy-floor (with --in-scan) adds two rows' worth of context to each uniform add: the
same bytes copied into a ring as large by numpy (glibc's memcpy) and by XLA's
`dynamic_update_slice`, with no replay logic. flashbax's time over a floor is the largest
speedup over flashbax that an add costing one such copy could show on the host it runs on.
It adds the same to each uniform sample: drawing the slots and gathering the rows' bytes
from a full ring as large, with no replay logic (`gather_floor`).

Writes benchmarks/results/replay.json, or replay_in_scan.json with --in-scan (or --out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import replay
from jaxrl_par.runner.memory import tree_bytes


def transition(kind: str):
    if kind == "cartpole":
        obs = jnp.zeros(4, jnp.float32)
    elif kind == "minatar":
        obs = jnp.zeros((10, 10, 4), jnp.uint8)
    else:
        raise ValueError(kind)
    return {
        "obs": obs,
        "action": jnp.int32(0),
        "reward": jnp.float32(0),
        "done": jnp.bool_(False),
        "next_obs": obs,
    }


def batch_of(example, n, seed=0):
    rng = np.random.default_rng(seed)

    def leaf(x):
        shape = (n, *x.shape)
        if x.dtype == jnp.bool_:
            return jnp.asarray(rng.random(shape) < 0.5)
        if jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(rng.integers(0, 100, shape), x.dtype)
        return jnp.asarray(rng.normal(size=shape), x.dtype)

    return jax.tree.map(leaf, example)


def compile_(fn, *args, donate=()):
    t0 = time.perf_counter()
    compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
    return compiled, time.perf_counter() - t0


class Op:
    """A compiled op and how to call it repeatedly (threading the state if donated)."""

    def __init__(self, fn, state, args, donate, make_args=None):
        self.state, self.args, self.donate = state, args, donate
        self.make_args = make_args
        self.compiled, self.compile_s = compile_(fn, state, *args, donate=(0,) if donate else ())

    def time(self, calls: int) -> float:
        times = []
        for i in range(calls):
            args = self.make_args(i) if self.make_args else self.args
            t0 = time.perf_counter()
            out = self.compiled(self.state, *args)
            jax.block_until_ready(out)
            times.append(time.perf_counter() - t0)
            if self.donate:
                self.state = out
        return statistics.median(times)


def fill(add, state, example, capacity, chunk=4096):
    chunk = min(chunk, capacity)
    x = batch_of(example, chunk, seed=1)
    add = jax.jit(add, donate_argnums=0)
    for _ in range(capacity // chunk):
        state = add(state, x)
    return jax.block_until_ready(state)


def fbx_buffers(fbx, capacity, sample_batch_size, add_batch_size):
    """flashbax's prioritised flat buffer (alpha 0.6) and flat buffer, same sizes."""
    kw = {"max_length": capacity, "min_length": 1, "sample_batch_size": sample_batch_size,
          "add_batch_size": add_batch_size, "add_sequences": False}
    return (fbx.make_prioritised_flat_buffer(**kw, priority_exponent=0.6),
            fbx.make_flat_buffer(**kw))


def full_buffers(ours_p, ours_u, example, capacity, fbx):
    """Ours (prioritized, uniform) and flashbax's (prioritized, flat) states, all full
    (filled in chunks of min(4096, capacity), as `fill` does)."""
    chunk = min(4096, capacity)
    fb_fill, fbu_fill = fbx_buffers(fbx, capacity, 256, chunk)
    return (fill(ours_p.add, ours_p.init(example), example, capacity),
            fill(ours_u.add, ours_u.init(example), example, capacity),
            fill(fb_fill.add, fb_fill.init(example), example, capacity),
            fill(fbu_fill.add, fbu_fill.init(example), example, capacity))


PROGRESS = False  # --progress: say each build's seconds and each first timing as it happens


def interleaved_times(ops, repeats: int, calls: int) -> dict:
    """``{(name, who): [seconds per repeat]}`` for ``[(name, [(who, op), ...])]``: each
    repeat times every op of both libraries in turn (``op.time(calls)``)."""
    samples = {(name, who): [] for name, pair in ops for who, _ in pair}
    for r in range(repeats):
        for name, pair in ops:
            for who, op in pair:
                samples[(name, who)].append(op.time(calls))
                if PROGRESS and r == 0:
                    print(f"  timed {name} {who}: {samples[(name, who)][-1] * 1e6:.1f} us",
                          flush=True)
    return samples


def bench_case(kind, capacity, args, fbx):
    example = transition(kind)
    ours_p = replay.prioritized(capacity=capacity, alpha=0.6)
    ours_u = replay.uniform(capacity=capacity)
    rows, ops = [], []
    keys = [jax.random.key(i) for i in range(64)]

    def key_args(i):
        return (keys[i % 64],)

    # ---- add -------------------------------------------------------------------------
    for n in args.add_sizes:
        x = batch_of(example, n)
        pri = jnp.asarray(np.random.default_rng(2).uniform(0.1, 2, n), jnp.float32)
        fb_p, fb_u = fbx_buffers(fbx, capacity, 256, n)
        # Both libraries told the add size (flashbax's add_batch_size is mandatory).
        add_p = replay.prioritized(capacity=capacity, alpha=0.6, add_batch_size=n)
        add_u = replay.uniform(capacity=capacity, add_batch_size=n)
        ops.append((f"prioritized add {n}", [
            ("ours", Op(add_p.add, add_p.init(example), (x, pri), True)),
            ("flashbax", Op(fb_p.add, fb_p.init(example), (x,), True)),
        ]))
        ops.append((f"uniform add {n}", [
            ("ours", Op(add_u.add, add_u.init(example), (x,), True)),
            ("flashbax", Op(fb_u.add, fb_u.init(example), (x,), True)),
        ]))

    # ---- sample / update on full buffers ----------------------------------------------
    chunk = min(4096, capacity)  # flashbax's add_batch_size must match its fill
    full_p, full_u, fb_full_p, fbu_full = full_buffers(ours_p, ours_u, example, capacity, fbx)
    memory = {
        "raw_storage_bytes": full_p.storage.data_nbytes,
        "ours_prioritized_state_bytes": tree_bytes(full_p),
        "ours_uniform_state_bytes": tree_bytes(full_u),
        "flashbax_prioritized_state_bytes": tree_bytes(fb_full_p),
        "flashbax_flat_state_bytes": tree_bytes(fbu_full),
    }
    for name in list(memory)[1:]:
        extra = memory[name] - memory["raw_storage_bytes"]
        memory[name.replace("_bytes", "_overhead_float32_per_slot")] = extra / capacity / 4

    for n in args.sample_sizes:
        fb_p, fb_u = fbx_buffers(fbx, capacity, n, chunk)
        ops.append((f"prioritized sample {n}", [
            ("ours", Op(lambda s, k, n=n: ours_p.sample(s, k, n, 0.4), full_p, (keys[0],), False,
                        key_args)),
            ("flashbax", Op(fb_p.sample, fb_full_p, (keys[0],), False, key_args)),
        ]))
        ops.append((f"uniform sample {n}", [
            ("ours", Op(lambda s, k, n=n: ours_u.sample(s, k, n), full_u, (keys[0],), False,
                        key_args)),
            ("flashbax", Op(fb_u.sample, fbu_full, (keys[0],), False, key_args)),
        ]))
    for n in args.update_sizes:
        fb_p, _ = fbx_buffers(fbx, capacity, n, chunk)
        idx = ours_p.sample(full_p, keys[1], n).indices
        fb_idx = fb_p.sample(fb_full_p, keys[1]).indices
        pri = jnp.asarray(np.random.default_rng(3).uniform(0.1, 2, n), jnp.float32)
        # Own copies of the full states: update donates its state.
        ops.append((f"prioritized update {n}", [
            ("ours", Op(ours_p.update_priorities, jax.tree.map(jnp.copy, full_p), (idx, pri),
                        True)),
            ("flashbax", Op(fb_p.set_priorities, jax.tree.map(jnp.copy, fb_full_p), (fb_idx, pri),
                            True)),
        ]))

    # ---- timing: interleaved, median of repeats ----------------------------------------
    samples = interleaved_times(ops, args.repeats, args.calls)
    for name, pair in ops:
        ours_s = statistics.median(samples[(name, "ours")])
        fb_s = statistics.median(samples[(name, "flashbax")])
        compile_s = {who: op.compile_s for who, op in pair}
        rows.append({
            "transition": kind, "capacity": capacity, "op": name,
            "ours_us": ours_s * 1e6, "flashbax_us": fb_s * 1e6,
            "ours_ops_per_s": 1 / ours_s, "flashbax_ops_per_s": 1 / fb_s,
            "speedup": fb_s / ours_s,
            "ours_compile_s": compile_s["ours"], "flashbax_compile_s": compile_s["flashbax"],
        })
        print(f"{kind:8s} 2^{int(np.log2(capacity))} {name:24s} ours {ours_s*1e6:9.1f} us  "
              f"flashbax {fb_s*1e6:9.1f} us  x{fb_s/ours_s:6.2f}", flush=True)
    # sample + update together (a learner step's replay cost)
    for n in args.update_sizes:
        if n in args.sample_sizes:
            s = next(r for r in rows if r["op"] == f"prioritized sample {n}")
            u = next(r for r in rows if r["op"] == f"prioritized update {n}")
            o, f = s["ours_us"] + u["ours_us"], s["flashbax_us"] + u["flashbax_us"]
            rows.append({"transition": kind, "capacity": capacity,
                         "op": f"prioritized sample+update {n}", "ours_us": o, "flashbax_us": f,
                         "ours_ops_per_s": 1e6 / o, "flashbax_ops_per_s": 1e6 / f,
                         "speedup": f / o})
    del ops, full_p, full_u, fb_full_p, fbu_full
    return rows, memory


# ---- in-scan mode -----------------------------------------------------------------------
# How DQN / Ape-X use replay: many ops inside one jitted `lax.scan`, no per-call dispatch.




class ScanOp:
    """`L` iterations of `step` in one jitted `lax.scan`; the carry is donated and threaded.

    `step(carry, x, *consts) -> carry`. `consts` (full buffers for sample-only ops, the pool
    of batches for add) are read-only arguments, not part of the carry, so that nothing is
    copied per call. `xs` is per-iteration input (keys, indices, priorities, pool slots).
    """

    def __init__(self, step, carry, xs, consts=()):
        def run(carry, xs, *consts):
            def body(c, x):
                return step(c, x, *consts), None

            return jax.lax.scan(body, carry, xs)[0]

        self.carry, self.xs, self.consts = carry, xs, consts
        self.length = jax.tree.leaves(xs)[0].shape[0]
        self.compiled, self.compile_s = compile_(run, carry, xs, *consts, donate=(0,))
        if PROGRESS:
            print(f"  built {getattr(step, '__qualname__', step)} (L={self.length}) in "
                  f"{self.compile_s:.1f} s", flush=True)

    def time(self, calls: int) -> float:
        """Median over `calls` of (one call's wall time) / L."""
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            self.carry = self.compiled(self.carry, self.xs, *self.consts)
            jax.block_until_ready(self.carry)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) / self.length

    def hlo(self) -> str:
        return self.compiled.as_text()


class CopyFloor:
    """What writing an add's bytes costs without any replay logic: `L` adds of `n` rows of
    `row_bytes` each into a ring of `capacity` such rows, the ring position carried on
    from call to call, so that every add writes memory the last `capacity` rows have
    left cold (as the buffers' adds do).

    `how="memcpy"`: numpy slice assignment of a contiguous uint8 row block, i.e. glibc's
    memcpy. `how="xla"`: a jitted `lax.scan` of `dynamic_update_slice` of a prebuilt
    uint32 row block into a donated `[capacity, row_bytes / 4]` ring (XLA's own copy; no
    wrap, so `capacity` must be a multiple of `n`). Neither checks, packs or wraps: they
    bound from below what any add of these bytes can cost here.
    """

    def __init__(self, how, n, row_bytes, capacity, length, pool_size=4):
        if capacity % n:
            raise ValueError(f"CopyFloor needs capacity ({capacity}) divisible by n ({n})")
        self.how, self.n, self.capacity, self.length = how, n, capacity, length
        self.position, self.compile_s = 0, 0.0
        rng = np.random.default_rng(3)
        if how == "memcpy":
            self.ring = np.ones((capacity, row_bytes), np.uint8)  # every page touched
            self.pool = rng.integers(0, 100, (pool_size, n, row_bytes), dtype=np.uint8)
            return
        words = -(-row_bytes // 4)
        self.pool = jnp.asarray(rng.integers(0, 2**31, (pool_size, n, words)), jnp.uint32)
        ring = jnp.ones((capacity, words), jnp.uint32)

        def run(ring, start, pool):
            def body(carry, i):
                ring, pos = carry
                block = jax.lax.dynamic_index_in_dim(pool, i % pool_size, keepdims=False)
                ring = jax.lax.dynamic_update_slice(ring, block, (pos, jnp.int32(0)))
                return (ring, (pos + n) % capacity), None

            return jax.lax.scan(body, (ring, start), jnp.arange(length))[0]

        self.carry = (ring, jnp.int32(0))
        self.compiled, self.compile_s = compile_(run, *self.carry, self.pool, donate=(0,))

    def time(self, calls: int) -> float:
        """Median over `calls` of (one call's wall time) / L, as `ScanOp.time`."""
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            if self.how == "memcpy":
                for i in range(self.length):
                    p = self.position
                    self.ring[p:p + self.n] = self.pool[i % len(self.pool)]
                    self.position = (p + self.n) % self.capacity
            else:
                self.carry = self.compiled(*self.carry, self.pool)
                jax.block_until_ready(self.carry)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) / self.length


def gather_floor(n, row_bytes, capacity, keys) -> ScanOp:
    """What drawing `n` rows costs without any replay logic: per iteration, `n` uniform
    slots from the iteration's key and a gather of those rows from a full `[capacity,
    row_bytes / 4]` uint32 ring (the transition's bytes, as words), the draw kept live in
    the carry as the samplers keep theirs. It bounds from below what any uniform sample
    of these bytes can cost here."""
    words = -(-row_bytes // 4)
    ring = jnp.asarray(np.random.default_rng(5).integers(0, 2**31, (capacity, words)),
                       jnp.uint32)

    def step(carry, key, ring):
        _last, acc = carry
        rows = ring[jax.random.randint(key, (n,), 0, capacity)]
        return rows, acc + rows[0, 0].astype(jnp.float32)

    return ScanOp(step, (jnp.zeros((n, words), jnp.uint32), jnp.float32(0)), keys, (ring,))


def _zeros_like_output(fn, *args):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))


def bench_scan_case(kind, capacity, args, fbx):
    """In-scan rows for one (transition, capacity): same ops and sizes as `bench_case`.

    Per iteration: add writes a batch from a pool of 4 distinct batches (slot i % 4);
    sample draws with the iteration's key and keeps the whole draw live (the carry holds the
    last draw's transitions, indices and weights, plus a running sum of the weights);
    update writes the iteration's random indices and priorities; sample+update writes
    new priorities at the indices just drawn. Ours and flashbax run the same scan.
    """
    pool_size, length = 4, args.scan_length
    example = transition(kind)
    ours_p = replay.prioritized(capacity=capacity, alpha=0.6)
    ours_u = replay.uniform(capacity=capacity)
    # flashbax is made with its (mandatory) add_batch_size = n; ours gets the same in the
    # add rows, so that its adds are aligned writes (replay.storage.init), and is also
    # timed without it ("ours, any size").
    aligned = {n: (replay.prioritized(capacity=capacity, alpha=0.6, add_batch_size=n),
                   replay.uniform(capacity=capacity, add_batch_size=n))
               for n in args.add_sizes}
    rng = np.random.default_rng(7)
    keys = jax.random.split(jax.random.key(11), length)
    ops = []

    def priorities(n):
        return jnp.asarray(rng.uniform(0.1, 2, (length, n)), jnp.float32)

    # ---- add -------------------------------------------------------------------------
    for n in args.add_sizes:
        batches = [batch_of(example, n, seed) for seed in range(pool_size)]
        pool = jax.tree.map(lambda *x: jnp.stack(x), *batches)
        slots = jnp.arange(length, dtype=jnp.int32) % pool_size
        pri = priorities(n)
        fb_p, fb_u = fbx_buffers(fbx, capacity, 256, n)

        def pick(pool, slot):
            return jax.tree.map(
                lambda p: jax.lax.dynamic_index_in_dim(p, slot, keepdims=False), pool
            )

        def ours_p_add(state, x, pool, buf=aligned[n][0]):
            return buf.add(state, pick(pool, x[0]), x[1])

        def ours_u_add(state, slot, pool, buf=aligned[n][1]):
            return buf.add(state, pick(pool, slot))

        def any_p_add(state, x, pool):
            return ours_p.add(state, pick(pool, x[0]), x[1])

        def any_u_add(state, slot, pool):
            return ours_u.add(state, pick(pool, slot))

        def fb_p_add(state, x, pool, fb=fb_p):
            return fb.add(state, pick(pool, x[0]))

        def fb_u_add(state, slot, pool, fb=fb_u):
            return fb.add(state, pick(pool, slot))

        any_size = not args.skip_any_size
        ops.append((f"prioritized add {n}", [
            ("ours", ScanOp(ours_p_add, aligned[n][0].init(example), (slots, pri), (pool,))),
            ("flashbax", ScanOp(fb_p_add, fb_p.init(example), (slots, pri), (pool,))),
        ] + [("ours, any size", ScanOp(any_p_add, ours_p.init(example), (slots, pri), (pool,)))
             ] * any_size))
        uniform_add = [
            ("ours", ScanOp(ours_u_add, aligned[n][1].init(example), slots, (pool,))),
            ("flashbax", ScanOp(fb_u_add, fb_u.init(example), slots, (pool,))),
        ] + [("ours, any size", ScanOp(any_u_add, ours_u.init(example), slots, (pool,)))
             ] * any_size
        if args.copy_floor:
            row_bytes = tree_bytes(example)
            uniform_add += [(f"{how} floor", CopyFloor(how, n, row_bytes, capacity, length))
                            for how in ("xla", "memcpy")]
        ops.append((f"uniform add {n}", uniform_add))

    # Timed (interleaved) and freed before the full buffers exist: halves peak memory.
    rows = time_scan_ops(ops, kind, capacity, args)
    ops = []
    if args.add_only:
        return rows

    # ---- sample / update on full buffers ----------------------------------------------
    chunk = min(4096, capacity)  # flashbax's add_batch_size must match its fill
    full_p, full_u, fb_full_p, fbu_full = full_buffers(ours_p, ours_u, example, capacity, fbx)

    # What a draw leaves live. flashbax's flat buffer returns (first, second) of a 2-step
    # window; we keep only `first` (it holds next_obs already), so XLA may skip the second
    # gather: the cheaper reading for flashbax. flashbax returns probabilities, not IS
    # weights; we sum those instead (ours also computes the weights).
    def ours_live(s):
        return s.transitions, s.indices, s.weights

    def fb_live(s):
        return s.experience.first, s.indices, s.probabilities

    def fbu_live(s):
        return s.experience.first, jnp.ones((), jnp.float32)

    def sampler(sample, live, batch_state):
        """A step that draws, keeps the draw in the carry (last, acc); state is a const."""
        def step(carry, key, state):
            _last, acc = carry
            out = live(sample(state, key))
            return out, acc + jnp.sum(out[-1])

        init = (_zeros_like_output(lambda s, k: live(sample(s, k)), batch_state, keys[0]),
                jnp.float32(0))
        return step, init

    for n in args.sample_sizes:
        fb_p, fb_u = fbx_buffers(fbx, capacity, n, chunk)
        pairs = [
            ("prioritized", lambda s, k, n=n: ours_p.sample(s, k, n, 0.4), ours_live, full_p,
             fb_p.sample, fb_live, fb_full_p),
            ("uniform", lambda s, k, n=n: ours_u.sample(s, k, n), ours_live, full_u,
             fb_u.sample, fbu_live, fbu_full),
        ]
        for name, o_sample, o_live, o_state, f_sample, f_live, f_state in pairs:
            o_step, o_init = sampler(o_sample, o_live, o_state)
            f_step, f_init = sampler(f_sample, f_live, f_state)
            ops.append((f"{name} sample {n}", [
                ("ours", ScanOp(o_step, o_init, keys, (o_state,))),
                ("flashbax", ScanOp(f_step, f_init, keys, (f_state,))),
            ] + [("xla floor", gather_floor(n, tree_bytes(example), capacity, keys))]
                * (args.copy_floor and name == "uniform")))

    for n in args.update_sizes:
        fb_p, _ = fbx_buffers(fbx, capacity, n, chunk)
        # The same random slots for both (flashbax's item index = slot for a flat buffer
        # with period 1), priorities in [0.1, 2).
        idx = jnp.asarray(rng.integers(0, capacity, (length, n)), jnp.int32)
        pri = priorities(n)

        def ours_update(state, x):
            return ours_p.update_priorities(state, *x)

        def fb_update(state, x, fb=fb_p):
            return fb.set_priorities(state, *x)

        # Own copies of the full states: the scan donates its carry.
        ops.append((f"prioritized update {n}", [
            ("ours", ScanOp(ours_update, jax.tree.map(jnp.copy, full_p), (idx, pri))),
            ("flashbax", ScanOp(fb_update, jax.tree.map(jnp.copy, fb_full_p), (idx, pri))),
        ]))
        if n in args.sample_sizes:
            def sample_update(sample, update, live, state, n=n):
                """Draw with the key, write new priorities at the drawn indices."""
                def step(carry, x):
                    state, _last, acc = carry
                    s = sample(state, x[0])
                    out = live(s)
                    return update(state, s.indices, x[1]), out, acc + jnp.sum(out[-1])

                init = (state, _zeros_like_output(lambda s, k: live(sample(s, k)), state,
                                                  keys[0]), jnp.float32(0))
                return step, init

            # Also without the weights / probabilities: their read of the tree, left
            # unordered against the in-place priority update, makes XLA copy the whole
            # tree every iteration (ours orders it; flashbax 0.1.3 does not).
            for suffix, o_live, f_live in [
                ("", ours_live, fb_live),
                (" (no weights)", lambda s: ours_live(s)[:2], lambda s: fb_live(s)[:2]),
            ]:
                o_step, o_init = sample_update(lambda s, k, n=n: ours_p.sample(s, k, n, 0.4),
                                               ours_p.update_priorities, o_live,
                                               jax.tree.map(jnp.copy, full_p))
                f_step, f_init = sample_update(fb_p.sample, fb_p.set_priorities, f_live,
                                               jax.tree.map(jnp.copy, fb_full_p))
                ops.append((f"prioritized sample+update {n}{suffix}", [
                    ("ours", ScanOp(o_step, o_init, (keys, pri))),
                    ("flashbax", ScanOp(f_step, f_init, (keys, pri))),
                ]))

    rows += time_scan_ops(ops, kind, capacity, args)
    del ops, full_p, full_u, fb_full_p, fbu_full
    return rows


def _slug(who: str) -> str:
    """``"ours, any size"`` -> ``"ours_any_size"``: a timed side's name in JSON keys and
    file names."""
    return who.replace(",", "").replace(" ", "_")


def time_scan_ops(ops, kind, capacity, args):
    """Times [(name, [("ours", ScanOp), ("flashbax", ScanOp)])]: repeats interleave every
    op and both libraries; per row, the median over repeats of each repeat's median."""
    if args.dump_hlo:
        d = pathlib.Path(args.dump_hlo)
        d.mkdir(parents=True, exist_ok=True)
        for name, pair in ops:
            for who, op in pair:
                if not isinstance(op, ScanOp):  # a copy floor: no replay program
                    continue
                tag = f"{kind}_{capacity}_{name.replace(' ', '_').replace('+', '_')}_{_slug(who)}"
                (d / f"{tag}.hlo.txt").write_text(op.hlo())
    samples = interleaved_times(ops, args.repeats, args.calls)
    rows = []
    for name, pair in ops:
        ours_s = statistics.median(samples[(name, "ours")])
        fb_s = statistics.median(samples[(name, "flashbax")])
        extras = {who: statistics.median(samples[(name, who)]) for who, _ in pair[2:]}
        rows.append({
            "mode": "in-scan", "scan_length": args.scan_length,
            "transition": kind, "capacity": capacity, "op": name,
            "ours_us": ours_s * 1e6, "flashbax_us": fb_s * 1e6, "speedup": fb_s / ours_s,
            "ours_us_repeats": [t * 1e6 for t in samples[(name, "ours")]],
            "flashbax_us_repeats": [t * 1e6 for t in samples[(name, "flashbax")]],
            "ours_compile_s": pair[0][1].compile_s, "flashbax_compile_s": pair[1][1].compile_s,
        })
        for who, extra_s in extras.items():
            # ours without add_batch_size; or a copy floor, where flashbax / floor is the
            # largest speedup over flashbax an add could show that cost no more than a
            # plain copy of its bytes.
            slug = _slug(who)
            rows[-1].update({f"{slug}_us": extra_s * 1e6,
                             f"{slug}_us_repeats": [t * 1e6 for t in samples[(name, who)]],
                             f"flashbax_over_{slug}": fb_s / extra_s})
        print(f"{kind:8s} 2^{int(np.log2(capacity))} L={args.scan_length} {name:30s} ours "
              f"{ours_s*1e6:9.1f} us  flashbax {fb_s*1e6:9.1f} us  x{fb_s/ours_s:6.2f}"
              + "".join(f"  {who} {t*1e6:7.1f} us (x{fb_s/t:.2f})"
                        for who, t in extras.items()), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2^17, CartPole, few repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--capacities", type=int, nargs="+", default=[2**17, 2**20])
    parser.add_argument("--kinds", nargs="+", default=["cartpole", "minatar"])
    parser.add_argument("--out", default=None,
                        help="default benchmarks/results/replay.json (replay_in_scan.json "
                             "with --in-scan)")
    parser.add_argument("--in-scan", action="store_true",
                        help="time each op as L iterations inside one jitted lax.scan")
    parser.add_argument("--scan-length", type=int, default=64, help="L for --in-scan")
    parser.add_argument("--add-only", action="store_true",
                        help="with --in-scan: the add rows alone (no full buffers built)")
    parser.add_argument("--skip-any-size", action="store_true",
                        help="with --in-scan: leave out the add rows of ours without "
                             "add_batch_size (fewer programs to compile)")
    parser.add_argument("--copy-floor", action="store_true",
                        help="with --in-scan: also time a plain copy of each uniform add's "
                             "bytes into a ring as large (numpy's memcpy, and XLA's "
                             "dynamic_update_slice): how fast any add could be here")
    parser.add_argument("--dump-hlo", default=None,
                        help="with --in-scan: write each compiled program's HLO here")
    parser.add_argument("--progress", action="store_true",
                        help="with --in-scan: print each build and first timing as it happens")
    args = parser.parse_args()
    global PROGRESS
    PROGRESS = args.progress
    if args.out is None:
        args.out = f"benchmarks/results/replay{'_in_scan' if args.in_scan else ''}.json"
    import flashbax as fbx  # bench extra; imported here so the module imports without it

    args.add_sizes, args.sample_sizes, args.update_sizes = [256, 4096], [256, 1024], [256, 1024]
    cases = [(k, c) for c in args.capacities for k in args.kinds]
    if args.quick:
        cases, args.repeats, args.calls = [("cartpole", 2**17)], 2, 5
    results = {"rows": [], "memory": []}
    for kind, capacity in cases:
        if args.in_scan:
            results["rows"] += bench_scan_case(kind, capacity, args, fbx)
            continue
        rows, memory = bench_case(kind, capacity, args, fbx)
        results["rows"] += rows
        results["memory"].append({"transition": kind, "capacity": capacity, **memory})
        print(json.dumps(results["memory"][-1]), flush=True)
    import importlib.metadata as md

    results["meta"] = {
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__, "flashbax": md.version("flashbax"),
        "platform": platform.platform(), "devices": [str(d) for d in jax.devices()],
        "repeats": args.repeats, "calls_per_repeat": args.calls, "quick": args.quick,
        "mode": "in-scan" if args.in_scan else "per-call",
    }
    if args.in_scan:
        results["meta"]["scan_length"] = args.scan_length
        del results["memory"]
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
