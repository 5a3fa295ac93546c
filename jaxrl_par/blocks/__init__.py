"""Small building blocks that algorithms compose: rollouts, exploration schedules and
running normalisation statistics. They know nothing of any one algorithm."""
