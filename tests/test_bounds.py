"""Wall-clock bounds of the chunk loop: chunks that take too long are followed by shorter
ones (so a stop never waits long for the running chunk), and a time limit stops a run
logged and checkpointed; neither changes what is trained."""

from __future__ import annotations

import time

import jax
import numpy as np
import toy_algo

from jaxrl_par.runner import loop
from jaxrl_par.runner.training import train

TOY = toy_algo.Config(env="ProbeObsAction-v0")  # 23 updates


def test_smaller_chunk_sizes_the_next_chunks_to_the_bound():
    assert loop.smaller_chunk(10, took=25.0, bound=10.0) == 4  # int(10 * 10 / 25)
    assert loop.smaller_chunk(10, took=12.0, bound=10.0) is None  # a fifth over passes
    assert loop.smaller_chunk(10, took=1000.0, bound=10.0) == 1
    assert loop.smaller_chunk(1, took=1000.0, bound=10.0) is None


def _sleepy(per_update: float, updates: int):
    """A stand-in chunk of ``updates`` updates, each ``per_update`` seconds long."""
    def chunk(state, start):
        time.sleep(per_update * updates)
        return state + updates, {"loss": np.zeros((1, updates), np.float32)}

    return chunk


def test_a_slow_chunk_is_followed_by_shorter_ones():
    asked = []

    def rechunk(updates):
        asked.append(updates)
        return _sleepy(0.01, updates)

    ran = loop.run(_sleepy(0.01, 20), 0, start=0, num_updates=60, chunk_updates=20,
                   env_steps_per_update=1,
                   bounds=loop.Bounds(chunk_seconds=0.05, rechunk=rechunk))
    # 20 updates took >= 0.2 s > 1.2 * 0.05: the next chunks have <= int(20 * 0.05 / 0.2)
    assert asked and 1 <= asked[0] <= 5
    sizes = np.diff([0, *ran.chunk_ends])
    assert sizes[0] == 20 and all(s <= asked[0] for s in sizes[1:])
    assert ran.done == 60 and ran.chunk_ends[-1] == 60


def test_a_time_limit_stops_after_the_chunk_that_reaches_it():
    ran = loop.run(_sleepy(0.001, 4), 0, start=0, num_updates=40, chunk_updates=4,
                   env_steps_per_update=1, bounds=loop.Bounds(time_limit=1e-9))
    assert ran.done == 4 and ran.stop_signal is None


def _leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key) else x) for x in jax.tree.leaves(tree)]


def test_shorter_chunks_and_a_time_limit_train_the_same_run(tmp_path):
    """Chunks cut to one update after the first (a bound no chunk meets) train what one
    long scan trains; a run stopped by its time limit after a chunk is checkpointed
    there, and resuming it ends as the run that never stopped."""
    algo = toy_algo.make(TOY)
    full = train(algo, [0, 1], num_chunks=4, progress=False, max_chunk_seconds=None)
    cut = train(algo, [0, 1], num_chunks=4, progress=False, max_chunk_seconds=1e-9)
    assert list(np.diff([0, *cut.chunk_ends])) == [6] + [1] * 17
    for a, b in zip(_leaves(full.state), _leaves(cut.state), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(full.metrics["loss"], cut.metrics["loss"])
    log = str(tmp_path / "run")
    part = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, time_limit=1e-9)
    assert part.interrupted and part.stop_signal is None and part.updates_run == 6
    rest = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    for a, b in zip(_leaves(full.state), _leaves(rest.state), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(full.metrics["loss"], rest.metrics["loss"])
