"""Parallel layer on one device (mesh arithmetic, replication check, global PER), plus
the 8-fake-device suite run in a subprocess (XLA_FLAGS must precede importing jax)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import axes, parallel, replay

HERE = os.path.dirname(os.path.abspath(__file__))


def test_mesh_shape():
    assert parallel.mesh_shape(8) == (1, 8)
    assert parallel.mesh_shape(8, pop=4) == parallel.MeshShape(pop=4, data=2)
    with pytest.raises(ValueError, match="pop=3 does not divide devices=8"):
        parallel.mesh_shape(8, pop=3)
    with pytest.raises(ValueError, match="devices=4 but only 1"):
        parallel.make_mesh(4)
    mesh = parallel.make_mesh(1)
    assert mesh.axis_names == (axes.POP, axes.DATA)
    assert parallel.shape_of(mesh) == (1, 1)


def test_initialize_needs_all_or_none_of_the_explicit_arguments():
    with pytest.raises(ValueError, match="or none of them"):
        parallel.initialize("127.0.0.1:1234", num_processes=2)
    with pytest.raises(ValueError, match=r"process_id=2 is not in \[0, num_processes=2\)"):
        parallel.initialize("127.0.0.1:1234", num_processes=2, process_id=2)


def test_assert_is_replicated_reports_leaf_seed_and_size():
    w = np.zeros((2, 3, 4), np.float32)  # [S=2, D=3, 4]
    state = {"params": {"w": w}, "env": np.arange(6.0).reshape(2, 3)}
    parallel.assert_is_replicated(state)  # env differs per shard: not checked
    w[1, 2, 0] = 0.5
    with pytest.raises(parallel.ReplicationError, match=r"(?s)\['params'\]\['w'\].*0\.5 "
                                                         r"\(seed index 1\)"):
        parallel.assert_is_replicated(state)
    parallel.assert_is_replicated(state, atol=0.5)
    w[1, 2, 0] = np.nan  # NaN on one shard only is a divergence too
    with pytest.raises(parallel.ReplicationError, match="inf"):
        parallel.assert_is_replicated(state)


# --- Ape-X: one prioritized replay per device, sampled as one global buffer ------------

SHARDS, CAPACITY, BATCH = 4, 16, 32


def _shards(alpha=0.6):
    """4 shards x 16 slots; shard d's transition i stores its global id 16 d + i.

    Shard totals differ (priorities scaled by d + 1) and shard 2 is half full.
    """
    buf = replay.prioritized(capacity=CAPACITY, alpha=alpha)
    rng = np.random.default_rng(0)
    states, masses = [], []
    for d in range(SHARDS):
        n = CAPACITY // 2 if d == 2 else CAPACITY
        p = rng.uniform(0.1, 2.0, n).astype(np.float32) * (d + 1)
        s = buf.add(buf.init({"id": jnp.int32(0)}),
                    {"id": jnp.arange(n, dtype=jnp.int32) + CAPACITY * d}, jnp.asarray(p))
        states.append(s)
        masses.append(np.pad(p.astype(np.float64) ** alpha, (0, CAPACITY - n)))
    return buf, jax.tree.map(lambda *x: jnp.stack(x), *states), np.concatenate(masses)


def _sample_many(buf, states, keys, beta=0.4):
    def one(s, k):
        return parallel.sample_global(buf, s, k, BATCH, beta, axis_name=axes.DATA)
    per_shard = jax.vmap(one, in_axes=(0, None), axis_name=axes.DATA)  # shards as an axis
    return jax.jit(jax.vmap(per_shard, in_axes=(None, 0)))(states, keys)  # [K, D, B]


def test_global_per_matches_the_global_distribution():
    """Chi-square of slot counts over 2000 global batches against P(i) = m_i / sum m."""
    buf, states, mass = _shards()
    out = _sample_many(buf, states, jax.random.split(jax.random.key(1), 2000))
    valid = np.asarray(out.valid)
    np.testing.assert_array_equal(np.asarray(out.count).sum(axis=1), BATCH)  # psum = B
    assert int(np.asarray(out.dropped).max()) == 0
    ids = np.asarray(out.sample.transitions["id"])[valid]
    counts = np.bincount(ids, minlength=SHARDS * CAPACITY)
    p = mass / mass.sum()
    assert counts[p == 0].sum() == 0  # empty slots of the half-full shard never drawn
    expected = p[p > 0] * ids.size
    chi2 = float(np.sum((counts[p > 0] - expected) ** 2 / expected))
    df = expected.size - 1
    # Wilson-Hilferty: (chi2/df)^(1/3) is about normal; z < 3.5 is p > 2e-4. Stratified
    # draws vary less than multinomial ones, so this is conservative.
    z = ((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / np.sqrt(2 / (9 * df))
    assert z < 3.5, (chi2, df, z)
    # Shard shares follow the shard totals (4 shards: per-shard counts drawn from them).
    share = np.bincount(ids // CAPACITY, minlength=SHARDS) / ids.size
    np.testing.assert_allclose(share, mass.reshape(SHARDS, -1).sum(1) / mass.sum(), atol=0.01)


def test_global_per_probabilities_and_weights_use_global_n_and_max_weight():
    buf, states, mass = _shards()
    beta = 0.4
    out = _sample_many(buf, states, jax.random.split(jax.random.key(2), 4), beta)
    valid = np.asarray(out.valid)
    ids = np.asarray(out.sample.transitions["id"])[valid]
    np.testing.assert_allclose(np.asarray(out.sample.probabilities)[valid],
                               mass[ids] / mass.sum(), rtol=1e-5)
    # w_i = (N P_i)^-beta / max_j (N P_j)^-beta over ALL shards = (m_i / min_j m_j)^-beta.
    n = np.count_nonzero(mass)
    p = mass / mass.sum()
    w_all = (n * p[p > 0]) ** -beta
    np.testing.assert_allclose(np.asarray(out.sample.weights)[valid],
                               (n * p[ids]) ** -beta / w_all.max(), rtol=1e-5)
    assert np.all(np.asarray(out.sample.weights)[~valid] == 0)


def test_global_per_on_one_shard_is_the_plain_stratified_sample():
    buf, states, _ = _shards()
    one = jax.tree.map(lambda x: x[0], states)
    key = jax.random.key(3)
    got = parallel.sample_global(buf, one, key, BATCH, axis_name=None)
    ref = buf.sample(one, key, BATCH)
    assert bool(got.valid.all())
    np.testing.assert_array_equal(got.sample.indices, ref.indices)
    np.testing.assert_allclose(got.sample.weights, ref.weights, rtol=1e-6)


def test_global_per_packs_valid_rows_and_counts_overflow():
    buf, states, _ = _shards()
    out = jax.vmap(lambda s: parallel.sample_global(buf, s, jax.random.key(4), BATCH,
                                                    axis_name=axes.DATA, max_per_shard=4),
                   axis_name=axes.DATA)(states)
    count, valid = np.asarray(out.count), np.asarray(out.valid)
    np.testing.assert_array_equal(valid.sum(1), np.minimum(count, 4))
    np.testing.assert_array_equal(np.asarray(out.dropped), np.maximum(count - 4, 0))
    for row in valid:  # valid rows first
        assert not np.any(np.diff(row.astype(int)) > 0)


def _reference_batch(mass, key, beta):
    """numpy: the stratified batch one buffer holding every shard (in shard order) draws,
    its slots and IS weights divided by the batch maximum."""
    u = np.asarray(replay.stratified_uniforms(key, BATCH), np.float64)
    cum = np.cumsum(mass)
    ids = np.minimum(np.searchsorted(cum, u * cum[-1], side="right"), mass.size - 1)
    w = (mass[ids] / mass[mass > 0].min()) ** -beta
    return ids, w / w.max()


@pytest.mark.parametrize("max_per_shard", [None, 8])
def test_weighted_batch_gives_the_single_buffer_loss(max_per_shard):
    """psum over shards of mean(loss_weights * x) is the IS-weighted mean of x over the
    global batch: the gradient a single buffer holding all shards would give (Ape-X)."""
    buf, states, mass = _shards()
    beta = 0.4

    def shard_part(state, key):
        b = replay.weighted_batch(buf, state, key, BATCH, beta, axes.DATA, max_per_shard)
        x = b.transitions["id"].astype(jnp.float32)
        return jax.lax.psum(jnp.mean(b.loss_weights * x), axes.DATA), b

    fn = jax.jit(jax.vmap(shard_part, in_axes=(0, None), axis_name=axes.DATA))
    for seed in range(5):
        key = jax.random.key(100 + seed)
        got, b = fn(states, key)
        ids, w = _reference_batch(mass, key, beta)
        valid = np.asarray(b.valid)
        k = valid.shape[1]
        assert k == (BATCH if max_per_shard is None else max_per_shard)
        got_ids = np.sort(np.asarray(b.transitions["id"])[valid])
        if max_per_shard is None:
            np.testing.assert_array_equal(got_ids, np.sort(ids))
            np.testing.assert_allclose(float(got[0]), np.mean(w * ids), rtol=1e-5)
            assert int(np.asarray(b.dropped).sum()) == 0
        else:  # shard 3 holds ~40% of the mass (~13 rows): it overflows K = 8
            dropped = np.asarray(b.dropped)
            assert dropped.sum() > 0
            assert valid.sum() + dropped.sum() == BATCH
            assert set(got_ids) <= set(ids)
        # rows outside the batch: weight 0 and index -1 (update_priorities skips them)
        np.testing.assert_array_equal(np.asarray(b.loss_weights)[~valid], 0.0)
        np.testing.assert_array_equal(np.asarray(b.indices)[~valid], -1)


def test_weighted_batch_on_one_buffer_is_sample_with_batch_max_weights():
    buf, states, _ = _shards()
    one = jax.tree.map(lambda x: x[3], states)
    key = jax.random.key(7)
    b = replay.weighted_batch(buf, one, key, BATCH, 0.4)
    ref = buf.sample(one, key, BATCH, 0.4)
    np.testing.assert_array_equal(b.indices, ref.indices)
    np.testing.assert_allclose(b.loss_weights, ref.weights / ref.weights.max(), rtol=1e-6)
    assert bool(b.valid.all()) and int(b.dropped) == 0


def test_global_batch_then_update_in_a_scan_does_not_copy_the_tree():
    """Ape-X's sharded learner loop (global batch, write-back) keeps every read of the
    tree before the in-place update, so XLA:CPU does not copy the tree per step."""
    buf, states, _ = _shards()

    def body(carry, key):
        state, acc = carry
        b = replay.weighted_batch(buf, state, key, BATCH, 0.4, axes.DATA, 16)
        state = buf.update_priorities(state, b.indices, jnp.full(16, 2.0))
        return (state, acc + jnp.sum(b.loss_weights)), None

    def run(carry, keys):
        return jax.vmap(lambda c: jax.lax.scan(body, c, keys)[0], axis_name=axes.DATA)(carry)

    keys = jax.random.split(jax.random.key(0), 4)
    carry = (states, jnp.zeros(SHARDS))
    hlo = jax.jit(run, donate_argnums=0).lower(carry, keys).compile().as_text()
    tree_shape = f"f32[{SHARDS},{states.tree.flat.shape[1]}]"
    copies = [ln for ln in hlo.splitlines() if f"= {tree_shape}" in ln and " copy(" in ln]
    assert not copies, copies


# --- 8 fake devices, in a fresh process ------------------------------------------------

# Two halves of about equal time, so that pytest-xdist's workers share them (run as one
# process, the file took 406 s on a 2-core Zen 2 host and held one worker alone).
REPLAY_AND_ASYNC = "apex or dqn or sac or td3 or actor_learner or async"
# These tests run tiny budgets: alone on a Zen 2 host, the synchronous half spent 129 of
# its 137 s tracing and compiling. The subprocess loads tests/conftest.py, so its tests
# compile with `jax_disable_most_optimizations` like the rest of the suite (LLVM level 0:
# the halves took 140 and 129 s instead of 185 and 179 s, side by side); both sides of
# every comparison in the file are compiled alike, and XLA's HLO passes (sharding,
# collectives, fusion) are unchanged. JAXRL_PAR_TEST_XLA_DEFAULTS=1, inherited, turns it
# off there too.


@pytest.mark.parametrize("selection", [f"not ({REPLAY_AND_ASYNC})", REPLAY_AND_ASYNC],
                         ids=["synchronous", "replay-and-async"])
def test_eight_device_suite(selection):
    """Runs tests/test_parallel_devices.py with 8 fake CPU devices (see that file), the
    tests that ``-k selection`` picks; together the two selections are the whole file."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=8").strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", selection,
         os.path.join(HERE, "test_parallel_devices.py")],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    last = proc.stdout.splitlines()[-1]
    assert "passed" in last and "skipped" not in last and "failed" not in last, proc.stdout[-2000:]
