"""Networks: initialisation under vmap (no batched LAPACK call, same bits as one seed),
action sampling (same bits as jax.random) and byte observations (same bits as float)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.algos import dqn, ppo
from jaxrl_par.networks import ActorCritic, QNetwork, orthogonal

SEEDS = 4


def _compile_unbatched(fn, *args):
    """``fn`` compiled for ``args``, after checking that it calls LAPACK and that every
    LAPACK call's result is one matrix (rank 2), not a batch of them."""
    compiled = jax.jit(fn).lower(*args).compile()
    shapes = re.findall(r"= (\w+\[[\d,]*\])[^\n]*custom_call_target=\"lapack_",
                        compiled.as_text())
    assert shapes and all(s.count(",") == 1 for s in shapes), shapes
    return compiled


def _arrays(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)
            if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]


def test_orthogonal_under_vmap_calls_lapack_one_matrix_at_a_time():
    # jaxlib 0.10's batched QR kernel blocks an XLA pool thread on work queued to the
    # same pool: two of them at once hung a vmapped MinAtar PPO init on every try on a
    # 2-core machine. Every QR in a vmapped (and doubly vmapped) init must be one matrix.
    init = orthogonal(1.0)
    keys = jax.random.split(jax.random.key(0), (3, SEEDS))
    one = jax.vmap(lambda k: init(k, (64, 32), jax.numpy.float32))
    two = jax.vmap(one)
    _compile_unbatched(one, keys[0])
    q = np.asarray(_compile_unbatched(two, keys)(keys))
    assert q.shape == (3, SEEDS, 64, 32)
    np.testing.assert_allclose(np.einsum("abij,abik->abjk", q, q),
                               np.broadcast_to(np.eye(32), (3, SEEDS, 32, 32)), atol=1e-5)
    assert not np.allclose(q[0, 0], q[0, 1])  # different keys, different matrices


def test_vmapped_algorithm_init_equals_one_seed_at_a_time():
    keys = jax.random.split(jax.random.key(3), SEEDS)
    for algo in (ppo.make(ppo.Config(env="Breakout-MinAtar", num_envs=4, num_steps=8,
                                     total_timesteps=10_000)),
                 dqn.make(dqn.Config(env="CartPole-v1"))):
        batched = _compile_unbatched(jax.vmap(algo.init), keys)
        got = _arrays(batched(keys).params)
        init = jax.jit(algo.init)
        per_seed = [_arrays(init(k).params) for k in keys]
        for i, leaf in enumerate(got):
            np.testing.assert_array_equal(leaf, np.stack([p[i] for p in per_seed]))


def test_sampling_through_noise_is_jax_random_bit_for_bit():
    # sample(key) samples through noise (sample_with_noise), and equals jax.random's own
    # samplers bit for bit.
    from jaxrl_par.networks import Categorical, DiagGaussian

    logits = jax.random.normal(jax.random.key(0), (64, 5))
    keys = jax.random.split(jax.random.key(1), 64)
    ours = jax.vmap(lambda k, row: Categorical(row).sample(k))(keys, logits)
    ref = jax.vmap(jax.random.categorical)(keys, logits)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    mean, log_std = logits, jnp.full((64, 5), -0.5)
    ours = DiagGaussian(mean, log_std).sample(jax.random.key(2))
    ref = mean + jnp.exp(log_std) * jax.random.normal(jax.random.key(2), (64, 5))
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


@pytest.mark.parametrize("num_actions", [2, 3])
def test_action_noise_samples_the_softmax(num_actions):
    """PPO's rollout samples ``argmax(logits + action_noise)``: each action's frequency
    matches its softmax probability (chi-square, fixed seed)."""
    from scipy import stats

    from jaxrl_par.networks import Categorical, action_noise

    logits = jnp.asarray([[0.0, 1.5, -1.0][:num_actions], [2.0, -3.0, 0.5][:num_actions]])
    n = 200_000
    noise = action_noise(jax.random.key(4), (n, 2, num_actions), discrete=True)
    actions = np.asarray(Categorical(logits[None]).sample_with_noise(noise))  # [n, 2]
    probs = np.asarray(jax.nn.softmax(logits), np.float64)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    for row in range(2):
        counts = np.bincount(actions[:, row], minlength=num_actions)
        assert stats.chisquare(counts, probs[row] * n).pvalue > 1e-3, (counts, probs[row] * n)


def test_networks_take_byte_observations_as_their_float_values():
    # MinAtar envs deliver uint8 0/1 grids; every torso converts them at its input, so
    # a network gives bit for bit what it gives on the float32 values.
    obs = jax.random.bernoulli(jax.random.key(0), 0.2, (16, 10, 10, 4)).astype(jnp.uint8)
    nets = [ActorCritic(num_actions=3, obs_shape=(10, 10, 4)),  # CNN torso
            ActorCritic(num_actions=3, obs_shape=(10, 10, 4), torso="mlp"),
            QNetwork(num_actions=3, obs_shape=(10, 10, 4), dueling=True)]
    for net in nets:
        params = net.init(jax.random.key(1), obs.astype(jnp.float32))
        got = jax.tree.leaves(net.apply(params, obs))
        want = jax.tree.leaves(net.apply(params, obs.astype(jnp.float32)))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def _networks():
    """Every network the algorithms build, with an example input."""
    from jaxrl_par.networks import EnsembleQ, SquashedGaussianActor

    vec, img = jnp.ones((3, 4)), jnp.ones((3, 10, 10, 4))
    return [
        ("actor-critic, discrete", ActorCritic(2, obs_shape=(4,)), (vec,)),
        ("actor-critic, Gaussian", ActorCritic(2, discrete=False, obs_shape=(4,)), (vec,)),
        ("actor-critic, Gaussian, softplus std",
         ActorCritic(2, discrete=False, obs_shape=(4,), action_std="softplus"), (vec,)),
        ("actor-critic, shared torso", ActorCritic(2, obs_shape=(4,), shared_torso=True),
         (vec,)),
        ("actor-critic, CNN", ActorCritic(3, obs_shape=(10, 10, 4)), (img,)),
        ("Q, dueling", QNetwork(2, obs_shape=(4,), dueling=True), (vec,)),
        ("Q, CNN", QNetwork(3, obs_shape=(10, 10, 4)), (img,)),
        ("squashed Gaussian actor", SquashedGaussianActor(2, (-1.0, -2.0), (1.0, 2.0),
                                                          obs_shape=(4,)), (vec,)),
        ("critic ensemble", EnsembleQ(2, (8, 8)), (vec, jnp.ones((3, 2)))),
    ]


def _outputs(out):
    return [x for x in jax.tree.leaves(out) if jnp.issubdtype(x.dtype, jnp.floating)]


@pytest.mark.parametrize("name, net, args", _networks(), ids=[n for n, *_ in _networks()])
def test_forward_mode_autodiff_through_every_network(name, net, args):
    """``jax.jvp`` with respect to the parameters works through every network (forward mode:
    Hessian-vector products, ``jax.jacfwd``) and agrees with reverse mode: for random
    directions ``t`` and cotangents ``u``, ``<u, J t> = <J^T u, t>``."""
    params = net.init(jax.random.key(0), *args)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    tangent = treedef.unflatten([jax.random.normal(k, p.shape, p.dtype)
                                 for k, p in zip(keys, leaves, strict=True)])
    def f(p):
        return _outputs(net.apply(p, *args))
    primal, jvp = jax.jvp(f, (params,), (tangent,))
    cotangent = [jax.random.normal(jax.random.key(2 + i), y.shape, y.dtype)
                 for i, y in enumerate(primal)]
    _, vjp = jax.vjp(f, params)
    (pullback,) = vjp(cotangent)
    forward = sum(float(jnp.vdot(u, dy)) for u, dy in zip(cotangent, jvp, strict=True))
    backward = sum(float(jnp.vdot(g, t)) for g, t in
                   zip(jax.tree.leaves(pullback), jax.tree.leaves(tangent), strict=True))
    np.testing.assert_allclose(forward, backward, rtol=1e-4, atol=1e-4, err_msg=name)


def test_softplus_std_is_a_head_of_the_actor_torso():
    """``action_std="softplus"``: ``std = softplus(W h + b) + 0.001`` per state, from the
    actor's torso features ``h``; "parameter": one learned ``log_std`` for every state."""
    net = ActorCritic(2, discrete=False, obs_shape=(3,), action_std="softplus")
    obs = jnp.array([[0.5, -1.0, 2.0], [0.0, 0.3, -0.7]])
    params = net.init(jax.random.key(0), obs)
    p = params["params"]
    assert "log_std" not in p
    p = jax.tree.map(jnp.zeros_like, p)  # a zero head: softplus(0) + 0.001 in every state
    dist, _ = net.apply({"params": p}, obs)
    np.testing.assert_allclose(np.exp(dist.log_std), np.full((2, 2), np.log(2) + 0.001),
                               rtol=1e-6)
    p["std_head"]["bias"] = jnp.array([1.0, -2.0])
    dist = net.apply({"params": p}, obs, method="actor")
    want = np.log1p(np.exp([1.0, -2.0])) + 0.001  # softplus by hand
    np.testing.assert_allclose(np.exp(dist.log_std), np.broadcast_to(want, (2, 2)),
                               rtol=1e-6)
    # the std depends on the state through the torso's features
    dist = net.apply(params, obs, method="actor")
    assert not np.allclose(dist.log_std[0], dist.log_std[1])
    with pytest.raises(ValueError, match="action_std='wide'; choose from"):
        ActorCritic(2, discrete=False, obs_shape=(3,), action_std="wide").init(
            jax.random.key(0), obs)


@pytest.mark.parametrize("scale", [0.01, 3.0])
def test_policy_init_scale_sets_the_norm_of_the_policy_head_columns(scale):
    """The policy head's kernel ``[64, A]`` is orthogonal times ``policy_init_scale``:
    its columns are orthogonal with norm ``scale``."""
    net = ActorCritic(3, obs_shape=(4,), policy_init_scale=scale)
    kernel = net.init(jax.random.key(1), jnp.ones((1, 4)))["params"]["policy_head"]["kernel"]
    np.testing.assert_allclose(np.asarray(kernel.T @ kernel), scale**2 * np.eye(3),
                               rtol=1e-4, atol=1e-6 * scale**2)
