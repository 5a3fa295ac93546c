"""Data/population parallelism on 8 fake CPU devices.

Needs ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before jax is imported, so
``tests/test_parallel.py`` runs this file in a subprocess; collected in a 1-device
process, it skips.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from killed import train_killed_after

from jaxrl_par import axes, envs, parallel
from jaxrl_par.algos import apex, dqn, impala, ppo
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.runner.runs import load_run
from jaxrl_par.runner.training import train

pytestmark = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs 8 devices: run through tests/test_parallel.py"
)

# Global batch B = 8 envs x 8 steps; two minibatches, obs and reward normalisation on
# (more pmeans, and a per-env running return split over the shards). max_grad_norm is
# huge so that clipping cannot hide an N-times gradient.
CFG = ppo.Config(num_envs=8, num_steps=8, num_minibatches=2, update_epochs=2,
                 total_timesteps=8 * 8 * 3, hidden_sizes=(8, 8), normalize_obs=True,
                 normalize_rewards=True, max_grad_norm=1e6)
DP_CFG = dataclasses.replace(CFG, axis_name=axes.DATA)


def _run(cfg, seeds, **kw):
    return train(ppo.make(cfg), seeds, progress=False, **{"num_chunks": 1, **kw})


@functools.cache
def _reference(seed: int):
    """One seed on one device, no mesh (the plain runner)."""
    return _run(CFG, [seed])


def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def _adam_moments(opt_state):
    """Adam's first moment ``mu``: linear in the gradients (mu_k = sum_j 0.1 0.9^(k-j) g_j),
    so an N-times gradient gives an N-times ``mu``."""
    return [x for p, x in jax.tree_util.tree_flatten_with_path(opt_state)[0]
            if "mu" in jax.tree_util.keystr(p)]


def test_check_vma_trap_is_real():
    """jax behaviour we build on: with check_vma=True grad of a replicated parameter is
    already summed over the axis, so pmean(grad) is D times too big; False gives pmap's."""
    mesh = parallel.make_mesh(4)
    w, x = jnp.float32(2.0), jnp.arange(8.0)

    def f(w, x):
        return jax.lax.pmean(jax.grad(lambda w: jnp.mean(w * x))(w), axes.DATA)

    expected = float(jnp.mean(x))  # d/dw mean(w x) = mean(x) = 3.5
    got = {cv: float(jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(axes.DATA)),
                                           out_specs=P(), check_vma=cv))(w, x))
           for cv in (True, False)}
    assert got[False] == pytest.approx(expected)
    assert got[True] == pytest.approx(4 * expected)  # if this fails, jax changed: revisit


@pytest.mark.parametrize("devices", [2, 8])  # (4 adds nothing that 2 and 8 do not cover)
def test_ppo_data_parallel_equals_one_device(devices, tmp_path):
    """Global batch B on D devices equals B on 1 device (the plain runner, `_reference`);
    its checkpoint, read back by `load_run`, is that one-device state too."""
    ref = _reference(0)
    out = _run(DP_CFG, [0], devices=devices, log_dir=str(tmp_path))
    run = load_run(str(tmp_path))
    assert run.data_shards == devices and run.algo.config == CFG
    for a, b in zip(jax.tree.leaves(run.state.params),
                    jax.tree.leaves(ref.state.params), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(run.state.env_state),
                    jax.tree.leaves(ref.state.env_state), strict=True):
        np.testing.assert_array_equal(a, b)
    state = parallel.unreplicate(out.state)
    # Gradients: Adam's first moment after 3 updates x 2 epochs x 2 minibatches.
    for a, b in zip(_adam_moments(state.opt_state),
                    _adam_moments(ref.state.opt_state), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref.state.params), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.obs_stats),
                    jax.tree.leaves(ref.state.obs_stats), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.reward_stats),
                    jax.tree.leaves(ref.state.reward_stats), strict=True):
        assert _rel_err(a, b) <= 1e-5
    returns = np.asarray(out.state.discounted_return)  # [S, D, N/D]: data order
    np.testing.assert_allclose(returns.reshape(returns.shape[0], -1),
                               ref.state.discounted_return, rtol=1e-5)
    # The shards' envs, concatenated in data order, are the one device's envs.
    for a, b in zip(jax.tree.leaves(out.state.env_state),
                    jax.tree.leaves(ref.state.env_state), strict=True):
        a = np.asarray(a)
        np.testing.assert_array_equal(a.reshape((a.shape[0], -1) + a.shape[3:]), b)
    for k in ("loss", "value_loss", "entropy"):
        np.testing.assert_allclose(out.metrics[k], ref.metrics[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out.metrics["num_episodes"], ref.metrics["num_episodes"])


def _stopped_then_resumed(first_algo, first, then_algo, then, log_dir):
    """Seed 0 trained in 3 chunks on ``first`` devices (None: no mesh), killed after its
    first update, then resumed from ``log_dir`` with ``then_algo`` on ``then`` devices:
    the resumed run's result, and its state as one device holds it."""
    def mesh(devices):
        return {"devices": devices} if devices else {}

    train_killed_after(1, first_algo, [0], progress=False, log_dir=log_dir, num_chunks=3,
                       **mesh(first))
    out = train(then_algo, [0], progress=False, log_dir=log_dir, num_chunks=3, resume=True,
                **mesh(then))
    return out, (parallel.unreplicate(out.state) if then else out.state)


def test_resume_on_another_layout_equals_never_stopping(tmp_path):
    """A run stopped after its first update continues on another device layout (2 -> 4
    devices, 2 -> one device without a mesh, one device -> 2) and ends where the one-device
    run that never stopped ends."""
    ref = _reference(0)
    for i, (first, then) in enumerate([(2, 4), (2, None), (None, 2)]):
        out, state = _stopped_then_resumed(ppo.make(DP_CFG if first else CFG), first,
                                           ppo.make(DP_CFG if then else CFG), then,
                                           str(tmp_path / str(i)))
        for a, b in zip(jax.tree.leaves(state.params),
                        jax.tree.leaves(ref.state.params), strict=True):
            assert _rel_err(a, b) <= 1e-5, (first, then)
        np.testing.assert_allclose(out.metrics["loss"], ref.metrics["loss"], rtol=1e-5,
                                   atol=1e-6)


def test_population_of_4_seeds_times_2_data_devices_equals_seeds_one_by_one():
    out = _run(DP_CFG, [0, 1, 2, 3], devices=8, pop=4)
    assert jax.tree.leaves(out.state.params)[0].shape[:2] == (4, 2)
    # The reference is the 4 seeds vmapped on one device, one compile instead of four:
    # test_train checks that vmapped seeds equal single runs, and seed 0 is checked
    # against its single run here too.
    ref = _run(CFG, [0, 1, 2, 3])
    for i in range(4):
        for a, b in zip(jax.tree.leaves(out.state.params),
                        jax.tree.leaves(ref.state.params), strict=True):
            assert _rel_err(np.asarray(a)[i, 0], np.asarray(b)[i]) <= 1e-5
        np.testing.assert_allclose(out.metrics["loss"][i], ref.metrics["loss"][i],
                                   rtol=1e-5, atol=1e-6)
    single = _reference(0)
    for a, b in zip(jax.tree.leaves(out.state.params),
                    jax.tree.leaves(single.state.params), strict=True):
        assert _rel_err(np.asarray(a)[0, 0], np.asarray(b)[0]) <= 1e-5


def test_a_sweep_over_a_population_mesh_equals_the_sweep_on_one_device():
    """Four lanes of (seed, learning rate, gamma) on a 4 x 2 (pop x data) mesh: each
    lane's values are written into every data shard of its pop group, and every lane
    trains as the same sweep does on one device."""
    sweep = ("learning_rate", "gamma")
    hparams = {"learning_rate": [1e-3, 1e-3, 3e-4, 3e-4], "gamma": [0.9, 0.99, 0.9, 0.99]}
    out = _run(dataclasses.replace(DP_CFG, sweep=sweep), [0, 1, 0, 1], devices=8, pop=4,
               hparams=hparams)
    assert out.state.hparams["gamma"].shape == (4, 2)
    np.testing.assert_array_equal(np.asarray(out.state.hparams["gamma"]),
                                  np.float32([[0.9] * 2, [0.99] * 2] * 2))
    ref = _run(dataclasses.replace(CFG, sweep=sweep), [0, 1, 0, 1], hparams=hparams)
    for i in range(4):
        for a, b in zip(jax.tree.leaves(out.state.params),
                        jax.tree.leaves(ref.state.params), strict=True):
            assert _rel_err(np.asarray(a)[i, 0], np.asarray(b)[i]) <= 1e-5
        np.testing.assert_allclose(out.metrics["loss"][i], ref.metrics["loss"][i],
                                   rtol=1e-5, atol=1e-6)
    assert not np.allclose(out.metrics["loss"][0], out.metrics["loss"][2])  # values used


def test_pbt_on_a_population_mesh_equals_pbt_on_one_device():
    """PBT's whole-state copies go across pop shards and come back in the mesh's layout;
    the steps and the training equal the same PBT run on one device."""
    from jaxrl_par.runner.pbt import PBT

    hparams = {"learning_rate": [1e-6, 3e-3, 1e-6, 1e-3]}
    sweep = ("learning_rate",)
    out = _run(dataclasses.replace(DP_CFG, sweep=sweep, total_timesteps=8 * 8 * 6),
               [0, 1, 2, 3], devices=8, pop=4, hparams=hparams, pbt=PBT(interval=2))
    ref = _run(dataclasses.replace(CFG, sweep=sweep, total_timesteps=8 * 8 * 6),
               [0, 1, 2, 3], hparams=hparams, pbt=PBT(interval=2))
    np.testing.assert_array_equal(out.metrics["hparams/learning_rate"],
                                  ref.metrics["hparams/learning_rate"])
    assert not np.array_equal(ref.metrics["hparams/learning_rate"][:, 0],
                              ref.metrics["hparams/learning_rate"][:, -1])
    for i in range(4):
        for a, b in zip(jax.tree.leaves(out.state.params),
                        jax.tree.leaves(ref.state.params), strict=True):
            assert _rel_err(np.asarray(a)[i, 0], np.asarray(b)[i]) <= 1e-5


def test_errors_name_the_numbers_before_compiling():
    with pytest.raises(ValueError, match="pop=3 does not divide devices=8"):
        _run(DP_CFG, [0, 1, 2], devices=8, pop=3)
    with pytest.raises(ValueError, match="num_envs=6 does not divide over 4 devices"):
        _run(dataclasses.replace(DP_CFG, num_envs=6), [0], devices=4)
    with pytest.raises(ValueError, match="3 seed.* do not divide over pop=2"):
        _run(DP_CFG, [0, 1, 2], devices=4, pop=2)
    with pytest.raises(ValueError, match="axis_name=None"):
        _run(CFG, [0], devices=2)
    with pytest.raises(ValueError, match="devices=16 but only 8"):
        _run(DP_CFG, [0], devices=16)
    from jaxrl_par.algos import gorila  # no axis_name at all: not "make it with axis_name"

    with pytest.raises(ValueError, match="gorila.Config has no axis_name: this algorithm "
                                         "does not run data parallel"):
        train(gorila.make(gorila.Config(total_timesteps=2000)), [0], devices=2,
              progress=False)


def _diverging_algorithm() -> Algorithm:
    """Plain SGD on w with a shard-dependent step and no pmean: replicas drift apart."""

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        axis_name: str = axes.DATA

    def init(key):
        return {"params": {"w": jnp.zeros(3)}, "key": key}

    def update(state):
        w = state["params"]["w"] + axes.axis_index(axes.DATA).astype(jnp.float32)
        return {"params": {"w": w}, "key": state["key"]}, {"episode_return": jnp.float32(0)}

    return Algorithm(Cfg(), init, update, num_updates=4, env_steps_per_update=1,
                     axis_name=axes.DATA, data_parallel=True)


def test_replication_check_catches_divergence():
    pattern = r"(?s)after update 2.*\[.params.\]\[.w.\]"
    with pytest.raises(parallel.ReplicationError, match=pattern):
        train(_diverging_algorithm(), [0], num_chunks=2, progress=False, devices=2,
              debug_replication=True)
    with pytest.raises(parallel.ReplicationError, match="after training"):
        train(_diverging_algorithm(), [0], num_chunks=2, progress=False, devices=2)


# Ape-X with one replay shard per device and one global prioritized batch (64 rows).
APEX_DP = apex.Config(env="ProbeTimeLimit-v0", gamma=0.9, n_step=3, num_actors=8, num_steps=4,
                      total_timesteps=16_000, buffer_size=1_000, batch_size=32,
                      learning_starts=256, learner_steps_per_iteration=4, learning_rate=1e-2,
                      target_period=10, actor_sync_period=4, hidden_sizes=(32,), loss="mse",
                      axis_name=axes.DATA)


def test_apex_global_replay_on_2_devices_learns_the_time_limit_value():
    """ProbeTimeLimit's value 1 / (1 - 0.9) = 10 needs n-step targets that bootstrap on
    truncation; learnt here from two replay shards sampled as one buffer (the runner also
    checks that the two learners' parameters stayed identical)."""
    out = train(apex.make(APEX_DP), [0], num_chunks=2, progress=False, devices=2)
    state = jax.tree.map(lambda x: x[0], parallel.unreplicate(out.state))
    net = dqn.make_q_network(envs.make(APEX_DP.env, 1), APEX_DP.hidden_sizes,
                             APEX_DP.activation, APEX_DP.dueling)
    q = np.asarray(net.apply(state.params, jnp.zeros((1, 1), jnp.float32)))
    assert q[0, 0] == pytest.approx(10.0, abs=0.5)
    # K defaults to min(2 * 32, global 64) = 64 rows: nothing is ever dropped.
    assert float(np.max(out.metrics["dropped_fraction"])) == 0.0
    # Both shards' buffers were filled by their own actors and sampled by priority.
    assert np.all(np.asarray(out.state.learner.buffer.storage.size) > APEX_DP.batch_size)
    assert float(np.max(out.metrics["learner_steps"])) > 0


def test_apex_global_batch_reports_rows_that_do_not_fit():
    cfg = dataclasses.replace(APEX_DP, max_per_shard=8, total_timesteps=2_048,
                              learning_starts=64)
    out = train(apex.make(cfg), [0], num_chunks=1, progress=False, devices=4)
    dropped = np.asarray(out.metrics["dropped_fraction"])
    # 4 shards x 8 rows = 32 of a global batch of 128: at least 3/4 is dropped.
    learned = np.asarray(out.metrics["learner_steps"]) > 0
    assert np.all(dropped[learned] >= 0.75 - 1e-6)


DQN_DP = dqn.Config(env="ProbeTimeLimit-v0", gamma=0.9, n_step=3, num_envs=8, num_steps=4,
                    total_timesteps=30_000, buffer_size=2_000, batch_size=32,
                    learning_starts=256, train_frequency=4, learning_rate=1e-2,
                    target_update_period=10, exploration_fraction=0.3, epsilon_end=0.2,
                    hidden_sizes=(32,), loss="mse", axis_name=axes.DATA)


@pytest.mark.parametrize("prioritized", [False, True])
def test_dqn_on_2_devices_learns_the_time_limit_value(prioritized):
    """DQN with a replay shard per device and pmean'd gradients learns ProbeTimeLimit's
    value 10 (the runner also checks that both learners stayed identical)."""
    cfg = dataclasses.replace(DQN_DP, prioritized=prioritized)
    out = train(dqn.make(cfg), [0], num_chunks=2, progress=False, devices=2)
    state = jax.tree.map(lambda x: x[0], parallel.unreplicate(out.state))
    net = dqn.make_q_network(envs.make(cfg.env, 1), cfg.hidden_sizes, cfg.activation,
                             cfg.dueling)
    q = np.asarray(net.apply(state.params, jnp.zeros((1, 1), jnp.float32)))
    assert q[0, 0] == pytest.approx(10.0, abs=0.5)
    assert np.all(np.asarray(out.state.buffer.size) > cfg.batch_size)  # both shards filled


# --- actor-learner pipeline: actors on one device, learner and replay on another -------

APEX_PIPE = dataclasses.replace(APEX_DP, axis_name=None, pipeline=True)


def test_apex_actor_learner_on_two_devices_equals_one_device_and_learns():
    """Pipelined Ape-X with its actors on device 1 and its learner on device 0 (two
    programs, run at the same time), and with both halves sharing device 0, gives the
    numbers of its own ``update`` on one device (one program), in 3 and 2 chunks against
    1, and learns ProbeTimeLimit's value 10. ``init`` acts the first batch and update u
    adds the one acted in update u - 1, so after U updates U batches are stored and one
    more is pending."""
    from jaxrl_par.parallel.actor_learner import ActorLearner

    algo = apex.make(APEX_PIPE)
    d0, d1 = jax.devices()[:2]
    split = train(algo, [0, 1], num_chunks=3, progress=False, actor_learner=(d0, d1))
    shared = train(algo, [0, 1], num_chunks=2, progress=False, actor_learner=(d0, d0))
    whole = train(algo, [0, 1], num_chunks=1, progress=False)
    per, updates = APEX_PIPE.env_steps_per_update, APEX_PIPE.num_updates
    # U batches written (the ring wraps at buffer_size), the last one acted still pending
    np.testing.assert_array_equal(whole.state.learner.buffer.storage.insert_pos,
                                  [updates * per % APEX_PIPE.buffer_size] * 2)
    np.testing.assert_array_equal(whole.state.pending.env_steps, [(updates + 1) * per] * 2)
    np.testing.assert_array_equal(whole.state.actor.env_steps, [(updates + 1) * per] * 2)
    for run in (split, shared):
        for name in ("loss", "q_mean", "insert_priority", "sampled_priority", "policy_lag",
                     "learner_steps", "episode_return"):
            np.testing.assert_allclose(run.metrics[name], whole.metrics[name], rtol=1e-6,
                                       atol=1e-7, err_msg=name)
        for half, name in (("learner", "learner_steps"), ("learner", "actor_version"),
                           ("actor", "env_steps"), ("learner", "update_count")):
            np.testing.assert_array_equal(getattr(getattr(run.state, half), name),
                                          getattr(getattr(whole.state, half), name))
        def chex_close(a, b):
            return np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        jax.tree.map(chex_close, run.state.params, whole.state.params)
        np.testing.assert_array_equal(run.state.learner.buffer.storage.data.action,
                                      whole.state.learner.buffer.storage.data.action)
    # the state comes back joined on the learner's device
    assert {d0} == set().union(*(x.devices() for x in jax.tree.leaves(split.state)))
    net = dqn.make_q_network(envs.make(APEX_PIPE.env, 1), APEX_PIPE.hidden_sizes,
                             APEX_PIPE.activation, APEX_PIPE.dueling)
    for seed in range(2):
        params = jax.tree.map(lambda x, s=seed: x[s], split.state.params)
        q = np.asarray(net.apply(params, jnp.zeros((1, 1), jnp.float32)))
        assert q[0, 0] == pytest.approx(10.0, abs=0.5), (seed, q)
    # each half was compiled for its own device, and once: a new runtime for the same
    # algorithm and devices reuses the programs of the run above
    runtime = ActorLearner(algo, (d0, d1))
    runtime.compile(whole.state, 4)
    def placed(program):
        return {d for s in jax.tree.leaves(program.input_shardings)
                                  for d in s.device_set}
    assert placed(runtime.actor_program) == {d1}
    assert placed(runtime.learner_program) == {d0}
    again = ActorLearner(algo, (d0, d1))
    again.compile(whole.state, 7)
    assert again.actor_program is runtime.actor_program
    assert again.learner_program is runtime.learner_program


# --- IMPALA: data parallel, and its actors and learner on two devices --------------------

IMPALA_CFG = impala.Config(num_envs=16, num_steps=8, num_minibatches=2,
                           total_timesteps=16 * 8 * 4, hidden_sizes=(8, 8),
                           max_grad_norm=1e6, actor_sync_period=2)


@pytest.mark.parametrize("devices", [2, 8])
def test_impala_data_parallel_equals_one_device(devices):
    """Pipelined IMPALA over D data devices (each acting 16/D envs; minibatch m the union
    of the shards' minibatches m) gives the one-device gradients, parameters, envs and
    metrics."""
    ref = train(impala.make(IMPALA_CFG), [0], progress=False, num_chunks=1)
    out = train(impala.make(dataclasses.replace(IMPALA_CFG, axis_name=axes.DATA)), [0],
                progress=False, num_chunks=1, devices=devices)
    state = parallel.unreplicate(out.state)
    for a, b in zip(_adam_moments(state.learner.opt_state),
                    _adam_moments(ref.state.learner.opt_state), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref.state.params), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(out.state.actor.env_state),
                    jax.tree.leaves(ref.state.actor.env_state), strict=True):
        a = np.asarray(a)
        np.testing.assert_array_equal(a.reshape((a.shape[0], -1) + a.shape[3:]), b)
    for k in ("loss", "value_loss", "importance_weight", "episode_return", "policy_lag"):
        np.testing.assert_allclose(out.metrics[k], ref.metrics[k], rtol=1e-5, atol=1e-6,
                                   err_msg=k)


def test_impala_actor_learner_on_two_devices_equals_one_device():
    """IMPALA's actors on device 1 and its learner on device 0, two programs at the same
    time (Sebulba's layout), in 3 chunks: the numbers of its own ``update`` on one
    device in one chunk."""
    algo = impala.make(IMPALA_CFG)
    d0, d1 = jax.devices()[:2]
    split = train(algo, [0, 1], num_chunks=3, progress=False, actor_learner=(d0, d1))
    whole = train(algo, [0, 1], num_chunks=1, progress=False)
    for name in ("loss", "importance_weight", "policy_lag", "learner_steps",
                 "episode_return", "num_episodes"):
        np.testing.assert_allclose(split.metrics[name], whole.metrics[name], rtol=1e-6,
                                   atol=1e-7, err_msg=name)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 split.state.params, whole.state.params)
    np.testing.assert_array_equal(split.state.pending.action, whole.state.pending.action)
    assert {d0} == set().union(*(x.devices() for x in jax.tree.leaves(split.state)))


# --- A2C and A3C: data parallel ---------------------------------------------------------


@pytest.mark.parametrize("module,devices", [("a2c", 8), ("a3c", 2)])
def test_a2c_and_a3c_data_parallel_equal_one_device(module, devices):
    """Each device steps num_envs / D of every worker's envs (A2C at 8 devices: one env
    each) and every push is the devices' mean gradient: the server's Adam moments and
    parameters, the reward statistics, the envs and the metrics of one device. Reward
    normalisation is on (statistics over all shards), clipping off (an N-times gradient
    would show)."""
    from jaxrl_par.algos import a2c, a3c

    mod = {"a2c": a2c, "a3c": a3c}[module]
    cfg = mod.Config(**({} if module == "a2c" else {"num_workers": 2}), num_envs=8,
                     num_steps=4, total_timesteps=8 * 4 * 4 * (1 if module == "a2c" else 2),
                     hidden_sizes=(8,), normalize_rewards=True, max_grad_norm=1e6)
    ref = train(mod.make(cfg), [0], progress=False, num_chunks=1)
    out = train(mod.make(dataclasses.replace(cfg, axis_name=axes.DATA)), [0],
                progress=False, num_chunks=1, devices=devices)
    state = parallel.unreplicate(out.state)
    for a, b in zip(_adam_moments(state.server.opt_state),
                    _adam_moments(ref.state.server.opt_state), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.server.params),
                    jax.tree.leaves(ref.state.server.params), strict=True):
        assert _rel_err(a, b) <= 1e-5
    for a, b in zip(jax.tree.leaves(state.workers.reward_stats),
                    jax.tree.leaves(ref.state.workers.reward_stats), strict=True):
        assert _rel_err(a, b) <= 1e-5
    # Worker leaves are [S, D, K, N/D, ...] sharded; in data order they are one device's.
    returns = np.moveaxis(np.asarray(out.state.workers.discounted_return), 1, 2)
    np.testing.assert_allclose(returns.reshape(returns.shape[:2] + (-1,)),
                               ref.state.workers.discounted_return, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(out.state.workers.env_state),
                    jax.tree.leaves(ref.state.workers.env_state), strict=True):
        a = np.moveaxis(np.asarray(a), 1, 2)
        np.testing.assert_array_equal(a.reshape(a.shape[:2] + (-1,) + a.shape[4:]), b)
    for k in ("loss", "value_loss", "entropy", "staleness"):
        np.testing.assert_allclose(out.metrics[k], ref.metrics[k], rtol=1e-5, atol=1e-6,
                                   err_msg=k)
    np.testing.assert_array_equal(out.metrics["num_episodes"], ref.metrics["num_episodes"])


def test_a3c_resumes_on_another_layout(tmp_path):
    """A data-parallel A3C run stopped after its first update goes on without a mesh, and
    a one-device run on 2 devices: every worker's envs and running returns are split or
    joined along their env axis, and both end where the run that never stopped ends."""
    from jaxrl_par.algos import a3c

    cfg = a3c.Config(num_workers=2, num_envs=8, num_steps=4, total_timesteps=64 * 6,
                     hidden_sizes=(8,), normalize_rewards=True, max_grad_norm=1e6)
    made = {None: a3c.make(cfg), 2: a3c.make(dataclasses.replace(cfg, axis_name=axes.DATA))}
    ref = train(made[None], [0], progress=False, num_chunks=1)
    for i, (first, then) in enumerate([(2, None), (None, 2)]):
        out, state = _stopped_then_resumed(made[first], first, made[then], then,
                                           str(tmp_path / str(i)))
        for a, b in zip(jax.tree.leaves(state.server.params),
                        jax.tree.leaves(ref.state.server.params), strict=True):
            assert _rel_err(a, b) <= 1e-5, (first, then)
        np.testing.assert_allclose(out.metrics["loss"], ref.metrics["loss"], rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("module", ["a3c", "gorila"])
def test_async_workers_on_their_own_devices_equal_the_scan(module):
    """A3C's and Gorila's 3 workers on devices 0-2 of 4 (worker k on device k mod 4), the
    server on device 0, gradients and copies crossing devices, in the round-robin order
    and in 3 chunks (Gorila's crossing its warm-up): the state of the one-device scan,
    bit for bit, back on the server's device. With threads, every push is applied."""
    from jaxrl_par.algos import a3c, gorila
    from jaxrl_par.parallel.async_workers import AsyncWorkers

    cfg = (a3c.Config(num_workers=3, num_envs=2, num_steps=4, total_timesteps=24 * 6,
                      hidden_sizes=(8,)) if module == "a3c" else
           gorila.Config(num_workers=3, num_envs=2, num_steps=4, total_timesteps=24 * 6,
                         learning_starts=49, batch_size=16, buffer_size=32,
                         hidden_sizes=(8,)))
    algo = (a3c if module == "a3c" else gorila).make(cfg)
    devices = jax.devices()[:4]
    runtime = AsyncWorkers(algo, devices, schedule="round_robin")
    assert runtime.worker_devices == [devices[0], devices[1], devices[2]]
    spread = train(algo, [0, 1], num_chunks=3, progress=False, async_workers=runtime)
    whole = train(algo, [0, 1], num_chunks=1, progress=False)
    def key_data(x):
        return jax.random.key_data(x) if jnp.issubdtype(
            x.dtype, jax.dtypes.prng_key) else x
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(key_data(a), key_data(b)),
                 spread.state, whole.state)
    assert {devices[0]} == set().union(*(x.devices() for x in jax.tree.leaves(spread.state)))
    threaded = train(algo, [0, 1], num_chunks=3, progress=False,
                     async_workers=AsyncWorkers(algo, devices))
    pushes = cfg.num_workers * (algo.num_updates - algo.warmup_updates)
    assert int(threaded.state.server.version[0]) == pushes


def test_td3_on_2_devices_equals_one_device():
    """TD3 (OU noise) with a replay shard per device and pmean'd gradients: each shard
    acts exactly as its envs do on one device, so the envs and the episode
    returns of the warm-up updates are those of the one-device run; after the learning
    starts, both learners stay identical (the runner checks)."""
    from jaxrl_par.algos import td3

    cfg = td3.Config(env="ProbeContinuous-v0", num_envs=4, num_steps=8, total_timesteps=256,
                     learning_starts=64, batch_size=16, hidden_sizes=(8,), exploration="ou",
                     axis_name=axes.DATA)
    out = train(td3.make(cfg), [0], num_chunks=2, progress=False, devices=2)
    plain = train(td3.make(dataclasses.replace(cfg, axis_name=None)), [0], num_chunks=2,
                  progress=False)
    assert np.all(np.asarray(out.state.buffer.size) == 128)  # each shard its 2 envs' steps
    np.testing.assert_array_equal(out.metrics["gradient_steps"], plain.metrics["gradient_steps"])
    # updates 0 and 1 act before learning_starts (64 env steps): the same uniform actions
    np.testing.assert_allclose(out.metrics["episode_return"][:, :2],
                               plain.metrics["episode_return"][:, :2], rtol=1e-5)


def test_sac_on_2_devices_learns_the_rewarded_action():
    """SAC with a replay shard per device and pmean'd gradients (actor, critics and the
    temperature's) moves its greedy action to ProbeContinuous's 0.5; the runner checks
    that both learners stayed identical."""
    from jaxrl_par.algos import sac
    from jaxrl_par.runner.evaluation import greedy_returns

    cfg = sac.Config(env="ProbeContinuous-v0", num_envs=4, num_steps=8, total_timesteps=4_000,
                     learning_starts=256, batch_size=64, hidden_sizes=(16,),
                     axis_name=axes.DATA)
    out = train(sac.make(cfg), [0], num_chunks=2, progress=False, devices=2)
    state = parallel.unreplicate(out.state)
    assert np.all(np.asarray(out.state.buffer.size) == 2_000)  # each shard its 2 envs' steps
    plain = sac.make(dataclasses.replace(cfg, axis_name=None))
    assert greedy_returns(plain, state, num_envs=4)[0] > -0.01
