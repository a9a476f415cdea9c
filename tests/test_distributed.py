"""Data-parallel training: one process, 2 gloo ranks by hand and 2 gloo ranks with DDP agree.

The two ranks are forked by the test itself (each runs ``course_pkg.training.distributed.main``, the
entry point torchrun starts, with the rendezvous variables torchrun would set) and talk over the
loopback interface. The reference runs in this process with no process group.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
import torch
from torch.utils.data import TensorDataset

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import translation_dataloaders
from course_pkg.models.transformer import Transformer
from course_pkg.training import data_parallel, distributed
from course_pkg.training.loop import masked_cross_entropy

# A small corpus and a global batch of 16: a few seconds in all.
ARGV = ["--num-pairs", "400", "--batch-size", "16", "--threads", "1"]
# In float64 the three runs agree far below 1e-6, with SGD and with Adam, after 2 epochs of 3
# steps. In float32 they agree to rounding (about 1e-7) after 3 SGD steps; not bit for bit, since
# one process and two ranks add the gradient's terms in different orders. Longer float32 runs can
# drift further: a ReLU input within rounding of 0 may be on in one run and off in the other, and
# Adam divides each gradient entry by its own size, magnifying rounding in entries near 0.
LONG = ["--epochs", "2", "--max-steps", "3"]
# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without
# MKL_CBWR=COMPATIBLE; 1 thread, as the ranks run): after 3 SGD steps one process and the two
# ranks each err by at most 3.0e-7 and differ by 1.2e-7; bound = 10 x the sum of the errors,
# rounded up (it was 1e-6). The 3 steps move the parameters by 5.3e-2 from the untrained model.
# The step losses differ by 8.4e-8 relative at most (bound 1e-6).
FLOAT32_SGD_BOUND = 1e-5
RUNS = {
    "float64, SGD": (
        ["--dtype", "float64", "--optimizer", "sgd", "--lr", "0.1", *LONG],
        1e-10,
    ),
    "float64, Adam": (
        ["--dtype", "float64", "--optimizer", "adam", "--lr", "0.01", *LONG],
        1e-10,
    ),
    "float32, SGD": (
        [
            "--optimizer",
            "sgd",
            "--lr",
            "0.1",
            "--epochs",
            "1",
            "--max-steps",
            "3",
        ],
        FLOAT32_SGD_BOUND,
    ),
}
WORLD_SIZE = 2
THREADS_AT_IMPORT = torch.get_num_threads()


def _rank_main(rank: int, port: int, flags: list[str], save: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(WORLD_SIZE),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(WORLD_SIZE),
    )
    distributed.main(
        [*ARGV, *flags, "--device", "cpu", "--sync", "hand", "ddp"]
        + ["--save", save]
    )


def _run_ranks(flags: list[str], save: str) -> None:
    """One process group of WORLD_SIZE forked ranks, on a port found free just before they start.

    A port per group, taken as late as possible: between free_port() and rank 0 binding it,
    another process could take it (a port found long before, for a later group, stays unbound
    for the whole of the earlier groups), and a rank that reused the last group's port could
    reach that group's closing rendezvous server instead of the new one.
    """
    context = multiprocessing.get_context("fork")
    port = data_parallel.free_port()
    ranks = [
        context.Process(target=_rank_main, args=(rank, port, flags, save))
        for rank in range(WORLD_SIZE)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
        if process.is_alive():  # a rank stuck in a collective
            process.kill()
    assert [process.exitcode for process in ranks] == [0] * WORLD_SIZE


class _Runs(dict):
    """{run: {'one process': ..., 'hand': ..., 'ddp': ..., 'losses': ...}}, each run of RUNS
    trained on first use (so ``-m numerics`` trains the float32 run only)."""

    def __init__(self, save_dir):
        super().__init__()
        self.save_dir = save_dir

    def __missing__(self, name: str) -> dict:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as each rank runs (--threads 1)
        try:
            self[name] = _train_run(name, self.save_dir)
        finally:
            torch.set_num_threads(threads)
        return self[name]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return _Runs(tmp_path_factory.mktemp("ddp"))


def _train_run(name: str, save_dir) -> dict:
    flags, _ = RUNS[name]
    # The reference first: the ranks, forked after it, start with everything it imported loaded
    # (the first optimizer alone imports torch._dynamo) and the corpus in its cache.
    reference = distributed.train_data_parallel(
        distributed.parse_args([*ARGV, *flags]), None
    )
    save = save_dir / f"{list(RUNS).index(name)}.pt"
    _run_ranks(flags, str(save))
    saved = torch.load(save, weights_only=True)
    return {
        "one process": reference["model"].state_dict(),
        **{sync: saved[sync]["model"] for sync in ("hand", "ddp")},
        "losses": {
            "one process": reference["step_loss"],
            **{sync: saved[sync]["step_loss"] for sync in ("hand", "ddp")},
        },
    }


def test_training_leaves_the_thread_count_as_it_found_it(trained):
    trained["float32, SGD"]  # trains it, if no test has yet
    assert torch.get_num_threads() == THREADS_AT_IMPORT


def _max_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max(
        (first[name].double() - second[name].double()).abs().max().item()
        for name in first
    )


# The float32 run's bounds are measured (tests/README.md): it runs again on the portable CPU
# path and on 2 threads (make unit-numerics).
RUN_PARAMS = [
    pytest.param(run, marks=pytest.mark.numerics) if "float32" in run else run
    for run in RUNS
]


@pytest.mark.parametrize("run", RUN_PARAMS)
@pytest.mark.parametrize(
    "pair", [("one process", "hand"), ("one process", "ddp"), ("hand", "ddp")]
)
def test_two_ranks_reach_the_parameters_of_one_process(trained, run, pair):
    first, second = trained[run][pair[0]], trained[run][pair[1]]
    difference = _max_difference(first, second)
    print(f"{run}: max |{pair[0]} - {pair[1]}| = {difference:.2e}")
    assert difference <= RUNS[run][1]
    # and training moved them: the agreement is not that of an untouched model
    assert _max_difference(first, _untrained()) > 1e-3


@pytest.mark.parametrize("run", RUN_PARAMS)
def test_every_step_reports_the_loss_of_the_global_batch(trained, run):
    losses = trained[run]["losses"]
    assert len(losses["one process"]) == (6 if "float64" in run else 3)
    for sync in ("hand", "ddp"):
        assert losses[sync] == pytest.approx(losses["one process"], rel=1e-6)
    assert losses["one process"][-1] < losses["one process"][0]


def _untrained() -> dict:
    splits = english_french_corpus(seed=0, num_pairs=400)
    data = translation_dataloaders(splits, 16, 18)
    torch.manual_seed(0)
    return distributed.build_model(
        "transformer", len(data.src_vocab), len(data.tgt_vocab)
    ).state_dict()


# ---------------------------------------------------------------------- gradient accumulation


def _batches(num_batches: int, batch_size: int):
    splits = english_french_corpus(seed=0, num_pairs=400)
    data = translation_dataloaders(splits, batch_size, 18, seed=1)
    batches = []
    for batch in data.train:
        batches.append(batch)
        if len(batches) == num_batches:
            return (
                data.tgt_vocab.pad,
                len(data.src_vocab),
                len(data.tgt_vocab),
                batches,
            )


def _tiny(src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(src_vocab_size, tgt_vocab_size, 16, 32, 2, 1, 0.0)


# In float64 (the float64 fixture). In float32, Adam magnifies rounding (it divides each gradient
# entry by its own size): the two sides differed by 1.03e-6 on an AVX-512 machine, by 7.2e-7
# (default path) and 2.5e-7 (avx2) here, and each is 1.2e-5 from its float64 result, so a float32
# bound by the x10 rule would be 2e-4. In float64 they differ by 5.8e-15 (default) and 6.2e-15
# (avx2); summing the micro-batch means instead of weighting them by tokens is off by > 1e-4.
@pytest.mark.usefixtures("float64")
def test_gradient_accumulation_equals_the_larger_batch():
    pad, src_size, tgt_size, batches = _batches(6, 8)
    accumulated, whole = _tiny(src_size, tgt_size), _tiny(src_size, tgt_size)
    optimizers = [
        torch.optim.Adam(m.parameters(), lr=0.01) for m in (accumulated, whole)
    ]
    for step in range(3):
        micro = batches[2 * step : 2 * step + 2]
        joined = tuple(
            torch.cat(parts) for parts in zip(*micro)
        )  # (16, T) ...
        loss_micro = data_parallel.train_step(
            accumulated, micro, optimizers[0], pad, grad_clip=1.0
        )
        loss_whole = data_parallel.train_step(
            whole, [joined], optimizers[1], pad, grad_clip=1.0
        )
        assert abs(loss_micro - loss_whole) <= 1e-12
    assert (
        _max_difference(accumulated.state_dict(), whole.state_dict()) <= 1e-12
    )
    assert next(whole.parameters()).dtype == torch.float64


def test_a_global_batch_of_padding_only_has_loss_zero_not_nan():
    pad, src_size, tgt_size, batches = _batches(2, 8)
    model = _tiny(src_size, tgt_size)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    padding_only = [
        (*batch[:3], torch.full_like(batch[3], pad)) for batch in batches
    ]
    loss = data_parallel.train_step(model, padding_only, optimizer, pad)
    assert loss == 0.0
    assert _max_difference(model.state_dict(), before) == 0.0


@pytest.mark.usefixtures("float64")
def test_averaging_micro_batch_means_would_not_equal_the_larger_batch():
    # Why train_step weights by tokens: the two halves hold different numbers of target tokens.
    pad, src_size, tgt_size, (first, second) = _batches(2, 8)
    counts = [int((batch[3] != pad).sum()) for batch in (first, second)]
    assert counts[0] != counts[1]
    model = _tiny(src_size, tgt_size)
    joined = tuple(torch.cat(parts) for parts in zip(first, second))

    def loss_of(batch):
        return masked_cross_entropy(
            model(batch[0], batch[2], batch[1]), batch[3], pad
        )

    mean_of_means = (loss_of(first) + loss_of(second)) / 2
    weighted = (
        counts[0] * loss_of(first) + counts[1] * loss_of(second)
    ) / sum(counts)
    assert abs(weighted.item() - loss_of(joined).item()) <= 1e-12
    assert abs(mean_of_means.item() - loss_of(joined).item()) > 1e-4


# ---------------------------------------------------------------------------- the shards


# Exhaustive, not sampled: every world size to 4 and per-rank batch to 5, and every number of
# examples up to two global batches and one more (every remainder, 0 to 2 whole steps).
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("per_rank", [1, 2, 3, 4, 5])
def test_the_shards_of_a_step_make_up_the_global_batch(world_size, per_rank):
    global_batch = world_size * per_rank
    for num_examples in range(1, 2 * global_batch + 2):
        seed = num_examples % 2
        dataset = TensorDataset(torch.arange(num_examples))
        one = list(
            data_parallel.sharded_loader(dataset, global_batch, 0, 1, seed)
        )
        shards = [
            list(
                data_parallel.sharded_loader(
                    dataset, global_batch, r, world_size, seed
                )
            )
            for r in range(world_size)
        ]
        assert len(one) == num_examples // global_batch
        assert all(len(batches) == len(one) for batches in shards)
        for step, (whole,) in enumerate(one):
            parts = torch.cat([shards[r][step][0] for r in range(world_size)])
            assert sorted(parts.tolist()) == sorted(whole.tolist())
            assert len(set(parts.tolist())) == global_batch


# ---------------------------------------------------------------------------- bad set-ups


def _torchrun_environment(
    monkeypatch, world_size: int = 2, rank: int = 0
) -> None:
    for name, value in dict(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
    ).items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("variable", data_parallel.RENDEZVOUS_VARIABLES)
def test_a_missing_rendezvous_variable_is_named(monkeypatch, variable):
    _torchrun_environment(monkeypatch)
    monkeypatch.delenv(variable)
    with pytest.raises(
        ValueError, match=f"missing rendezvous variable.*{variable}.*torchrun"
    ):
        data_parallel.setup_process_group("cpu")
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("world_size, global_batch", [(3, 16), (2, 7), (4, 6)])
def test_a_world_size_that_does_not_divide_the_global_batch(
    world_size, global_batch
):
    dataset = TensorDataset(torch.arange(40))
    with pytest.raises(
        ValueError,
        match=f"world size \\({world_size}\\) must divide the global batch",
    ):
        data_parallel.sharded_loader(dataset, global_batch, 0, world_size)


def test_cuda_with_fewer_gpus_than_ranks(monkeypatch):
    ranks = torch.cuda.device_count() + 1
    _torchrun_environment(monkeypatch, world_size=ranks)
    with pytest.raises(
        ValueError, match=f"{ranks} ranks on this machine but {ranks - 1} GPU"
    ):
        data_parallel.setup_process_group("cuda")
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(RANK="2"), "RANK must be in \\[0, WORLD_SIZE=2\\)"),
        (dict(WORLD_SIZE="two"), "WORLD_SIZE must be an integer"),
        (dict(MASTER_PORT="port"), "MASTER_PORT must be an integer"),
    ],
)
def test_malformed_rendezvous_variables(monkeypatch, changes, message):
    _torchrun_environment(monkeypatch)
    for name, value in changes.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        data_parallel.setup_process_group("cpu")


def test_other_refusals(monkeypatch):
    _torchrun_environment(monkeypatch)
    with pytest.raises(ValueError, match="device_type must be"):
        data_parallel.setup_process_group("tpu")
    with pytest.raises(ValueError, match="name must be"):
        distributed.build_model("lstm", 10, 10)
    pad, src_size, tgt_size, batches = _batches(1, 4)
    model = _tiny(src_size, tgt_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(
        ValueError,
        match="needs a plain \\(not DDP\\) model and a process group",
    ):
        data_parallel.train_step(
            model, batches, optimizer, pad, all_reduce_by_hand=True
        )
    with pytest.raises(ValueError, match="at least one batch"):
        data_parallel.train_step(model, [], optimizer, pad)
    with pytest.raises(RuntimeError, match="needs a process group"):
        data_parallel.all_reduce_gradients(model)
