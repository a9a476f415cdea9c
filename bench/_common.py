"""What the benchmark scripts share: their common options, the device they
run on, timing several paths in turns, the verdict line of a target, and
the Transformer chapters' training loop (one rate per epoch).

The timing itself is :mod:`course_pkg.evaluation.cost`'s; a script imports this module
as ``_common`` (its own folder is on ``sys.path`` when it runs).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable

import torch

from course_pkg.device import get_device
from course_pkg.evaluation.cost import call_seconds
from course_pkg.training.loop import train_seq2seq


def parser(
    doc: str,
    *,
    warmup: int | None = None,
    repeats: int | None = None,
    threads: int | None = None,
    sizes: dict[str, int] | None = None,
    lengths: list[int] | None = None,
) -> argparse.ArgumentParser:
    """A parser with the options the benchmarks share.

    Always --device and --threads (default ``threads``; None: torch's
    choice); --warmup and --repeats when given a default; one integer option
    per entry of ``sizes`` (``{"batch": 8}`` gives ``--batch 8``); and
    ``--lengths`` (several sequence lengths T) when given a default.

    Args:
        doc: the script's docstring; its first line describes the script.
    """
    options = argparse.ArgumentParser(description=doc.splitlines()[0])
    options.add_argument(
        "--device",
        help="cpu, cuda, ... (default: course_pkg.device.get_device())",
    )
    options.add_argument(
        "--threads",
        type=at_least(1),
        default=threads,
        help="CPU threads (1 on a machine shared with other jobs)",
    )
    integers = dict(sizes or {})
    if warmup is not None:
        integers["warmup"] = warmup
    if repeats is not None:
        integers["repeats"] = repeats
    for name, default in integers.items():
        # sizes and counts are >= 1; a warm-up (iterations or updates) may be 0
        lowest = 0 if "warmup" in name else 1
        options.add_argument(
            f"--{name}", type=at_least(lowest), default=default
        )
    if lengths is not None:
        options.add_argument(
            "--lengths", type=at_least(1), nargs="+", default=lengths
        )
    return options


def _read(kind: type, what: str, text: str):
    """text as kind (int or float), or the usage error "must be <what>"."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be {what}, got {text!r}"
        ) from None


def at_least(lowest: int):
    """An argparse type: an int >= lowest, refused with the usage message
    (exit status 2) before any work starts."""

    def parse(text: str) -> int:
        value = _read(int, "an int", text)
        if value < lowest:
            raise argparse.ArgumentTypeError(
                f"must be >= {lowest}, got {value}"
            )
        return value

    parse.__name__ = f"int >= {lowest}"
    return parse


def number_in(
    lowest: float, highest: float = math.inf, *, above: bool = False
):
    """An argparse type: a finite float in [lowest, highest] (in
    (lowest, highest] when ``above``), refused with the usage message (exit
    status 2) before any work starts: NaN, inf and out-of-range values."""

    def parse(text: str) -> float:
        value = _read(float, "a number", text)
        low_ok = value > lowest if above else value >= lowest
        if not (math.isfinite(value) and low_ok and value <= highest):
            where = (
                f"{'>' if above else '>='} {lowest}"
                if highest == math.inf
                else f"in {'(' if above else '['}{lowest}, {highest}]"
            )
            raise argparse.ArgumentTypeError(
                f"must be a finite number {where}, got {text}"
            )
        return value

    parse.__name__ = "number"
    return parse


def device_of(args: argparse.Namespace) -> torch.device:
    """Set the CPU threads asked for and return the device to run on."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return torch.device(args.device) if args.device else get_device()


def interleaved_medians(
    paths: dict[str, Callable[[], object]],
    device: torch.device,
    warmup: int,
    repeats: int,
) -> dict[str, float]:
    """Median seconds of each path, after ``warmup`` untimed calls of each.

    The paths take turns (one call of each per round) so that a change in the
    load of a shared machine hits all of them alike instead of biasing
    whichever ran during it.
    """
    for _ in range(warmup):
        for fn in paths.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            times[name] += call_seconds(fn, 1, device, warmup=0)
    return {name: statistics.median(values) for name, values in times.items()}


def verdict(ratios: dict[int, float], target: float) -> str:
    """ "meets the target at every T" when every ratio is <= target, else
    the lengths T that miss it."""
    missed = [steps for steps, ratio in ratios.items() if ratio > target]
    if not missed:
        return "meets the target at every T"
    return f"MISSES the target at T={missed}"


def train_rate_per_epoch(
    model: torch.nn.Module, data, rates: list[float], **options
) -> None:
    """Train an encoder–decoder as the Transformer chapters do: one Adam for
    every epoch, one pass over ``data.train`` per rate, at that rate.

    Args:
        model: the encoder–decoder. data: its dataloaders (``train``,
            ``tgt_vocab``). rates: the learning rate of each epoch.
        options: passed on to :func:`course_pkg.training.loop.train_seq2seq`
            (``device``, ``grad_clip``, ``label_smoothing``).
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=rates[0])
    for lr in rates:
        for group in optimizer.param_groups:
            group["lr"] = lr
        train_seq2seq(
            model,
            data.train,
            lr,
            1,
            data.tgt_vocab,
            optimizer=optimizer,
            **options,
        )
