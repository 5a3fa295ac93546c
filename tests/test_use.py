"""Using a trained run: load_policy in a plain gymnasium loop, export, videos, plots, and
the public names."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_par
from jaxrl_par import load_policy, ppo, train
from jaxrl_par.cli import main
from jaxrl_par.envs import render
from jaxrl_par.runner import plots
from jaxrl_par.runner import policy as policy_lib


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> str:
    """The README's main job (PPO on CartPole-v1 at its defaults, seed 0) with a log dir.
    Module-scoped, so it is set up before the per-test quick-compile switch and trains
    with XLA's optimisations (~15 s)."""
    log_dir = str(tmp_path_factory.mktemp("use") / "cartpole")
    train(ppo.make(ppo.Config(env="CartPole-v1")), seeds=[0], log_dir=log_dir,
          progress=False)
    return log_dir


def test_load_policy_solves_gymnasium_cartpole(cartpole_run):
    """The loaded policy, called on one numpy observation at a time from a plain Python
    loop, balances gymnasium's own CartPole-v1 (a return of 500 is the time limit)."""
    gymnasium = pytest.importorskip("gymnasium")
    policy = load_policy(cartpole_run)
    assert policy.seed == 0 and policy.observation_shape == (4,)
    env = gymnasium.make("CartPole-v1")
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += reward
            done = terminated or truncated
        assert total >= 475, f"episode {episode}: return {total}"


def test_policy_takes_one_observation_or_a_batch(cartpole_run):
    policy = load_policy(cartpole_run)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32) * 0.1
    batch = policy(obs)
    assert isinstance(batch, np.ndarray) and batch.shape == (5,) and batch.dtype == np.int32
    singles = [policy(o) for o in obs]
    assert all(isinstance(a, np.ndarray) and a.shape == () for a in singles)
    np.testing.assert_array_equal(batch, singles)
    as_jax = policy(jnp.asarray(obs))
    assert isinstance(as_jax, jax.Array)
    np.testing.assert_array_equal(np.asarray(as_jax), batch)
    assert policy(obs.tolist()).shape == (5,)  # nested lists too
    with pytest.raises(ValueError, match=r"shape \(3,\): .* shape \(4,\) or a batch \[N, 4\]"):
        policy(np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(2, 2, 4\)"):
        policy(np.zeros((2, 2, 4)))
    # only what act reads is kept: PPO's network parameters, no optimiser, envs or key
    names = [jax.tree_util.keystr(p)
             for p, _ in jax.tree_util.tree_flatten_with_path(policy.state)[0]]
    assert names and all(n.startswith(".params") for n in names)


def test_export_and_load_without_the_training_state(cartpole_run, tmp_path):
    out = str(tmp_path / "exported" / "policy.msgpack")
    assert main(["export", cartpole_run, "-o", out]) == 0
    with open(str(tmp_path / "exported" / "policy.json")) as f:
        meta = json.load(f)
    assert meta["seed"] == 0 and meta["config"]["config_class"] == "jaxrl_par.algos.ppo.Config"
    assert sorted(os.listdir(tmp_path / "exported")) == ["policy.json", "policy.msgpack"]
    exported, loaded = load_policy(out), load_policy(cartpole_run)
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32) * 0.2
    np.testing.assert_array_equal(exported(obs), loaded(obs))
    for a, b in zip(jax.tree.leaves(exported.state), jax.tree.leaves(loaded.state),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="holds one seed"):
        load_policy(out, seed=0)
    os.remove(str(tmp_path / "exported" / "policy.json"))
    with pytest.raises(FileNotFoundError, match="policy.json does not exist"):
        load_policy(out)
    assert main(["export", cartpole_run, "--seed", "3", "-o", out]) == 2  # not a seed of it


def test_best_lane_is_the_last_recorded_greedy_return(tmp_path):
    """Seeds [10, 11, 12]; greedy returns recorded at update 2 (the last evaluation):
    [100, 300, 200] -> the second seed (index 1); update 3 has none (null)."""
    rows = [{"update": 1, "env_steps": 4, "greedy_return": [500.0, 1.0, 1.0]},
            {"update": 2, "env_steps": 8, "greedy_return": [100.0, 300.0, 200.0]},
            {"update": 3, "env_steps": 12, "greedy_return": [None, None, None]}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert policy_lib.best_lane(str(tmp_path), [10, 11, 12]) == 1
    rows = [{"update": 1, "env_steps": 4, "episode_return": [5.0, 9.0, 7.0]}]
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert policy_lib.best_lane(str(tmp_path), [10, 11, 12]) == 0  # none recorded: first


def test_record_video_writes_a_gif(cartpole_run, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    path = str(tmp_path / "cartpole.gif")
    video = jaxrl_par.record_video(load_policy(cartpole_run), path, max_steps=20)
    assert video.frames == 20 and video.returns == [20.0]  # 20 steps, reward 1 each
    with Image.open(path) as gif:
        assert gif.n_frames == 20
        frames = []
        for i in (0, 19):
            gif.seek(i)
            frames.append(np.asarray(gif.convert("RGB"), np.int32))
    assert frames[0].shape == (render.HEIGHT, render.WIDTH, 3)
    assert frames[0].std() > 0 and np.any(frames[0] != frames[1])


def test_eval_video_from_the_command_line(cartpole_run, tmp_path, capsys):
    """`jaxrl-par eval RUN --video out.gif`: one greedy episode of 500 steps, so 501
    frames (each observation acted on, and the last one)."""
    Image = pytest.importorskip("PIL.Image")
    path = str(tmp_path / "out.gif")
    assert main(["eval", cartpole_run, "--video", path, "--eval-envs", "1"]) == 0
    assert "501 frames" in capsys.readouterr().out
    with Image.open(path) as gif:
        assert gif.n_frames == 501


def test_record_video_of_a_gymnasium_run_draws_gymnasiums_frames(tmp_path):
    """A run on a host env (`gymnasium:CartPole-v1`) is filmed by gymnasium's own
    renderer (`render_mode="rgb_array"`, pygame): 10 steps, so 11 frames of its 600x400
    picture, the cart moving between the first and the last (the GIF may merge frames
    that came out identical)."""
    pytest.importorskip("pygame")
    Image = pytest.importorskip("PIL.Image")
    run = str(tmp_path / "gym")
    cfg = ppo.Config(env="gymnasium:CartPole-v1", num_envs=2, num_steps=16,
                     total_timesteps=64, num_minibatches=2, update_epochs=1)
    train(ppo.make(cfg), seeds=[0], log_dir=run, progress=False, vector_env="sync")
    path = str(tmp_path / "gym.gif")
    video = jaxrl_par.record_video(load_policy(run), path, max_steps=10)
    assert video.frames == 11 and video.returns == [10.0]
    with Image.open(path) as gif:
        assert 2 <= gif.n_frames <= 11 and gif.size == (600, 400)
        gif.seek(0)
        first = np.asarray(gif.convert("RGB"), np.int32)
        gif.seek(gif.n_frames - 1)
        last = np.asarray(gif.convert("RGB"), np.int32)
    assert first.std() > 0 and np.any(first != last)


def test_minatar_frame_colours_cells_by_channel():
    """A [10, 10, 3] grid with channel 1 on at cell (0, 0) and channels 0 and 2 at cell
    (2, 3): cell (0, 0) takes PALETTE[1], cell (2, 3) the last active channel's
    PALETTE[2], an empty cell is black."""
    pytest.importorskip("PIL")
    grid = np.zeros((10, 10, 3), np.float32)
    grid[0, 0, 1] = 1
    grid[2, 3, [0, 2]] = 1
    frame = render.minatar(grid, 0)
    c = render.CELL
    assert frame.shape == (10 * c, 10 * c, 3)
    np.testing.assert_array_equal(frame[c // 2 + 2, c // 2], render.PALETTE[1])  # below t=0
    np.testing.assert_array_equal(frame[2 * c + c // 2, 3 * c + c // 2], render.PALETTE[2])
    np.testing.assert_array_equal(frame[5 * c + c // 2, 5 * c + c // 2], [0, 0, 0])


OBSERVATIONS = {  # two observations of each env, in its observation's layout
    "CartPole-v1": ([0.0, 0, 0.0, 0], [0.5, 0, -0.2, 0]),  # x, x_dot, theta, theta_dot
    "Pendulum-v1": ([1.0, 0.0, 0], [0.0, 1.0, 0]),  # cos, sin, theta_dot
    "Acrobot-v1": ([1.0, 0, 1, 0, 0, 0], [0.0, 1, 1, 0, 0, 0]),  # cos/sin t1, t2, speeds
    "MountainCar-v0": ([-0.5, 0.0], [0.3, 0.01]),  # position, velocity
    "Breakout-MinAtar": (np.eye(10)[:, :, None].repeat(4, -1),
                         np.eye(10)[::-1, :, None].repeat(4, -1)),  # [10, 10, 4] grids
}


@pytest.mark.parametrize("env_id", sorted(OBSERVATIONS))
def test_every_renderer_draws_the_env(env_id):
    """Two observations draw two different, non-blank frames whose sides are multiples of
    16 (what video codecs want)."""
    pytest.importorskip("PIL")
    draw = render.renderer(env_id)
    a, b = (draw(np.asarray(o, np.float32), t) for t, o in enumerate(OBSERVATIONS[env_id]))
    assert a.dtype == np.uint8 and a.shape[0] % 16 == 0 and a.shape[1] % 16 == 0
    assert a.std() > 0 and np.any(a != b)
    with pytest.raises(ValueError, match="no frame renderer for DeepSea-bsuite"):
        render.renderer("DeepSea-bsuite")


def test_smooth_fills_and_averages_each_seed():
    """Seed [nan, 1, nan, 3, 5], window 2: filled [nan, 1, 1, 3, 5], trailing means
    [nan, 1, (1+1)/2, (1+3)/2, (3+5)/2] = [nan, 1, 1, 2, 4]."""
    out = plots.smooth(np.array([[np.nan, 1, np.nan, 3, 5]]), 2)
    np.testing.assert_array_equal(out, [[np.nan, 1, 1, 2, 4]])


def test_plot_runs_and_the_cli(cartpole_run, tmp_path):
    pytest.importorskip("matplotlib")
    curve = plots.read_curve(cartpole_run)
    assert curve.returns.shape == (1, len(curve.env_steps))
    assert curve.seconds is not None and np.all(np.diff(curve.seconds) >= 0)
    assert curve.seconds[-1] > 0 and "ppo on CartPole-v1" in curve.label
    out = str(tmp_path / "curves.png")
    assert main(["plot", cartpole_run, cartpole_run, "--label", "a", "--label", "b",
                 "-o", out]) == 0
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", cartpole_run, "--metric", "nothing", "-o", out]) == 2
    assert main(["plot", str(tmp_path / "none"), "-o", out]) == 2


def test_public_names():
    """Every name in __all__ resolves, and the documented imports work."""
    for name in jaxrl_par.__all__:
        assert getattr(jaxrl_par, name) is not None, name
    from jaxrl_par import (  # noqa: F401
        compare,
        dqn,
        evaluate,
        load_policy,
        plot_runs,
        ppo,
        record_video,
        train,
    )
    assert set(jaxrl_par.__all__) <= set(dir(jaxrl_par))


def test_evaluate_a_run_and_a_policy(cartpole_run):
    per_seed = jaxrl_par.evaluate(cartpole_run, num_envs=2)
    assert per_seed.shape == (1,) and per_seed[0] >= 475
    np.testing.assert_array_equal(jaxrl_par.evaluate(load_policy(cartpole_run), num_envs=2),
                                  per_seed)


def test_sampled_actions(cartpole_run):
    """``sample=True`` draws from the distribution: a new draw each call, the same one
    for the same key; Q-learners act greedily only."""
    obs = np.random.default_rng(2).normal(size=(256, 4)).astype(np.float32) * 2
    sampled = load_policy(cartpole_run, sample=True)
    first, second = sampled(obs), sampled(obs)
    assert first.shape == (256,) and set(np.unique(first)) <= {0, 1}
    assert np.any(first != second)  # a new key each call
    greedy = load_policy(cartpole_run)
    key = jax.random.key(7)
    np.testing.assert_array_equal(greedy(obs, key=key), sampled(obs, key=key))
    assert np.any(greedy(obs, key=key) != greedy(obs))  # a key draws, without one: the mode
    with pytest.raises(ValueError, match=r"dqn acts greedily only"):
        policy_lib.Policy(jaxrl_par.dqn.make(jaxrl_par.dqn.Config()), None, sample=True)
