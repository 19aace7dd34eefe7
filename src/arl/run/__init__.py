"""The orchestration room: how a run is put together, read top-down.

- :mod:`~arl.run.pipeline`: :func:`~arl.run.pipeline.train`, the whole job in named steps (the run
  folder, the parts, behaviour cloning, the RL stage, the export, the record);
- :mod:`~arl.run.bc_stage`: behaviour cloning (expert data, SFT rounds, self-bootstrapping, DAgger);
- :mod:`~arl.run.evaluation`: validation outside training (``src/eval.py``, the BC stage);
- :mod:`~arl.run.builders`: the parts from the config (model, engine, agent loop, module, DataModule,
  Trainer); nothing there runs a stage;
- :mod:`~arl.run.resume`: checkpoints, finished runs and their records;
- :mod:`~arl.run.checks`: the start-up checks (a bad key or a machine that cannot run the config
  stops the run in seconds);
- :mod:`~arl.run.settings`: the run's config as one typed object (``RunSettings``, ``EvalSettings``), made once;
- :mod:`~arl.run.loggers`: the ``logger`` group per stage; :mod:`~arl.run.resolvers`: the OmegaConf
  resolvers the entry points register; :mod:`~arl.run.explain`: which config files set a key
  (``explain=<key>``); :mod:`~arl.run.start_validation`: a sweep's shared start validation.

Every other room is below this one; ``src/train.py`` and ``src/eval.py`` are its callers.
"""
