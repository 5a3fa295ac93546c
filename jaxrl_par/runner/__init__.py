"""The runner: builds an algorithm's programs, drives the chunk loop, and the process
plumbing around it (checkpoints, run directories, evaluation, sweeps, comparisons)."""
