"""Cheaper CPU compiles of ``jax.random``: the Threefry hash lowered unrolled, same bits.

Every ``jax.random`` call (split, uniform, normal, categorical, permutation...) hashes
counters with Threefry-2x32. jax lowers that hash, on CPU only, as a rolled 5-step
``fori_loop``: each call site becomes an XLA while loop with its own condition and body
computations, which XLA:CPU compiles (and, at run time, launches) one by one. On GPU and
TPU jax emits the same 20 rounds unrolled, as straight-line code that XLA fuses into the
consumer. An RL update calls the PRNG at many sites (acting, minibatch permutations,
environment resets, replay draws). On jaxlib 0.10.2 the unrolled rule compiled a PPO
CartPole training chunk in 6.0-6.2 s instead of 7.9-10.0 s and DQN's in 4.2 s instead
of 6.2 s, with step times unchanged within noise (``benchmarks/compile_rng.py``, table
in BENCHMARKS.md).

:func:`unrolled_threefry` is a context manager that lowers the hash unrolled on CPU while
it is active, with jax's own unrolled rule (the one jax uses on other platforms), so the
bits do not change (tested), and with an optimization barrier on each hash's output. It
is scoped, not a global switch: ``jaxrl_par.runner.training`` and the benchmarks' builds of our
programs compile inside it, and nothing else in the process is touched (a peer
benchmarked side by side compiles jax's default). If a future jax moves the private names
it relies on, it does nothing.

The barrier keeps XLA from fusing one hash into the next. Without it, jax 0.11.2's XLA
did not finish compiling three chained hashes (``split(split(split(key)[1])[0])[1]``) in a
minute, nor PPO's init in five minutes (so until 2026-12-02 this was off on jax 0.11).
With it, the CLI's PPO CartPole run compiled in 7.2 s instead of 9.3-10.2 s rolled on jax
0.11.2, and on jax 0.10.2 in the same time as without the barrier (6.3 / 7.5 s, rolled
8.9 / 10.4 s, alternating, one core); PPO updates ran as fast or faster (4 envs 2.76 ms
against 3.11 ms unrolled without the barrier and 3.31 ms rolled; 1024 envs within 4%).

Not free at every size on jax 0.10: unrolled, the hash is an elementwise expression that
XLA fuses into its consumers, and where a consumer is a concatenation (the ``stack`` of a
vmapped ``jax.random.split``) each output element recomputes it. gymnax's own vmapped
``step`` with random actions (``benchmarks/ppo.py``'s ceiling) ran ~4x slower this way
at 1024 envs (339 against 78 us per step rolled; one fusion took ~0.35 ms per step) and
~2x faster at 4 envs. The barrier does not stop this on jax 0.10 (its compiled program
still has both hashes in the one concatenation fusion); on jax 0.11.2, with the barrier,
the same ceiling ran 2x faster than rolled (39 against 75 us per step). Whole PPO
updates at 1024 envs timed within 4% of rolled on both versions (2026-12-02).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_saved = None


def _lowering_registry():
    """(cpu rules dict, primitive, the unrolled rule with a barrier), or None if jax
    moved what it needs."""
    try:
        from jax._src.interpreters import mlir as mlir_internal
        from jax._src.lib.mlir.dialects import hlo
        from jax._src.random import threefry2x32 as threefry
        from jax.extend.random import threefry2x32_p

        unrolled = threefry._threefry2x32_lowering_rule
        cpu_rules = mlir_internal._platform_specific_lowerings["cpu"]
    except (ImportError, AttributeError, KeyError):
        return None

    def unrolled_behind_barrier(ctx, *args):
        # The two output words of each hash pass an optimization barrier (why: the
        # module docstring; the chained case is tested in tests/test_rng.py).
        outs = unrolled(ctx, *args)
        nested = isinstance(outs[0], (list, tuple))
        flat = [v for out in outs for v in (out if nested else [out])]
        results = hlo.OptimizationBarrierOp(flat).results
        return [[r] for r in results] if nested else list(results)

    return cpu_rules, threefry2x32_p, unrolled_behind_barrier


@contextlib.contextmanager
def unrolled_threefry() -> Iterator[bool]:
    """Lowers ``jax.random``'s Threefry hash unrolled on CPU inside the block.

    Programs lowered (``jit(...).lower``, or a first call) inside the block compile
    faster on CPU and compute the same bits; programs lowered outside are unaffected.
    Re-entrant and thread-safe (the rule is swapped in on the first entry and restored
    on the last exit). Yields True if the unrolled rule is active, False where this jax
    does not expose what it needs (then nothing changes).
    """
    global _depth, _saved
    from jax.interpreters import mlir

    registry = _lowering_registry()
    if registry is None:
        yield False
        return
    cpu_rules, prim, unrolled_rule = registry
    with _lock:
        if _depth == 0:
            _saved = cpu_rules.get(prim)
            mlir.register_lowering(prim, unrolled_rule, platform="cpu")
        _depth += 1
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _saved is None:
                    cpu_rules.pop(prim, None)
                else:
                    cpu_rules[prim] = _saved
                _saved = None


def _permutation_tie_bound(n: int) -> float:
    """Upper bound on the chance that two of ``n`` packed keys tie (see `permutation`)."""
    index_bits = max(n - 1, 1).bit_length()
    return n * (n - 1) / 2 / 2.0 ** (32 - index_bits)


def permutation(key, n: int):
    """A uniformly random permutation of ``arange(n)``, int32 ``[n]``, from one sort.

    ``jax.random.permutation`` sorts random keys together with the indices, a sort of
    two operands with a comparator, which XLA:CPU runs slowly (a vmapped ``[1024, 128]``
    of them took 16 ms on one core). Here each index sits in the low
    ``ceil(log2 n)`` bits of its random 32-bit key, so one sort of plain ``uint32``
    values (3 ms for the same shape) orders the indices by their random high bits.

    Two indices whose random high bits are equal keep their index order instead of a
    coin flip. That happens with probability below ``n^2 / 2^(33 - ceil(log2 n))`` per
    permutation (2.4e-4 for n = 128, and then for one pair); above 1e-3 (n > 183) this
    falls back to ``jax.random.permutation``.

    Args:
        key: a PRNG key.
        n: static length.
    """
    import jax
    import jax.numpy as jnp

    if _permutation_tie_bound(n) > 1e-3:
        return jax.random.permutation(key, n).astype(jnp.int32)
    index_bits = max(n - 1, 1).bit_length()
    bits = jax.random.bits(key, (n,), jnp.uint32)
    packed = (bits >> index_bits << index_bits) | jnp.arange(n, dtype=jnp.uint32)
    return (jax.lax.sort(packed) & (2**index_bits - 1)).astype(jnp.int32)


def mul_hi(a, b):
    """The high 32 bits of the 64-bit product of two uint32 arrays: ``(a * b) >> 32``.

    Exact, in uint32 arithmetic only (jax runs without 64-bit integers by default): the
    product is assembled from 16-bit halves, about fifteen elementwise ops that XLA fuses.
    """
    import jax.numpy as jnp

    a, b = jnp.asarray(a, jnp.uint32), jnp.asarray(b, jnp.uint32)
    low16 = jnp.uint32(0xFFFF)
    ah, al = a >> 16, a & low16
    bh, bl = b >> 16, b & low16
    hl, lh = ah * bl, al * bh  # each < 2^32
    carry = ((hl & low16) + (lh & low16) + ((al * bl) >> 16)) >> 16  # < 3
    return ah * bh + (hl >> 16) + (lh >> 16) + carry


def integers_below(key, shape, bound):
    """Random int32 in ``[0, bound)``, ``shape``; ``bound`` int32 ``[]`` (traced is fine).

    ``floor(bits * bound / 2^32)`` of one 32-bit draw (Lemire's multiply-shift, without
    the rejection step): each value gets ``floor`` or ``ceil`` of ``2^32 / bound`` of the
    draws, so the relative difference between the likeliest and the least likely value
    is below ``bound / 2^32`` (2.4e-4 at a million slots). ``jax.random.randint`` is exact
    but draws twice and takes three integer remainders per value: 24-32 us for 1024
    values on this CPU against ~3 us here. ``floor(uniform * bound)`` would be as cheap,
    but jax's float32 uniforms carry 23 random bits (2^23 values), so at a million slots
    some slots would be drawn 9/8 as often as others. ``bound <= 0`` gives 0.
    """
    import jax
    import jax.numpy as jnp

    bound = jnp.maximum(jnp.asarray(bound, jnp.int32), 0).astype(jnp.uint32)
    bits = jax.random.bits(key, tuple(shape), jnp.uint32)
    return mul_hi(bits, bound).astype(jnp.int32)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32_rolled(k1, k2, x1, x2):
    """Threefry-2x32 (20 rounds) of the uint32 counter pairs ``(x1, x2)`` under the key
    words ``(k1, k2)``: the same bits as jax's hash, computed in one XLA while loop whose
    outputs are materialised (see `split_each`).

    The hash is five steps of four rounds and a key injection, with rotations that
    alternate between two sets. Step 0 runs before the loop (XLA fuses it into the
    loop's input) and the loop does steps 1-2 and 3-4, so every rotation is a constant.
    jax's own rolled form (5 iterations) reads them from a table at run time; this one
    hashed 1.1-1.3x faster at 4096 keys and 1.5-1.7x at 4 (BENCHMARKS.md, 2026-12-04),
    and its fusions compile faster. Steps after the loop instead would be fused into every
    consumer of the output and computed again in each.
    """
    import jax
    import jax.numpy as jnp

    u32 = jnp.uint32
    ks = jnp.stack(jnp.broadcast_arrays(k1, k2, k1 ^ k2 ^ u32(0x1BD11BDA)))  # key schedule

    def rounds(a, b, rotations):
        for r in rotations:
            a = a + b
            b = ((b << u32(r)) | (b >> u32(32 - r))) ^ a
        return a, b

    def inject(i, a, b):  # the key injection after step i (an int or a traced index)
        return a + ks[(i + 1) % 3], b + ks[(i + 2) % 3] + jnp.asarray(i).astype(u32) + u32(1)

    def steps_pair(p, xs):  # steps 2p + 1 (second rotation set) and 2p + 2 (first)
        i = 2 * p + 1
        a, b = inject(i, *rounds(*xs, _ROTATIONS[1]))
        return inject(i + 1, *rounds(a, b, _ROTATIONS[0]))

    step0 = inject(0, *rounds(x1 + ks[0], x2 + ks[1], _ROTATIONS[0]))
    return jax.lax.fori_loop(0, 2, steps_pair, step0)


def split_each(keys, num: int = 2, index: int | None = None):
    """Each key split in ``num``: ``jax.random.split(keys[i], num)`` for every ``i``, the
    same keys, ``[...]`` -> ``[..., num]`` (typed keys; raw ``uint32 [..., 2]`` key data
    gives ``[..., num, 2]``).

    For Threefry keys on CPU the hashes run as one rolled loop over all the keys at once
    (`_threefry2x32_rolled`), so their outputs are materialised before they are stacked
    into keys. A vmapped ``jax.random.split`` under `unrolled_threefry` is instead one
    fusion that stacks the two words of each key and recomputes the whole hash for each
    word: in a 4096-env CartPole step that fusion took ~126 us (profiled, BENCHMARKS.md,
    2026-12-04), the rolled loop ~69 us. Other platforms and PRNG implementations use
    jax's split.

    With ``index``, only key ``index`` of each split, ``[...]`` (``[..., 2]`` raw): its
    hash alone is computed.
    """
    import jax
    import jax.numpy as jnp

    if not jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(split_each(jax.random.wrap_key_data(keys), num, index))
    if index is not None and not 0 <= index < num:
        raise ValueError(f"split_each: index {index} is not in [0, {num})")

    def plain(keys):
        if index is None:
            return jnp.vectorize(lambda k: jax.random.split(k, num), signature="()->(n)")(keys)
        return jnp.vectorize(lambda k: jax.random.split(k, num)[index])(keys)

    # The rolled form hashes the counters (0, j), as jax's split does in its default
    # "partitionable" mode; in the other mode split hashes other counters.
    if (str(jax.random.key_impl(keys)) != "threefry2x32"
            or not jax.config.jax_threefry_partitionable):
        return plain(keys)

    def rolled(keys):
        data = jax.random.key_data(keys)  # [..., 2]
        k1, k2 = data[..., 0:1], data[..., 1:2]  # [..., 1]: the hash's key words
        if index is None:
            x1 = jnp.zeros(data.shape[:-1] + (num,), jnp.uint32)  # counters (0, j)
            x2 = jnp.broadcast_to(jnp.arange(num, dtype=jnp.uint32), x1.shape)
            words = _threefry2x32_rolled(k1, k2, x1, x2)
            return jax.random.wrap_key_data(jnp.stack(words, axis=-1), impl="threefry2x32")
        x1 = jnp.zeros_like(k1)  # counter (0, index)
        words = _threefry2x32_rolled(k1, k2, x1, x1 + jnp.uint32(index))
        return jax.random.wrap_key_data(jnp.concatenate(words, axis=-1), impl="threefry2x32")

    return jax.lax.platform_dependent(keys, cpu=rolled, default=plain)


def _partitionable_counts(shape):
    """``(hi, lo)`` uint32 words of the row-major index of every element of ``shape``
    (jax's ``iota_2x32_shape``, for fewer than 2^32 elements: ``hi`` is zero)."""
    import math

    import jax.numpy as jnp

    lo = jnp.arange(math.prod(shape), dtype=jnp.uint32).reshape(shape)
    return jnp.zeros_like(lo), lo


def _make_rolled_impl():
    """The PRNG implementation behind :func:`rolled_keys` (registered once, at import)."""
    import math

    import jax
    import jax.numpy as jnp
    from jax.extend import random as jex_random

    fry = jex_random.threefry_prng_impl
    uint = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}

    def rolled_ok(shape) -> bool:
        # The rolled forms below follow jax's "partitionable" Threefry (the default since
        # jax 0.5); under the other setting, or past 2^32 counters, jax's own functions run.
        return bool(jax.config.jax_threefry_partitionable) and math.prod(shape) < 2**32

    def words(key, shape):
        hi, lo = _partitionable_counts(shape)
        return _threefry2x32_rolled(key[0], key[1], hi, lo)

    def random_bits(key, bit_width, shape):
        if not rolled_ok(shape) or (bit_width == 64 and not jax.config.jax_enable_x64):
            return fry.random_bits(key, bit_width, shape)

        def rolled(key):
            bits1, bits2 = words(key, shape)
            if bit_width == 64:
                return (bits1.astype(jnp.uint64) << jnp.uint64(32)) | bits2.astype(jnp.uint64)
            return (bits1 ^ bits2).astype(uint[bit_width])

        return jax.lax.platform_dependent(
            key, cpu=rolled, default=lambda k: fry.random_bits(k, bit_width, shape))

    def split(key, shape):
        if not rolled_ok(shape):
            return fry.split(key, shape)

        def rolled(key):
            bits1, bits2 = words(key, shape)
            return jnp.stack([bits1, bits2], axis=bits1.ndim)

        return jax.lax.platform_dependent(key, cpu=rolled, default=lambda k: fry.split(k, shape))

    return jex_random.define_prng_impl(
        key_shape=(2,), seed=fry.seed, split=split, random_bits=random_bits,
        fold_in=fry.fold_in, name="threefry2x32_rolled", tag="fry_rolled")


#: Threefry-2x32 with every draw's hash computed as one rolled loop on CPU (same bits as
#: ``"threefry2x32"``); see :func:`rolled_keys`.
ROLLED_THREEFRY = _make_rolled_impl()


def rolled_keys(keys):
    """The same Threefry keys, drawing through a rolled loop on CPU: every
    ``jax.random`` draw made from them (``uniform``, ``normal``, ``bits``, ``split``...)
    gives the bits that ``keys`` give, but its hash runs as one XLA while loop (see
    `_threefry2x32_rolled`) whose output is materialised, instead of jax's hash lowered
    into the draw's consumers.

    Why: code we do not own draws from keys we pass it. Under `unrolled_threefry`, the
    hash of gymnax's CartPole reset draw was fused into each of its consumers (the
    observation's concatenation and the state's four components), so it ran five times
    per step; from keys of this implementation it runs once, in its loop
    (``envs.core.ROLLED_RESET_MIN_ENVS`` has the timings).

    Typed Threefry keys and raw ``uint32 [..., 2]`` key data (the default
    implementation's) are converted; any other key is returned as it is. Other platforms
    than CPU compute jax's own hash.
    """
    import jax
    import jax.numpy as jnp

    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(keys)) != "threefry2x32":
            return keys
        data = jax.random.key_data(keys)
    elif str(jax.config.jax_default_prng_impl) == "threefry2x32" and keys.shape[-1:] == (2,):
        data = keys
    else:
        return keys
    return jax.random.wrap_key_data(data, impl=ROLLED_THREEFRY)


def threefry_keys(tree):
    """``tree`` with every key leaf of `rolled_keys`' kind turned back into a plain
    ``"threefry2x32"`` key (same data); other leaves as they are. For state that an
    environment keeps across steps, so its dtype does not depend on which keys it got."""
    import jax
    import jax.numpy as jnp

    def back(x):
        if (isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
                and jax.random.key_impl(x) == ROLLED_THREEFRY):
            return jax.random.wrap_key_data(jax.random.key_data(x), impl="threefry2x32")
        return x

    return jax.tree.map(back, tree)
