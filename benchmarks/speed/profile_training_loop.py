"""Where an epoch of ``meshop train`` spends its time, for every model: the run's setup (loading the
splits, preparing the data: latent meshes and normalisers), then each epoch split into data
loading (the loader's next batch: collation, lazily prepared samples), neighbour search and latent
sampling (torch-cluster's kNN, radius and farthest-point calls, wherever they run), forward
(without the searches inside it), loss, backward, optimiser (zero_grad, clipping, step, schedule),
evaluation on the test split, the checkpoint, and the rest (progress bar, loss bookkeeping and
logging): the epoch's wall-clock time less the timed parts.

The runs are the ones ``meshop train --dataset elasticity --model MODEL`` makes with the model's
preset, on ``--num-train`` training and ``--num-test`` test samples; epoch 1 fills the caches
(neighbour lists), epoch 2 is what every later epoch costs.

    python -m benchmarks.speed.profile_training_loop                 # every model, 2 epochs
    python -m benchmarks.speed.profile_training_loop --quick         # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.lib.common import RESULTS, SECTION_END, SECTION_START, machine, markdown_table
from benchmarks.lib.training_runs import run_trainer

MODELS = ("pit", "galerkin", "fourier", "ono", "transolver", "mlp")
#: the parts of an epoch, in table order (``rest`` is the epoch less the others)
PARTS = (
    "data loading",
    "neighbour search and latent sampling",
    "forward",
    "loss",
    "backward",
    "optimiser",
    "evaluation",
    "checkpoint",
    "rest (progress, bookkeeping, logging)",
)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny data (a smoke test)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models")
    parser.add_argument("--num-train", type=int, default=None, help="training samples (64; 4)")
    parser.add_argument("--num-test", type=int, default=None, help="test samples (16; 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--note", default="measured under load", help="a note under the table")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args(argv)
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
    import torch

    import meshop.train.trainer as trainer_module
    from meshop._pyg import torch_cluster

    patch = stack.enter_context(_patcher())
    for name in ("knn", "radius", "fps"):
        patch(torch_cluster, name, clock.wrap(PARTS[1], getattr(torch_cluster, name)))
    patch(trainer_module, "training_loss", clock.wrap("loss", trainer_module.training_loss))
    clip = torch.nn.utils.clip_grad_norm_
    patch(torch.nn.utils, "clip_grad_norm_", clock.wrap("optimiser", clip))
    patch(torch.Tensor, "backward", clock.wrap("backward", torch.Tensor.backward))
    for name, part in (("evaluate", "evaluation"), ("save_checkpoint", "checkpoint")):
        patch(trainer, name, clock.wrap(part, getattr(trainer, name)))
    # on the classes: the checkpoint pickles the scheduler's attributes
    for owner, names in (
        (type(trainer.optimizer), ("zero_grad", "step")),
        (type(trainer.scheduler), ("step",)),
    ):
        for name in names:
            patch(owner, name, clock.wrap("optimiser", getattr(owner, name)))
    patch(trainer, "net", _Timed(trainer.net, clock))
    patch(trainer, "loader", _TimedLoader(trainer.loader, clock))


class _Timed:
    """A module whose calls are timed as the forward part."""

    def __init__(self, module, clock):
        self.module, self.clock = module, clock

    def __call__(self, *args, **kwargs):
        with self.clock.part("forward"):
            return self.module(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.module, name)


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


@contextlib.contextmanager
def _patcher():
    undo = []

    def patch(owner, name, value):
        undo.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    try:
        yield patch
    finally:
        for owner, name, old in reversed(undo):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


_MISSING = object()


def profile_model(model: str, args, out_dir: Path) -> dict:
    """Setup and per-epoch parts (seconds) of two epochs of ``meshop train`` on Elasticity."""
    from meshop.train import RunConfig

    run = RunConfig(
        dataset="elasticity",
        model=model,
        train={"epochs": 2, "eval_every": 1, "progress": False},
        dataset_args={"num_train": args.num_train, "num_test": args.num_test},
    )
    trainer, setup = run_trainer(run, out_dir / model)
    clock, epochs, started = Clock(), [], []
    with contextlib.ExitStack() as stack:
        instrument(trainer, clock, stack)
        patch = stack.enter_context(_patcher())
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

        patch(trainer, "train_epoch", epoch_start)
        patch(trainer, "save_checkpoint", epoch_end)
        trainer.fit()
    return {
        "model": model,
        "batch_size": trainer.config.batch_size,
        **setup,
        "epochs": epochs,
    }


def table(records: list[dict], epoch: int) -> str:
    headers = ["model", "epoch", *PARTS, "forward + backward"]
    rows = []
    for r in records:
        e = r["epochs"][epoch]
        parts, total = e["parts_s"], e["epoch_s"]
        cells = [*(parts[p] for p in PARTS), parts["forward"] + parts["backward"]]
        rows.append(
            [
                r["model"],
                f"{1e3 * total:.0f} ms",
                *(f"{1e3 * seconds:.0f} ms ({100 * seconds / total:.0f} %)" for seconds in cells),
            ]
        )
    return markdown_table(headers, rows)


def write(args, records: list[dict]) -> str:
    import torch

    info = {**machine(), "threads": args.threads, "quick": args.quick, "note": args.note}
    setup = markdown_table(
        ["model", "batch size", "loading the splits", "preparing the data"],
        [
            [
                r["model"],
                str(r["batch_size"]),
                f"{1e3 * r['load_s']:.0f} ms",
                f"{1e3 * r['prepare_s']:.0f} ms",
            ]
            for r in records
        ],
    )
    text = "\n".join(
        [
            "## Where an epoch of meshop train spends its time",
            "",
            SECTION_START,
            f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
            f"({info['cpu_cores']} cores), {torch.get_num_threads()} thread(s), torch "
            f"{info['torch']}, {args.note}: `meshop train --dataset elasticity` with each model's "
            f"preset on {args.num_train} training and {args.num_test} test samples; the share of "
            f"each part in the epoch's wall-clock time.",
            "",
            "### Epoch 2 (every later epoch)",
            "",
            table(records, 1),
            "",
            "### Epoch 1 (caches filled)",
            "",
            table(records, 0),
            "",
            "### Before the first epoch",
            "",
            setup,
            "",
            SECTION_END,
            "",
        ]
    )
    print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "training_loop_profile.md").write_text(text)
    (args.out / "training_loop_profile.json").write_text(
        json.dumps({"machine": info, "records": records}, indent=1) + "\n"
    )
    return text


def main(argv=None) -> None:
    import torch

    args = parse(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        records = [profile_model(model, args, Path(tmp)) for model in args.models]
    write(args, records)


if __name__ == "__main__":
    main()
