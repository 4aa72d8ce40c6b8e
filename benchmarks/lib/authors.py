"""The authors' Transolver (``Model``, github.com/thuml/Transolver) and ONO (``ONO2``,
github.com/xzppp/ONO), imported at run time from local clones (never copied here), with empty
stand-ins for packages their modules import but these models never call, and an adapter that lets
meshop's trainer train them."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch
from torch import nn

from meshop.data.batching import num_samples

#: each model's repository, the file of the model there and the folder its imports start from
REPOS = {
    "Transolver": ("https://github.com/thuml/Transolver", "PDE-Solving-StandardBenchmark/model/"
                   "Transolver_Irregular_Mesh.py", "PDE-Solving-StandardBenchmark"),
    "ONO": ("https://github.com/xzppp/ONO", "ONOmodel2.py", "."),
}  # fmt: skip
#: packages the authors' modules import but these models never call, with the names they import
UNUSED = {
    "timm": (),
    "timm.models": (),
    "timm.models.layers": ("trunc_normal_",),  # torch's nn.init.trunc_normal_ is the same
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


def _load(clone: Path | None, model: str, option: str, needs: dict[str, str]):
    """The module of ``model``'s file in ``clone`` (checked, with the packages ``needs``: import
    name to pip name), imported with empty stand-ins for the missing :data:`UNUSED` packages."""
    repo, file, root = REPOS[model]
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
    for package, pip_name in needs.items():
        if not _installed(package):
            raise AuthorsCodeMissing(
                f"the authors' {model} imports the package {package!r}, which is not installed: "
                f"pip install {pip_name}"
            )
    missing = [p for p in UNUSED if not _installed(p.split(".")[0])]
    for package in missing:  # empty stand-ins
        module = sys.modules.setdefault(package, types.ModuleType(package))
        for name in UNUSED[package]:
            setattr(module, name, nn.init.trunc_normal_ if name == "trunc_normal_" else None)
    search = str(Path(clone).expanduser() / root)
    sys.path.insert(0, search)
    try:
        spec = importlib.util.spec_from_file_location(f"authors_{model.lower()}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(search)
    return module


def transolver_class(clone: Path | None, option: str = "--transolver-dir") -> type[nn.Module]:
    """The Transolver authors' irregular-mesh ``Model`` (called as ``model(pos, fields)`` on
    ``[B, N, C]`` tensors), imported from ``clone``."""
    return _load(clone, "Transolver", option, {"einops": "einops"}).Model


def ono_class(clone: Path | None, option: str = "--ono-dir") -> type[nn.Module]:
    """The ONO authors' ``ONO2`` (called as ``model(pos, field)`` on ``[B, N, C]`` tensors, one
    input field), imported from ``clone``."""
    needs = {"einops": "einops", "linear_attention_transformer": "linear-attention-transformer"}
    return _load(clone, "ONO", option, needs).ONO2


class DenseModel(nn.Module):
    """An authors' model on ``[B, N, C]`` tensors seen as a meshop model (a batch of ``B`` samples
    of ``N`` nodes in, ``[B N, C_out]`` out), so that meshop's trainer trains it as its own."""

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
