"""The README's Python example runs as written (with a smaller training budget) and its
comments hold: shapes, seeds, no recompilation for the same algorithm and seed count."""

import os
import re

import jax
import numpy as np

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
BUDGET = "total_timesteps=500_000"
SECOND_TRAIN = "result = train(algo, seeds=[4, 5, 6, 7],"


def _python_block() -> str:
    with open(README) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert len(blocks) == 1, "the README's Python example: update this test if it is split"
    return blocks[0]


def test_readme_python_example(tmp_path, monkeypatch):
    code = _python_block()
    assert code.count(BUDGET) == 2 and code.count(SECOND_TRAIN) == 1  # the runs, the sweep
    code = code.replace(BUDGET, "total_timesteps=4 * 128 * 6")  # 6 updates
    first, rest = code.split(SECOND_TRAIN)
    second, last = (SECOND_TRAIN + rest).split("from jaxrl_par.runner.runs import")
    monkeypatch.chdir(tmp_path)  # the example writes runs/cartpole
    compiled = []
    real_compile = jax.stages.Lowered.compile

    def counting_compile(self, *args, **kwargs):
        compiled.append(self)
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting_compile)
    ns: dict = {}
    exec(first, ns)  # noqa: S102 (the README's own example)
    assert compiled, "the first train compiles"
    before = len(compiled)
    exec(second, ns)  # noqa: S102
    assert len(compiled) == before  # "same algo object and seed count: no recompile"
    exec("from jaxrl_par.runner.runs import" + last, ns)  # noqa: S102

    result, run = ns["result"], ns["run"]
    updates = ns["algo"].num_updates
    assert updates == 6
    assert result.env_steps.shape == (updates,) and result.returns.shape == (4, updates)
    assert result.seeds == [4, 5, 6, 7] and run.seeds == [4, 5, 6, 7]
    assert {"checkpoints", "config.json", "metrics.jsonl"} <= set(os.listdir("runs/cartpole"))
    for a, b in zip(jax.tree.leaves(run.state.params), jax.tree.leaves(result.state.params),
                    strict=True):
        assert a.shape[0] == 4
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    greedy = ns["greedy_returns"](run.algo, run.state)
    assert greedy.shape == (4,)
    np.testing.assert_array_equal(ns["env_steps"], result.env_steps)  # the logged curves
    np.testing.assert_array_equal(ns["metrics"]["episode_return"], result.returns)
    np.testing.assert_array_equal(ns["metrics"]["loss"], result.metrics["loss"])
    sweep = ns["sweep"]  # "4 lanes ... [4] each, lane by lane"
    assert sweep.seeds == [0, 1, 0, 1] and sweep.final_returns().shape == (4,)
    np.testing.assert_array_equal(sweep.hparams["learning_rate"],
                                  np.float32([1e-3, 1e-3, 2.5e-4, 2.5e-4]))
    rows = ns["hyper"].summarize(sweep.hparams, sweep.final_returns(), sweep.seeds)
    assert [(r["hparams"], r["seeds"]) for r in rows] == [
        ({"learning_rate": 1e-3}, [0, 1]), ({"learning_rate": 2.5e-4}, [0, 1])]
