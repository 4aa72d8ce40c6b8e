"""Training: losses, metrics, the loop, checkpoints, distributed training (torchrun), runs.

``prepare_data(train_set, test_set, TrainConfig(epochs=10))`` readies the data of a run in one call
(latent meshes, normalisers, field names); ``Trainer(model, data, out_dir="runs/mine").fit()`` (or
``train(model, data)``) trains any meshop model on it; docs/training.md has the whole journey.
"""

from meshop.train import checkpoint
from meshop.train.checkpoint import load_model
from meshop.train.config import RunConfig, TrainConfig, load_config
from meshop.train.data import LatentMesh, PreparedData, prepare_data
from meshop.train.inference import (
    checkpoint_fields,
    predict,
    predict_fields,
    predict_file,
    prediction_integrals,
    read_inputs,
)
from meshop.train.losses import relative_h1, relative_l1, relative_l2, relative_lp
from meshop.train.metrics import per_sample_errors
from meshop.train.normalized import NormalizedModel, fit_normalizers
from meshop.train.optim import build_optimizer, build_scheduler
from meshop.train.trainer import Trainer, seed_everything, train, training_loss

__all__ = [
    "LatentMesh",
    "NormalizedModel",
    "PreparedData",
    "RunConfig",
    "TrainConfig",
    "Trainer",
    "build_optimizer",
    "build_scheduler",
    "checkpoint",
    "checkpoint_fields",
    "fit_normalizers",
    "load_config",
    "load_model",
    "per_sample_errors",
    "predict",
    "predict_fields",
    "predict_file",
    "prediction_integrals",
    "prepare_data",
    "read_inputs",
    "relative_h1",
    "relative_l1",
    "relative_l2",
    "relative_lp",
    "seed_everything",
    "train",
    "training_loss",
]
