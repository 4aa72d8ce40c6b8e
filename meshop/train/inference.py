"""Using a trained model: predictions on any mesh file, at mesh nodes or arbitrary query points."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from meshop._pyg import Data
from meshop.data import (
    GROUP_PREFIX,
    field_layout,
    from_meshio,
    group_masks,
    mesh_cells,
    mesh_integrals,
    read_mesh,
    read_meshio,
    set_query_points,
    split_fields,
    write_mesh,
)
from meshop.data.batching import reporting_chunks
from meshop.data.subsample import random_subset
from meshop.errors import (
    ConfigError,
    FieldError,
    FileExistsMeshopError,
    MeshError,
    MeshReadError,
)
from meshop.models import ONO, GalerkinTransformer, Transolver
from meshop.models.registry import model_class
from meshop.nn.chunking import Walk
from meshop.nn.edge_cache import no_edge_cache
from meshop.train.checkpoint import load, load_model
from meshop.train.config import from_dict
from meshop.train.data import LatentMesh, check_compatible, field_layout_of
from meshop.train.memory import (
    CHUNK_FROM,
    available_memory,
    chunked,
    default_chunk_nodes,
    release_freed_memory,
    total_nodes,
)
from meshop.train.normalized import NormalizedModel

#: bytes per node of ``meshop predict`` besides the model: the mesh as meshio reads it (float64
#: coordinates, the cells, the fields, the file's decoded arrays while reading), the domain's
#: tensors, the node features and the outputs, and the written file's arrays
FILE_BYTES_PER_NODE = 600
#: ``[N, width]`` float32 tensors a model family keeps between its layers in a chunked pass: the
#: Transolver its features (and a little more), ONO its two streams, the Galerkin Transformer on
#: the input mesh (no latent mesh) its features; PiT and the Galerkin Transformer on a latent
#: mesh none. Measured: the growth of the chunked pass's peak between 5e5 and 2e6 nodes, less
#: :func:`pass_bytes_per_node`'s 40 bytes for one input and one output on 2D meshes, at width
#: 64: ONO 512 bytes per node, the Transolver 308, the Galerkin Transformer and PiT on a latent
#: mesh below the noise (about 100 bytes)
STATE_TENSORS = {Transolver: 1.25, ONO: 2, GalerkinTransformer: 2}
#: the larger subset's growth of the resident memory over its pass times this is the estimate's
#: allowance for one chunk's intermediates: the allocator's free blocks make it vary by +-30%
#: from one mesh size to the next (PiT's chunked pass, chunks of 65,536 nodes: 310 to 619 MB
#: between 1.3e5 and 2e6 nodes, without a trend)
TRANSIENT_MARGIN = 1.3
#: live float32 tensors of a chunk's widest layer (the layer's input and output, an MLP's hidden
#: features, attention weights), in units of the model's widest linear layer
CHUNK_TENSORS = 4
#: the smallest chunk :func:`check_memory` suggests
SMALLEST_CHUNK = 1024


@dataclass
class MemoryEstimate:
    """Bytes a prediction on a mesh needs (:func:`memory_estimate`), by part.

    Attributes:
        file: reading the mesh, its domain, features and outputs, and writing the result.
        state: the model's tensors of size N between its layers.
        chunk: one chunk's intermediate tensors (the whole pass when ``chunk_nodes`` is None).
        chunk_nodes: the chunk the estimate is for (None: unchunked).
    """

    file: int
    state: int
    chunk: int
    chunk_nodes: int | None

    @property
    def total(self) -> int:
        return self.file + self.state + self.chunk

    def __str__(self) -> str:
        chunks = (
            "the whole pass at once"
            if self.chunk_nodes is None
            else f"chunks of {self.chunk_nodes:,} nodes"
        )
        return (
            f"{_gb(self.total)} (the mesh file, its fields and the written result "
            f"{_gb(self.file)}, the model's state of size N {_gb(self.state)}, {chunks} "
            f"{_gb(self.chunk)})"
        )


def _gb(size: int) -> str:
    return f"{size / 2**30:.1f} GB"


def memory_estimate(
    model: torch.nn.Module, ckpt: dict[str, Any], num_nodes: int, chunk_nodes: int | None = None
) -> MemoryEstimate:
    """The memory :func:`predict_file` needs on a mesh of ``num_nodes`` nodes (input nodes plus
    query points), above what the process holds before (torch, the model), in chunks of
    ``chunk_nodes`` nodes (None: the default of :func:`predict_in_chunks`;
    0: unchunked).

    Per node, :data:`FILE_BYTES_PER_NODE` for the file and the domain and :data:`STATE_TENSORS`
    ``[N, width]`` tensors for the model family's state; per node of a chunk,
    :data:`CHUNK_TENSORS` float32 tensors as wide as the model's widest linear layer (the whole
    mesh is one chunk unchunked). A rough estimate, made before the mesh is read: within a
    factor of 2 of the measured peak for PiT (``tests/train/test_predict_memory.py``), up to
    several times the peak of models narrower than the constants assume; the estimate
    ``meshop predict`` prints once the mesh is read is :func:`estimate_prediction`'s.
    """
    inner = model.model if isinstance(model, NormalizedModel) else model
    if chunk_nodes is None:
        chunk_nodes = default_chunk_nodes(num_nodes)
    chunk = min(chunk_nodes or num_nodes, num_nodes)
    linear = [m.out_features for m in inner.modules() if isinstance(m, torch.nn.Linear)]
    widest = max(linear, default=1)
    return MemoryEstimate(
        file=FILE_BYTES_PER_NODE * num_nodes,
        state=int(state_bytes_per_node(model, ckpt) * num_nodes),
        chunk=4 * CHUNK_TENSORS * widest * chunk,
        chunk_nodes=chunk_nodes or None,
    )


def latent_of(ckpt: dict[str, Any]) -> LatentMesh:
    """The latent-mesh transform a checkpoint's model was trained with."""
    c = from_dict(ckpt["train_config"])
    return LatentMesh(c.latent_points, c.latent_grid, sampling=c.latent_sampling)


def check_memory(
    model: torch.nn.Module,
    ckpt: dict[str, Any],
    num_nodes: int,
    chunk_nodes: int | None = None,
    what: str = "the mesh",
) -> MemoryEstimate:
    """:func:`memory_estimate`, checked against the free memory
    (:func:`~meshop.train.memory.available_memory`; not checked where unknown).

    Raises:
        ConfigError: it does not fit; the message says how much is needed, by part, and which
            ``--chunk-nodes`` fits, or that no chunk does (the state of size N alone is too
            large).
    """
    estimate = memory_estimate(model, ckpt, num_nodes, chunk_nodes)
    free = available_memory()
    if free is None or estimate.total <= free:
        return estimate
    smallest = memory_estimate(model, ckpt, num_nodes, SMALLEST_CHUNK)
    if smallest.total <= free:
        room = free - smallest.file - smallest.state
        fits = 2 ** int(np.log2(room // max(smallest.chunk // SMALLEST_CHUNK, 1)))
        advice = f"lower it with --chunk-nodes {fits} (Python: chunk_nodes={fits})"
    else:
        advice = (
            f"no --chunk-nodes fits: the mesh and the model's state of size N alone need "
            f"{_gb(smallest.file + smallest.state)}; free memory, predict at fewer --query "
            f"points, or use a machine with more memory"
        )
    raise ConfigError(
        f"predicting on {what} ({num_nodes:,} nodes) needs about {estimate}, but "
        f"{_gb(free)} is available; {advice}"
    )


@torch.no_grad()
def predict_in_chunks(model: torch.nn.Module, data: Data, chunk_nodes: int | None = None):
    """``model(data)``, walked in chunks of ``chunk_nodes`` nodes (:mod:`meshop.nn.chunking`;
    :func:`~meshop.train.memory.default_chunk_nodes` when None, which leaves small meshes
    unchunked; 0 never chunks), in evaluation mode (the model is left in the mode it was given
    in), without autograd."""
    if chunk_nodes is None:
        chunk_nodes = default_chunk_nodes(total_nodes(data))
    elif chunk_nodes == 0:
        chunk_nodes = None
    was_training = model.training
    model.eval()
    try:
        if chunk_nodes is None:
            return model(data)
        return chunked(model, Walk(chunk_nodes))(data)
    finally:
        model.train(was_training)


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    ckpt: dict[str, Any],
    data: Data,
    chunk_nodes: int | None = None,
    quadratic_ok: bool = False,
) -> torch.Tensor:
    """Predictions [N_query, C_out] of a checkpoint's model on one domain (physical units).

    The domain gets the latent mesh the model was trained with; its fields are checked against
    the training data's (dimension, input channels, parameters) first. The model predicts in
    evaluation mode (no dropout; running statistics read, not updated) and is left in the mode it
    was given in. Meshes of more than :data:`~meshop.train.memory.CHUNK_FROM` nodes (input plus
    query) are evaluated in chunks (:func:`predict_in_chunks`, the same
    numbers in bounded memory); ``chunk_nodes`` sets the chunk (0: never chunk). A model whose
    cost grows with the square of the nodes is refused on large meshes (:func:`check_quadratic`)
    unless ``quadratic_ok``.
    """
    check_compatible(data, ckpt["data"], "the mesh")
    data = latent_of(ckpt)(data)
    if not quadratic_ok:
        check_quadratic(model, data)
    return predict_in_chunks(model, data, chunk_nodes)


#: nodes (input plus query) above which :func:`predict` refuses a model whose cost grows with
#: the square of the nodes
QUADRATIC_FROM = 200_000
#: nodes of the subset that :func:`check_quadratic` times to estimate the whole prediction
QUADRATIC_PROBE = 4096


def check_quadratic(model: torch.nn.Module, data: Data) -> None:
    """Refuse, before the prediction, a model whose cost on ``data`` grows with the square of
    its nodes (:meth:`meshop.models.Operator.quadratic`) when ``data`` has more than
    :data:`QUADRATIC_FROM` nodes, with the time it would take: the model timed on a random
    subset of :data:`QUADRATIC_PROBE` of the nodes (:func:`probe_subset`), scaled by the square
    of the ratio.

    Raises:
        ConfigError: what makes the model quadratic, its estimated time, and what avoids it.
    """
    inner = model.model if isinstance(model, NormalizedModel) else model
    reason = inner.quadratic(data) if hasattr(inner, "quadratic") else None
    nodes = total_nodes(data)
    if reason is None or nodes <= QUADRATIC_FROM:
        return
    probe = probe_subset(data, QUADRATIC_PROBE)
    start = time.perf_counter()
    predict_in_chunks(model, probe, 0)
    seconds = (time.perf_counter() - start) * (nodes / total_nodes(probe)) ** 2
    raise ConfigError(
        f"the model's cost grows with the square of the nodes on this mesh ({nodes:,} nodes, "
        f"about {seconds / 60:,.0f} minutes estimated from a {len(probe.pos):,}-node subset): "
        f"{reason}; or pass quadratic_ok=True (meshop predict --quadratic-ok) to run it anyway"
    )


#: the subset :func:`estimate_prediction` runs the model on: this fraction of the nodes, between
#: these bounds (the whole mesh below the lower one)
PROBE_FRACTION = 1 / 32
PROBE_NODES = (32_768, 262_144)
#: chunks the subset holds at least (within the upper bound): the memory the allocator keeps
#: between chunks grows over the first few (PiT, chunks of 16,384 nodes: 105 MB over a pass of
#: two chunks, 323 MB over eight, 393 MB over the 62 of a million nodes)
PROBE_CHUNKS = 8
#: the second, smaller subset of :func:`estimate_prediction` holds this fraction of the first
SMALL_PROBE = 8
#: seconds under which the larger subset's pass is timed three times, and the smaller one's, and
#: the median of each kept: a pass of a second or less varies by a third from one run to the next
#: (the MLP on a million nodes: the estimate 1.02x, 0.96x and 1.53x of the pass in three runs)
REPEAT_UNDER = 1.0


def probe_subset(data: Data, nodes: int, seed: int = 0, order: torch.Tensor | None = None) -> Data:
    """A random subset of ``nodes`` of a domain's input nodes, in their order, with the same
    fraction of its query points: what :func:`estimate_prediction` and :func:`check_quadratic`
    time. Per-node fields are cut; the quadrature weights are scaled by the inverse fraction (so
    that they still sum to the domain's measure); per-sample ones (``params``, a latent mesh)
    kept. ``order``: the input nodes in a random order (:func:`probe_order`), whose first
    ``nodes`` are taken (drawn when None), so that several subsets draw it once."""
    generator = torch.Generator().manual_seed(seed)
    n = len(data.pos)
    if order is None:
        order = probe_order(data, nodes, seed)
    keep = order[:nodes].sort().values.to(data.pos.device)
    probe = Data(**{key: data[key][keep] for key in ("pos", "x") if key in data})
    if getattr(data, "weight", None) is not None:
        probe.weight = data.weight[keep] * (n / len(keep))
    query = getattr(data, "query_pos", None)
    if query is not None:
        count = max(1, round(len(query) * len(keep) / n))
        probe.query_pos = query[torch.randperm(len(query), generator=generator)[:count].sort()[0]]
    for key in ("params", "latent_pos", "latent_weight"):  # per sample, not per node
        if key in data:
            probe[key] = data[key]
    return probe


def probe_order(data: Data, nodes: int, seed: int = 0) -> torch.Tensor:
    """``nodes`` of a domain's input nodes drawn at random, in a random order (seeded): each
    first part of it is a random subset, which :func:`probe_subset` takes."""
    generator = torch.Generator().manual_seed(seed)
    return random_subset(len(data.pos), nodes, generator)


@dataclass
class PredictionEstimate:
    """What a prediction will cost (:func:`estimate_prediction`): the model's pass (the latent
    mesh's sampling, the receptive fields' search, the layers) and the writing of the result, in
    seconds, the process's peak resident memory (bytes; reading the mesh included), the
    nodes the progress bar will count, and the nodes of the largest subset measured
    (``probe_nodes``; ``whole``: all of the mesh's)."""

    seconds: float
    write_seconds: float
    memory: int
    reported: int
    probe_nodes: int
    whole: bool = False

    def __str__(self) -> str:
        source = (
            "measured by a first pass over the mesh"
            if self.whole
            else f"estimated from a {self.probe_nodes:,}-node subset"
        )
        return (
            f"about {_duration(self.seconds + self.write_seconds)} (the model "
            f"{_duration(self.seconds)}, writing {_duration(self.write_seconds)}) and a peak "
            f"memory of {_size(self.memory)}, {source}"
        )


def _size(size: int) -> str:
    return f"{size / 2**20:.0f} MB" if size < 2**30 else f"{size / 2**30:.2f} GB"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def _resident() -> tuple[int, int] | None:
    """This process's resident memory now and its peak since the last :func:`_reset_peak`
    (Linux' ``VmRSS`` and ``VmHWM``; None where unknown)."""
    try:
        with open("/proc/self/status") as status:
            values = dict(line.split(":", 1) for line in status if line.startswith("Vm"))
        return int(values["VmRSS"].split()[0]) * 1024, int(values["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _reset_peak() -> bool:
    """Reset the peak resident memory that :func:`_resident` reads (Linux >= 4.0), after giving
    the memory that the C allocator holds free back to the system
    (:func:`~meshop.train.memory.release_freed_memory`), so that what the next steps allocate
    shows in the resident memory instead of reusing it unseen."""
    release_freed_memory()
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


#: seconds of writing a predicted mesh per node (meshop's raw .vtu writer: 0.5-0.8 s for ten
#: million nodes, 0.05-0.14 s for a million, on a loaded machine)
WRITE_SECONDS_PER_NODE = 1e-7


class _Probe(NamedTuple):
    """What the prediction on a subset of a mesh took (:func:`_probe`): ``seconds``, the peak
    resident ``memory`` above the start (bytes; -1 where unknown), the nodes ``reported`` to a
    progress bar, and the subset's ``nodes`` (input and query)."""

    seconds: float
    memory: int
    reported: int
    nodes: int


def _probe(model, ckpt, data: Data, nodes: int, chunk: int | None, order: torch.Tensor) -> _Probe:
    """The prediction on a random subset of ``nodes`` of ``data`` (the first of ``order``) in
    chunks of ``chunk`` nodes (None: whole), measured: with the latent mesh of ``data`` where it
    has one, else with its own."""
    probe = probe_subset(data, nodes, order=order)
    if getattr(data, "latent_pos", None) is None:
        probe = latent_of(ckpt)(probe)
    counted = [0]
    before = _resident() if _reset_peak() else None
    start = time.perf_counter()
    # without the local layers' edge caches: a subset of all the nodes would leave its edges for
    # the prediction, which would then skip the searches the estimate timed
    with reporting_chunks(lambda n: counted.__setitem__(0, counted[0] + n)), no_edge_cache():
        predict_in_chunks(model, probe, chunk or 0)
    seconds = time.perf_counter() - start
    after = _resident() if before is not None else None
    memory = -1 if before is None or after is None else max(after[1] - before[0], 0)
    return _Probe(seconds, memory, counted[0], total_nodes(probe))


def state_bytes_per_node(model: torch.nn.Module, ckpt: dict[str, Any]) -> float:
    """Bytes per node of the ``[N, width]`` float32 tensors the model family keeps between its
    layers (:data:`STATE_TENSORS`; none for the Galerkin Transformer on a latent mesh)."""
    inner = model.model if isinstance(model, NormalizedModel) else model
    tensors = next((k for cls, k in STATE_TENSORS.items() if isinstance(inner, cls)), 0)
    config = from_dict(ckpt["train_config"])
    if isinstance(inner, GalerkinTransformer) and (config.latent_points or config.latent_grid):
        tensors = 0
    return 4 * tensors * (inner.config.get("width") or 0)


def pass_bytes_per_node(model: torch.nn.Module, ckpt: dict[str, Any], data: Data) -> int:
    """Bytes per node of the tensors a chunked pass holds for the whole mesh at once: the
    normalised inputs and the node features (inputs and coordinates), two index vectors, the
    outputs (normalised and decoded), and the model family's state
    (:func:`state_bytes_per_node`)."""
    info = ckpt["data"]
    inputs = info["x_channels"] or 0
    per_node = 4 * (2 * inputs + data.pos.shape[1]) + 16 + 8 * info["out_channels"]
    return int(per_node + state_bytes_per_node(model, ckpt))


#: the memory :func:`meshop.data.vtu.write_vtu` takes above the arrays it writes (its 1 MiB
#: blocks and the buffers around them: measured 3 to 4 MiB at 4e4 to 1e7 nodes)
VTU_WRITE_BYTES = 3 * 2**20

#: bytes per value that writing a mesh format other than ``.vtu`` takes (float64 copies and
#: the values as text: meshop writes XDMF with its data inline as XML, gmsh as ASCII; measured
#: 63 for XDMF at 40,000 nodes)
TEXT_BYTES_PER_VALUE = 64


def write_bytes(data: Data, channels: int, path: str | os.PathLike) -> int:
    """The memory that writing ``channels`` values at every node of ``data`` (its input fields
    included) to ``path`` takes above the domain. A ``.vtu`` file: the blocks that
    :func:`meshop.data.vtu.write_vtu` casts and writes one at a time, whatever the mesh (it writes
    the arrays themselves from where they are). A CSV file: its float64 table and text. Other
    formats: :data:`TEXT_BYTES_PER_VALUE` per value written."""
    query = getattr(data, "query_pos", None)
    n = len(data.pos) if query is None else len(query)
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return 16 * (data.pos.shape[1] + channels) * n
    written = channels + (data.x.shape[1] if getattr(data, "x", None) is not None else 0)
    blocks = mesh_cells(data) if query is None else []
    corners = sum(conn.size for _, conn in blocks) or n
    if suffix != ".vtu":
        return TEXT_BYTES_PER_VALUE * (3 * n + corners + written * n)
    return VTU_WRITE_BYTES


def _median(probes: list[_Probe]) -> _Probe:
    """The probe of the median time, with the largest memory of them all."""
    middle = sorted(probes, key=lambda p: p.seconds)[len(probes) // 2]
    return middle._replace(memory=max(p.memory for p in probes))


def estimate_prediction(
    model: torch.nn.Module,
    ckpt: dict[str, Any],
    data: Data,
    chunk_nodes: int | None = None,
    written: int = 0,
) -> PredictionEstimate:
    """The time and memory :func:`predict` will take on ``data`` (after the mesh is read),
    measured on random subsets of the nodes and extrapolated to the whole.

    The subsets hold ``P / 4`` (the warm-up), ``P /`` :data:`SMALL_PROBE` and ``P`` of the
    nodes, where ``P`` is :data:`PROBE_FRACTION` of them, at least :data:`PROBE_CHUNKS` chunks,
    within :data:`PROBE_NODES` and at most all (all of a mesh predicted unchunked: a whole pass's
    time per node grows with the nodes, 1.4x from 32,768 to 10^5 nodes for ONO and the
    Transolver), drawn from one random order of the nodes; each is
    predicted with the latent mesh of ``data`` (:func:`predict_file` samples the mesh's once,
    before; where ``data`` has none, each subset samples its own) in chunks of ``chunk_nodes``,
    as the whole mesh will be (a chunk's cost per node depends on its size); where the larger
    subset takes less than :data:`REPEAT_UNDER` seconds, both are timed three times and the
    median of each kept (and the largest memory); a subset of all the nodes is the mesh's own
    pass, timed after the warm-up, three times where it takes less than :data:`REPEAT_UNDER`
    seconds (a Galerkin Transformer's 0.13 s pass on 10^5 nodes, timed once, was estimated
    1.4x).
    The time is the line through the two timed subsets at ``N`` (a pass's fixed costs are not
    scaled), between half and all of the larger subset's time scaled by ``N / P``. The memory
    is the largest of three peaks of the resident memory (Linux; elsewhere the rough
    :func:`memory_estimate`): reading the mesh (measured
    before the estimate); the pass (the resident memory now, the larger subset's growth over
    its pass, which holds a chunk's intermediates whatever the mesh (times
    :data:`TRANSIENT_MARGIN`), and :func:`pass_bytes_per_node` for the rest of the nodes; an
    unchunked pass: the subset's growth scaled by ``N / P``); writing (the outputs and
    ``written`` bytes, :func:`write_bytes`). The subsets cost about 1.4 ``P / N`` of the
    prediction."""
    nodes = total_nodes(data)
    if chunk_nodes is None:
        chunk_nodes = default_chunk_nodes(nodes)
    lo, hi = PROBE_NODES
    size = round(len(data.pos) * PROBE_FRACTION)
    size = min(len(data.pos), max(lo, min(hi, max(size, PROBE_CHUNKS * (chunk_nodes or 0)))))
    if not chunk_nodes and nodes <= CHUNK_FROM:
        size = len(data.pos)  # a whole pass's time per node grows with the mesh: measure it
    now, peak = _resident() or (0, 0)  # before the subsets: the mesh as read, its peak
    order = probe_order(data, size)
    _probe(model, ckpt, data, max(size // 4, 1), chunk_nodes, order)  # the warm-up
    if size >= len(data.pos):  # the mesh itself: its pass is the time, nothing to extend
        wholes = [_probe(model, ckpt, data, size, chunk_nodes, order)]
        if wholes[0].seconds < REPEAT_UNDER:  # a short pass varies by a third: three of it
            wholes += [_probe(model, ckpt, data, size, chunk_nodes, order) for _ in "ab"]
        small = whole = _median(wholes)
    else:
        small_size = max(size // SMALL_PROBE, 1)
        smalls = [_probe(model, ckpt, data, small_size, chunk_nodes, order)]
        wholes = [_probe(model, ckpt, data, size, chunk_nodes, order)]
        if wholes[0].seconds < REPEAT_UNDER:  # three of each
            smalls += [_probe(model, ckpt, data, small_size, chunk_nodes, order) for _ in "ab"]
            wholes += [_probe(model, ckpt, data, size, chunk_nodes, order) for _ in "ab"]
        small, whole = _median(smalls), _median(wholes)
    scale = nodes / max(whole.nodes, 1)
    # what a pass costs whatever its size (the latent processor, a chunk's set-up) is not scaled
    # with the nodes: the line through the two subsets' times, kept within half and all of the
    # larger subset's time scaled (a noisy small subset cannot make the estimate absurd)
    per_node = (whole.seconds - small.seconds) / max(whole.nodes - small.nodes, 1)
    scaled = whole.seconds * scale
    fitted = whole.seconds + per_node * max(nodes - whole.nodes, 0)
    seconds = min(max(fitted, 0.5 * scaled), scaled)
    if whole.memory >= 0:
        if chunk_nodes:  # one chunk's intermediates, and the tensors of the whole mesh
            per_node = pass_bytes_per_node(model, ckpt, data)
            forward = TRANSIENT_MARGIN * whole.memory + per_node * max(nodes - whole.nodes, 0)
        else:  # unchunked: every intermediate grows with the mesh
            forward = whole.memory * scale
        outputs = 4 * ckpt["data"]["out_channels"] * nodes
        memory = max(peak, now + forward, now + outputs + written)
    else:
        memory = now + memory_estimate(model, ckpt, nodes, chunk_nodes or 0).total
    return PredictionEstimate(
        seconds=seconds,
        write_seconds=WRITE_SECONDS_PER_NODE * nodes,
        memory=memory,
        reported=int(whole.reported * scale),
        probe_nodes=whole.nodes,
        whole=whole.nodes >= nodes,
    )


def vtu_points(path: str | os.PathLike) -> int | None:
    """The number of points a VTK XML file (``.vtu``) declares in its header, read without
    reading the file (None for other formats or a header without it)."""
    path = Path(path)
    if path.suffix.lower() != ".vtu" or not path.is_file():
        return None
    with open(path, "rb") as file:
        head = file.read(2**16)
    match = re.search(rb'NumberOfPoints="(\d+)"', head)
    return None if match is None else int(match.group(1))


def _read_csv_points(path: Path) -> np.ndarray:
    """Rows of comma-separated numbers; the first line may be a header of column names."""
    rows, width, first = [], None, True
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = [t.strip() for t in line.split(",")]
        try:
            values = [float(t) for t in tokens]
        except ValueError:
            if first:  # a header line
                first = False
                continue
            column, token = next((j, t) for j, t in enumerate(tokens, 1) if not _is_number(t))
            raise MeshReadError(
                f"query file '{path}', line {number}, column {column}: '{token}' is not a "
                "number; give one point per line as comma-separated numbers x,y[,z] "
                "(and optionally a first line of column names)"
            ) from None
        first = False
        if width is not None and len(values) != width:
            raise MeshReadError(
                f"query file '{path}', line {number}: {len(values)} values, but the lines before "
                f"have {width}; give every point the same number of coordinates"
            )
        width = len(values)
        rows.append(values)
    if not rows:
        raise MeshReadError(f"query file '{path}' holds no points")
    return np.asarray(rows, dtype=np.float64)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_points(path: str | os.PathLike, pos_dim: int) -> np.ndarray:
    """Query points from a CSV file (one point per row, optional header line; a last column of
    zeros is dropped for 2D models) or from the nodes of any mesh file.

    Raises:
        MeshReadError: the file is missing, or a CSV value is not a number (the message gives
            its line and the value).
        MeshError: the points have another dimension than the model's domains.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshReadError(f"query file '{path}' does not exist (working directory: {Path.cwd()})")
    if path.suffix.lower() in (".csv", ".txt"):
        points = _read_csv_points(path)
        if points.shape[1] == pos_dim + 1 and np.all(points[:, -1] == 0.0):
            points = points[:, :pos_dim]  # 2D points written with z = 0
    else:
        points = read_mesh(path).pos.numpy()
    if points.shape[1] != pos_dim:
        raise MeshError(
            f"query points in '{path}' have {points.shape[1]} coordinates but the model works on "
            f"{pos_dim}D domains"
        )
    return points


def write_points_csv(
    path: str | os.PathLike,
    points: np.ndarray,
    fields: dict[str, np.ndarray],
    overwrite: bool = False,
) -> Path:
    """Points and point values as CSV with a header (``x, y, name, ...``): a field of ``k > 1``
    components as columns ``name_0, ..., name_k-1``; a column whose name is taken, by a coordinate
    (the default name ``y`` of one unnamed target) or an earlier column, gets ``_value`` appended
    (``x, y, y_value``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsMeshopError(f"'{path}' already exists; pass --overwrite to replace it")
    coords = ["x", "y", "z"][: points.shape[1]]
    columns, header = [points], list(coords)
    for name, values in fields.items():
        values = np.asarray(values).reshape(len(points), -1)
        columns.append(values)
        names = [name] if values.shape[1] == 1 else [f"{name}_{i}" for i in range(values.shape[1])]
        for column in names:
            while column in header:
                column += "_value"
            header.append(column)
    np.savetxt(path, np.hstack(columns), delimiter=",", header=",".join(header), comments="")
    return path


def checkpoint_fields(ckpt: dict[str, Any], key: str) -> list[tuple[str, int]]:
    """``[(name, components), ...]`` of a checkpoint's ``"input"`` or ``"target"`` fields.

    Checkpoints of meshop versions that stored only one name per channel (``x0, x1, x2`` for a
    3-component field) give one 1-component field per name.
    """
    info = ckpt["data"]
    channels = info["x_channels"] if key == "input" else info["out_channels"]
    if not channels:
        return []
    stored = SimpleNamespace(
        **{f"{key}_fields": info.get(f"{key}_fields"), f"{key}_names": info.get(f"{key}_names")}
    )
    return field_layout_of(stored, key, channels)


def read_inputs(
    ckpt: dict[str, Any],
    mesh: str | os.PathLike,
    inputs: Sequence[str] | None = None,
    params: Sequence[float] | None = None,
) -> tuple[Data, list[tuple[str, int]]]:
    """A mesh file as the domain a checkpoint's model takes: its input fields read by name (each
    with the components it had in training), and its parameters.

    Args:
        ckpt: the checkpoint (:func:`~meshop.train.checkpoint.load_model`).
        mesh: any mesh file meshio reads.
        inputs: names of the mesh's fields that supply the model's inputs, when they differ from
            the names used in training (same order and components).
        params: the per-sample parameters, if the model was trained with them.

    The domain has quadrature weights (``weight``) when the checkpoint's model reads them
    (:meth:`~meshop.models.base.Operator.reads_weights`).

    Returns:
        ``(domain, [(input field name, components), ...])``.

    Raises:
        FieldError: a field is missing or has another number of components than in training;
            parameters are missing or not expected.
    """
    info = ckpt["data"]
    layout = checkpoint_fields(ckpt, "input")
    cell_data = bool((info.get("dataset_args") or {}).get("cell_data_to_nodes", False))
    names = list(inputs) if inputs is not None else [n for n, _ in layout]

    def missing_from(meshio_mesh):
        available = set(meshio_mesh.point_data)
        available |= set(meshio_mesh.cell_data) if cell_data else set()
        available |= {GROUP_PREFIX + g for g in group_masks(meshio_mesh)}
        return [n for n in names if n not in available]

    # only the arrays the model reads are decoded (and the Gmsh groups' tags)
    meshio_mesh = read_meshio(mesh, fields=[*names, "gmsh:physical"])
    missing = missing_from(meshio_mesh)
    if missing:  # every array, for the message's list of the mesh's fields
        meshio_mesh = read_meshio(mesh)
        missing = missing_from(meshio_mesh)
    if missing and inputs is None and "input_fields" not in info and layout:
        raise FieldError(
            f"{mesh}: this checkpoint names its {info['x_channels']} input channels "
            f"{names} (a checkpoint of an older meshop, which stored one name per channel) and "
            f"the mesh has no field {missing[0]!r}; its point fields are "
            f"{sorted(meshio_mesh.point_data)}: name the fields that supply the inputs with "
            "--inputs NAME[,NAME...] (Python: inputs=[...])"
        )
    options = {"cell_data_to_nodes": cell_data, "source": str(mesh)}
    here = field_layout(meshio_mesh, names, **options)
    if inputs is None:
        for (name, k), (_, have) in zip(layout, here):
            if k != have:
                raise FieldError(
                    f"{mesh}: field '{name}' has {have} components but the model was trained "
                    f"with {k}; give the same fields as in training"
                )
    name = ckpt.get("model_name")
    own_latent = latent_of(ckpt).active if "train_config" in ckpt else False
    reads_weights = name is None or model_class(name).reads_weights(
        ckpt.get("model_config", {}), own_latent
    )
    data = from_meshio(meshio_mesh, names or None, weights=reads_weights, **options)
    if info["params_channels"]:
        if params is None:
            raise FieldError(
                f"the model was trained with {info['params_channels']} per-sample parameters; "
                "give them with --params v1,v2,..."
            )
        data.params = torch.as_tensor(np.asarray(params, dtype=np.float32)).reshape(1, -1)
    elif params is not None:
        raise FieldError("the model was trained without per-sample parameters; drop --params")
    check_compatible(data, info, str(mesh))
    return data, here


def predict_fields(
    model: torch.nn.Module, ckpt: dict[str, Any], data: Data
) -> dict[str, torch.Tensor]:
    """:func:`predict` as named fields, with the target names and components of training:
    ``{"p": [N_query], "u": [N_query, 3], ...}``."""
    return split_fields(predict(model, ckpt, data), checkpoint_fields(ckpt, "target"))


def predict_file(
    checkpoint: str | os.PathLike,
    mesh: str | os.PathLike,
    out: str | os.PathLike,
    query: str | os.PathLike | None = None,
    params: Sequence[float] | None = None,
    overwrite: bool = False,
    inputs: Sequence[str] | None = None,
    chunk_nodes: int | None = None,
    progress: bool = False,
    quadratic_ok: bool = False,
    report: Callable[[str], None] | None = None,
    estimate: bool = True,
) -> tuple[Path, torch.Tensor]:
    """Read ``mesh`` (any meshio format), predict at its nodes or at ``query`` points (CSV or mesh
    file), write ``out``: a mesh file with the predictions as point data, or CSV for ``.csv``.

    The input fields are read from ``mesh`` by the names they had in training (``inputs`` names
    others). Each predicted field is written under its training name with its components: a
    vector field as one vector point-data array (glyphs and stream tracers in ParaView work on
    it), in CSV as columns ``name_0, name_1, ...``.

    Query points may lie anywhere, also outside the mesh the model was trained on; the model then
    extrapolates, and nothing guarantees the accuracy there. Large meshes are predicted in chunks
    of ``chunk_nodes`` nodes (see :func:`predict`), ``progress`` shows the nodes the layers have
    gone through on a tqdm bar (stderr, on a terminal).

    The memory the prediction needs is checked (:func:`check_memory`) before the mesh is read
    when its header gives its size (``.vtu``), and before the model runs otherwise; a model
    whose cost grows with the square of the nodes is refused on large meshes unless
    ``quadratic_ok`` (:func:`check_quadratic`).

    ``report`` (``print`` in ``meshop predict``) gets a line before the prediction with the time
    and memory it will take (:func:`estimate_prediction`, whose nodes are then the progress bar's
    total), and one after it with what it took; ``estimate=False`` skips the estimate (its passes
    over subsets of the mesh cost the fastest models a large share of a prediction's time on a
    million nodes) and its line.

    Returns:
        ``(written path, predictions [N_query, C_out])``.
    """
    model, ckpt = load_model(checkpoint)
    declared = vtu_points(mesh)
    if declared is not None:
        check_memory(model, ckpt, declared, chunk_nodes, f"'{mesh}'")
    data, input_layout = read_inputs(ckpt, mesh, inputs, params)
    query_mesh = None
    if query is not None:
        points = read_points(query, ckpt["data"]["pos_dim"])
        set_query_points(data, points)
        if Path(query).suffix.lower() not in (".csv", ".txt"):
            query_mesh = read_mesh(query)
    check_memory(model, ckpt, total_nodes(data), chunk_nodes, f"'{mesh}'")
    release_freed_memory()  # the file parser's buffers
    prepared = latent_of(ckpt)(data)
    if not quadratic_ok:
        check_quadratic(model, prepared)
    made = None
    if estimate and (report is not None or progress):
        written = write_bytes(data, ckpt["data"]["out_channels"], out)
        made = estimate_prediction(model, ckpt, prepared, chunk_nodes, written)
        if report is not None:
            report(f"predicting on {total_nodes(data):,} nodes: {made}")
    bar = tqdm(
        desc="predicting",
        total=None if made is None else made.reported,
        unit="node",
        unit_scale=True,
        file=sys.stderr,
        disable=not progress or None,
    )
    release_freed_memory()  # the estimate's subsets
    start = time.perf_counter()
    with bar, reporting_chunks(bar.update), no_edge_cache():  # one pass: nothing to reuse
        pred = predict_in_chunks(model, prepared, chunk_nodes)
    seconds = time.perf_counter() - start
    del prepared
    release_freed_memory()  # the forward's intermediates, before the file's copies
    fields = split_fields(pred, checkpoint_fields(ckpt, "target"))
    out = Path(out)
    write_start = time.perf_counter()
    if out.suffix.lower() == ".csv":
        points = data.query_pos if query is not None else data.pos
        path = write_points_csv(
            out, points.numpy(), {k: v.numpy() for k, v in fields.items()}, overwrite
        )
    else:
        target_mesh = data
        if query is not None:
            target_mesh = query_mesh if query_mesh is not None else Data(pos=data.query_pos)
        elif getattr(data, "x", None) is not None:
            fields = {**split_fields(data.x, input_layout), **fields}
        path = write_mesh(out, target_mesh, fields, overwrite=overwrite)
    if report is not None:
        report(
            f"predicted in {_duration(seconds)}, wrote in "
            f"{_duration(time.perf_counter() - write_start)}"
        )
    return path, pred


def prediction_integrals(
    checkpoint: str | os.PathLike | dict[str, Any],
    pred: torch.Tensor,
    mesh: str | os.PathLike,
    groups: Sequence[str] = (),
) -> dict[str, dict[str, float | list[float]]]:
    """Integrals of predictions at the nodes of ``mesh`` (from :func:`predict_file`) over the
    mesh and over its named ``groups``, per target field of the checkpoint (see
    :func:`meshop.data.mesh_integrals`)."""
    ckpt = checkpoint if isinstance(checkpoint, dict) else load(checkpoint)
    return mesh_integrals(mesh, split_fields(pred, checkpoint_fields(ckpt, "target")), groups)
