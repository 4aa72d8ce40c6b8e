"""PiT's whole forward against a dense float64 reference of Sec. 2.3 (encoder, processor blocks,
decoder, decoder blocks, head), and its output depends on every decoder block."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from meshop.data import from_points, make_loader
from meshop.errors import ConfigError
from meshop.models import PiT
from tests.reference import dense_attention


def dense_linear(lin, x):
    return x @ lin.weight.double().T + lin.bias.double()


def dense_mlp(mlp, x):
    for i, lin in enumerate(mlp.lins):
        x = dense_linear(lin, F.gelu(x) if i else x)
    return x


def as_built(layer, periodic):
    """The attention layer with the model's periodic box (the one the model was asked for)."""
    names = ("heads", "head_channels", "lin_v", "lam")
    return SimpleNamespace(periodic=periodic, **{n: getattr(layer, n) for n in names})


def receptive_field(config, where):
    """PiT's rule: a k or radius field replaces the default quantile."""
    k, radius = config[f"{where}_k"], config[f"{where}_radius"]
    if k is not None:
        return {"k": k}
    return {"radius": radius} if radius is not None else {"quantile": config[f"{where}_quantile"]}


def dense_block(block, u, pos, batch, periodic, weight=None):
    """U' = gelu(MLP(gelu(PosAtt(U))) + Linear(U)) (PiT Sec. 2.3, Table 9)."""
    attn = as_built(block.attn, periodic)
    h = F.gelu(dense_attention(attn, u, pos, batch_src=batch, weight=weight))
    return F.gelu(dense_mlp(block.mlp, h) + dense_linear(block.skip, u))


def lumped_weights(data):
    """Each latent node's weight: the summed weights of the input nodes nearest to it, found
    by an explicit distance matrix per sample."""
    out = torch.zeros(len(data.latent_pos), dtype=torch.float64)
    for b in data.batch.unique():
        src, dst = data.batch == b, (data.latent_pos_batch == b).nonzero().view(-1)
        nearest = torch.cdist(data.pos[src].double(), data.latent_pos[dst].double()).argmin(1)
        out.index_add_(0, dst[nearest], data.weight[src].double())
    return out


def dense_pit(model, data):
    """Head(DecBlocks(gelu(LocPosAtt_out(Blocks(gelu(LocPosAtt_in(gelu(Lift(a)))))))))."""
    c = model.config
    periodic = c["periodic"]
    encoder, decoder = as_built(model.encoder, periodic), as_built(model.decoder, periodic)
    latent, query = (data.latent_pos, data.latent_pos_batch), (data.query_pos, data.query_pos_batch)
    weight, latent_weight = (data.weight, lumped_weights(data)) if c["weighted"] else (None, None)
    features = torch.cat([data.x, data.pos], dim=1).double()
    u = F.gelu(dense_linear(model.lift, features))
    u = dense_attention(
        encoder,
        u,
        data.pos,
        latent[0],
        data.batch,
        latent[1],
        weight,
        **receptive_field(c, "encoder"),
    )
    u = F.gelu(u)
    for block in model.processor:
        u = dense_block(block, u, *latent, periodic, latent_weight)
    u = dense_attention(
        decoder,
        u,
        latent[0],
        query[0],
        latent[1],
        query[1],
        latent_weight,
        **receptive_field(c, "decoder"),
    )
    u = F.gelu(u)
    for block in model.decoder_processor:
        u = dense_block(block, u, *query, periodic)
    return dense_mlp(model.head, u)


def batch_of_clouds():
    g = torch.Generator().manual_seed(3)
    samples = []
    for n, nv, nq in ((30, 9, 7), (41, 12, 10)):
        pos = torch.rand(n, 2, generator=g)
        weight = 10.0 ** (-3 * torch.rand(n, generator=g))  # as on a graded mesh
        data = from_points(pos, x=5 * torch.sin(4 * pos[:, :1]) + 5 * pos[:, 1:], weight=weight)
        data.latent_pos = torch.rand(nv, 2, generator=g)
        data.query_pos = torch.rand(nq, 2, generator=g)
        samples.append(data)
    return next(iter(make_loader(samples, 2)))


FIELDS = {
    "knn": dict(encoder_k=6, decoder_k=4),
    "radius": dict(encoder_radius=0.4, decoder_radius=0.5),
    "periodic": dict(encoder_k=6, decoder_k=4, periodic=1.0),
}


def build(decoder_layers: int, fields: str = "knn", weighted: bool = True) -> PiT:
    torch.manual_seed(0)
    model = PiT(
        3,
        2,
        2,
        width=8,
        heads=2,
        layers=2,
        decoder_layers=decoder_layers,
        weighted=weighted,
        **FIELDS[fields],
    )
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):  # features that differ from node to node
                module.weight.mul_(2.5)
            if hasattr(module, "theta"):  # soft kernels: lambda = tan(pi/4 (1 + sin theta))
                module.theta.copy_(torch.tensor([-0.4221, 0.6316]))  # 0.5 and 3
    return model.eval()


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("fields", list(FIELDS))
@pytest.mark.parametrize("decoder_layers", [0, 2])
def test_pit_forward_matches_the_dense_reference_of_the_whole_model(
    decoder_layers, fields, weighted
):
    data = batch_of_clouds()
    model = build(decoder_layers, fields, weighted)
    with torch.no_grad():
        out = model(data)
    assert out.shape == (17, 2)
    torch.testing.assert_close(out.double(), dense_pit(model, data), rtol=1e-4, atol=2e-5)


def test_pit_checks_its_block_counts_and_receptive_fields():
    PiT(3, 1, 2, layers=0)  # an encoder and a decoder only
    for layers, decoder_layers in ((-1, 0), (0, -1)):
        with pytest.raises(ConfigError, match="layers and decoder_layers must be >= 0"):
            PiT(3, 1, 2, layers=layers, decoder_layers=decoder_layers)
    with pytest.raises(ConfigError, match=r"give the decoder one receptive field.*'k': 3"):
        PiT(3, 1, 2, decoder_k=3, decoder_radius=0.2)
    model = PiT(3, 1, 2, encoder_radius=0.3, decoder_radius=0.4)
    assert PiT(**model.config).config == model.config
    assert (model.config["encoder_radius"], model.config["decoder_radius"]) == (0.3, 0.4)


def test_pit_output_changes_with_each_decoder_block():
    data = batch_of_clouds()
    model = build(2)
    with torch.no_grad():
        full = model(data)
        blocks = model.decoder_processor
        model.decoder_processor = torch.nn.ModuleList([blocks[0]])
        one = model(data)
        model.decoder_processor = torch.nn.ModuleList()
        none = model(data)
    assert (full - one).abs().max() > 1e-3 and (one - none).abs().max() > 1e-3
