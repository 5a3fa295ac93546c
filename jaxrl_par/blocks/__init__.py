"""Small building blocks that algorithms compose: rollouts, exploration schedules and
running normalisation statistics, and which leaves of a state a function reads. They know
nothing of any one algorithm."""
