"""Model and training-loop options beyond MLRC's loop, as the Mean-Field authors' code runs the
traditional protocol (mft-in-dml ``train.py``, adapted from Proxy-Anchor's; protocols/traditional.toml).

Every option is off by default (the MLRC loop of docs/protocols.md §2.2 is unchanged). The model
options are config keys:

* ``model.pooling = "avg+max"``: the trunk's last feature map is pooled by the *sum* of global
  average and global max pooling (their BN-Inception: ``gap(x) + gmp(x)``);
* ``model.embedder_init = "kaiming"``: embedder weights He-normal with fan-out, bias 0;
* ``model.freeze_trunk_bn_affine``: BatchNorm γ/β do not train either (their ``bn_freeze``), until
  a warm-up ends: their warm-up block sets ``requires_grad = True`` on every parameter outside the
  embedder and the loss at epoch ``warm``, γ/β included, so γ/β train from the first epoch after
  the warm-up (and never without a warm-up).

The loop options are a :class:`LoopOptions` the protocol passes to
:func:`benchmark.engine.train.train_with_loss` (the traditional protocol's own settings; the
engine reads no protocol's settings itself):

* ``warmup_epochs``: the first epochs train only the embedder and the loss's parameters;
* ``lr_decay_step`` / ``lr_decay_gamma``: every learning rate times gamma after each step of
  epochs (torch's StepLR, stepped after every epoch, as theirs);
* ``clip_grad_value``: each trunk/embedder gradient clipped to ±value before the step
  (``clip_grad_value_(model.parameters(), 10)``; their loss parameters are not clipped).

:mod:`benchmark.engine.train` calls :func:`configure_model` when it builds a model and a
:class:`LoopControl` at the start of each epoch, after each backward pass and after each epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from benchmark.config import ModelConfig
from benchmark.errors import ConfigError
from benchmark.models.trunks import EmbeddingModel

# The value checks need no torch: dmlbench run makes them before importing it (re-exported here).
from benchmark.option_checks import EMBEDDER_INITS as EMBEDDER_INITS
from benchmark.option_checks import POOLINGS as POOLINGS
from benchmark.option_checks import validate_training_options as validate_training_options

# Offset of the embedder-init seed from the model seed: the init draws its own numbers and must
# not repeat the trunk's first draws.
_INIT_SEED_OFFSET = 7919


def configure_model(model: EmbeddingModel, options: ModelConfig, seed: int) -> EmbeddingModel:
    """Apply pooling, embedder initialisation and BatchNorm γ/β freezing to a freshly built model."""
    if options.pooling != "avg":
        if not hasattr(model.trunk, "global_pool"):
            raise ConfigError(
                f"model.pooling = {options.pooling!r} needs a trunk that pools its own feature map "
                f"(bninception, smallcnn); trunk {options.trunk!r} has a fixed pooling."
            )
        setattr(model.trunk, "global_pool", options.pooling)  # noqa: B010  (nn.Module typing)
    if options.embedder_init == "kaiming":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + _INIT_SEED_OFFSET)
            nn.init.kaiming_normal_(model.embedder.weight, mode="fan_out")
            nn.init.zeros_(model.embedder.bias)
    if options.freeze_trunk_bn_affine:
        for module in model.trunk.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                for param in module.parameters(recurse=False):
                    param.requires_grad_(False)
    return model


@dataclass(frozen=True)
class LoopOptions:
    """Warm-up, learning-rate steps and gradient clipping of a training loop; the defaults are
    MLRC's loop (none of them). The caller has checked the values (the protocol's settings)."""

    #: Epochs at the start that train only the embedder and the loss's parameters (trunk frozen).
    warmup_epochs: int = 0
    #: Every lr multiplied by ``lr_decay_gamma`` after each ``lr_decay_step`` epochs (0 = no decay).
    lr_decay_step: int = 0
    lr_decay_gamma: float = 1.0
    #: Each trunk/embedder gradient clipped to [-clip_grad_value, clip_grad_value] (0 = none).
    clip_grad_value: float = 0.0


class LoopControl:
    """Warm-up, learning-rate steps and gradient clipping of one fold's training loop."""

    def __init__(
        self, options: LoopOptions, model: nn.Module, optimizers: list[torch.optim.Optimizer]
    ) -> None:
        self.options = options
        self.model = model
        trunk = getattr(model, "trunk", None)
        # Trunk parameters that the warm-up freezes and thaws: all of them, BatchNorm γ/β frozen by
        # model.freeze_trunk_bn_affine included, as the authors' warm-up block thaws every parameter
        # outside the embedder and the loss at epoch `warm`. Without a warm-up nothing is touched,
        # so frozen γ/β stay frozen (their block does not run with --warm 0).
        self.trunk_params = (
            list(trunk.parameters()) if trunk is not None and options.warmup_epochs > 0 else []
        )
        self.schedulers = (
            [
                torch.optim.lr_scheduler.StepLR(
                    opt, step_size=options.lr_decay_step, gamma=options.lr_decay_gamma
                )
                for opt in optimizers
            ]
            if options.lr_decay_step > 0
            else []
        )

    def start_epoch(self, epoch: int) -> None:
        """Freeze the trunk during the warm-up epochs (1-based ``epoch``), unfreeze all of it,
        BatchNorm γ/β included, afterwards."""
        if self.options.warmup_epochs > 0:
            trains = epoch > self.options.warmup_epochs
            for param in self.trunk_params:
                param.requires_grad_(trains)

    def after_backward(self) -> None:
        """Clip the model's gradients element-wise (before the optimiser step)."""
        if self.options.clip_grad_value > 0:
            torch.nn.utils.clip_grad_value_(self.model.parameters(), self.options.clip_grad_value)

    def end_epoch(self) -> None:
        """Advance the learning-rate schedule by one epoch."""
        for scheduler in self.schedulers:
            scheduler.step()

    def finish(self) -> None:
        """Leave the trunk as after the warm-up, all trainable (a fold may end inside the warm-up)."""
        for param in self.trunk_params:
            param.requires_grad_(True)
