"""Trunk networks (feature extractors) and the embedder head.

Each trunk maps images (B, C, H, W) to pooled features (B, F). Pretrained weights come only
from local files: ``model.trunk_weights``, else the trunk's public checkpoint if it is already in
the torch hub cache or (timm trunks) the Hugging Face hub cache. Nothing is downloaded, and asking
for pretrained weights that are in none of these is an error, never a silent random init.
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import torch
from torch import nn

from benchmark.errors import ConfigError
from benchmark.models.registry import TIMM_PREFIX, TRUNKS, HFWeights, TrunkSpec, trunk_spec

# The specs live in benchmark.models.registry (importable without torch); re-exported for callers.
__all__ = [
    "TIMM_PREFIX",
    "TRUNKS",
    "EmbeddingModel",
    "HFWeights",
    "TrunkSpec",
    "WeightsLookup",
    "build_head",
    "build_model",
    "check_weights_file",
    "load_trunk_weights",
    "lookup_cached_weights",
    "set_train_mode",
    "trunk_spec",
]


@dataclass(frozen=True)
class WeightsLookup:
    """Where a trunk's public weights were looked for in the local caches, and what was found."""

    found: Path | None
    cache: str  # which cache ``found`` is in ("" when nothing was found)
    searched: tuple[str, ...]  # one phrase per place looked in, for the error message


def hub_checkpoint_dir() -> Path:
    """Where torch keeps downloaded checkpoints (``$TORCH_HOME/hub/checkpoints``)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def hf_hub_cache_dir() -> Path:
    """The Hugging Face hub cache, from the environment variables huggingface_hub reads.

    ``HF_HUB_CACHE``, else the legacy ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub`` with
    ``HF_HOME`` defaulting to ``$XDG_CACHE_HOME/huggingface`` (``~/.cache/huggingface``). Read
    at each call because huggingface_hub reads them once, when it is imported.
    """
    default_home = os.path.join(os.path.expanduser("~"), ".cache")
    hf_home = os.path.expandvars(
        os.path.expanduser(
            os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", default_home), "huggingface"))
        )
    )
    hub = os.getenv("HF_HUB_CACHE", os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home, "hub")))
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def _find_in_hf_cache(weights: HFWeights, cache: Path) -> Path | None:
    """The first of ``weights.files`` in the hub cache at the wanted revision (files only, no network)."""
    from huggingface_hub import try_to_load_from_cache

    for name in weights.files:
        # Resolves refs/<revision> to a snapshot like hf_hub_download does; returns None, or a
        # "known to be absent" marker (not a str), when the file is not there.
        found = try_to_load_from_cache(weights.repo_id, name, cache_dir=cache, revision=weights.revision)
        if isinstance(found, str):
            return Path(found)
    return None


def lookup_cached_weights(spec: TrunkSpec) -> WeightsLookup:
    """Look for the trunk's public weights already on disk: Hugging Face hub cache, then torch hub cache.

    The order is timm's (it prefers the hub copy to the URL one). Only the file system is read.
    """
    searched: list[str] = []
    if not spec.has_public_weights:
        return WeightsLookup(None, "", (f"trunk {spec.name!r} has no public pretrained weights to look for",))
    if spec.hf_weights is not None:
        hf = spec.hf_weights
        cache = hf_hub_cache_dir()
        try:
            path = _find_in_hf_cache(hf, cache)
        except ImportError:  # a timm dependency only since timm 0.9, which started using the hub
            searched.append("the Hugging Face hub cache was not searched (huggingface_hub is not installed)")
        else:
            if path is not None:
                return WeightsLookup(path, "Hugging Face hub", ())
            searched.append(
                f"none of {', '.join(hf.files)} of {hf.repo_id} (revision {hf.revision or 'main'}) is in "
                f"the Hugging Face hub cache {cache} (HF_HUB_CACHE / HF_HOME)"
            )
    if spec.cache_files:
        checkpoints = hub_checkpoint_dir()
        for name in spec.cache_files:
            if (checkpoints / name).is_file():
                return WeightsLookup(checkpoints / name, "torch hub", ())
        searched.append(f"none of {', '.join(spec.cache_files)} is in {checkpoints} (TORCH_HOME)")
    return WeightsLookup(None, "", tuple(searched))


def pool_feature_map(x: torch.Tensor, mode: str) -> torch.Tensor:
    """(B, C, H, W) -> (B, C): global average pooling, or with ``"avg+max"`` the sum of global
    average and global max pooling (the Proxy-Anchor / Mean-Field code's BN-Inception)."""
    avg = x.mean(dim=(2, 3))
    return avg if mode == "avg" else avg + x.amax(dim=(2, 3))


class SmallCNN(nn.Module):
    """Four conv-BN-ReLU blocks with max-pooling, global average pooling: the CPU default trunk."""

    def __init__(self, in_channels: int, widths: tuple[int, ...] = (16, 32, 64, 128)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(prev, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            # No pooling after the last block: at 28 px three halvings leave a 3x3 map to average.
            if i < len(widths) - 1:
                layers.append(nn.MaxPool2d(2))
            prev = w
        self.features = nn.Sequential(*layers)
        self.out_dim = prev
        self.global_pool = "avg"  # or "avg+max" (model.pooling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return pool_feature_map(self.features(x), self.global_pool)


def _small_cnn(in_channels: int) -> tuple[nn.Module, int]:
    net = SmallCNN(in_channels)
    return net, net.out_dim


def _torchvision_resnet(arch: str) -> Callable[[int], tuple[nn.Module, int]]:
    def build(in_channels: int) -> tuple[nn.Module, int]:
        import torchvision

        net = getattr(torchvision.models, arch)(weights=None)
        if in_channels != 3:
            # Grayscale input: a fresh first conv; pretrained weights (3 channels) are averaged in
            # load_trunk_weights if given.
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        out_dim = int(net.fc.in_features)
        net.fc = nn.Identity()
        return net, out_dim

    return build


def _torchvision_googlenet(in_channels: int) -> tuple[nn.Module, int]:
    import torchvision

    # No auxiliary classifiers: they only serve ImageNet training; their weights are skipped on load.
    net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    if in_channels != 3:
        net.conv1.conv = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    out_dim = int(net.fc.in_features)
    net.fc = nn.Identity()
    return net, out_dim


def _timm_trunk(model_name: str) -> Callable[[int], tuple[nn.Module, int]]:
    def build(in_channels: int) -> tuple[nn.Module, int]:
        timm = _import_timm(model_name)
        # num_classes=0: timm's pooled-feature output. pretrained=False: timm would download;
        # pretrained weights are loaded afterwards from a local file (load_trunk_weights).
        net = timm.create_model(model_name, pretrained=False, num_classes=0, in_chans=in_channels)
        return net, int(net.num_features)

    return build


def _import_timm(model_name: str):  # type: ignore[no-untyped-def]
    try:
        import timm
    except ImportError as exc:
        raise ConfigError(
            f"model.trunk = '{TIMM_PREFIX}{model_name}' needs the optional timm package: "
            "pip install 'dmlbench[timm]'."
        ) from exc
    if not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name, timm.list_models(), n=5, cutoff=0.7)
        raise ConfigError(
            f"timm has no model {model_name!r}" + (f"; similar: {', '.join(close)}." if close else ".")
        )
    return timm


# timm's load order on the hub: a safetensors copy of a pickled file first (timm._hub._get_safe_alternatives).
_HF_DEFAULT_FILE = "pytorch_model.bin"
_HF_SAFE_ALTERNATIVES = {
    "pytorch_model.bin": "model.safetensors",
    "open_clip_pytorch_model.bin": "open_clip_model.safetensors",
}


def _hf_weight_files(filename: str | None) -> tuple[str, ...]:
    """The files timm reads from a hub repository (``hf_hub_filename``, default ``pytorch_model.bin``)."""
    name = filename or _HF_DEFAULT_FILE
    if name.endswith(".bin"):
        return (_HF_SAFE_ALTERNATIVES.get(name, name[: -len(".bin")] + ".safetensors"), name)
    return (name,)


def _url_file(url: str | tuple[str, str]) -> str:
    """The file name timm / torch.hub give a downloaded URL: the URL path's last part, or the one named."""
    if isinstance(url, tuple):  # timm's (url, file name) form
        return url[1]
    return PurePosixPath(urlparse(url).path).name


def timm_spec(name: str, model_name: str) -> TrunkSpec:
    """The trunk spec of timm model ``model_name`` (``arch`` or ``arch.tag``) and where its weights live."""
    timm = _import_timm(model_name)
    from timm.models import get_pretrained_cfg

    try:
        # The cfg timm.create_model(pretrained=True) would use: the default tag for a bare name.
        cfg = get_pretrained_cfg(model_name)
    except RuntimeError as exc:  # an unknown tag of a known architecture
        arch = model_name.split(".", 1)[0]
        tags = timm.list_pretrained(f"{arch}.*")
        raise ConfigError(
            f"timm model {arch!r} has no pretrained tag {model_name!r}"
            + (f"; its tags: {', '.join(tags)}." if tags else "; it has no pretrained weights.")
        ) from exc
    if cfg is None:  # an architecture without registered weights
        return TrunkSpec(name, f"timm model {model_name}", _timm_trunk(model_name), False)
    hf = None
    if cfg.hf_hub_id:
        repo_id, _, revision = cfg.hf_hub_id.partition("@")  # timm's "org/name@revision"
        hf = HFWeights(repo_id, revision or None, _hf_weight_files(cfg.hf_hub_filename))
    # custom_load weights (e.g. ViT .npz) are not state dicts: their cached copy is of no use here.
    url_file = _url_file(cfg.url) if cfg.url and not cfg.custom_load else ""
    classifiers = (cfg.classifier,) if isinstance(cfg.classifier, str) else tuple(cfg.classifier or ())
    # The top-level module of each: num_classes=0 drops all of e.g. LeViT's head_dist (bn + linear)
    # though the cfg names only head_dist.linear. Keys the trunk keeps there still load.
    heads = tuple(dict.fromkeys(c.split(".", 1)[0] for c in classifiers))
    return TrunkSpec(
        name,
        f"timm model {model_name}",
        _timm_trunk(model_name),
        bool(hf or url_file),
        (url_file,) if url_file else (),
        hf,
        heads,
    )


# The registered trunks' builders (named "module:attr" in benchmark.models.registry).
small_cnn = _small_cnn
torchvision_resnet18 = _torchvision_resnet("resnet18")
torchvision_resnet50 = _torchvision_resnet("resnet50")
torchvision_googlenet = _torchvision_googlenet


# Classifier heads (and GoogLeNet's auxiliary classifiers) are not part of a trunk: torchvision's
# fc, Cadene's last_linear, timm's fc / head / head.fc / classifier (others come from TrunkSpec).
CLASSIFIER_PREFIXES = ("fc.", "last_linear.", "aux1.", "aux2.", "head.", "classifier.")


def _read_state_dict(path: Path) -> Mapping[str, torch.Tensor]:
    """The tensors of a weights file: safetensors (by its suffix, as the hub names them) or torch.save."""
    if path.suffix == ".safetensors":
        try:
            from safetensors import SafetensorError
            from safetensors.torch import load_file
        except ImportError as exc:
            raise ConfigError(
                f"Trunk weights file {path} is a safetensors file, which needs the safetensors package "
                "(a timm dependency): pip install safetensors."
            ) from exc
        try:
            return load_file(path, device="cpu")
        except SafetensorError as exc:
            raise ConfigError(f"Trunk weights file {path} is not a readable safetensors file: {exc}") from exc
    try:
        with warnings.catch_warnings():
            # torch warns of a pickle protocol it does not write before reading on; whatever the
            # file holds is judged below, so the warning would only precede the real message.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises anything from IndexError to UnpicklingError on a non-checkpoint
        raise ConfigError(
            f"Trunk weights file {path} is not a PyTorch checkpoint ({type(exc).__name__}: {exc}); expected "
            "a state dict saved with torch.save (.pth/.pt) or a .safetensors file."
        ) from exc
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(
            f"Trunk weights file {path} holds a {type(state).__name__}, not a state dict "
            "(a mapping of parameter names to tensors, as torch.save(model.state_dict(), path) writes)."
        )
    return state


def check_weights_file(path: Path, trunk_name: str | None = None) -> None:
    """Raise ConfigError unless ``path`` is a readable state dict whose keys and shapes fit the trunk
    ``trunk_name`` (when given); checked before any data is loaded.

    The trunk is built on torch's meta device (no memory, no random numbers drawn), with 3 input
    channels: a first convolution's channel count is left to :func:`load_trunk_weights`, which
    averages RGB weights for a grayscale dataset, and the dataset's channels are not known yet.
    """
    state = _read_state_dict(path)
    if trunk_name is None:
        return
    spec = trunk_spec(trunk_name)
    try:
        with torch.device("meta"):
            trunk, _ = spec.build(3)
    except Exception:  # a trunk (a plugin's) that needs real tensors to be built: build it on the CPU
        with torch.random.fork_rng(devices=[]):
            trunk, _ = spec.build(3)
    _fit_state(trunk.state_dict(), state, path, spec.head_names, any_channels=True)


def _fit_state(
    own: Mapping[str, torch.Tensor],
    state: Mapping[str, torch.Tensor],
    path: Path,
    head_names: tuple[str, ...],
    *,
    any_channels: bool = False,
) -> dict[str, torch.Tensor]:
    """``state`` as the trunk whose state dict is ``own`` loads it: classifier keys dropped, RGB first
    convolutions averaged for a grayscale trunk. A ConfigError names missing, unexpected and
    wrongly shaped keys. ``any_channels``: ``own`` is an RGB trunk's and the dataset's channels are
    not known, so a convolution taking 3 input channels there may hold 1 or 3 in ``state``."""
    skip = CLASSIFIER_PREFIXES + tuple(f"{h}." for h in head_names)
    # A key the trunk has is loaded even under a classifier prefix (e.g. timm's head.norm).
    filtered = {k: v for k, v in state.items() if not (k.startswith(skip) and k not in own)}
    for k, v in list(filtered.items()):
        if k in own and own[k].shape != v.shape and v.ndim == 4 and own[k].shape[1] == 1:
            filtered[k] = v.mean(dim=1, keepdim=True)  # RGB first conv -> grayscale
    missing = [k for k in own if k not in filtered and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in filtered if k not in own]

    def fits(key: str) -> bool:
        want, got = tuple(own[key].shape), tuple(filtered[key].shape)
        if any_channels and len(want) == 4 == len(got) and want[1] == 3 and got[1] in (1, 3):
            return want[:1] + want[2:] == got[:1] + got[2:]
        return want == got

    shapes = [
        f"{k} {tuple(filtered[k].shape)} (trunk: {tuple(own[k].shape)})"
        for k in filtered
        if k in own and not fits(k)
    ]
    problems = [
        f"{what} {keys[:5]}" + (f" ({len(keys)} in all)" if len(keys) > 5 else "")
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes))
        if keys
    ]
    if problems:
        raise ConfigError(f"Weights in {path} do not fit the trunk: {', '.join(problems)}.")
    return filtered


def load_trunk_weights(trunk: nn.Module, path: Path, head_names: tuple[str, ...] = ()) -> None:
    """Load a local state dict into ``trunk`` (classifier keys ignored; shapes must otherwise match).

    ``head_names`` are further classifier modules to ignore (timm's pretrained_cfg "classifier").
    """
    if not path.is_file():
        raise ConfigError(f"Trunk weights file {path} does not exist (model.trunk_weights).")
    state = _fit_state(trunk.state_dict(), _read_state_dict(path), path, head_names)
    trunk.load_state_dict(state, strict=False)


class EmbeddingModel(nn.Module):
    """Trunk followed by a linear embedder (no activation), as in MLRC."""

    def __init__(self, trunk: nn.Module, trunk_dim: int, embedding_dim: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.embedder = nn.Linear(trunk_dim, embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.embedder(self.trunk(x))
        return out


def build_model(
    trunk_name: str,
    in_channels: int,
    embedding_dim: int,
    *,
    pretrained: bool,
    weights_path: str,
    seed: int,
) -> EmbeddingModel:
    """Build trunk + embedder with parameters drawn from ``seed`` (weights file loaded if pretrained)."""
    spec = trunk_spec(trunk_name)
    if pretrained and not weights_path:
        raise ConfigError(
            f"model.pretrained = true for trunk {trunk_name!r} but no model.trunk_weights file was given; "
            "weights are never downloaded. Pass --set model.trunk_weights=PATH or model.pretrained=false."
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        trunk, dim = spec.build(in_channels)
        model = EmbeddingModel(trunk, dim, embedding_dim)
    if pretrained:
        from benchmark.models.pretrained import resolve_weights

        # builtin:NAME resolves to the packaged file after its sha256 check (mismatch: ConfigError).
        load_trunk_weights(trunk, resolve_weights(weights_path), spec.head_names)
    return model


def build_head(feature_dim: int, embedding_dim: int, seed: int) -> EmbeddingModel:
    """The embedder alone (identity trunk), for frozen-trunk training on cached features.

    The embedder is the MLRC ``Linear(feature_dim, embedding_dim)``, drawn from ``seed``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return EmbeddingModel(nn.Identity(), feature_dim, embedding_dim)


def set_train_mode(model: EmbeddingModel, freeze_trunk_bn: bool) -> None:
    """Training mode, with the trunk's BatchNorm layers in eval mode when frozen (docs/protocols.md §2.2)."""
    model.train()
    if freeze_trunk_bn:
        for module in model.trunk.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()
