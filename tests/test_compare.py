"""``jaxrl_par.runner.compare`` and ``jaxrl-par compare``: paradigms side by side."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from dropped import HANDLERS, drop_signal

from jaxrl_par import algos
from jaxrl_par.runner import compare, interrupt
from jaxrl_par.runner.compare import Entry
from jaxrl_par.runner.training import TrainResult, config_record, train

HERE = os.path.dirname(os.path.abspath(__file__))


def test_entries_parse_and_name_themselves():
    assert Entry.parse("ppo") == Entry("ppo")
    assert Entry.parse(" a3c@threads ") == Entry("a3c", "threads")
    assert Entry.parse("apex@actor-learner") == Entry("apex", "actor-learner")
    assert Entry.parse("ppo@devices=4") == Entry("ppo", "devices", 4)
    for text in ["ppo", "a3c@threads", "apex@actor-learner", "ppo@devices=4"]:
        assert Entry.parse(text).name == text
    assert Entry.parse("ppo@devices=4").devices_needed == 4
    assert Entry.parse("impala@actor-learner").devices_needed == 2
    assert Entry.parse("ppo@devices=2").paradigm() == (
        "synchronous vectorised actors (data parallel over 2 devices)")
    own = Entry.parse("ppo@devices=2:num_envs=8:learning_rate=1e-3")
    assert own == Entry("ppo", "devices", 2, ("num_envs=8", "learning_rate=1e-3"))
    assert own.name == "ppo@devices=2:num_envs=8:learning_rate=1e-3"
    # an entry's own settings come last, after those for every entry
    cfg = compare.entry_config(Entry.parse("dqn:prioritized=true:learning_rate=1e-3"),
                               "CartPole-v1", overrides=["learning_rate=5e-4"])
    assert cfg.prioritized and cfg.learning_rate == 1e-3
    assert not compare.entry_config(Entry("dqn"), "CartPole-v1").prioritized


@pytest.mark.parametrize("text,message", [
    ("pp0", "unknown algorithm 'pp0'.*available: a2c, a3c"),
    ("ppo@thread", "unknown runtime; write ALGO, ALGO@threads"),
    ("ppo@devices", "ALGO@devices=N"),
    ("ppo@devices=two", "ALGO@devices=N"),
    ("ppo@devices=0", "device count must be >= 1"),
    ("dqn:prioritized", "'prioritized' is not FIELD=VALUE"),
])
def test_bad_entries_name_the_fix(text, message):
    with pytest.raises(ValueError, match=message):
        Entry.parse(text)


def test_default_entries_are_what_trains_on_the_env():
    assert [e.name for e in compare.default_entries("CartPole-v1")] == [
        "a2c", "a3c", "apex", "dqn", "gorila", "impala", "ppo"]
    assert [e.name for e in compare.default_entries("Pendulum-v1")] == [
        "a2c", "a3c", "ddpg", "impala", "ppo", "sac", "td3"]
    assert [e.name for e in compare.default_entries("gymnasium:CartPole-v1")] == [
        "a3c@threads", "gorila@threads", "impala@actor-learner"]
    assert [e.name for e in compare.default_entries("gymnasium:Pendulum-v1")] == [
        "a3c@threads", "impala@actor-learner"]
    with pytest.raises(ValueError, match="closest known ids: CartPole-v1"):
        compare.default_entries("CartPol-v1")


def test_every_algorithm_has_a_paradigm():
    assert set(compare.PARADIGMS) == set(algos.ALGORITHMS)


def test_an_entry_whose_algorithm_lacks_the_runtime_names_those_that_have_it():
    with pytest.raises(ValueError, match="ppo has no threads runtime; it runs with a2c, a3c, "
                                         "gorila"):
        compare.entry_config(Entry("ppo", "threads"), "CartPole-v1")
    with pytest.raises(ValueError, match="dqn has no actor-learner runtime; it runs with "
                                         "apex, impala"):
        compare.entry_config(Entry("dqn", "actor-learner"), "CartPole-v1")
    cfg = compare.entry_config(Entry("impala", "actor-learner"), "CartPole-v1", 1000)
    assert cfg.pipeline and cfg.env == "CartPole-v1" and cfg.total_timesteps == 1000
    assert compare.entry_config(Entry("ppo", "devices", 2), "CartPole-v1").axis_name


def test_overrides_go_to_every_algorithm_with_the_field_or_to_the_one_named():
    entries = [Entry("ppo"), Entry("dqn"), Entry("a3c", "threads"), Entry("a3c")]
    out = compare.split_overrides(["num_envs=8", "ppo.num_steps=16", "num_workers=2"],
                                  entries)
    assert out == {"ppo": ["num_envs=8", "num_steps=16"], "dqn": ["num_envs=8"],
                   "a3c": ["num_envs=8", "num_workers=2"]}
    with pytest.raises(ValueError, match="no compared algorithm has a field 'num_workerz'"):
        compare.split_overrides(["num_workerz=2"], entries)
    with pytest.raises(ValueError, match="'sac' is not compared here"):
        compare.split_overrides(["sac.tau=0.1"], entries)
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        compare.split_overrides(["num_envs"], entries)


def test_every_entry_is_checked_before_anything_trains():
    # sac cannot train on CartPole: the error comes before ppo compiles
    with pytest.raises(ValueError, match="continuous"):
        compare.compare(["ppo", "sac"], "CartPole-v1", progress=False)
    with pytest.raises(ValueError, match="a3c: unknown config field 'num_workerz'"):
        compare.compare(["a3c"], "CartPole-v1", overrides=["a3c.num_workerz=3"],
                        progress=False)
    with pytest.raises(ValueError, match="needs 64 devices.*device_count=64"):
        compare.compare(["ppo@devices=64"], "CartPole-v1", progress=False)
    with pytest.raises(ValueError, match="given twice"):
        compare.compare(["ppo", "ppo"], "CartPole-v1", progress=False)


def _trailing_reference(r: np.ndarray, fraction: float) -> np.ndarray:
    """A plain loop: the mean of the finished episodes' returns in the trailing window,
    else the last return before it (NaN before the first)."""
    s_count, u_count = r.shape
    k = max(1, math.ceil(u_count * fraction))
    out = np.full(r.shape, np.nan)
    for s in range(s_count):
        last = np.nan
        for u in range(u_count):
            window = r[s, max(0, u - k + 1):u + 1]
            window = window[~np.isnan(window)]
            if window.size:
                out[s, u] = window.mean()
            else:
                out[s, u] = last
            if not np.isnan(r[s, u]):
                last = r[s, u]
    return out


def _result(returns: np.ndarray, **kw) -> TrainResult:
    u = returns.shape[1]
    return TrainResult(state=None, metrics={"episode_return": returns},
                       env_steps=(np.arange(u) + 1) * 10, seeds=list(range(returns.shape[0])),
                       compile_seconds=0.0, train_seconds=1.0, steps_per_second=1.0,
                       **{"updates_run": u, **kw})


def test_trailing_returns_equal_a_loop_and_end_at_the_final_returns():
    rng = np.random.default_rng(0)
    r = rng.normal(100, 30, (5, 300))
    r[rng.random(r.shape) < 0.8] = np.nan  # most updates finish no episode
    r[3, :] = np.nan
    r[3, 40] = 7.0  # one episode, early
    r[4, :] = np.nan  # none at all
    result = _result(r)
    for fraction in (0.05, 0.2):
        got = result.trailing_returns(fraction)
        np.testing.assert_allclose(got, _trailing_reference(r, fraction), rtol=1e-12)
        np.testing.assert_array_equal(result.final_returns(fraction), got[:, -1])
    assert result.final_returns()[3] == 7.0 and np.isnan(result.final_returns()[4])


def test_targets_are_read_off_the_curves_in_steps_and_measured_seconds():
    # 2 seeds x 10 updates of 10 env steps; trailing window 1 update (fraction 0.05)
    r = np.array([[10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
                  [np.nan, 30, 30, 50, 50, 60, 60, 90, 90, 90]], float)
    # chunks of 4, 4, 2 updates, ending at 1.0, 3.0 and 3.5 s
    result = _result(r, chunk_ends=np.array([4, 8, 10]),
                     chunk_seconds=np.array([1.0, 3.0, 3.5]))
    row = compare.row_of(Entry("ppo"), "CartPole-v1", result, target=55.0)
    # mean over seeds: NaN, 25, 30, 45, 50, 60, ...: first >= 55 at update 6 (index 5)
    assert row.steps_to_target == 60
    assert row.seconds_to_target == pytest.approx(1.0 + 2.0 * 2 / 4)  # 2 of chunk 2's 4
    assert compare.row_of(Entry("ppo"), "x", result, target=101.0).steps_to_target is None
    np.testing.assert_allclose(compare.update_seconds(result),
                               [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5])
    # a resumed run: the updates before this call have no time
    resumed = _result(r, updates_run=4, chunk_ends=np.array([8, 10]),
                      chunk_seconds=np.array([2.0, 3.0]))
    seconds = compare.update_seconds(resumed)
    assert np.isnan(seconds[:6]).all()
    np.testing.assert_allclose(seconds[6:], [1.0, 2.0, 2.5, 3.0])
    record = row.to_record()
    assert record["final_returns"] == [100.0, 90.0] and record["paradigm"].startswith(
        "synchronous vectorised actors")
    assert "| ppo | synchronous" in compare.table([row], 55.0)


def test_finished_rows_are_reused_and_other_settings_named():
    row = compare.Row(entry=Entry("a2c"), env="CartPole-v1", seeds=[0], devices=1,
                      env_steps=4096, final_returns=[30.0], steps_per_second=1.0,
                      compile_seconds=1.0, train_seconds=1.0, curve={"return": [30.0]},
                      config=config_record(algos.get("a2c").make(
                          compare.entry_config(Entry("a2c"), "CartPole-v1", 4096))))
    record = row.to_record()
    again = compare.compare(["a2c"], "CartPole-v1", [0], total_timesteps=4096, done=[record],
                            progress=False)  # nothing trains: the row comes back
    assert again[0].reused and again[0].to_record() == record
    with pytest.raises(ValueError, match=r"a2c finished before with other settings: "
                                         r"learning_rate=0.001 \(now 0.002\)"):
        compare.compare(["a2c"], "CartPole-v1", [0], total_timesteps=4096, done=[record],
                        overrides=["learning_rate=2e-3"], progress=False)
    with pytest.raises(ValueError, match=r"seeds \[0\] \(now \[1\]\)"):
        compare.compare(["a2c"], "CartPole-v1", [1], total_timesteps=4096, done=[record],
                        progress=False)


@pytest.mark.parametrize("handler, raised", HANDLERS)
def test_a_stop_python_dropped_between_entries_ends_the_comparison(handler, raised,
                                                                   monkeypatch):
    """A SIGTERM or Ctrl-C whose exception Python dropped (inside a garbage-collection
    callback, as ``_xla_gc_callback``) while an entry finished stops the comparison
    before the next entry trains; the finished entry's row was handed out first."""
    record = compare.Row(entry=Entry("a2c"), env="CartPole-v1", seeds=[0], devices=1,
                         env_steps=4096, final_returns=[30.0], steps_per_second=1.0,
                         compile_seconds=1.0, train_seconds=1.0, curve={"return": [30.0]},
                         config=config_record(algos.get("a2c").make(
                             compare.entry_config(Entry("a2c"), "CartPole-v1", 4096)))
                         ).to_record()
    handed, trained = [], []

    def recording_train(algo, *args, **kwargs):
        trained.append(algo)
        return train(algo, *args, **kwargs)

    monkeypatch.setattr("jaxrl_par.runner.training.train", recording_train)

    def on_row(row):
        handed.append(row.entry.name)
        drop_signal(handler)

    with pytest.raises(raised):
        compare.compare(["a2c", "ppo"], "CartPole-v1", [0], total_timesteps=4096,
                        done=[record], on_row=on_row, progress=False)
    assert handed == ["a2c"]
    assert trained == []  # ppo never started: not even its compile (the runner's check)
    interrupt.raise_pending()  # raised once: nothing is pending any more


SMALL = "total_timesteps=4096"


def test_compare_trains_each_entry_as_train_does_and_times_its_chunks():
    """A row holds what ``train`` gives for the same config and seeds (its final returns,
    bit for bit; evaluating during training changes nothing), one data-parallel device
    equals one program, the chunks' times rise to about the training time, and the
    greedy curve has a point at every second chunk."""
    rows = compare.compare(["ppo", "ppo@devices=1"], "CartPole-v1", [0, 1],
                           overrides=[SMALL, "num_envs=8"], target=20.0, num_chunks=4,
                           eval_every=2, eval_envs=2, repeats=2, progress=False)
    from jaxrl_par.algos import ppo

    direct = train(ppo.make(ppo.Config(total_timesteps=4096, num_envs=8)), [0, 1],
                   num_chunks=4, progress=False)
    assert rows[0].final_returns == [float(x) for x in direct.final_returns()]
    assert rows[1].final_returns == rows[0].final_returns
    for row in rows:  # repeats=2: two runs' speeds, and their median reported
        assert len(row.speed_runs) == 2
        assert row.steps_per_second == pytest.approx(np.median(row.speed_runs))
    assert "steps/s (median of 2)" in compare.table(rows)
    assert rows[0].env_steps == int(direct.env_steps[-1]) and rows[0].seeds == [0, 1]
    assert rows[0].steps_to_target is not None  # CartPole's random returns are ~22
    greedy = rows[0].curve["greedy"]  # evaluated after chunks 2 and 4 (the last)
    assert greedy["env_steps"] == [2048, 4096] and len(greedy["seconds"]) == 2
    assert greedy["return"][-1] == pytest.approx(np.mean(rows[0].greedy_returns))
    seconds = [x for x in rows[0].curve["seconds"] if x is not None]
    assert np.all(np.diff(seconds) >= 0)
    assert seconds[-1] == pytest.approx(rows[0].train_seconds, rel=0.2, abs=0.05)


def test_the_cli_prints_a_table_and_json_and_saves_the_rows(tmp_path, monkeypatch, capsys):
    """``python -m jaxrl_par compare`` end to end in a subprocess; then, in this process
    (a subprocess costs ~5 s of jax import on the CI's CPU), a resume that reuses the
    saved rows, a resume with another target, and an entry without that runtime."""
    out = tmp_path / "compare.json"
    args = ["compare", "a2c", "a3c@threads", "--seeds", "2", "--total-timesteps", "4096",
            "--target", "15", "--out", str(out), "--json", "--plot",
            str(tmp_path / "compare.png"), "--no-compile-cache"]
    proc = subprocess.run([sys.executable, "-m", "jaxrl_par", *args, "--no-progress"],
                          check=False, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["entry"] for r in summary["rows"]] == ["a2c", "a3c@threads"]
    assert summary["seeds"] == [0, 1] and summary["env"] == "CartPole-v1"
    threads = summary["rows"][1]
    assert threads["paradigm"].startswith("asynchronous workers, parameter server (host "
                                          "threads on 1 device")
    assert threads["mean_staleness"] > 0 and len(threads["final_returns"]) == 2
    assert summary["rows"][0]["mean_staleness"] == 0  # A2C: one worker
    assert json.loads(out.read_text()) == summary
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib: [test]
    assert "| a3c@threads |" in proc.stderr  # the table goes to stderr with --json
    from jaxrl_par.cli import main

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    again = capsys.readouterr()
    assert again.err.count("finished before, its row is reused") == 2
    assert json.loads(again.out.strip().splitlines()[-1]) == summary
    assert main([*args, "--resume", "--target", "20"]) == 2
    assert "holds a comparison with target 15.0" in capsys.readouterr().err
    assert main(["compare", "ppo@threads"]) == 2
    assert "ppo has no threads runtime" in capsys.readouterr().err
