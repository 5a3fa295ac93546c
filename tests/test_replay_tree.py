"""The K-ary sum/min tree against a plain numpy reference, and its numerics at 10^6 updates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrl_par.replay import sum_tree


class NumpySumTree:
    """Reference: a flat array of leaf masses, updated one item at a time in a Python loop."""

    def __init__(self, capacity):
        self.mass = np.zeros(capacity, np.float32)

    def update(self, indices, values):
        for i, v in zip(indices, values, strict=True):  # sequential: the last occurrence wins
            self.mass[i] = v

    def find(self, target):
        cumulative = np.cumsum(self.mass, dtype=np.float64)
        return int(np.searchsorted(cumulative, target, side="right"))


CAPACITY, BRANCHING, UPDATE = 37, 3, 8  # 37 leaves, K=3: 4 levels with padding
update_jit = jax.jit(sum_tree.update)
find_jit = jax.jit(sum_tree.find)


def check_against_reference(tree, ref):
    leaves = np.asarray(sum_tree.leaves(tree))
    np.testing.assert_array_equal(leaves[:CAPACITY], ref.mass)
    np.testing.assert_array_equal(leaves[CAPACITY:], 0)
    # Every internal node is the sum (and min of positive leaves) of its subtree.
    k = BRANCHING
    span = 1
    for level in range(1, len(tree.sums)):
        span *= k
        padded = np.zeros(len(tree.sums[level]) * span, np.float64)
        padded[:CAPACITY] = ref.mass
        blocks = padded.reshape(-1, span)
        np.testing.assert_allclose(tree.sums[level], blocks.sum(1), rtol=1e-6)
        mins = np.where(blocks > 0, blocks, np.inf).min(1)
        np.testing.assert_array_equal(tree.mins[level - 1], mins.astype(np.float32))
    total = ref.mass.astype(np.float64).sum()
    np.testing.assert_allclose(sum_tree.total(tree), total, rtol=1e-6)
    positive = ref.mass[ref.mass > 0]
    assert float(sum_tree.minimum(tree)) == (positive.min() if positive.size else np.inf)
    if total > 0:  # targets at the middle of each leaf interval wider than float32 rounding
        cumulative = np.cumsum(ref.mass, dtype=np.float64)
        mids = cumulative - ref.mass / 2
        pos = np.flatnonzero(ref.mass > 1e-5 * total)
        found = np.asarray(find_jit(tree, jnp.asarray(mids, jnp.float32)))  # fixed shape
        np.testing.assert_array_equal(found[pos], pos)
        assert (ref.mass[found] > 0).all()
        assert [ref.find(m) for m in mids[pos]] == pos.tolist()
        # Targets past the total or negative still land on positive leaves.
        edge = np.asarray(find_jit(tree, jnp.array([-1.0, 0.0, total, 10 * total], jnp.float32)))
        assert (ref.mass[edge] > 0).all()


ops = st.lists(
    st.tuples(
        st.lists(st.integers(0, CAPACITY - 1), min_size=UPDATE, max_size=UPDATE),
        st.lists(
            st.one_of(st.just(0.0), st.floats(2.0**-20, 2.0**20, width=32)),
            min_size=UPDATE,
            max_size=UPDATE,
        ),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_tree_equals_numpy_reference(operations):
    tree = sum_tree.init(CAPACITY, BRANCHING)
    ref = NumpySumTree(CAPACITY)
    for indices, values in operations:
        tree = update_jit(tree, jnp.array(indices, jnp.int32), jnp.array(values, jnp.float32))
        ref.update(indices, np.float32(values))
    check_against_reference(tree, ref)


def test_level_sizes_and_memory():
    assert sum_tree.level_sizes(2**20, 32) == [2**20, 2**15, 2**10, 32]
    assert sum_tree.level_sizes(37, 3) == [39, 15, 6, 3]
    tree = sum_tree.init(2**20, 32)
    floats = sum(x.size for x in tree.sums + tree.mins)
    assert floats / 2**20 < 1.07  # leaves + K-ary sum and min internals


def test_drift_free_after_a_million_float32_updates():
    """1000 jitted rounds of 1024 random updates (10^6 in all, a quarter of them zeros and
    the rest over 17 orders of magnitude), each followed by a 256-draw sample: no draw may
    land on a zero-mass leaf, and the total stays within float32 rounding of a float64 sum."""
    capacity, rounds, n = 50_000, 1000, 1024
    rng = np.random.default_rng(0)
    indices = rng.integers(0, capacity, (rounds, n)).astype(np.int32)
    values = np.exp(rng.uniform(-20, 20, (rounds, n))).astype(np.float32)
    values[rng.random((rounds, n)) < 0.25] = 0.0
    tree = sum_tree.init(capacity, 32)
    tree = sum_tree.update(tree, jnp.arange(capacity), jnp.ones(capacity))

    @jax.jit
    def run(tree, indices, values, key):
        def body(i, carry):
            tree, bad = carry
            tree = sum_tree.update(tree, indices[i], values[i])
            u = jax.random.uniform(jax.random.fold_in(key, i), (256,))
            targets = (jnp.arange(256) + u) / 256 * sum_tree.total(tree)
            found = sum_tree.find(tree, targets)
            bad = bad + jnp.sum(sum_tree.leaves(tree)[found] <= 0)
            return tree, bad

        return jax.lax.fori_loop(0, rounds, body, (tree, jnp.int32(0)))

    tree, bad = run(tree, jnp.asarray(indices), jnp.asarray(values), jax.random.key(1))
    assert int(bad) == 0

    expected = np.ones(capacity, np.float32)
    expected[indices.ravel()] = values.ravel()  # numpy assignment: the last write wins
    leaves = np.asarray(sum_tree.leaves(tree))[:capacity]
    np.testing.assert_array_equal(leaves, expected)
    exact = expected.astype(np.float64).sum()
    depth = len(tree.sums)
    bound = depth * 32 * np.finfo(np.float32).eps  # rounding of a depth-level K-ary sum
    assert abs(float(sum_tree.total(tree)) - exact) <= bound * exact
    # Internal nodes equal a fresh rebuild from the leaves.
    fresh = sum_tree.rebuild(tree)
    for a, b in zip(tree.sums + tree.mins, fresh.sums + fresh.mins, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert float(sum_tree.minimum(tree)) == expected[expected > 0].min()


@pytest.mark.parametrize("branching", [2, 4, 32])
def test_branching_factors_agree(branching):
    rng = np.random.default_rng(branching)
    mass = rng.uniform(0, 1, 100).astype(np.float32) * (rng.random(100) < 0.7)
    tree = update_jit(sum_tree.init(100, branching), jnp.arange(100), jnp.asarray(mass))
    cumulative = np.cumsum(mass, dtype=np.float64)
    pos = np.flatnonzero(mass > 0)
    found = find_jit(tree, jnp.asarray((cumulative - mass / 2)[pos], jnp.float32))
    np.testing.assert_array_equal(found, pos)


def test_out_of_range_and_invalid_entries_write_nothing():
    """The tree is one flat array: indices past the padded leaves (or masked invalid) must
    not land in the internal levels; duplicates still follow the last-occurrence rule."""
    tree = sum_tree.init(CAPACITY, BRANCHING)
    ref = NumpySumTree(CAPACITY)
    indices = jnp.array([5, 39, 40, 10**6, -1, 5, 7, 7], jnp.int32)
    values = jnp.array([1.0, 9.0, 9.0, 9.0, 9.0, 2.0, 3.0, 4.0], jnp.float32)
    valid = jnp.array([True] * 6 + [False, True])
    tree = jax.jit(sum_tree.update)(tree, indices, values, valid=valid)
    ref.update([5, 5, 7], np.float32([1.0, 2.0, 4.0]))
    check_against_reference(tree, ref)
    np.testing.assert_array_equal(sum_tree.rebuild(tree).flat, tree.flat)


def test_incremental_equals_rebuild_bit_for_bit():
    """Sums are written-out left folds, so a path update (gathered rows), the dense update
    of the small top levels and a full rebuild round identically, for any masses."""
    capacity = 2**14  # K=8: levels 16384, 2048 (path), 256, 32, 8 (dense: <= 4096 children)
    rng = np.random.default_rng(7)
    tree = update_jit(sum_tree.init(capacity), jnp.arange(capacity),
                      jnp.asarray(rng.uniform(0, 3, capacity) ** 0.6, jnp.float32))
    for _ in range(5):
        idx = rng.integers(0, capacity, 300).astype(np.int32)
        idx[:40] = idx[40:80]  # duplicates
        mass = (rng.uniform(0, 3, 300) ** 0.6 * (rng.random(300) < 0.9)).astype(np.float32)
        tree = update_jit(tree, jnp.asarray(idx), jnp.asarray(mass))
        np.testing.assert_array_equal(sum_tree.rebuild(tree).flat, tree.flat)


def test_find_with_mass_returns_the_leaf_mass():
    rng = np.random.default_rng(3)
    mass = (rng.uniform(0, 1, 500) * (rng.random(500) < 0.8)).astype(np.float32)
    tree = update_jit(sum_tree.init(500), jnp.arange(500), jnp.asarray(mass))
    targets = jnp.asarray(rng.uniform(-1, float(sum_tree.total(tree)) * 1.01, 4000), jnp.float32)
    found, found_mass = jax.jit(sum_tree.find_with_mass)(tree, targets)
    np.testing.assert_array_equal(found, find_jit(tree, targets))
    np.testing.assert_array_equal(found_mass, mass[np.asarray(found)])
    assert (np.asarray(found_mass) > 0).all()
    # `after` only orders the search: any value, even negative or NaN, finds the same.
    for after in (float(sum_tree.minimum(tree)), -1.0, 0.0, np.inf, np.nan):
        got, got_mass = jax.jit(sum_tree.find_with_mass)(tree, targets, jnp.float32(after))
        np.testing.assert_array_equal(got, found)
        np.testing.assert_array_equal(got_mass, found_mass)
