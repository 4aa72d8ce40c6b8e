"""The authors' public models, imported at run time from local clones of their repositories (never
copied here), and an adapter that lets meshop's training loop train them.

- :func:`transolver_class`: ``Model`` of ``PDE-Solving-StandardBenchmark/model/
  Transolver_Irregular_Mesh.py`` of https://github.com/thuml/Transolver (Wu et al. 2024).
- :func:`ono_class`: ``ONO2`` of ``ONOmodel2.py`` of https://github.com/xzppp/ONO (Xiao et al.
  2024).

Their modules import a few packages they do not use in these models: timm only for a
truncated-normal initialisation (torch's ``nn.init.trunc_normal_`` is the same function), and the
ONO module the attention packages of its other ``attn_type`` options (performer, Nyström, reformer,
Linformer). Where such a package is not installed, an empty stand-in is put in its place; the ONO's
default ``attn_type=None`` needs the real ``linear-attention-transformer`` package, and einops.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch
from torch import nn

from meshop.data.batching import num_samples

TRANSOLVER_REPO = "https://github.com/thuml/Transolver"
TRANSOLVER_FILE = Path("PDE-Solving-StandardBenchmark/model/Transolver_Irregular_Mesh.py")
ONO_REPO = "https://github.com/xzppp/ONO"
ONO_FILE = Path("ONOmodel2.py")
#: packages the authors' modules import but these models never call, with the names they import
UNUSED = {
    "performer_pytorch": ("SelfAttention",),
    "nystrom_attention": ("NystromAttention",),
    "reformer_pytorch": ("LSHSelfAttention",),
    "linformer": ("LinformerSelfAttention",),
}


class AuthorsCodeMissing(RuntimeError):
    """The clone or a package the authors' model needs is absent; the message says what to give."""


def _installed(package: str) -> bool:
    """Importable or already imported (a stand-in put in place before included)."""
    return package in sys.modules or importlib.util.find_spec(package) is not None


def _stand_in_timm() -> None:
    if not _installed("timm"):
        layers = types.ModuleType("timm.models.layers")
        layers.trunc_normal_ = nn.init.trunc_normal_
        for name, module in (("timm", None), ("timm.models", None), ("timm.models.layers", layers)):
            sys.modules.setdefault(name, module or types.ModuleType(name))


def _stand_in(package: str, names: tuple[str, ...]) -> None:
    if not _installed(package):
        module = types.ModuleType(package)
        for name in names:
            setattr(module, name, None)
        sys.modules.setdefault(package, module)


def _require(package: str, pip_name: str, model: str) -> None:
    if not _installed(package):
        raise AuthorsCodeMissing(
            f"the authors' {model} imports the package {package!r}, which is not installed: "
            f"pip install {pip_name}"
        )


def _check_clone(clone: Path | None, file: Path, model: str, option: str, repo) -> None:
    """A clear message, before anything else is checked, when no clone is given or ``clone``
    lacks the authors' ``file``."""
    if clone is None:
        raise AuthorsCodeMissing(
            f"no clone of the {model} authors' repository given: pass {option} /path/to/clone "
            f"(git clone {repo})"
        )
    path = Path(clone).expanduser() / file
    if not path.is_file():
        raise AuthorsCodeMissing(
            f"{option} {clone}: no {file} there; pass the root of a clone of {repo}"
        )


def _load(clone: Path | None, file: Path, root: Path, name: str, model: str, option: str, repo):
    """The module ``clone/file`` imported with ``clone/root`` on the path (their imports)."""
    _check_clone(clone, file, model, option, repo)
    path = Path(clone).expanduser() / file
    search = str(Path(clone).expanduser() / root)
    sys.path.insert(0, search)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(search)
    return module


def transolver_class(clone: Path | None, option: str = "--transolver-dir") -> type[nn.Module]:
    """The Transolver authors' irregular-mesh ``Model`` (called as ``model(pos, fields)`` on
    ``[B, N, C]`` tensors), imported from ``clone``."""
    _check_clone(clone, TRANSOLVER_FILE, "Transolver", option, TRANSOLVER_REPO)
    _require("einops", "einops", "Transolver")
    _stand_in_timm()
    root = TRANSOLVER_FILE.parts[0]
    module = _load(
        clone, TRANSOLVER_FILE, Path(root), "authors_transolver", "Transolver", option,
        TRANSOLVER_REPO,
    )  # fmt: skip
    return module.Model


def ono_class(clone: Path | None, option: str = "--ono-dir") -> type[nn.Module]:
    """The ONO authors' ``ONO2`` (called as ``model(pos, field)`` on ``[B, N, C]`` tensors, one
    input field), imported from ``clone``."""
    _check_clone(clone, ONO_FILE, "ONO", option, ONO_REPO)
    _require("einops", "einops", "ONO")
    _require("linear_attention_transformer", "linear-attention-transformer", "ONO")
    _stand_in_timm()
    for package, names in UNUSED.items():
        _stand_in(package, names)
    module = _load(clone, ONO_FILE, Path("."), "authors_ono", "ONO", option, ONO_REPO)
    return module.ONO2


class DenseModel(nn.Module):
    """An authors' model on ``[B, N, C]`` tensors seen as a meshop model: a batch of samples of
    equal size is viewed densely, the model called as ``model(pos, x)`` and its output flattened
    back to the batch's nodes, so that meshop's trainer (normalisers, loss, optimiser, schedule,
    evaluation) trains it exactly as it trains meshop's models.

    Shapes:
        - input: a batch of ``B`` samples of ``N`` nodes each, with ``pos`` and ``x``
        - output: ``[B N, C_out]``
    """

    def __init__(self, model: nn.Module, config: dict):
        super().__init__()
        self.model = model
        self.config = dict(config)

    def forward(self, data) -> torch.Tensor:
        b = num_samples(data)
        pos = data.pos.view(b, -1, data.pos.shape[-1])
        x = data.x.view(b, pos.shape[1], -1)
        out = self.model(pos, x)
        return out.reshape(-1, out.shape[-1])
