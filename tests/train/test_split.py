"""Training on one mesh over processes (TrainConfig.split_mesh, `meshop train --split-mesh`): two
gloo processes under torchrun, each with its own part of every sample's nodes, take the loss, the
gradients and the steps of one process on the whole meshes; what cannot split is refused before
the first step."""

import textwrap

import pytest
import torch

from meshop.cli import main
from meshop.data import from_points
from meshop.errors import ConfigError
from meshop.models import GalerkinTransformer, PiT, Transolver
from meshop.train import Trainer, checkpoint, prepare_data
from meshop.train.config import load_config
from meshop.train.split import check_model, part_of
from tests.helpers import quiet, torchrun

LATENT_POINTS = 12


def samples(count, seed=0):
    """``count`` float64 point clouds of 30 to 44 nodes with quadrature weights."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = 30 + 3 * (i % 5)
        pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
        x = torch.sin(3 * pos[:, :1] + i)
        data = from_points(pos, x, 2 * x + pos[:, 1:] ** 2)
        data.pos, data.x, data.y = pos, x, data.y.double()
        data.weight = (0.5 + torch.rand(n, generator=g, dtype=torch.float64)) / n
        out.append(data)
    return out


MODELS = {
    # quantile receptive fields: each latent node's radius is the whole mesh's
    "pit": lambda: PiT(3, 1, 2, width=8, heads=2, layers=1, encoder_quantile=0.2, decoder_k=4),
    "transolver": lambda: Transolver(3, 1, 2, width=8, layers=1, heads=2, slices=4),
}


def config(**changes):
    base = dict(epochs=2, batch_size=2, clip=0.5, device="cpu", latent_points=LATENT_POINTS)
    return quiet(**{**base, **changes})


def build(name):
    torch.manual_seed(0)
    return MODELS[name]().double()


def first_step(name, data):
    """The loss and the gradient (as the optimiser applies it) of a trainer's first step."""
    trainer = Trainer(build(name), data)
    loss = trainer.step(next(iter(trainer.loader)))
    grads = [p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]
    return loss, torch.cat(grads)


def train(name, data, out):
    Trainer(build(name), data, out_dir=out).fit()


def refusal(fn):
    try:
        fn()
    except ConfigError as exc:
        return str(exc)
    return None


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    from meshop.train import Trainer, prepare_data
    from tests.train.test_split import MODELS, build, config, first_step, refusal, samples, train

    out = Path(sys.argv[1])
    data = prepare_data(samples(6), samples(3, 1), config(split_mesh=True))
    steps = {name: first_step(name, data) for name in MODELS}
    for name in MODELS:
        train(name, data, out / name)
    plain = prepare_data(samples(6), samples(3, 1), config(split_mesh=True, latent_points=None))
    refused = refusal(lambda: Trainer(build("pit"), plain))
    if torch.distributed.get_rank() == 0:
        torch.save({"steps": steps, "refused": refused}, out / "steps.pt")
    """
)


def test_two_processes_on_parts_of_the_meshes_train_as_one_on_the_whole(tmp_path):
    script = tmp_path / "split.py"
    script.write_text(SCRIPT)
    result = torchrun(script, tmp_path / "split")
    assert result.returncode == 0, result.stderr[-3000:]
    split = torch.load(tmp_path / "split" / "steps.pt")
    assert "--latent-points 256" in split["refused"]  # PiT without a latent mesh: up front

    data = prepare_data(samples(6), samples(3, 1), config())
    for name in MODELS:
        loss, grads = first_step(name, data)
        split_loss, split_grads = split["steps"][name]
        assert split_loss == pytest.approx(loss, rel=1e-10), name
        # the whole meshes' gradient, summed over the processes (not their mean)
        assert torch.allclose(split_grads, grads, rtol=1e-8, atol=1e-12), name

        train(name, data, tmp_path / "single" / name)
        one = checkpoint.load(tmp_path / "single" / name)
        two = checkpoint.load(tmp_path / "split" / name)
        for key, value in one["state_dict"].items():
            assert torch.allclose(two["state_dict"][key], value, rtol=1e-7, atol=1e-9), (name, key)
        for row_two, row_one in zip(two["history"], one["history"], strict=True):
            for key in ("train_loss", "test_rel_l2", "test_rel_l2_median"):
                assert row_two[key] == pytest.approx(row_one[key], rel=1e-7), (name, key)
        assert two["train_config"]["split_mesh"] and len(two["rng"]) == 2


#: PiT's receptive fields under the split: k nearest in the encoder (searched among every
#: process's coordinates) and quantiles (searched by radius over each process's own nodes)
SEARCHING = {
    "encoder-k": lambda: PiT(3, 1, 2, width=8, heads=2, layers=1, encoder_k=6, decoder_k=4),
    "encoder-quantile": MODELS["pit"],
}

SEARCH_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import torch
    from meshop.train import Trainer, prepare_data
    from tests.train.test_split import SEARCHING, config, samples

    def recording(search, calls):
        def neighbors(pos_src, pos_dst, *args, **kwargs):
            calls.append((len(pos_src), len(pos_dst)))
            return search(pos_src, pos_dst, *args, **kwargs)
        return neighbors

    data = prepare_data(samples(3), config=config(split_mesh=True, batch_size=3))
    out = {}
    for name, build in SEARCHING.items():
        torch.manual_seed(0)
        trainer = Trainer(build().double(), data)
        pit, calls = trainer.model.model, {"encoder": [], "decoder": []}
        for layer in calls:
            getattr(pit, layer).neighbors = recording(getattr(pit, layer).neighbors, calls[layer])
        batch = next(iter(trainer.loader))
        trainer.step(batch)
        out[name] = {"nodes": len(batch.pos), "latent": len(batch.latent_pos), **calls}
    torch.save(out, Path(sys.argv[1]) / f"searched{torch.distributed.get_rank()}.pt")
    """
)


def test_split_pit_searches_receptive_fields_for_its_own_targets_only(tmp_path):
    script = tmp_path / "search.py"
    script.write_text(SEARCH_SCRIPT)
    result = torchrun(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    whole = sum(len(d.pos) for d in samples(3))
    for rank in (0, 1):
        searched = torch.load(tmp_path / f"searched{rank}.pt")
        for name, seen in searched.items():
            latent, nodes = seen["latent"], seen["nodes"]
            assert nodes < whole and latent == 3 * LATENT_POINTS, (rank, name)
            # the decoder: this process's own nodes, from the latent mesh every process holds
            assert sum(dst for _, dst in seen["decoder"]) == nodes, (rank, name)
            assert {src for src, _ in seen["decoder"]} == {latent}, (rank, name)
        # k nearest: every second latent node's field among every process's nodes
        encoder = searched["encoder-k"]["encoder"]
        assert sum(dst for _, dst in encoder) == len(range(rank, latent, 2)), rank
        assert {src for src, _ in encoder} == {whole}, rank
        # quantiles: radius searches over its own nodes (tests/nn/test_split_mesh.py), no others
        assert searched["encoder-quantile"]["encoder"] == [], rank


def train_argv(mesh_folder, run, *extra):
    argv = ["train", "--dataset", "folder", "--data-dir", mesh_folder, "--model", "transolver"]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", 2]
    argv += ["--batch-size", 4, "--out", run, "--no-progress", "--no-figures"]
    for arg in ("width=8", "layers=1", "heads=2", "slices=4"):
        argv += ["--model-arg", arg]
    return [*argv, *extra]


def test_meshop_train_split_mesh_under_torchrun_matches_one_process(mesh_folder, tmp_path):
    split, single = tmp_path / "split", tmp_path / "single"
    result = torchrun("-m", "meshop.cli", *train_argv(mesh_folder, split, "--split-mesh"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "every sample's nodes split over 2 processes" in " ".join(result.stdout.split())
    assert main([str(a) for a in train_argv(mesh_folder, single)]) == 0
    one, two = checkpoint.load(single), checkpoint.load(split)
    for key, value in one["state_dict"].items():
        assert torch.allclose(two["state_dict"][key], value, atol=1e-5), key
    for row_two, row_one in zip(two["history"], one["history"], strict=True):
        assert row_two["train_loss"] == pytest.approx(row_one["train_loss"], rel=1e-5)


def test_split_mesh_without_torchrun_is_refused(mesh_folder, tmp_path, capsys):
    with pytest.raises(ConfigError, match="launch it with torchrun --nproc_per_node N"):
        Trainer(build("transolver"), prepare_data(samples(2), config=config(split_mesh=True)))
    status = main([str(a) for a in train_argv(mesh_folder, tmp_path / "run", "--split-mesh")])
    assert status == 2
    assert "split_mesh spreads each sample's nodes over the processes" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was read or written


def test_models_that_cannot_split_are_refused_with_what_to_do():
    whole = samples(1)[0]
    latent = prepare_data([whole], config=config()).train_set[0]
    pit = build("pit")
    check_model(pit, latent)  # PiT with a latent mesh splits
    check_model(build("transolver"), whole)  # every layer splits
    message = refusal(lambda: check_model(pit, whole))
    assert "split_mesh cannot train PiT" in message and "--latent-points 256" in message
    deep = PiT(3, 1, 2, width=8, layers=1, decoder_layers=1, encoder_k=4, decoder_k=4)
    assert "decoder_layers=1" in refusal(lambda: check_model(deep, latent))
    galerkin = GalerkinTransformer(3, 1, 2, width=8, layers=1, heads=2, path="mesh")
    assert "--latent-points 256" in refusal(lambda: check_model(galerkin, whole))
    check_model(galerkin, latent)
    queried = latent.clone()
    queried.query_pos = torch.rand(5, 2, dtype=torch.float64)
    assert "query points" in refusal(lambda: check_model(build("transolver"), queried))
    assert "no chunked pass" in refusal(lambda: check_model(torch.nn.Linear(2, 2), whole))


def test_a_process_holds_every_size_th_node_and_the_whole_latent_mesh():
    data = prepare_data(samples(1), config=config()).train_set[0]
    data.face = torch.zeros(3, 1, dtype=torch.long)
    parts = [part_of(data, rank, 3) for rank in range(3)]
    for key in ("pos", "x", "y", "weight"):
        assert torch.equal(torch.cat([p[key] for p in parts]), data[key][_order(len(data.pos))])
    for piece in parts:
        assert piece.latent_pos is data.latent_pos and "face" not in piece
    assert "face" in data  # the sample itself is left alone


def _order(n):
    return torch.cat([torch.arange(rank, n, 3) for rank in range(3)])


def test_split_mesh_is_a_training_setting_and_refuses_what_it_cannot_split(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[train]\nsplit_mesh = true\nlatent_points = 64\n")
    assert load_config(path).train_config().split_mesh is True
    for clash in (dict(node_fraction=0.5), dict(h1_weight=0.1), dict(compile=True)):
        with pytest.raises(ConfigError, match=f"split_mesh cannot train with {next(iter(clash))}"):
            config(split_mesh=True, **clash)
    with pytest.raises(ConfigError, match="split_mesh must be true or false"):
        config(split_mesh="yes")
