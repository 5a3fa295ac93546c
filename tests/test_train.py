import dataclasses
import json
import os
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
import toy_algo
from dropped import HANDLERS, drop_signal
from killed import train_killed_after

from jaxrl_par.algos import ppo
from jaxrl_par.runner import checkpoints, interrupt, memory, records
from jaxrl_par.runner.lockfile import LogDirLock
from jaxrl_par.runner.training import choose_chunk, make_chunk_fn, train

# The runner's mechanics are tested on `toy_algo` (compiles in ~1 s); PPO, whose per-env
# random streams make these properties non-trivial, keeps the two the issue names
# (chunked = one scan, vmapped seeds = single runs).
SMALL = ppo.Config(env="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2,
                   update_epochs=2, total_timesteps=4 * 16 * 23)  # 23 updates: prime
TOY = toy_algo.Config(env="ProbeObsAction-v0")  # 23 updates too; one-step episodes


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.tree.map(
        lambda a: jax.random.key_data(a) if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
        else a, tree))]


def _assert_trees_equal(a, b, rtol=0.0):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        if rtol:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("make", [ppo.make, toy_algo.make], ids=["ppo", "toy"])
def test_chunked_equals_one_scan(make):
    algo = make(SMALL if make is ppo.make else TOY)
    one = train(algo, 0, num_chunks=1, progress=False)
    masked = train(algo, 0, num_chunks=5, progress=False)  # chunks of 5, the last masked
    assert choose_chunk(23, 5) == 5 and choose_chunk(24, 5) == 4
    assert choose_chunk(976, 20) == 61  # no divisor in [24, 49]; 61 is within 1.5x
    _assert_trees_equal(one.state, masked.state)
    np.testing.assert_array_equal(one.metrics["loss"], masked.metrics["loss"])
    assert masked.metrics["loss"].shape == (1, 23)
    if make is toy_algo.make:  # chunks of one update each, too
        many = train(algo, 0, num_chunks=23, progress=False)
        _assert_trees_equal(one.state, many.state)
        np.testing.assert_array_equal(one.metrics["loss"], many.metrics["loss"])
        assert int(many.state.update_count[0]) == 23


def test_seeds_vmapped_equal_single_runs():
    algo = ppo.make(SMALL)
    batched = train(algo, [0, 1, 2, 3], num_chunks=2, progress=False)
    for i, seed in enumerate([0, 1, 2, 3]):
        single = train(algo, seed, num_chunks=2, progress=False)
        mine = jax.tree.map(lambda x, i=i: x[i:i + 1], batched.state.params)
        _assert_trees_equal(mine, single.state.params, rtol=1e-5)
        np.testing.assert_allclose(batched.metrics["episode_return"][i],
                                   single.metrics["episode_return"][0], rtol=1e-5)
    # Different seeds learn differently.
    assert not np.allclose(_leaves(batched.state.params)[0][0], _leaves(batched.state.params)[0][1])


def test_chunk_function_compiles_once():
    algo = toy_algo.make(TOY)
    traces = []
    orig_update = algo.update

    def counting_update(state):
        traces.append(1)
        return orig_update(state)

    algo = algo._replace(update=counting_update)
    train(algo, 0, num_chunks=6, progress=False)
    # Traced once, never per chunk; the chunks of 4 are masked (23 updates), and the
    # skipped branch takes the metrics' shapes from that trace, not from a second one.
    assert len(traces) == 1, len(traces)


def test_training_the_same_algorithm_again_reuses_the_compiled_chunk():
    algo = toy_algo.make(TOY)
    built = []

    def counting_factory(algo, chunk_updates, example):
        built.append(chunk_updates)
        return make_chunk_fn(algo, chunk_updates, example)

    first = train(algo, 0, num_chunks=6, progress=False, chunk_fn_factory=counting_factory)
    again = train(algo, 1, num_chunks=6, progress=False, chunk_fn_factory=counting_factory)
    assert built == [4]  # 23 updates in chunks of 4: built and compiled once
    assert not np.allclose(_leaves(first.state.params)[0], _leaves(again.state.params)[0])
    single = train(algo, 1, num_chunks=6, progress=False)  # the default factory: its own
    _assert_trees_equal(again.state.params, single.state.params)
    train(algo, 1, num_chunks=5, progress=False, chunk_fn_factory=counting_factory)
    assert built == [4, 5]  # another chunk size is another program


def test_programs_compiled_under_other_compile_settings_are_not_reused(monkeypatch):
    """`jax_disable_most_optimizations` is read when XLA compiles, not when jax traces: a
    run of the same algorithm object after it changes compiles its init and chunk again,
    and each setting's programs stay cached."""
    compiled = []
    real_compile = jax.stages.Lowered.compile

    def counting_compile(self, *args, **kwargs):
        compiled.append(jax.config.values["jax_disable_most_optimizations"])
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting_compile)
    algo = toy_algo.make(TOY)
    setting = jax.config.values["jax_disable_most_optimizations"]
    try:
        for flag in (not setting, setting, not setting, setting):
            jax.config.update("jax_disable_most_optimizations", flag)
            train(algo, [0, 1], num_chunks=4, progress=False)
    finally:
        jax.config.update("jax_disable_most_optimizations", setting)
    assert compiled == [not setting] * 2 + [setting] * 2  # init and chunk; then cached


def _run_killed_after_two_chunks(algo, log: str) -> None:
    """Trains ``algo`` on seeds [0, 1] in 4 chunks into ``log`` and dies (an exception
    out of ``train``) after the second chunk is logged and checkpointed."""
    train_killed_after(12, algo, [0, 1], num_chunks=4, progress=False, log_dir=log)


def test_resume_equals_never_stopping(tmp_path):
    algo = toy_algo.make(TOY)
    full = train(algo, [0, 1], num_chunks=4, progress=False)
    log = str(tmp_path / "run")
    _run_killed_after_two_chunks(algo, log)
    resumed = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    _assert_trees_equal(full.state.params, resumed.state.params)
    np.testing.assert_array_equal(full.metrics["loss"], resumed.metrics["loss"])
    with open(os.path.join(log, "metrics.jsonl")) as f:
        assert len(f.readlines()) == 23


def test_resuming_a_finished_run_returns_it_without_compiling(tmp_path, monkeypatch):
    """A resume of a run that already finished trains nothing: it reads back the final
    state and the logged metrics and compiles nothing (it used to compile the chunk, then
    report 0 steps/s)."""
    algo = toy_algo.make(TOY)
    log = str(tmp_path / "run")
    full = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log)
    assert full.updates_run == algo.num_updates

    def no_compile(self, *a, **k):
        raise AssertionError("compiled for a run that has nothing left to train")

    monkeypatch.setattr(jax.stages.Lowered, "compile", no_compile)
    again = train(toy_algo.make(TOY), [0, 1], num_chunks=4, progress=False, log_dir=log,
                  resume=True)
    assert again.updates_run == 0 and not again.interrupted and again.compile_seconds == 0
    _assert_trees_equal(full.state, again.state)
    for k in full.metrics:
        np.testing.assert_array_equal(full.metrics[k], again.metrics[k])
    np.testing.assert_array_equal(full.env_steps, again.env_steps)


def test_a_run_that_fails_on_its_arguments_leaves_no_log_dir_behind(tmp_path):
    """The log dir's lock is taken first (it creates the dir); when the run then fails
    before writing anything, the dir goes again. A dir that existed before stays."""
    log = tmp_path / "new"
    with pytest.raises(ValueError, match="num_chunks=0"):
        train(toy_algo.make(TOY), [0], log_dir=str(log), num_chunks=0, progress=False)
    assert not log.exists()
    log.mkdir()
    with pytest.raises(ValueError, match="num_chunks=0"):
        train(toy_algo.make(TOY), [0], log_dir=str(log), num_chunks=0, progress=False)
    assert sorted(os.listdir(log)) == [".lock"]


@pytest.fixture
def python_sigint_handler():
    """SIGINT raises KeyboardInterrupt, as in a terminal or notebook, whatever the test
    runner installed (restored afterwards)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_finishes_the_running_chunk_and_keeps_it(tmp_path, python_sigint_handler):
    """The first Ctrl-C stops the run after the chunk in flight: the result holds the
    state and metrics up to it, the checkpoint is that chunk's, and resuming from it
    equals never stopping. The handler is removed afterwards."""
    algo = toy_algo.make(TOY)
    full = train(algo, [0, 1], num_chunks=4, progress=False)
    log = str(tmp_path / "run")
    chunks = []

    def ctrl_c_in_second_chunk(done, rows):
        chunks.append(done)
        if len(chunks) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    try:
        part = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log,
                     callback=ctrl_c_in_second_chunk)
    except KeyboardInterrupt:
        pytest.fail("the first Ctrl-C raised instead of stopping after the chunk")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    done = chunks[-1]
    assert part.interrupted and len(chunks) == 2 and 0 < done < algo.num_updates
    assert part.metrics["loss"].shape == (2, done) and len(part.env_steps) == done
    np.testing.assert_array_equal(part.metrics["loss"], full.metrics["loss"][:, :done])
    with open(os.path.join(log, "metrics.jsonl")) as f:
        assert len(f.readlines()) == done
    resumed = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    assert not resumed.interrupted
    _assert_trees_equal(full.state.params, resumed.state.params)
    np.testing.assert_array_equal(full.metrics["loss"], resumed.metrics["loss"])


@pytest.fixture
def default_sigterm():
    """SIGTERM at its default action (ends the process), restored afterwards."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_finishes_the_running_chunk_like_ctrl_c(tmp_path, default_sigterm):
    """SIGTERM (a scheduler's notice before it kills a job) stops the run after the chunk
    in flight, as Ctrl-C does, and the result names the signal. Right after the first,
    SIGTERM's default is back, so a second would end the process at once."""
    algo = toy_algo.make(TOY)
    log = str(tmp_path / "run")
    after_first = []

    def sigterm_in_second_chunk(done, rows):
        if done >= 12 and not after_first:
            os.kill(os.getpid(), signal.SIGTERM)
            after_first.append(signal.getsignal(signal.SIGTERM))

    part = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log,
                 callback=sigterm_in_second_chunk)
    assert after_first == [signal.SIG_DFL]
    assert part.interrupted and part.stop_signal == signal.SIGTERM
    assert 0 < len(part.env_steps) < algo.num_updates
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    resumed = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    assert not resumed.interrupted and resumed.stop_signal is None


def test_graceful_stop_hands_back_a_raising_sigterm_handler_as_sigterms_default(
        default_sigterm):
    """The CLI's SIGTERM handler raises (``interrupt.raise_terminated``), which could only
    run once a compiled call returned. Within a GracefulStop it is restored on a normal
    exit, but after a first SIGTERM the default comes back, so a second ends the process
    at once."""
    from jaxrl_par.runner import interrupt

    signal.signal(signal.SIGTERM, interrupt.raise_terminated)
    with interrupt.GracefulStop():
        assert signal.getsignal(signal.SIGTERM) is not interrupt.raise_terminated
    assert signal.getsignal(signal.SIGTERM) is interrupt.raise_terminated
    with interrupt.GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("handler,raised", HANDLERS, ids=["SIGTERM", "SIGINT"])
def test_a_signal_exception_python_dropped_is_raised_after_the_compile(tmp_path, handler,
                                                                       raised):
    """Python drops an exception that a signal handler raises inside a garbage-collection
    callback or ``__del__`` (jax runs such a callback at every collection), and a CLI run
    once trained to the end after its SIGTERM (CI, 2026-12-05). The CLI's handlers note
    the signal: the runner raises it when the compile returns, before it writes to the
    log dir, and only once."""
    drop_signal(handler)
    log = tmp_path / "run"
    with pytest.raises(raised):
        train(toy_algo.make(TOY), 0, progress=False, log_dir=str(log))
    assert not log.exists()
    interrupt.raise_pending()  # nothing is pending any more
    assert not train(toy_algo.make(TOY), 0, progress=False).interrupted


def test_resume_after_a_kill_that_cut_the_metrics_mid_line(tmp_path):
    """A kill while metrics.jsonl was being appended leaves a half line past the
    checkpoint's updates: resuming drops it, as it drops whole rows written after the
    checkpoint, and ends as a run never stopped."""
    algo = toy_algo.make(TOY)
    full = train(algo, [0, 1], num_chunks=4, progress=False)
    log = str(tmp_path / "run")
    _run_killed_after_two_chunks(algo, log)
    path = os.path.join(log, "metrics.jsonl")
    with open(path) as f:
        done = len(f.readlines())
    with open(path, "a") as f:
        f.write(f'{{"update": {done + 1}, "env_steps": 1, "loss": [0.1, ')  # cut here
    resumed = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    np.testing.assert_array_equal(full.metrics["loss"], resumed.metrics["loss"])
    with open(path) as f:
        assert [json.loads(line)["update"] for line in f] == list(range(1, 24))


def test_second_ctrl_c_raises_at_once(python_sigint_handler):
    algo = toy_algo.make(TOY)

    def ctrl_c_twice(done, rows):
        os.kill(os.getpid(), signal.SIGINT)  # stop after this chunk
        os.kill(os.getpid(), signal.SIGINT)  # no: now

    with pytest.raises(KeyboardInterrupt):
        train(algo, [0, 1], num_chunks=4, progress=False, callback=ctrl_c_twice)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_resume_refuses_other_settings_before_compiling(tmp_path, monkeypatch):
    """A checkpoint continues only the run that wrote it: another config (a shorter run,
    or a changed field) or other seeds is an error
    naming what differs, raised before anything compiles; so are a fresh run into a log
    dir that holds one and a resume without a log dir."""
    log = str(tmp_path / "run")
    train(toy_algo.make(TOY), [0, 1], num_chunks=4, progress=False, log_dir=log)

    def no_compile(self, *a, **k):
        raise AssertionError("compiled before checking the checkpoint")

    monkeypatch.setattr(jax.stages.Lowered, "compile", no_compile)
    longer = dataclasses.replace(TOY, total_timesteps=2 * TOY.total_timesteps,
                                 learning_rate=0.1)
    config_json = re.escape(os.path.join(log, "config.json"))
    with pytest.raises(ValueError, match=r"learning_rate=0.05 there, 0.1 now\): resume "
                                         rf"with the run's settings \({config_json}; the "
                                         rf"CLI takes them as --config {config_json}\)"):
        train(toy_algo.make(longer), [0, 1], log_dir=log, resume=True, progress=False)
    shorter = dataclasses.replace(TOY, total_timesteps=TOY.total_timesteps // 2)
    with pytest.raises(ValueError, match=r"total_timesteps=368 there, 184 now"):
        train(toy_algo.make(shorter), [0, 1], log_dir=log, resume=True, progress=False)
    with pytest.raises(ValueError, match=r"holds seeds \[0, 1\], this run asks for \[0, 2\]"):
        train(toy_algo.make(TOY), [0, 2], log_dir=log, resume=True, progress=False)
    # The same run again without resume would overwrite the logs and checkpoint: refused.
    with open(os.path.join(log, "metrics.jsonl")) as f:
        logged = f.read()
    with pytest.raises(ValueError, match=r"already holds a run .* resume=True \(--resume\)"):
        train(toy_algo.make(TOY), [0, 1], log_dir=log, progress=False)
    with open(os.path.join(log, "metrics.jsonl")) as f:
        assert f.read() == logged
    with pytest.raises(ValueError, match=r"resume=True needs the log_dir"):
        train(toy_algo.make(TOY), [0, 1], resume=True, progress=False)
    # A log dir that another run holds (here this process, through a second open file:
    # flock locks conflict across those as across processes): refused, naming the holder.
    with LogDirLock(log), pytest.raises(
            ValueError, match=rf"log dir {log} is in use by another run \(pid {os.getpid()} on "):
        train(toy_algo.make(TOY), [0, 1], log_dir=log, resume=True, progress=False)
    with open(os.path.join(log, "metrics.jsonl")) as f:
        assert f.read() == logged
    # A checkpoint from another device layout: only jaxrl_par.algos' algorithms (whose
    # one-device layout is known) can change layout; the toy cannot.
    _rewrite_meta(log, lambda meta: {**meta, "data_shards": 2})
    with pytest.raises(ValueError, match=r"written on a mesh with 2 data shard\(s\), this run "
                                         r"is on one device \(no mesh\), and only"):
        train(toy_algo.make(TOY), [0, 1], log_dir=log, resume=True, progress=False)


def test_a_log_dir_held_by_another_process_is_refused_until_it_exits(tmp_path):
    """Another process holding the log dir's lock (written as `LogDirLock` writes it)
    makes a run there fail at once, naming the holder; once that process is gone, its
    lock is too (the kernel drops it), and the log dir can be taken."""
    log = tmp_path / "run"
    log.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         ("import fcntl, os, time\n"
          f"fd = os.open({str(log / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
          "fcntl.flock(fd, fcntl.LOCK_EX)\n"
          "os.write(fd, b'pid 12345 on elsewhere, since then')\n"
          "print('held', flush=True)\n"
          "time.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=r"in use by another run \(pid 12345 on elsewhere, "
                                             r"since then\); wait for it"):
            train(toy_algo.make(TOY), [0], log_dir=str(log), progress=False)
        assert sorted(os.listdir(log)) == [".lock"]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    with LogDirLock(str(log)):
        assert (log / ".lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_resume_accepts_a_config_field_added_since_while_it_is_at_its_default():
    """A checkpoint written before a config field existed resumes while the run leaves
    that field at its default; set to anything else, the field counts as changed."""
    algo = ppo.make(ppo.Config(total_timesteps=4 * 128 * 2))
    record = records.config_record(algo)
    absent = records.field_defaults(algo)
    assert record["gae_method"] == absent["gae_method"] == "auto"
    old = {k: v for k, v in record.items() if k != "gae_method"}  # written before the field
    meta = {"seeds": [0], "config": old}
    records.check_resumable("ckpt", meta, [0], record, absent)
    other = records.config_record(
        ppo.make(ppo.Config(total_timesteps=4 * 128 * 2, gae_method="scan")))
    with pytest.raises(ValueError, match=r"gae_method=None there, 'scan' now"):
        records.check_resumable("ckpt", meta, [0], other, absent)
    with pytest.raises(ValueError, match=r"gae_method='auto' there, 'scan' now"):
        records.check_resumable("ckpt", {"seeds": [0], "config": record}, [0], other,
                                   absent)


def _rewrite_meta(log, edit) -> None:
    """Rewrites every checkpoint of the run in ``log`` with its JSON meta replaced by
    ``edit(meta)`` (the arrays as they are), e.g. to make it look written by another run."""
    saved = os.path.join(log, "checkpoints")
    for step in os.listdir(saved):
        path = os.path.join(saved, step, "meta", "metadata")
        with open(path) as f:
            meta = json.load(f)
        with open(path, "w") as f:
            json.dump(edit(meta), f)


def _as_recorded_before(log, field: str) -> None:
    """Rewrites the run in ``log`` as an older version recorded it: without ``field``."""
    _rewrite_meta(log,
                  lambda meta: {**meta, "config": {k: v for k, v in meta["config"].items()
                                                   if k != field}})


def test_progress_says_it_is_compiling_before_the_bar_moves(capsys):
    algo = toy_algo.make(TOY)
    result = train(algo, [0, 1], num_chunks=4, progress=True)
    err = capsys.readouterr().err
    head, _, rest = err.partition("\n")
    size = memory.format_bytes(memory.tree_bytes(result.state))  # the state it allocates
    assert head.startswith(f"jaxrl_par: compiling 2 seed(s) x 23 updates in chunks of 6 "
                           f"(state {size})...")
    assert head.endswith(f" {result.compile_seconds:.1f} s")
    steps = algo.num_updates * algo.env_steps_per_update
    assert f"{steps}/{steps}" in rest  # then the bar, to the end


def test_nan_loss_raises_clear_error():
    algo = toy_algo.make(TOY)
    orig = algo.update

    def poisoned(state):
        state, metrics = orig(state)
        metrics["loss"] = metrics["loss"] * jax.numpy.nan
        return state, metrics

    with pytest.raises(FloatingPointError, match="loss became nan at update 0.*learning rate"):
        train(algo._replace(update=poisoned), 0, num_chunks=2, progress=False)


@pytest.mark.parametrize("kwargs,message", [
    ({"num_chunks": 0}, "num_chunks=0; give the number of host round-trips"),
    ({"num_chunks": 2.5}, "num_chunks=2.5"),
    ({"seeds": []}, "no seeds given: pass a seed"),
])
def test_bad_run_arguments_are_clear_errors(kwargs, message):
    """Checked before anything compiles (num_chunks <= 0 used to run as one chunk)."""
    algo = toy_algo.make(TOY)
    with pytest.raises(ValueError, match=message):
        train(algo, **{"seeds": 0, "progress": False, **kwargs})


def test_a_data_parallel_algorithm_without_devices_is_a_clear_error(monkeypatch):
    """An algorithm made with axis_name reduces over a mesh axis; without devices the
    trace used to fail with jax's 'unbound axis name: data'. Now it names both fixes,
    before anything is traced."""
    from jaxrl_par import axes
    from jaxrl_par.algos import a2c

    monkeypatch.setattr(jax, "jit", None)  # nothing may be compiled before the error
    algo = a2c.make(a2c.Config(axis_name=axes.DATA))
    with pytest.raises(ValueError, match=r"axis_name='data'.*devices=N.*axis_name=None"):
        train(algo, 0, progress=False)
    with pytest.raises(ValueError, match=r"async_workers .* axis_name=None"):
        train(algo, 0, progress=False, async_workers=True)


def test_make_chunk_fn_masks_past_the_end():
    algo = toy_algo.make(TOY)  # 23 updates
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 1))
    chunk = make_chunk_fn(algo, 7, jax.tree.map(lambda x: x[0], state))
    state, m = chunk(state, 21)  # updates 21..27: only 21 and 22 run
    assert int(state.update_count[0]) == 2
    assert np.all(np.asarray(m["loss"])[0, 2:] == 0.0) and np.all(np.asarray(m["loss"])[0, :2] != 0)


@pytest.mark.parametrize("mesh", [{}, {"devices": 1}], ids=["plain", "mesh"])
def test_init_is_traced_once_for_the_memory_check_and_the_compile(mesh):
    """The memory check reads the state's shapes from the trace that is then lowered and
    compiled (tracing a big init twice cost ~0.1-0.3 s per run), on the plain runner and
    on a mesh."""
    algo = toy_algo.make(dataclasses.replace(TOY, learning_rate=0.0123))  # a fresh program
    traces = []

    def init(key):
        traces.append(key)
        return algo.init(key)

    counted = algo._replace(init=init)
    result = train(counted, [0, 1], num_chunks=2, progress=False, **mesh)
    assert len(traces) == 1
    reference = train(algo, [0, 1], num_chunks=2, progress=False, **mesh)
    _assert_trees_equal(result.state, reference.state)


def test_runs_in_32_bits_when_the_caller_enabled_x64(tmp_path):
    """With jax_enable_x64 on (as a scientific notebook may set it), training, the greedy
    evaluation and loading a run give what they give without it; tracing used to fail (a
    scan carry that turned float64). The caller's setting is left as it was."""
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.runs import load_run

    cfg = ppo.Config(num_envs=4, num_steps=16, num_minibatches=2,
                     total_timesteps=4 * 16 * 3, normalize_obs=True)
    plain = train(ppo.make(cfg), [0], progress=False, num_chunks=1)
    with jax.enable_x64(True):
        algo = ppo.make(cfg)
        wide = train(algo, [0], progress=False, num_chunks=1, log_dir=str(tmp_path))
        greedy = greedy_returns(algo, wide.state, num_envs=2)
        run = load_run(str(tmp_path))
        assert jax.numpy.zeros(1).dtype == np.float64  # still on for the caller
    _assert_trees_equal(plain.state, wide.state)
    _assert_trees_equal(wide.state.params, run.state.params)
    np.testing.assert_array_equal(greedy, greedy_returns(ppo.make(cfg), plain.state,
                                                         num_envs=2))
    assert all(x.dtype != np.float64 for x in jax.tree.leaves(wide.state))


@pytest.mark.parametrize("name", ["dqn", "sac", "td3"])
def test_warmup_updates_skip_the_learning_branch_with_the_same_result(name):
    """A replay learner's first updates (before ``learning_starts``) run ``algo.warmup_update``,
    chosen by the runner on the unbatched update index; the run equals, bit for bit, one
    in which every update takes ``update`` (whose ``lax.cond`` under the seed vmap
    computes the learning branch and drops it), over chunks that cross the boundary."""
    from jaxrl_par.algos import dqn, sac, td3

    if name == "dqn":
        cfg = dqn.Config(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 10, buffer_size=256,
                         batch_size=16, learning_starts=100, train_frequency=8)
        algo = dqn.make(cfg)
    else:
        module = {"sac": sac, "td3": td3}[name]
        cfg = module.Config(num_envs=2, num_steps=8, total_timesteps=2 * 8 * 10,
                            buffer_size=256, batch_size=16, learning_starts=70,
                            train_frequency=4, hidden_sizes=(8,))
        algo = module.make(cfg)
    assert algo.warmup_updates == cfg.warmup_updates == {"dqn": 3, "sac": 4, "td3": 4}[name]
    warm = train(algo, [0, 1], progress=False, num_chunks=3)
    plain = train(algo._replace(warmup_updates=0), [0, 1], progress=False, num_chunks=3)
    np.testing.assert_array_equal(warm.metrics["gradient_steps"][0][:algo.warmup_updates + 1],
                                  [0] * algo.warmup_updates
                                  + [cfg.gradient_steps_per_update])
    for x, y in zip(jax.tree.leaves(warm.state), jax.tree.leaves(plain.state), strict=True):
        if checkpoints.is_key(x):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(x, y)
    for k, v in plain.metrics.items():
        np.testing.assert_array_equal(warm.metrics[k], v, err_msg=k)
