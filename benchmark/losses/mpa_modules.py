"""The Multi-Proxy-Anchor loss module and its factories (declared, with the choices where the paper
is ambiguous, in :mod:`benchmark.losses.mpa`; imported on first use).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from benchmark.losses import functional as LF
from benchmark.losses.registry import LossContext, check_integer, check_positive

__all__ = ["MultiProxyAnchorLoss", "mpa", "mpa_ap", "mpa_dw"]

MultiProxyFormula = Callable[[Tensor, Tensor, Tensor, float, float, float, float], Tensor]

_VARIANTS: dict[str, MultiProxyFormula] = {
    "mpa": LF.multi_proxy_anchor,
    "mpa-dw": LF.multi_proxy_anchor_data_wise,
    "mpa-ap": LF.multi_proxy_anchor_all_proxies,
}


class MultiProxyAnchorLoss(nn.Module):
    """One of the MPA-family losses over K proxies per class (``variant`` picks the formula)."""

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        variant: str = "mpa",
        num_proxies: int = 10,
        alpha: float = 32.0,
        delta: float = 0.1,
        gamma: float = 0.1,
        tau: float = 0.2,
    ) -> None:
        super().__init__()
        if variant not in _VARIANTS:
            raise ValueError(f"Unknown MPA variant {variant!r}; choose one of {', '.join(_VARIANTS)}.")
        self.variant = variant
        self._formula = _VARIANTS[variant]
        self.num_classes, self.num_proxies = num_classes, num_proxies
        self.alpha, self.delta, self.gamma, self.tau = alpha, delta, gamma, tau
        self.proxies = nn.Parameter(torch.randn(num_classes, num_proxies, embedding_dim))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        proxies = self.proxies.to(embeddings.dtype)
        return self._formula(embeddings, labels, proxies, self.alpha, self.delta, self.gamma, self.tau)

    def extra_repr(self) -> str:
        return (
            f"variant={self.variant!r}, num_classes={self.num_classes}, num_proxies={self.num_proxies}, "
            f"alpha={self.alpha}, delta={self.delta}, gamma={self.gamma}, tau={self.tau}"
        )


def _factory(variant: str) -> Callable[[LossContext, Mapping[str, float]], nn.Module]:
    def build(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
        check_positive(variant, p, "alpha", "gamma")
        k = check_integer(variant, p, "num_proxies", 1)
        return MultiProxyAnchorLoss(
            ctx.num_classes, ctx.embedding_dim, variant, k, p["alpha"], p["delta"], p["gamma"], p["tau"]
        )

    return build


# One module-level factory per variant, so that each can be named "module:attr" (lazily imported).
mpa = _factory("mpa")
mpa_dw = _factory("mpa-dw")
mpa_ap = _factory("mpa-ap")
