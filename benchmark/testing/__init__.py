"""Contract tests a plugin author imports: what dmlbench requires of a loss or a dataset.

A plugin's own test suite runs them against its class, as Optuna's ``optuna.testing`` serves
sampler authors. With pytest, subclass the contract in a test module::

    from benchmark.testing.losses import LossContract
    from my_loss import MyLoss

    class TestMyLoss(LossContract):
        loss = MyLoss          # a torch.nn.Module subclass declaring the attributes, or a LossSpec

and for a dataset (``options`` may be overridden; the default reads no files)::

    from benchmark.testing.datasets import DatasetContract
    from my_data import SPEC

    class TestMyData(DatasetContract):
        dataset = SPEC         # a DatasetSpec
        data_dir = Path("...")  # where it reads its files (None for a generated dataset)

Each check is also a plain function (:data:`benchmark.testing.losses.LOSS_CHECKS`,
:data:`benchmark.testing.datasets.DATASET_CHECKS`) that raises ``AssertionError`` naming what
failed, so any test runner can call them; pytest itself is not needed to import this package.
dmlbench runs the same checks over every built-in loss and dataset (``tests/test_contracts.py``).
"""
