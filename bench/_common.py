"""What the benchmark scripts share: their common options (--record among
them), the device they run on and the start of a run, timing several paths
in turns, a table of ratios to a peer, the verdict line of a target, the
Transformer chapters' training loop (one rate per epoch) and the inference
chapter's target and draft GPTs.

The timing itself is :mod:`course_pkg.evaluation.cost`'s; a script imports this module
as ``_common`` (its own folder is on ``sys.path`` when it runs).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch

from course_pkg.device import describe_device, get_device
from course_pkg.evaluation.cost import call_seconds


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


def attention_parser(
    doc: str, sizes: dict[str, int], lengths: list[int]
) -> argparse.ArgumentParser:
    """:func:`parser` for the attention benchmarks (attention_memory, flash,
    subquadratic): one thread, one warm-up and the median of three, and
    B = 1, H = 4, d = 64 before the script's own ``sizes``."""
    return parser(
        doc,
        warmup=1,
        repeats=3,
        threads=1,
        sizes={"batch": 1, "heads": 4, "width": 64, **sizes},
        lengths=lengths,
    )


def record_option(
    options: argparse.ArgumentParser, name: str, what: str = "rows"
) -> None:
    """--record: the script writes its ``what`` to the chapter's bench
    record ``name`` (:func:`course_pkg.experiments.bench_records.write`)."""
    options.add_argument(
        "--record",
        action="store_true",
        help=f"write the {what} to the chapter's record (bench_records "
        f"'{name}')",
    )


def device_of(args: argparse.Namespace) -> torch.device:
    """Set the CPU threads asked for and return the device to run on."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return torch.device(args.device) if args.device else get_device()


def clock_and_device(args: argparse.Namespace) -> tuple[float, torch.device]:
    """Start a run: its wall clock (``time.perf_counter()``) and its device
    (:func:`device_of`), described on the first line of the output."""
    began = time.perf_counter()
    device = device_of(args)
    print(describe_device(device))
    return began, device


def begin(
    options: argparse.ArgumentParser,
) -> tuple[argparse.Namespace, float, torch.device]:
    """The arguments of the command line, then :func:`clock_and_device`."""
    args = options.parse_args()
    return (args, *clock_and_device(args))


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


def print_ratio_table(
    results: dict[int, dict[str, dict[str, float]]],
    measure: str,
    peer: str,
    cell: Callable[[float, float], str],
    extra: tuple[str, Callable[[int], str]] | None = None,
) -> None:
    """Print one measure of results (T -> path -> measure -> value): a row a
    length T, a column a path, each cell ``cell(value, peer's value)``.

    Args:
        extra: (heading, T -> text), a column of its own after T's (both
            with their padding and the two spaces that follow them).
    """
    names = list(next(iter(results.values())))
    heading, text = extra or ("", lambda steps: "")
    print(f"{'T':>6}  {heading}" + "  ".join(f"{name:>20}" for name in names))
    for steps, row in results.items():
        cells = [cell(row[n][measure], row[peer][measure]) for n in names]
        print(
            f"{steps:>6}  {text(steps)}"
            + "  ".join(f"{one:>20}" for one in cells)
        )


def verdict(ratios: dict[int, float], target: float) -> str:
    """ "meets the target at every T" when every ratio is <= target, else
    the lengths T that miss it."""
    missed = [steps for steps, ratio in ratios.items() if ratio > target]
    if not missed:
        return "meets the target at every T"
    return f"MISSES the target at T={missed}"


def target_and_draft(
    pairs, vocab, epochs: int | None = None
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The inference chapter's target and draft GPTs (GPT_SETTINGS and
    DRAFT_SETTINGS of course_pkg.experiments.lm_translation), each trained on
    the translation pairs as the chapter trains it (seed 0; the first
    ``epochs`` epochs of its rates, None: every one); in eval mode,
    need_weights off.

    Args:
        pairs: the training pairs. vocab: their language-model vocabulary
            (``translation_lm_vocab(pairs)``).
    """
    # Imported here: a bench record's fingerprint counts every course_pkg
    # module its run imported, and only the scripts that train these GPTs
    # (inference, speculative) use these.
    from course_pkg.experiments.lm_translation import (
        DRAFT_SETTINGS,
        GPT_SETTINGS,
        train_translation_gpt,
    )

    return tuple(
        train_translation_gpt(pairs, vocab, settings, num_epochs=epochs)[0]
        for settings in (GPT_SETTINGS, DRAFT_SETTINGS)
    )
