"""PiT's whole forward against a dense float64 reference of Sec. 2.3 (encoder, processor blocks,
decoder, decoder blocks, head), and its output depends on every decoder block."""

import pytest
import torch
import torch.nn.functional as F

from meshop.data import from_points, make_loader
from meshop.models import PiT
from tests.test_position_attention import dense_attention


def dense_linear(lin, x):
    return x @ lin.weight.double().T + lin.bias.double()


def dense_mlp(mlp, x):
    for i, lin in enumerate(mlp.lins):
        x = dense_linear(lin, F.gelu(x) if i else x)
    return x


def dense_block(block, u, pos, batch):
    """U' = gelu(MLP(gelu(PosAtt(U))) + Linear(U)) (PiT Sec. 2.3, Table 9)."""
    h = F.gelu(dense_attention(block.attn, u, pos, batch_src=batch))
    return F.gelu(dense_mlp(block.mlp, h) + dense_linear(block.skip, u))


def dense_pit(model, data):
    """Head(DecBlocks(gelu(LocPosAtt_out(Blocks(gelu(LocPosAtt_in(gelu(Lift(a)))))))))."""
    c = model.config
    features = torch.cat([data.x, data.pos], dim=1).double()
    u = F.gelu(dense_linear(model.lift, features))
    u = F.gelu(
        dense_attention(
            model.encoder,
            u,
            data.pos,
            data.latent_pos,
            data.batch,
            data.latent_pos_batch,
            k=c["encoder_k"],
        )
    )
    for block in model.processor:
        u = dense_block(block, u, data.latent_pos, data.latent_pos_batch)
    u = F.gelu(
        dense_attention(
            model.decoder,
            u,
            data.latent_pos,
            data.query_pos,
            data.latent_pos_batch,
            data.query_pos_batch,
            k=c["decoder_k"],
        )
    )
    for block in model.decoder_processor:
        u = dense_block(block, u, data.query_pos, data.query_pos_batch)
    return dense_mlp(model.head, u)


def batch_of_clouds():
    g = torch.Generator().manual_seed(3)
    samples = []
    for n, nv, nq in ((30, 9, 7), (41, 12, 10)):
        pos = torch.rand(n, 2, generator=g)
        data = from_points(pos, x=torch.sin(4 * pos[:, :1]) + pos[:, 1:])
        data.latent_pos = torch.rand(nv, 2, generator=g)
        data.query_pos = torch.rand(nq, 2, generator=g)
        samples.append(data)
    return next(iter(make_loader(samples, 2)))


def build(decoder_blocks: int) -> PiT:
    torch.manual_seed(0)
    model = PiT(
        3, 2, 2, width=8, heads=2, blocks=2, encoder_k=6, decoder_k=4, decoder_blocks=decoder_blocks
    )
    with torch.no_grad():  # lambda away from its initial value, different per head
        for module in model.modules():
            if hasattr(module, "theta"):
                module.theta.mul_(torch.tensor([0.7, 1.6]))
    return model.eval()


@pytest.mark.parametrize("decoder_blocks", [0, 2])
def test_pit_forward_matches_the_dense_reference_of_the_whole_model(decoder_blocks):
    data = batch_of_clouds()
    model = build(decoder_blocks)
    with torch.no_grad():
        out = model(data)
    assert out.shape == (17, 2)
    torch.testing.assert_close(out.double(), dense_pit(model, data), rtol=1e-4, atol=2e-5)


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
