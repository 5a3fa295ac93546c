"""The notebooks in notebooks/ run top to bottom, and say what they show."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _code(path: str) -> list[str]:
    """The notebook's code cells, without IPython's ``%`` and ``!`` lines."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    return ["".join(line for line in c["source"] if not line.lstrip().startswith(("%", "!")))
            for c in cells if c["cell_type"] == "code"]


QUICKSTART = os.path.join(ROOT, "notebooks", "quickstart.ipynb")
# The quickstart's budgets, and the smaller ones of the default run (the full notebook is
# the `slow` test: ~80 s of a 2-core CI run, most of it training to a return of 500).
BUDGETS = {"total_timesteps=500_000": "total_timesteps=4 * 128 * 8",  # PPO: 8 updates
           "total_timesteps=100_000": "total_timesteps=12_288"}  # sweep, compare (DQN
# learns from 10,000 steps)


def _run(monkeypatch, budgets: dict[str, str] | None = None, path: str = QUICKSTART) -> dict:
    """Runs the notebook's code cells in order in one namespace (with its training
    budgets replaced by ``budgets``) and returns the namespace."""
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {}
    name = os.path.basename(path)
    for i, source in enumerate(_code(path)):
        for old, new in (budgets or {}).items():
            source = source.replace(old, new)
        try:
            exec(compile(source, f"{name} cell {i}", "exec"), namespace)  # noqa: S102
        except Exception as e:
            raise AssertionError(f"code cell {i} failed: {e!r}\n{source}") from e
    return namespace


def test_quickstart_runs_with_small_budgets(monkeypatch):
    """Every cell runs against the current API, at small budgets, and makes what the
    next cells and the text use: four seeds' curves and greedy returns, a sweep of 2
    seeds x 3 learning rates, and one compare row per entry with its curve."""
    sources = "".join(_code(QUICKSTART))
    assert sources.count("total_timesteps=500_000") == 1, "update BUDGETS"
    assert sources.count("total_timesteps=100_000") == 2, "update BUDGETS"
    ns = _run(monkeypatch, BUDGETS)
    result, updates = ns["result"], ns["algo"].num_updates
    assert updates == 8 and result.seeds == [0, 1, 2, 3]
    assert result.returns.shape == (4, updates) and result.trailing_returns().shape == (4, 8)
    assert ns["greedy"].shape == (4,) and np.all(ns["greedy"] >= 8)  # CartPole: >= ~8 steps
    assert ns["policy"].seed == 0  # no greedy return recorded: the first seed
    assert ns["video"].frames == min(150, ns["video"].returns[0] + 1)  # steps + the last obs
    sweep = ns["sweep"]
    assert len(sweep.seeds) == 6
    np.testing.assert_allclose(np.sort(np.unique(sweep.hparams["learning_rate"])),
                               [3e-4, 1e-3, 3e-3], rtol=1e-6)
    rows = ns["rows"]
    assert [r.entry.name for r in rows] == ["ppo", "a3c", "dqn"]
    for r in rows:
        assert len(r.curve["env_steps"]) == len(r.curve["return"]) == len(r.curve["seconds"])
        assert r.curve["env_steps"][-1] <= 12_288


@pytest.mark.slow
@pytest.mark.xla_optimized
def test_quickstart_runs_and_learns(monkeypatch):
    """The whole notebook as written, and what its text says: PPO solves CartPole on
    every seed, greedy too; one compare entry reaches the target return."""
    namespace = _run(monkeypatch)
    assert np.all(namespace["result"].final_returns() >= 475)
    assert np.all(namespace["greedy"] >= 475)
    assert len(namespace["sweep"].seeds) == 6
    rows = namespace["rows"]
    assert [r.entry.name for r in rows] == ["ppo", "a3c", "dqn"]
    assert any(r.steps_to_target is not None for r in rows)


PARADIGMS = os.path.join(ROOT, "notebooks", "paradigms.ipynb")


@pytest.mark.parametrize("path", [QUICKSTART, PARADIGMS], ids=os.path.basename)
def test_notebook_is_stored_with_its_outputs(path):
    """What a reader sees without running it: every code cell ran, in order, without an
    error, and the figures are there (the quickstart's GIF too)."""
    with open(path) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    kinds = [k for o in outputs for k in o.get("data", {})]
    if path == QUICKSTART:  # the seeds' curves, plot_runs', compare's; the policy's GIF
        assert kinds.count("image/png") == 3 and kinds.count("image/gif") == 1
    else:  # compare's curves
        assert kinds.count("image/png") == 1


PARADIGM_BUDGET = {"total_timesteps=60_000": "total_timesteps=12_288"}  # DQN learns
# from 10,000 steps


@pytest.mark.slow
def test_paradigms_runs(monkeypatch):
    """Every cell of the paradigms notebook against the current API, at a small budget:
    a row per entry with its curve, the runtimes' rows in order."""
    sources = "".join(_code(PARADIGMS))
    assert sources.count("total_timesteps=60_000") == 2, "update PARADIGM_BUDGET"
    ns = _run(monkeypatch, PARADIGM_BUDGET, PARADIGMS)
    assert [r.entry.name for r in ns["rows"]] == ns["entries"]
    assert [r.entry.name for r in ns["runtimes"]] == [
        "a3c", "a3c@threads", "impala", "impala@actor-learner"]
    for r in ns["rows"] + ns["runtimes"]:
        assert r.curve["env_steps"][-1] <= 12_288
