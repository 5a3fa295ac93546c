"""The runner: builds an algorithm's programs, drives the chunk loop, and the process
plumbing around it (checkpoints, run directories, evaluation, sweeps, comparisons).

* :mod:`~jaxrl_par.runner.training`: ``train()`` and ``TrainResult``.
* :mod:`~jaxrl_par.runner.programs`: the builder (initial states, compiled chunks).
* :mod:`~jaxrl_par.runner.loop`: the chunk loop; :mod:`~jaxrl_par.runner.listeners`: what
  runs after every chunk (progress, logs, checkpoints, evaluation, PBT, callbacks).
* :mod:`~jaxrl_par.runner.records`, :mod:`~jaxrl_par.runner.checkpoints` (orbax),
  :mod:`~jaxrl_par.runner.continuation`, :mod:`~jaxrl_par.runner.layouts`,
  :mod:`~jaxrl_par.runner.runs`: a run directory's files, its checkpoints, continuing a
  run, device layouts, reading a finished run.
* :mod:`~jaxrl_par.runner.loggers`: TensorBoard and W&B loggers, as listeners.
* :mod:`~jaxrl_par.runner.policy` (``load_policy``, ``export_policy``, ``evaluate``),
  :mod:`~jaxrl_par.runner.video` (``record_video``), :mod:`~jaxrl_par.runner.plots`
  (``plot_runs``): using a trained run.
"""
