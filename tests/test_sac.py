"""SAC: the squashed Gaussian, random warm-up, truncation bootstraps, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.algos import sac
from jaxrl_par.networks import TanhGaussian
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train


@pytest.mark.slow
@pytest.mark.xla_optimized
def test_sac_learns_pendulum():
    """Seed 0, 1.5e4 env steps (1e3 of them random): the last updates average >= -350 (a
    random policy gets ~-1,200; seeds 0-3 of this budget: -180, -124, -119, -251)."""
    cfg = sac.Config(total_timesteps=15_000, learning_starts=1_000)
    final = train(sac.make(cfg), 0, progress=False).final_returns(fraction=0.05)[0]
    assert final >= -350.0, final


def test_tanh_gaussian_is_a_density_on_the_box_and_reparameterised():
    d = TanhGaussian(jnp.array([0.3]), jnp.array([-0.2]), jnp.array([-2.0]), jnp.array([2.0]))
    xs = jnp.linspace(-2 + 1e-4, 2 - 1e-4, 400_001)[:, None]
    mass = float(jnp.sum(jnp.exp(d.log_prob(xs))) * (xs[1, 0] - xs[0, 0]))
    assert mass == pytest.approx(1.0, abs=3e-3)
    noise = jax.random.normal(jax.random.key(0), (1000, 1))
    action, log_prob = d.sample_and_log_prob(noise)
    assert float(jnp.min(action)) > -2.0 and float(jnp.max(action)) < 2.0
    np.testing.assert_allclose(log_prob, d.log_prob(action), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(action, d.sample_with_noise(noise))
    assert float(d.mode()[0]) == pytest.approx(2.0 * np.tanh(0.3))
    # the gradient reaches the mean through the sample (reparameterisation)
    grad = jax.grad(lambda m: jnp.sum(d._replace(mean=m).sample_and_log_prob(noise)[0]))(d.mean)
    assert float(grad[0]) > 0


def test_warm_up_acts_uniformly_and_learns_nothing_until_learning_starts():
    """Before ``learning_starts`` env steps the actions are uniform over Pendulum's box
    [-2, 2] (mean 0, variance 16/12) and no gradient step is taken; the buffer holds
    every step, and since Pendulum only truncates (at 200 steps) no stored transition is
    terminal: truncations bootstrap."""
    cfg = sac.Config(num_envs=4, num_steps=64, total_timesteps=4 * 64 * 4, learning_starts=768)
    result = train(sac.make(cfg), 0, progress=False, num_chunks=1)
    np.testing.assert_array_equal(result.metrics["gradient_steps"][0], [0, 0, 256, 512])
    buffer = jax.tree.map(lambda x: x[0], result.state.buffer)
    assert int(buffer.size) == 1024
    stored = buffer.data
    actions = np.asarray(stored.action[:768, 0])
    assert abs(actions.mean()) < 0.15 and actions.var() == pytest.approx(16 / 12, rel=0.1)
    assert np.all(np.asarray(stored.terminated) == 0.0)
    # next_obs is the observation each step reached: the next row's obs within an env
    obs, next_obs = np.asarray(stored.obs), np.asarray(stored.next_obs)
    np.testing.assert_allclose(next_obs[:4 * 63], obs[4:4 * 64])  # rows are (step, env)


def test_sac_moves_its_mean_to_the_rewarded_action():
    """ProbeContinuous: one-step episodes, reward -(a - 0.5)^2. The greedy action (the
    squashed mean) ends near 0.5."""
    cfg = sac.Config(env="ProbeContinuous-v0", num_envs=4, num_steps=8,
                     total_timesteps=4_000, learning_starts=256, batch_size=64,
                     hidden_sizes=(16,))
    result = train(sac.make(cfg), 0, progress=False, num_chunks=1)
    assert greedy_returns(sac.make(cfg), result.state, num_envs=4)[0] > -0.01


@pytest.mark.parametrize("changes,message", [
    ({"env": "CartPole-v1"}, "discrete actions; sac takes a continuous"),
    ({"train_frequency": 3}, "train_frequency=3 does not divide"),
    ({"batch_size": 512, "buffer_size": 256}, "batch_size=512 exceeds buffer_size=256"),
    ({"tau": 1.5}, "tau must be in"),
    ({"sweep": ("hidden_sizes",)}, "cannot be swept"),
])
def test_config_errors_name_the_fix(changes, message):
    with pytest.raises(ValueError, match=message):
        sac.Config(**changes)
