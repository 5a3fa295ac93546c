"""Replay buffers: storage ring, sampling law, IS weights, rules, errors, vmap/shard_map."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import replay

EXAMPLE = {"obs": jnp.zeros(3, jnp.float32), "action": jnp.int32(0)}


def batch(ids):
    ids = np.asarray(ids, np.int32)
    obs = jnp.asarray(np.repeat(ids[:, None], 3, 1), jnp.float32)
    return {"obs": obs, "action": jnp.asarray(ids)}


def chi_square_pvalue(counts, expected):
    """Pearson chi-square over bins with expected >= 5 (the rest lumped into one bin)."""
    big = expected >= 5
    obs = list(counts[big]) + ([counts[~big].sum()] if (~big).any() else [])
    exp = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    keep = exp > 0
    stat = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    if dof == 0:  # a single bin: the counts must match exactly
        return 1.0 if stat == 0 else 0.0
    try:
        from scipy.stats import chi2

        return float(chi2.sf(stat, dof))
    except ImportError:  # Wilson-Hilferty normal approximation
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / np.sqrt(2 / (9 * dof))
        return float(0.5 * math.erfc(z / math.sqrt(2)))


def draw_counts(buf, state, n_calls, batch_size, seed=0):
    keys = jax.random.split(jax.random.key(seed), n_calls)
    idx = jax.jit(jax.vmap(lambda k: buf.sample(state, k, batch_size).indices))(keys)
    return np.bincount(np.asarray(idx).ravel(), minlength=buf.capacity)


# --- storage ---------------------------------------------------------------------------


def test_packed_rows_round_trip_every_dtype():
    """Leaves that fill whole 32-bit words (of any dtype) go to the uint32 rows, the other
    bytes to the uint8 tail; adding and reading back gives the same values and dtypes,
    with no padding."""
    rng = np.random.default_rng(0)
    example = {
        "f32": jnp.zeros(3, jnp.float32), "i32": jnp.int32(0), "done": jnp.bool_(False),
        "img": jnp.zeros((2, 2, 3), jnp.uint8), "odd": jnp.zeros(3, jnp.uint8),
        "half": jnp.zeros((), jnp.float16), "pair": jnp.zeros(2, jnp.float16),
        "i16": jnp.zeros(3, jnp.int16), "flags": jnp.zeros(4, jnp.bool_),
    }
    n = 7
    items = {
        "f32": rng.normal(size=(n, 3)).astype(np.float32),
        "i32": rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32),
        "done": rng.random(n) < 0.5,
        "img": rng.integers(0, 256, (n, 2, 2, 3)).astype(np.uint8),
        "odd": rng.integers(0, 256, (n, 3)).astype(np.uint8),
        "half": rng.normal(size=n).astype(np.float16),
        "pair": rng.normal(size=(n, 2)).astype(np.float16),
        "i16": rng.integers(-(2**15), 2**15 - 1, (n, 3)).astype(np.int16),
        "flags": rng.random((n, 4)) < 0.5,
    }
    buf = replay.uniform(capacity=10)
    state = buf.add(buf.init(example), jax.tree.map(jnp.asarray, items))
    assert state.data_nbytes == 10 * sum(x[0].nbytes for x in items.values())
    leaves = jax.tree_util.tree_flatten_with_path(example)[0]
    in_words = {jax.tree_util.keystr(p)[2:-2]: slot.in_words
                for (p, _), slot in zip(leaves, state.layout.slots, strict=True)}
    assert in_words == {"f32": True, "i32": True, "img": True, "pair": True, "flags": True,
                        "done": False, "odd": False, "half": False, "i16": False}
    data = state.data
    for name, want in items.items():
        assert data[name].dtype == want.dtype and data[name].shape == (10, *want.shape[1:])
        np.testing.assert_array_equal(np.asarray(data[name])[:n], want)
    got = replay.storage.get(state, jnp.array([6, 0, 3]))
    for name, want in items.items():
        np.testing.assert_array_equal(np.asarray(got[name]), want[[6, 0, 3]])


@pytest.mark.parametrize("sizes", [[3, 4, 7], [10], [9, 9, 9, 2], [1] * 23])
def test_wrap_around_keeps_newest(sizes):
    buf = replay.uniform(capacity=10)
    state = buf.init(EXAMPLE)
    start = 0
    for n in sizes:
        state = buf.add(state, batch(np.arange(start, start + n)))
        start += n
    total = start
    assert int(state.size) == min(total, 10)
    assert int(state.insert_pos) == total % 10
    stored = np.asarray(state.data["action"])[: int(state.size)]
    assert sorted(stored.tolist()) == list(range(max(0, total - 10), total))
    # The item with id i sits in slot i % capacity.
    for i in range(max(0, total - 10), total):
        assert stored[i % 10] == i
        np.testing.assert_array_equal(np.asarray(state.data["obs"])[i % 10], [i] * 3)


def test_can_sample():
    buf = replay.prioritized(capacity=8)
    state = buf.init(EXAMPLE)
    assert not bool(buf.can_sample(state, 1))
    state = buf.add(state, batch([0, 1, 2]))
    assert bool(buf.can_sample(state, 3)) and not bool(buf.can_sample(state, 4))


# --- sampling law ----------------------------------------------------------------------

DISTRIBUTIONS = {
    "random": np.random.default_rng(0).uniform(0.1, 2.0, 64),
    "skewed": np.logspace(-6, 3, 64),
    "zeros": np.where(np.arange(64) % 3 == 0, 0.0, np.random.default_rng(1).uniform(0, 5, 64)),
    "one_hot": np.eye(64)[17] * 3.0,
    "skewed_with_zeros": np.where(np.arange(64) % 2 == 0, 0.0, np.logspace(-8, 4, 64)),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_prioritized_sampling_frequencies(name, alpha):
    p = DISTRIBUTIONS[name]
    buf = replay.prioritized(capacity=64, alpha=alpha, branching=4)
    state = buf.init(EXAMPLE)
    state = buf.add(state, batch(np.arange(64)), priorities=jnp.asarray(p, jnp.float32))
    counts = draw_counts(buf, state, n_calls=100, batch_size=1024)
    mass = np.where(p > 0, np.power(p.astype(np.float32), alpha, dtype=np.float64), 0)
    expected = counts.sum() * mass / mass.sum()
    assert counts[p == 0].sum() == 0, "a zero-priority slot was sampled"
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_uniform_sampling_frequencies():
    buf = replay.uniform(capacity=64)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(40)))  # 40 of 64 slots stored
    counts = draw_counts(buf, state, n_calls=50, batch_size=1024)
    assert counts[40:].sum() == 0
    expected = np.where(np.arange(64) < 40, counts.sum() / 40, 0.0)
    assert chi_square_pvalue(counts[:40], expected[:40]) > 1e-3
    s = buf.sample(state, jax.random.key(3), 16)
    np.testing.assert_allclose(s.probabilities, 1 / 40)
    np.testing.assert_array_equal(s.weights, 1.0)
    np.testing.assert_array_equal(s.transitions["action"], s.indices)


def test_stratified_one_draw_per_slice():
    # Equal masses, batch == size: stratification draws every item exactly once.
    buf = replay.prioritized(capacity=16)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(16)))
    s = buf.sample(state, jax.random.key(0), 16)
    np.testing.assert_array_equal(np.sort(s.indices), np.arange(16))


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_match_numpy(beta):
    rng = np.random.default_rng(2)
    p = rng.uniform(0.01, 10.0, 50).astype(np.float32)
    p[[3, 7]] = 0.0
    alpha = 0.7
    buf = replay.prioritized(capacity=64, alpha=alpha, branching=8)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(50)), priorities=jnp.asarray(p))
    s = buf.sample(state, jax.random.key(1), 256, beta=beta)
    mass = np.where(p > 0, np.power(p, alpha, dtype=np.float64), 0.0)
    prob = mass / mass.sum()
    n = 50
    w_all = np.where(prob > 0, (n * np.where(prob > 0, prob, 1)) ** -beta, 0)
    w_ref = w_all / w_all[prob > 0].max()  # max over the whole buffer, not the batch
    i = np.asarray(s.indices)
    np.testing.assert_allclose(s.probabilities, prob[i], rtol=1e-5)
    np.testing.assert_allclose(s.weights, w_ref[i], rtol=1e-5)
    np.testing.assert_array_equal(s.transitions["action"], i)


def test_new_items_get_max_priority_seen():
    buf = replay.prioritized(capacity=8, alpha=1.0)
    state = buf.add(buf.init(EXAMPLE), batch([0, 1]))  # max seen starts at 1
    np.testing.assert_allclose(state.tree.sums[0][:2], [1.0, 1.0])
    state = buf.update_priorities(state, jnp.array([0]), jnp.array([5.0]))
    state = buf.update_priorities(state, jnp.array([0]), jnp.array([0.5]))
    state = buf.add(state, batch([2]))
    assert float(state.tree.sums[0][2]) == 5.0  # the max ever seen, not the current max
    state = buf.add(state, batch([3]), priorities=jnp.array([7.0]))
    state = buf.add(state, batch([4]))
    assert float(state.tree.sums[0][4]) == 7.0


def test_duplicate_indices_last_occurrence_wins():
    buf = replay.prioritized(capacity=8, alpha=1.0, branching=2)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(8)))
    idx = jnp.array([3, 5, 3, 3, 5, 1])
    pri = jnp.array([1.0, 2.0, 3.0, 4.0, 6.0, 7.0])
    state = buf.update_priorities(state, idx, pri)
    leaves = np.asarray(state.tree.sums[0])
    np.testing.assert_array_equal(leaves[[1, 3, 5]], [7.0, 4.0, 6.0])
    assert float(buf.total_priority(state)) == 7 + 4 + 6 + 5 * 1.0
    # Same rule under jit.
    state2 = jax.jit(buf.update_priorities)(state, idx, pri[::-1])
    # Reversed values: the last occurrences of 1, 3, 5 now carry 1, 3, 2.
    np.testing.assert_array_equal(np.asarray(state2.tree.sums[0])[[1, 3, 5]], [1.0, 3.0, 2.0])


# --- errors ----------------------------------------------------------------------------


@pytest.fixture(params=["prioritized", "uniform"])
def filled(request):
    buf = getattr(replay, request.param)(capacity=8)
    return buf, buf.add(buf.init(EXAMPLE), batch([0, 1, 2]))


def test_add_structure_dtype_shape_errors(filled):
    buf, state = filled
    with pytest.raises(ValueError, match="structure"):
        buf.add(state, {"obs": jnp.zeros((2, 3))})
    with pytest.raises(ValueError, match="dtype.*astype"):
        buf.add(state, {"obs": jnp.zeros((2, 3)), "action": jnp.zeros(2, jnp.float32)})
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        buf.add(state, {"obs": jnp.zeros((2, 4)), "action": jnp.zeros(2, jnp.int32)})
    with pytest.raises(ValueError, match="leading batch axis"):
        buf.add(state, {"obs": jnp.zeros(3), "action": jnp.int32(0)})
    with pytest.raises(ValueError, match="batch size"):
        buf.add(state, {"obs": jnp.zeros((2, 3)), "action": jnp.zeros(3, jnp.int32)})


def test_batch_larger_than_capacity_names_both(filled):
    buf, state = filled
    with pytest.raises(ValueError, match="batch of 9 .* capacity 8"):
        buf.add(state, batch(np.arange(9)))
    with pytest.raises(ValueError, match="batch of 9 .* capacity 8"):
        jax.jit(buf.add)(state, batch(np.arange(9)))  # static: raised under jit too


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_bad_priorities(filled, bad):
    buf, state = filled
    with pytest.raises(ValueError, match="finite and >= 0"):
        buf.add(state, batch([5, 6]), priorities=jnp.array([1.0, bad]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        buf.update_priorities(state, jnp.array([0, 1]), jnp.array([bad, 1.0]))


def test_update_errors(filled):
    buf, state = filled
    with pytest.raises(ValueError, match="outside the 3 stored items"):
        buf.update_priorities(state, jnp.array([0, 3]), jnp.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        buf.update_priorities(state, jnp.array([0, 1]), jnp.array([1.0]))
    with pytest.raises(ValueError, match="integers"):
        buf.update_priorities(state, jnp.array([0.0]), jnp.array([1.0]))


def test_sample_errors(filled):
    buf, state = filled
    with pytest.raises(ValueError, match="empty.*add transitions first"):
        buf.sample(buf.init(EXAMPLE), jax.random.key(0), 4)
    with pytest.raises(ValueError, match="Python int"):
        buf.sample(state, jax.random.key(0), jnp.int32(4))


def test_sample_all_zero_priorities_error():
    buf = replay.prioritized(capacity=8)
    state = buf.add(buf.init(EXAMPLE), batch([0, 1]), priorities=jnp.zeros(2))
    with pytest.raises(ValueError, match="every stored priority is zero"):
        buf.sample(state, jax.random.key(0), 4)


def test_in_jit_fallbacks():
    """Inside jit: NaN/inf/negative -> 0 (never sampled); out-of-range indices ignored;
    empty buffer -> weight 0 and probability 0."""
    buf = replay.prioritized(capacity=8, alpha=1.0)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(6)))
    pri = jnp.array([jnp.nan, jnp.inf, -2.0, 3.0, 0.0])
    state = jax.jit(buf.update_priorities)(state, jnp.array([0, 1, 2, 3, 7]), pri)
    np.testing.assert_array_equal(np.asarray(state.tree.sums[0])[:8], [0, 0, 0, 3, 1, 1, 0, 0])
    assert float(state.max_priority) == 3.0
    idx = jax.jit(lambda s, k: buf.sample(s, k, 512).indices)(state, jax.random.key(0))
    assert set(np.asarray(idx).tolist()) <= {3, 4, 5}
    empty = jax.jit(lambda s, k: buf.sample(s, k, 4))(buf.init(EXAMPLE), jax.random.key(0))
    np.testing.assert_array_equal(empty.weights, 0.0)
    np.testing.assert_array_equal(empty.probabilities, 0.0)


# --- vmap / shard_map / donation -------------------------------------------------------


@pytest.mark.parametrize("kind", ["prioritized", "uniform"])
def test_vmap_equals_separate_buffers(kind):
    buf = getattr(replay, kind)(capacity=16)
    n_buf = 3
    data = [batch(np.arange(10) + 100 * b) for b in range(n_buf)]
    rngs = [np.random.default_rng(b) for b in range(n_buf)]
    pri = [jnp.asarray(r.uniform(0, 2, 10), jnp.float32) for r in rngs]
    keys = jax.random.split(jax.random.key(0), n_buf)

    def step(state, x, p, key):
        state = buf.add(state, x, p)
        s = buf.sample(state, key, 8, 0.5)
        state = buf.update_priorities(state, s.indices, s.probabilities * 10 + 0.1)
        return state, s

    def stack(xs):
        return jax.tree.map(lambda *a: jnp.stack(a), *xs)
    states = jax.vmap(lambda _: buf.init(EXAMPLE))(jnp.arange(n_buf))
    vs, vsample = jax.jit(jax.vmap(step))(states, stack(data), stack(pri), keys)
    separate = [step(buf.init(EXAMPLE), data[b], pri[b], keys[b]) for b in range(n_buf)]
    sep_states, sep_samples = stack([s for s, _ in separate]), stack([s for _, s in separate])
    close = functools.partial(np.testing.assert_allclose, rtol=1e-6)  # vmapped pow: 1 ulp
    jax.tree.map(close, vs, sep_states)
    jax.tree.map(close, vsample, sep_samples)


def test_shard_map_per_device_buffers_and_global_sample():
    """Each device holds its own shard; a global stratified sample uses the documented
    recipe (psum of totals, exclusive prefix, pmin of minima)."""
    devices = jax.devices()
    d = len(devices)
    mesh = jax.make_mesh((d,), ("shard",), devices=devices)
    P = jax.sharding.PartitionSpec
    buf = replay.prioritized(capacity=32, alpha=1.0)
    B = 64

    def body(x, p, key):
        x, p = jax.tree.map(lambda a: a[0], (x, p))
        state = buf.add(buf.init(EXAMPLE), x, p)
        local_total = buf.total_priority(state)
        totals = jax.lax.all_gather(local_total, "shard")
        offset = jnp.sum(jnp.where(jnp.arange(d) < jax.lax.axis_index("shard"), totals, 0.0))
        targets = replay.stratified_uniforms(key, B) * jnp.sum(totals) - offset
        mine = (targets >= 0) & (targets < local_total)
        s = buf.sample_at(
            state,
            jnp.where(mine, targets, 0.0),
            0.4,
            total=jnp.sum(totals),
            min_priority=jax.lax.pmin(buf.min_priority(state), "shard"),
        )
        ids = jnp.where(mine, s.transitions["action"], -1)
        return ids[None], jnp.where(mine, s.probabilities, 0.0)[None]

    x = batch(np.arange(20 * d).reshape(d, 20).ravel())
    x = jax.tree.map(lambda a: a.reshape(d, 20, *a.shape[1:]), x)
    p = jnp.asarray(np.random.default_rng(0).uniform(0.5, 2.0, (d, 20)), jnp.float32)
    f = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P("shard"), P("shard"), P()), out_specs=P("shard"))
    )
    sharded = jax.sharding.NamedSharding(mesh, P("shard"))
    x, p = jax.device_put((x, p), sharded)
    ids, probs = f(x, p, jax.random.key(0))
    ids, probs = np.asarray(ids), np.asarray(probs)
    assert ((ids >= 0).sum(0) == 1).all()  # every draw lands on exactly one shard
    flat_p = np.asarray(p).ravel()
    got = ids.max(0)
    np.testing.assert_allclose(probs.sum(0), flat_p[got] / flat_p.sum(), rtol=1e-5)


def test_jit_with_donation_and_no_recompile():
    buf = replay.prioritized(capacity=64)
    add = jax.jit(buf.add, donate_argnums=0)
    upd = jax.jit(buf.update_priorities, donate_argnums=0)
    sample = jax.jit(buf.sample, static_argnums=2)
    state = buf.init(EXAMPLE)
    for i in range(5):
        state = add(state, batch(np.arange(8) + 8 * i), jnp.ones(8))
        s = sample(state, jax.random.key(i), 16)
        state = upd(state, s.indices, jnp.full(16, 2.0))
    assert add._cache_size() == 1 and upd._cache_size() == 1 and sample._cache_size() == 1



def test_sample_then_update_in_a_scan_does_not_copy_the_tree():
    # How DQN uses replay: sample, keep the weights, update at the drawn indices, in one
    # scan. XLA:CPU copies the whole tree (twice per iteration) unless every read of it
    # comes before the in-place update; see sum_tree.find_with_mass(after=...).
    buf = replay.prioritized(capacity=4096)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(4096)))

    def body(carry, key):
        state, acc = carry
        s = buf.sample(state, key, 32)
        state = buf.update_priorities(state, s.indices, jnp.full(32, 2.0))
        return (state, acc + jnp.sum(s.weights)), None

    def run(carry, keys):
        return jax.lax.scan(body, carry, keys)[0]

    keys = jax.random.split(jax.random.key(0), 4)
    hlo = jax.jit(run, donate_argnums=0).lower((state, jnp.float32(0)), keys).compile()
    tree_shape = f"f32[{state.tree.flat.shape[0]}]"
    copies = [line for line in hlo.as_text().splitlines()
              if f"= {tree_shape}" in line and " copy(" in line]
    assert not copies, copies

def test_sample_indices_and_transitions_agree():
    buf = replay.prioritized(capacity=32)
    state = buf.add(buf.init(EXAMPLE), batch(np.arange(20)))
    state = buf.add(state, batch(np.arange(20, 40)))  # wrapped: ids 8..39
    s = buf.sample(state, jax.random.key(0), 64)
    ids = np.asarray(s.transitions["action"])
    np.testing.assert_array_equal(ids % 32, s.indices)
    assert ids.min() >= 8


def test_uniform_update_priorities_is_a_checked_noop():
    buf = replay.uniform(capacity=8)
    state = buf.add(buf.init(EXAMPLE), batch([0, 1]))
    same = buf.update_priorities(state, jnp.array([1]), jnp.array([3.0]))
    jax.tree.map(np.testing.assert_array_equal, same, state)


@pytest.mark.parametrize("sizes", [[3, 4, 7], [10], [9, 9, 9, 2]])
def test_image_rows_written_per_leaf_equal_one_row_block(sizes, monkeypatch):
    # Rows with an image leaf (>= WIDE_LEAF_WORDS words) are written leaf by leaf into
    # their columns; the ring must hold exactly what the one-block write gives, through
    # wrap-arounds, and read back as the newest items in their slots.
    example = {"obs": jnp.zeros((10, 10, 4), jnp.uint8), "action": jnp.int32(0),
               "reward": jnp.float32(0), "done": jnp.bool_(False),
               "next_obs": jnp.zeros((10, 10, 4), jnp.uint8)}
    rng = np.random.default_rng(3)

    def items(ids):
        n = len(ids)
        return {"obs": jnp.asarray(rng.integers(0, 256, (n, 10, 10, 4)), jnp.uint8),
                "action": jnp.asarray(ids, jnp.int32),
                "reward": jnp.asarray(rng.normal(size=n), jnp.float32),
                "done": jnp.asarray(rng.random(n) < 0.5),
                "next_obs": jnp.asarray(rng.integers(0, 256, (n, 10, 10, 4)), jnp.uint8)}

    batches, start = [], 0
    for n in sizes:
        batches.append(items(np.arange(start, start + n)))
        start += n
    buf = replay.uniform(capacity=10)

    def fill():
        state = buf.init(example)
        for b in batches:
            state = buf.add(state, b)
        return state

    per_leaf = fill()
    monkeypatch.setattr(replay.storage, "WIDE_LEAF_WORDS", 10**9)  # one row block
    block = fill()
    np.testing.assert_array_equal(per_leaf.words, block.words)
    np.testing.assert_array_equal(per_leaf.tail, block.tail)
    everything = jax.tree.map(lambda *x: np.concatenate(x), *batches)
    data = per_leaf.data
    for i in range(max(0, start - 10), start):  # item i sits in slot i % capacity
        for name in example:
            np.testing.assert_array_equal(np.asarray(data[name])[i % 10], everything[name][i])


# --- add_batch_size: the aligned write ----------------------------------------------------

MINATAR_ROW = {"obs": jnp.zeros((10, 10, 4), jnp.uint8), "action": jnp.int32(0),
               "reward": jnp.float32(0), "done": jnp.bool_(False),
               "next_obs": jnp.zeros((10, 10, 4), jnp.uint8)}


def _random_rows(example, n, rng):
    """``n`` random rows shaped like ``example``: floats normal, ints in [0, 200), bools fair."""
    def leaf(x):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(rng.normal(size=(n, *x.shape)), x.dtype)
        high = 2 if x.dtype == jnp.bool_ else 200
        return jnp.asarray(rng.integers(0, high, (n, *x.shape))).astype(x.dtype)

    return jax.tree.map(leaf, example)


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
@pytest.mark.parametrize("example", [EXAMPLE, MINATAR_ROW], ids=["small-rows", "image-rows"])
def test_add_batch_size_writes_what_any_size_writes(kind, example):
    """With add_batch_size, add writes by dynamic_update_slice (no batch crosses the end);
    through three laps of the ring, inside one jitted scan with the state donated, the
    words, tail, positions and (prioritized) sum tree equal those of the scatter write."""
    rng = np.random.default_rng(5)
    n, capacity, laps = 4, 12, 3
    adds = [_random_rows(example, n, rng) for _ in range(laps * capacity // n + 1)]
    xs = jax.tree.map(lambda *a: jnp.stack(a), *adds)
    pri = jnp.asarray(rng.uniform(0.1, 3, (len(adds), n)), jnp.float32)
    states = {}
    for aligned in (None, n):
        buf = getattr(replay, kind)(capacity=capacity, add_batch_size=aligned)

        def run(state, xs, pri, buf=buf):
            def body(s, x):
                return buf.add(s, x[0], x[1] if kind == "prioritized" else None), None

            return jax.lax.scan(body, state, (xs, pri))[0]

        states[aligned] = jax.jit(run, donate_argnums=0)(buf.init(example), xs, pri)
    for a, b in zip(jax.tree.leaves(states[n]), jax.tree.leaves(states[None]), strict=True):
        np.testing.assert_array_equal(a, b)
    storage = states[n] if kind == "uniform" else states[n].storage
    assert storage.add_batch_size == n and int(storage.insert_pos) == n
    # The newest `capacity` items, item i in slot i % capacity.
    newest = [(i, a) for i, a in enumerate(adds)][-capacity // n:]
    for i, a in newest:
        slots = (i * n + np.arange(n)) % capacity
        for name, leaf in a.items():
            np.testing.assert_array_equal(np.asarray(storage.data[name])[slots], leaf)


def test_add_batch_size_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"capacity 20000 is not a multiple of add_batch_size "
                                         r"256.*capacity 19968 or 20224.*None"):
        replay.uniform(20_000, add_batch_size=256)
    with pytest.raises(ValueError, match="prioritized: capacity 10 is not a multiple"):
        replay.prioritized(10, add_batch_size=4)
    with pytest.raises(ValueError, match="add_batch_size must be a positive int"):
        replay.uniform(16, add_batch_size=0)
    buf = replay.uniform(16, add_batch_size=4)
    state = buf.init(EXAMPLE)
    with pytest.raises(ValueError, match=r"batch of 3 .* add_batch_size=4.*exactly that size"):
        buf.add(state, batch([1, 2, 3]))


def test_add_batch_size_under_vmap_equals_separate_buffers():
    """Per-lane insert positions (vmap turns the slice write into a scatter): each lane
    holds what its own buffer would."""
    buf = replay.uniform(capacity=8, add_batch_size=4)
    data = [[batch(np.arange(4) + 10 * k + 100 * b) for k in range(3)] for b in range(2)]
    def stack(xs):
        return jax.tree.map(lambda *a: jnp.stack(a), *xs)

    def fill(state, xs):
        for x in xs:
            state = buf.add(state, x)
        return state

    lanes = jax.jit(jax.vmap(fill))(jax.vmap(lambda _: buf.init(EXAMPLE))(jnp.arange(2)),
                                    [stack([data[0][k], data[1][k]]) for k in range(3)])
    separate = stack([fill(buf.init(EXAMPLE), data[b]) for b in range(2)])
    jax.tree.map(np.testing.assert_array_equal, lanes, separate)
