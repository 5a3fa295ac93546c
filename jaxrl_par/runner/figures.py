"""What each figure of a run's summary is, and its spread over seeds.

The CLI's JSON summary (``jaxrl-par train --json``) carries, beside the numbers, a
``figures`` object naming what each one measures (:data:`FIGURES`), and for every return
its spread over seeds (:func:`spread_fields`): the standard deviation and a 95% confidence
interval of the mean (:func:`jaxrl_par.runner.evaluation.spread`).
"""

from __future__ import annotations

from jaxrl_par.runner.evaluation import spread

#: summary key -> what the figure is.
FIGURES: dict[str, str] = {
    "final_return": "training return: mean over seeds of each seed's mean undiscounted return "
                    "of the episodes that finished in the last 5% of its updates, played by "
                    "the exploring policy (epsilon-greedy, sampled actions)",
    "final_return_std": "standard deviation over seeds of final_returns",
    "final_return_ci95": "95% confidence interval of final_return's mean over seeds "
                         "(Student's t; null for one seed)",
    "final_returns": "training return of each seed, in seed order",
    "greedy_return": "greedy return: mean over seeds of each seed's mean return of one "
                     "episode in each of --eval-envs envs, played by the evaluation policy "
                     "(argmax Q, the distribution's mode), each seed and env from its own "
                     "start state",
    "greedy_return_std": "standard deviation over seeds of greedy_returns",
    "greedy_return_ci95": "95% confidence interval of greedy_return's mean over seeds "
                          "(Student's t; null for one seed)",
    "greedy_returns": "greedy return of each seed, in seed order",
    "steps_per_second": "environment steps per second of training time, summed over all "
                        "seeds (steps_per_second_per_seed is one seed's)",
    "steps_per_second_per_seed": "steps_per_second divided by the number of seeds",
    "env_steps": "environment steps of one seed",
}


def spread_fields(name: str, values) -> dict:
    """``{name: mean, name_std: std, name_ci95: [low, high] or None}`` of ``values`` ``[S]``
    (NaNs, seeds without the figure, left out; None where no seed has it)."""
    s = spread(values)
    return {name: s.mean, f"{name}_std": s.std,
            f"{name}_ci95": None if s.ci95 is None else [s.ci95[0], s.ci95[1]]}


def describe(summary: dict) -> dict:
    """:data:`FIGURES`' entries for the keys ``summary`` holds."""
    return {k: v for k, v in FIGURES.items() if k in summary}


__all__ = ["FIGURES", "describe", "spread_fields"]
