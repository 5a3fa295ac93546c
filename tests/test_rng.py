"""`rng.unrolled_threefry`: the same random bits, no while loop, scoped to its block."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.platform import rng


def _draws(key):
    """Every kind of draw the library makes, from one key (fresh function each call so
    that no lowering is reused from jax's caches)."""
    k = jax.random.split(key, 6)
    return {
        "split": jax.random.key_data(jax.random.split(k[0], (3, 2))),
        "fold_in": jax.random.key_data(jax.random.fold_in(k[0], 7)),
        "bits": jax.random.bits(k[1], (5, 3), jnp.uint32),
        "uniform": jax.random.uniform(k[2], (17,)),
        "normal": jax.random.normal(k[3], (4, 4)),
        "categorical": jax.random.categorical(k[4], jnp.log(jnp.arange(1.0, 6.0)), shape=(9,)),
        "permutation": jax.random.permutation(k[5], 11),
    }


def _lowered(keys):
    fn = jax.jit(jax.vmap(lambda key: _draws(key)))  # a new function object every time
    return fn.lower(keys)


@pytest.mark.rolled_threefry  # compares against jax's own CPU lowering
def test_same_bits_and_no_while_loop_inside_the_block_only():
    keys = jax.random.split(jax.random.key(42), 3)
    before = _lowered(keys)
    with rng.unrolled_threefry() as active:
        inside = _lowered(keys)
        with rng.unrolled_threefry():  # re-entrant
            nested = _lowered(keys)
        again = _lowered(keys)  # still active after the inner block
    after = _lowered(keys)
    for lowered in (before, after):
        assert "stablehlo.while" in lowered.as_text()
    assert active  # on jax 0.10 and 0.11 alike
    for lowered in (inside, nested, again):
        assert "stablehlo.while" not in lowered.as_text()
        assert "stablehlo.optimization_barrier" in lowered.as_text()
    want, got = before.compile()(keys), inside.compile()(keys)
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]),
                                      err_msg=name)


@pytest.mark.rolled_threefry  # compares against jax's own CPU lowering
def test_chained_hashes_compile_and_keep_their_bits():
    """Three chained splits: jax 0.11.2's XLA did not finish compiling them unrolled
    without the barrier (a regression here hangs this test, and faulthandler prints
    where); the bits equal jax's rolled lowering."""
    def chained(key):
        k = jax.random.split(jax.random.split(jax.random.split(key)[1])[0])[1]
        return jax.random.uniform(k, (4,))

    key = jax.random.key(3)
    want = jax.jit(lambda k: chained(k)).lower(key).compile()(key)
    with rng.unrolled_threefry():
        got = jax.jit(lambda k: chained(k)).lower(key).compile()(key)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_permutation_is_uniform_over_all_orders():
    """Chi-square over the 120 orders of 5 items, 24,000 draws (200 expected each)."""
    from scipy import stats

    keys = jax.random.split(jax.random.key(0), 24_000)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: rng.permutation(k, 5)))(keys))
    assert perms.dtype == np.int32
    assert (np.sort(perms, axis=1) == np.arange(5)).all()
    codes = perms @ (5 ** np.arange(5))
    _, counts = np.unique(codes, return_counts=True)
    assert len(counts) == 120
    assert stats.chisquare(counts).pvalue > 1e-3


def test_permutation_of_128_and_the_fallback():
    keys = jax.random.split(jax.random.key(1), 2000)
    perms = np.asarray(jax.vmap(lambda k: rng.permutation(k, 128))(keys))
    assert (np.sort(perms, axis=1) == np.arange(128)).all()
    # Every item lands in every half about equally often (binomial, 2000 draws each).
    first_half = (perms[:, :64] < 64).mean()
    assert abs(first_half - 0.5) < 0.01
    # Where packed keys could tie too often, jax's own permutation is used.
    key = jax.random.key(2)
    np.testing.assert_array_equal(rng.permutation(key, 256), jax.random.permutation(key, 256))


def test_mul_hi_is_the_exact_high_word():
    r = np.random.default_rng(0)
    a = r.integers(0, 2**32, 50_000, dtype=np.uint64)
    b = r.integers(0, 2**32, 50_000, dtype=np.uint64)
    edges = np.array([0, 1, 2**16 - 1, 2**16, 2**31, 2**32 - 1], np.uint64)
    a = np.concatenate([a, np.repeat(edges, len(edges))])
    b = np.concatenate([b, np.tile(edges, len(edges))])
    got = np.asarray(rng.mul_hi(a.astype(np.uint32), b.astype(np.uint32))).astype(np.uint64)
    np.testing.assert_array_equal(got, (a * b) >> np.uint64(32))


def test_integers_below_is_uniform_and_in_range():
    """Chi-square over 7 values (70,000 draws), the range at a traced million-slot bound,
    and 0 for an empty range."""
    from scipy import stats

    x = np.asarray(rng.integers_below(jax.random.key(0), (70_000,), 7))
    assert x.dtype == np.int32 and x.min() == 0 and x.max() == 6
    assert stats.chisquare(np.bincount(x, minlength=7)).pvalue > 1e-3
    bound = 1_000_003
    y = np.asarray(jax.jit(lambda k, n: rng.integers_below(k, (4, 50_000), n))(
        jax.random.key(1), jnp.int32(bound)))
    assert y.shape == (4, 50_000) and y.min() >= 0 and y.max() < bound
    # Spread over the whole range: each tenth holds about a tenth of the draws.
    tenths = np.bincount(y.reshape(-1) * 10 // bound, minlength=10) / y.size
    np.testing.assert_allclose(tenths, 0.1, atol=0.005)
    assert int(np.asarray(rng.integers_below(jax.random.key(2), (3,), 0)).max()) == 0


@pytest.mark.parametrize("shape", [(), (3,), (4, 5)])
def test_split_each_equals_vmapped_jax_split(shape):
    """`rng.split_each` (the env step's per-copy split) gives jax's keys for typed and raw
    keys, jitted, vmapped and inside the unrolled block; on CPU its hash is a rolled loop."""
    keys = jax.random.split(jax.random.key(11), shape) if shape else jax.random.key(11)
    split = jax.random.split
    want = keys
    for _ in shape:
        split = jax.vmap(split, in_axes=(0, None))
    want = jax.random.key_data(split(keys, 3))
    with rng.unrolled_threefry():
        lowered = jax.jit(lambda k: rng.split_each(k, 3)).lower(keys)
        got = lowered.compile()(keys)
        got_raw = jax.jit(lambda k: rng.split_each(k, 3))(jax.random.key_data(keys))
        got_vmapped = jax.jit(jax.vmap(lambda k: rng.split_each(k, 3)))(keys[None])
    assert "stablehlo.while" in lowered.as_text()
    assert got.dtype == keys.dtype and got.shape == shape + (3,)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got)), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(got_raw), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got_vmapped))[0],
                                  np.asarray(want))
    for index in range(3):  # one key of each split, its hash alone
        with rng.unrolled_threefry():
            one = jax.jit(lambda k, i=index: rng.split_each(k, 3, index=i))(keys)
        assert one.shape == shape
        np.testing.assert_array_equal(np.asarray(jax.random.key_data(one)),
                                      np.asarray(want)[..., index, :])
    with pytest.raises(ValueError, match="index 3"):
        rng.split_each(keys, 3, index=3)


def test_split_each_of_another_prng_goes_to_jax():
    keys = jax.random.split(jax.random.key(4, impl="rbg"), 2)
    want = jax.vmap(jax.random.split)(keys)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(rng.split_each(keys))),
                                  np.asarray(jax.random.key_data(want)))


@pytest.mark.parametrize("unrolled", [False, True])
def test_rolled_keys_draw_the_same_bits(unrolled):
    """Every draw from `rolled_keys` equals the draw from the keys it came from, vmapped
    and jitted, with either Threefry lowering active; keys split from them stay rolled."""
    keys = jax.random.split(jax.random.key(11), 5)
    rolled = rng.rolled_keys(keys)
    assert jax.random.key_impl(rolled) == rng.ROLLED_THREEFRY

    def more(key):
        out = _draws(key)
        out["bits8"] = jax.random.bits(key, (7,), jnp.uint8)
        out["bits16"] = jax.random.bits(key, (3,), jnp.uint16)
        out["scalar"] = jax.random.uniform(key)
        out["randint"] = jax.random.randint(key, (6,), -3, 10)
        out["after_split"] = jax.random.uniform(jax.random.split(key)[1], (2,))
        return out

    with rng.unrolled_threefry() if unrolled else contextlib.nullcontext():
        want = jax.jit(jax.vmap(more))(keys)
        got = jax.jit(jax.vmap(more))(rolled)
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]), err_msg=name)
    assert jax.random.key_impl(jax.random.split(rolled[0])) == rng.ROLLED_THREEFRY


def test_rolled_keys_of_raw_data_and_of_other_prngs():
    raw = jax.random.PRNGKey(3)  # uint32 [2] data of the default implementation
    np.testing.assert_array_equal(jax.random.normal(rng.rolled_keys(raw), (5,)),
                                  jax.random.normal(raw, (5,)))
    rbg = jax.random.key(0, impl="rbg")
    assert rng.rolled_keys(rbg) is rbg
    back = rng.threefry_keys({"k": rng.rolled_keys(jax.random.key(1)), "x": jnp.ones(2)})
    assert str(jax.random.key_impl(back["k"])) == "threefry2x32"
    np.testing.assert_array_equal(jax.random.key_data(back["k"]),
                                  jax.random.key_data(jax.random.key(1)))
