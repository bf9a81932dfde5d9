"""``dmlbench regress``: short fixed-hyperparameter trainings on small subsets compared with committed
baselines (``results/baselines/``).

- :mod:`benchmark.regress.cases` — the suite (``protocols/regress.toml``), parsed strictly;
- :mod:`benchmark.regress.training` — one case trained with the protocol's own fold training;
- :mod:`benchmark.regress.compare` — pure comparison: tolerances, verdicts, table, diff;
- :mod:`benchmark.regress.baselines` — the baseline files;
- :mod:`benchmark.regress.check` — check and ``--update`` modes.
"""
