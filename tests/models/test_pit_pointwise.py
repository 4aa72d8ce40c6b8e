"""PiT's pointwise decoder option (PiT(pointwise=True)): the decoder reads each query point's own
input features, on meshes of different sizes, at query points, in chunks and from a checkpoint."""

import torch

from meshop.data import from_points, make_loader, set_query_points
from meshop.models import PiT
from meshop.models.registry import build_model
from meshop.train.trainer import model_spec


def sample(n, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=g)
    return from_points(pos, x=torch.rand(n, 1, generator=g), y=torch.rand(n, 1, generator=g))


def built(pointwise):
    torch.manual_seed(0)
    return PiT(3, 1, 2, width=16, layers=1, encoder_k=8, decoder_k=4, pointwise=pointwise).eval()


def own_input_effect(model, data):
    """How much the output at node 0 moves when only node 0's input field changes."""
    changed = data.clone()
    changed.x = data.x.clone()
    changed.x[0] += 1.0
    with torch.no_grad():
        return float((model(changed)[0] - model(data)[0]).abs().max())


def test_the_output_at_a_node_reads_its_own_inputs():
    data = sample(300, 0)
    paper, pointwise = own_input_effect(built(False), data), own_input_effect(built(True), data)
    assert pointwise > 20 * paper  # the paper's decoder sees node 0 only through the encoder
    assert built(False).query_lift is None and built(True).config["pointwise"] is True


def test_query_points_take_the_inputs_of_their_nearest_node():
    data = sample(200, 1)
    model = built(True)
    set_query_points(data, data.pos[[5, 17]] + 1e-4)  # next to nodes 5 and 17
    with torch.no_grad():
        at_queries = model(data)
        data.x[[5, 17]] += 1.0
        moved = model(data)
    assert (moved - at_queries).abs().min() > 1e-3


def test_a_batch_of_meshes_of_different_sizes_predicts_each_sample_alone():
    samples = [sample(120, 2), sample(250, 3)]
    model = built(True)
    batch = next(iter(make_loader(samples, batch_size=2)))
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model(s) for s in samples])
        chunked = model.forward_chunked(batch, 50)
    assert torch.allclose(together, alone, atol=1e-5)
    assert torch.allclose(chunked, together, atol=1e-5)


def test_a_pointwise_model_is_rebuilt_from_its_checkpoint_config():
    model = built(True)
    rebuilt = build_model(model_spec(model), **model.config)
    rebuilt.load_state_dict(model.state_dict())
    data = sample(90, 4)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(data), model(data))
