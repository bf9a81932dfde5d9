"""The training engine: one fold's training, its options, fold-parallel execution and worker processes.

What every protocol runs its folds with, below the protocols: nothing here imports
:mod:`benchmark.protocol` (tests/test_import_cycles.py checks it). ``train.py`` trains and embeds
one fold, ``training_options.py`` holds the loop's optional controls, ``parallel.py`` runs folds
in processes, ``workers.py`` runs search processes, and ``device.py``, ``environment.py``,
``seeds.py``, ``evaluation.py`` are what these share with the protocols' run steps.
"""
