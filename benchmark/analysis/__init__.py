"""Record analysis: what is computed from run records (convergence, code provenance), torch-free.

Below both the protocols that write records and the reports that read them, so that
:mod:`benchmark.report` and :mod:`benchmark.records` use it without importing
:mod:`benchmark.protocol` or the training engine (tests/test_import_cycles.py checks it).
"""
