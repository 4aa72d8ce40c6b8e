"""Where an epoch of ``meshop train --dataset elasticity --model MODEL`` spends its time, every
model: data loading, neighbour search, forward, loss, backward, optimiser, evaluation, checkpoint
and the rest (the epoch less the timed parts), for two epochs, and the run's setup.

    python -m benchmarks.speed.profile_training_loop                 # every model, 2 epochs
    python -m benchmarks.speed.profile_training_loop --quick         # smoke test
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from unittest import mock

import torch

import meshop.train.trainer as trainer_module
from benchmarks.lib.common import machine, markdown_table, parser, results_text, write_text
from benchmarks.lib.training_runs import run_trainer
from meshop._pyg import torch_cluster
from meshop.train import RunConfig

MODELS = ("pit", "galerkin", "fourier", "ono", "transolver", "mlp")
#: the parts of an epoch, in table order (``rest`` is the epoch less the others)
PARTS = "data loading|neighbour search and latent sampling|forward|loss|backward|optimiser|"
PARTS = tuple((PARTS + "evaluation|checkpoint|rest (progress, bookkeeping, logging)").split("|"))


def parse(argv=None):
    p = parser(__doc__.splitlines()[0], "tiny data (a smoke test)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated models")
    p.add_argument("--num-train", type=int, default=None, help="training samples (64; 4)")
    p.add_argument("--num-test", type=int, default=None, help="test samples (16; 2)")
    p.add_argument("--note", default="measured under load", help="a note under the table")
    args = p.parse_args(argv)
    args.num_train = args.num_train or (4 if args.quick else 64)
    args.num_test = args.num_test or (2 if args.quick else 16)
    args.models = args.models.split(",")
    return args


class Clock:
    """Seconds per part; ``part(name)`` times a block, ``nested`` parts (the searches inside a
    forward pass) are subtracted from the part that encloses them."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.stack: list[list] = []

    @contextlib.contextmanager
    def part(self, name: str):
        frame = [name, 0.0]  # the time of the parts nested in this one
        self.stack.append(frame)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.stack.pop()
            self.seconds[name] += elapsed - frame[1]
            if self.stack:
                self.stack[-1][1] += elapsed

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            with self.part(name):
                return fn(*args, **kwargs)

        return timed


def instrument(trainer, clock: Clock, stack: contextlib.ExitStack) -> None:
    """Times the parts of ``trainer``'s epochs (patches undone when ``stack`` closes)."""

    def patch(owner, name, value):
        stack.enter_context(mock.patch.object(owner, name, value))

    for name in ("knn", "radius", "fps"):
        patch(torch_cluster, name, clock.wrap(PARTS[1], getattr(torch_cluster, name)))
    patch(trainer_module, "training_loss", clock.wrap("loss", trainer_module.training_loss))
    clip = torch.nn.utils.clip_grad_norm_
    patch(torch.nn.utils, "clip_grad_norm_", clock.wrap("optimiser", clip))
    patch(torch.Tensor, "backward", clock.wrap("backward", torch.Tensor.backward))
    for name, part in (("evaluate", "evaluation"), ("save_checkpoint", "checkpoint")):
        patch(trainer, name, clock.wrap(part, getattr(trainer, name)))
    # on the classes: the checkpoint pickles the scheduler's attributes
    optimizer, scheduler = type(trainer.optimizer), type(trainer.scheduler)
    for owner, name in ((optimizer, "zero_grad"), (optimizer, "step"), (scheduler, "step")):
        patch(owner, name, clock.wrap("optimiser", getattr(owner, name)))
    patch(trainer.net, "forward", clock.wrap("forward", trainer.net.forward))
    patch(trainer, "loader", _TimedLoader(trainer.loader, clock))


class _TimedLoader:
    """A loader whose every next batch is timed as data loading."""

    def __init__(self, loader, clock):
        self.loader, self.clock = loader, clock

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        batches = iter(self.loader)
        while True:
            with self.clock.part("data loading"):
                batch = next(batches, None)
            if batch is None:
                return
            yield batch


def profile_model(model: str, args, out_dir: Path) -> dict:
    """Setup and per-epoch parts (seconds) of two epochs of ``meshop train`` on Elasticity."""
    train = {"epochs": 2, "eval_every": 1, "progress": False}
    sizes = {"num_train": args.num_train, "num_test": args.num_test}
    run = RunConfig(dataset="elasticity", model=model, train=train, dataset_args=sizes)
    trainer, setup = run_trainer(run, out_dir / model)
    clock, epochs, started = Clock(), [], []
    with contextlib.ExitStack() as stack:
        instrument(trainer, clock, stack)
        train_epoch, checkpoint = trainer.train_epoch, trainer.save_checkpoint

        def epoch_start():
            clock.seconds.clear()
            started.append(time.perf_counter())
            return train_epoch()

        def epoch_end():  # fit() closes every epoch with the checkpoint
            checkpoint()
            wall = time.perf_counter() - started[-1]
            parts = {part: clock.seconds.get(part, 0.0) for part in PARTS[:-1]}
            parts[PARTS[-1]] = wall - sum(parts.values())
            epochs.append({"epoch_s": wall, "parts_s": parts})

        stack.enter_context(mock.patch.object(trainer, "train_epoch", epoch_start))
        stack.enter_context(mock.patch.object(trainer, "save_checkpoint", epoch_end))
        trainer.fit()
    return {"model": model, "batch_size": trainer.config.batch_size, **setup, "epochs": epochs}


def table(records: list[dict], epoch: int) -> str:
    rows = []
    for r in records:
        parts, total = r["epochs"][epoch]["parts_s"], r["epochs"][epoch]["epoch_s"]
        cells = [*(parts[p] for p in PARTS), parts["forward"] + parts["backward"]]
        cells = [f"{1e3 * seconds:.0f} ms ({100 * seconds / total:.0f} %)" for seconds in cells]
        rows.append([r["model"], f"{1e3 * total:.0f} ms", *cells])
    return markdown_table(["model", "epoch", *PARTS, "forward + backward"], rows)


def write(args, records: list[dict]) -> str:
    info = {**machine(), "threads": args.threads, "quick": args.quick, "note": args.note}
    setup = [[r["model"], str(r["batch_size"]), f"{1e3 * r['load_s']:.0f} ms"] for r in records]
    setup = [[*row, f"{1e3 * r['prepare_s']:.0f} ms"] for row, r in zip(setup, records)]
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
        f"({info['cpu_cores']} cores), {torch.get_num_threads()} thread(s), torch "
        f"{info['torch']}, {args.note}: `meshop train --dataset elasticity` with each model's "
        f"preset on {args.num_train} training and {args.num_test} test samples; the share of "
        f"each part in the epoch's wall-clock time."
    )
    sections = {"Epoch 2 (every later epoch)": table(records, 1)}
    sections["Epoch 1 (caches filled)"] = table(records, 0)
    headers = "model|batch size|loading the splits|preparing the data"
    sections["Before the first epoch"] = markdown_table(headers, setup)
    text = results_text("Where an epoch of meshop train spends its time", header, sections)
    write_text(args.out, "training_loop_profile", text, {"machine": info, "records": records})
    return text


def main(argv=None) -> None:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        records = [profile_model(model, args, Path(tmp)) for model in args.models]
    write(args, records)


if __name__ == "__main__":
    main()
