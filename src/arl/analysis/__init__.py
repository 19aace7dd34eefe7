"""Study tooling: run folders read into tables, plots and the results page's findings.

Nothing in training imports this package; ``src/report.py`` and ``src/compare.py`` are its command
lines. Its modules, each importing at run time only those above it in this list (and ``arl.utils``):

- :mod:`~arl.analysis.stats`: the statistics (t intervals, paired tests, the bootstrap, power);
- :mod:`~arl.analysis.runs`: reading run folders (overrides, configs, event files, BC results,
  validation episodes) into :class:`~arl.analysis.runs.Run` records, grouped by setting;
- :mod:`~arl.analysis.tables`: the markdown tables of a multirun's report, and the measures a paired
  comparison compares (:data:`~arl.analysis.tables.MEASURES`);
- :mod:`~arl.analysis.games`: validations compared game by game (a sign test over games, each game
  one unit; McNemar for one validation against another), per setting and for ``src/compare.py``;
- :mod:`~arl.analysis.plots`: the curves and bar charts;
- :mod:`~arl.analysis.report`: a multirun's ``report.md`` and figures (``python src/report.py <folder>``);
- :mod:`~arl.analysis.contrasts`: the findings' statistics: the paired t-test, Holm, a contrast, the
  verdict rule, the collapse counts' Fisher tests;
- :mod:`~arl.analysis.study`: a study of the findings spec: its archive's runs and configs, its
  measures, its env's task;
- :mod:`~arl.analysis.findings`: the findings spec (``docs/results/findings.yaml``), the findings
  table and README's headline table;
- :mod:`~arl.analysis.blocks`: the other generated blocks of the pages (per study, and the archives);
- :mod:`~arl.analysis.values`: the numbers a page's prose quotes, generated inline
  (``<!-- value ... -->``);
- :mod:`~arl.analysis.pages`: the blocks by name, written into the pages between their markers and
  checked against the archives, with the inline values and the numbers of the prose
  (``python src/report.py findings [--write | --check]``).

matplotlib, tensorboard and yaml are imported inside the functions that need them.
"""
