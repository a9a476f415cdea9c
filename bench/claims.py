"""Measure the chapters' asserted training claims over seeds and CPU paths.

The one driver for every chapter that asserts training results: the chapters
in ``CLAIMS`` run as notebooks (below); ``bert`` and ``gpt`` run the
``measure(seed)`` of ``bench/claims_bert.py`` and ``bench/claims_gpt.py``,
which train exactly what those chapters train, with the same functions.

A chapter that trains a model prints numbers that differ from machine to
machine (CPUs take different SIMD paths, so training diverges in the last
digits and then more). Its cells therefore assert claims with floors, and the
floors must come from measurements, not guesses. This script runs each
training chapter exactly as the book does (the notebook itself, executed with
nbclient) for several seeds and CPU paths, and prints every claim's value in a
table with its minimum and maximum.

How a run differs from the book's: one cell after the first sets the seed
(``SETTINGS.seed`` where the chapter has it, and ``seed_everything``; a
chapter whose training seeds itself or draws nothing random varies with the
CPU path only), the kernel runs with
``PYTHONOPTIMIZE=1`` so that a claim below its floor is measured instead of
stopping the notebook, and a last cell prints the claims as JSON.

CPU paths: ``native`` (whatever PyTorch picks here), ``default``
(``ATEN_CPU_CAPABILITY=default``: no vector instructions beyond the baseline),
``avx2`` and ``avx512`` (PyTorch falls back to the best path the CPU has when
asked for more), ``mkl-compatible`` (native ATen kernels, MKL on its
slowest, most portable path, ``MKL_CBWR=COMPATIBLE``) and ``portable`` (both
of the last, as ``make notebooks-portable`` runs the notebooks).

Usage::

    python bench/claims.py                      # every chapter x seeds 0-2 x 2 paths
    python bench/claims.py --chapters bahdanau --seeds 0 --paths default
    python bench/claims.py --chapters bert gpt --jobs 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import claims_bert
import claims_gpt

ROOT = pathlib.Path(__file__).resolve().parent.parent

# For each training chapter: claim name -> expression evaluated in the kernel
# after the notebook has run. The names say what the chapter asserts.
CLAIMS: dict[str, dict[str, str]] = {
    "attention_pooling": {
        "LOO loss last/first": "losses[-1] / losses[0]",
        "|learned - best width|": "abs(learned_width - best_width)",
        "width K=25 - K=400": "learned_widths[0] - learned_widths[-1]",
        "validation MSE learned / initial": "mse(y_learned) / mse(y_initial)",
        "validation MSE learned / sweep's best": "mse(y_learned) / min(val_mse)",
        "learned / best validation width": "learned_width / best_val_width",
    },
    "multihead_attention": {
        "H=1: worse side": "min(accuracies[1])",
        "H=1: better side": "max(accuracies[1])",
        "H=2,4: worst side": "min(min(accuracies[h]) for h in (2, 4))",
        "H=1: |left - right| weight": "abs(on_left - on_right)",
        "H=1: left + right weight": "on_left + on_right",
        "H=1: larger share = better side": "(on_left > on_right)"
        " == (accuracies[1][0] > accuracies[1][1])",
        "H=2 one head off: lost side, highest": "max(min(a) for a in ablated.values())",
        "H=2 one head off: kept side, lowest": "min(max(a) for a in ablated.values())",
        "H=2 one head off: the heads lose different sides": "len({min((0, 1), key=a.__getitem__)"
        " for a in ablated.values()}) == 2",
    },
    "self_attention": {
        "both: length 16 (worst)": "min(seen_short.values())",
        "learned: positions 16-31": 'unseen_long["learned"]',
        "sinusoidal: positions 16-31": 'unseen_long["sinusoidal"]',
        "sinusoidal: positions 2-15 at length 32": 'seen_long["sinusoidal"]',
        "sinusoidal: length 16 - length 32, positions 2-15": 'seen_short["sinusoidal"]'
        ' - seen_long["sinusoidal"]',
    },
    "encoder_decoder": {
        "loss last/first epoch": 'history["epoch_loss"][-1] / history["epoch_loss"][0]',
        "test BLEU": "test_bleu",
        "beam: more probable": "more",
        "beam: less probable": "less",
        "beam BLEU - greedy BLEU": 'beam_scores["beam 4"] - beam_scores["greedy"]',
        "beam changes (of 100)": "len(differ)",
    },
    "bahdanau": {
        "loss Bahdanau/GRU": 'histories["Bahdanau attention"]["epoch_loss"][-1]'
        ' / histories["GRU seq2seq"]["epoch_loss"][-1]',
        "argmax on adjective": "reading.on_adjective",
        "argmax on adjective / chance": "reading.on_adjective / reading.chance",
        "reorder followed": "reading.reorder_followed",
        "GRU BLEU shortest - longest": "plain[0] - plain[-1]",
        "attention BLEU, worst bucket": "min(attention)",
        "attention - GRU, longest": "attention[-1] - plain[-1]",
        "entropy / uniform": "float(entropy.mean() / uniform.mean())",
        "argmax on adjective or next": "(offsets[0] + offsets[1]) / total",
        "BLEU masked - unmasked": "masked_bleu - unmasked_bleu",
        "Bahdanau test BLEU": 'test_bleu["Bahdanau attention"]',
        "Luong test BLEU": "luong_bleu",
        "BLEU Bahdanau - Luong": 'test_bleu["Bahdanau attention"] - luong_bleu',
        "loss Luong": 'final_loss["Luong (general)"]',
        "loss Bahdanau": 'final_loss["Bahdanau attention"]',
        "loss Luong / Bahdanau": 'final_loss["Luong (general)"]'
        ' / final_loss["Bahdanau attention"]',
        "attention = attribution argmax": "agreement.argmax_agree",
        "attribution argmax, chance": "agreement.chance",
        "attention = attribution / chance": "agreement.argmax_agree / agreement.chance",
        "attention-attribution Spearman": "agreement.spearman",
    },
    "transformer_training": {
        "validation BLEU, last epoch": "val_bleu[-1]",
        "loss, last epoch": "loss",
        "greedy test BLEU": "greedy_bleu",
        "beam changes (of 100)": "changed",
        "|beam - greedy| BLEU": "abs(beam_bleu - greedy_subset_bleu)",
        "argmax on adjective": "reading.on_adjective",
        "argmax on adjective / chance": "reading.on_adjective / reading.chance",
        "Transformer - Bahdanau": 'bleus["Transformer"] - bleus["Bahdanau attention"]',
        "Bahdanau - Transformer (2 ep.)": 'bleus["Bahdanau attention"] - bleus[early_name]',
        "Transformer (2 ep.) - GRU": 'bleus[early_name] - bleus["GRU seq2seq"]',
        "GRU rel. loss / attention rel. loss": 'relative_loss["GRU seq2seq"]'
        " / largest_attention_loss",
        "contextual cosine, one pair": "contextual_cosine",
        "max output cosine": "max(cosine_out.values())",
        "min input - output cosine": "min(cosine_in[w] - cosine_out[w]"
        " for w in cosine_in)",
        "min output - other word": "min(cosine_out.values()) - other_word",
    },
    # Trains with its own seeds (0; floors from seeds 0-2 via train_encoding).
    "attention_at_scale": {
        "all: length 16 (worst)": "min(short.values())",
        "rotary: positions 16-31": 'unseen["rotary"]',
        "sinusoidal: positions 16-31": 'unseen["sinusoidal"]',
        "learned: positions 16-31": 'unseen["learned"]',
        "rotary - sinusoidal, 16-31": 'unseen["rotary"] - unseen["sinusoidal"]',
        "rotary: positions 2-15, length 32": 'long["rotary"][: TRAIN_LEN - SHIFT].mean()',
    },
    "modern_training": {
        "BLEU MHA": 'bleu_by_heads["MHA (G = 4)"]',
        "BLEU GQA": 'bleu_by_heads["GQA (G = 2)"]',
        "BLEU MQA": 'bleu_by_heads["MQA (G = 1)"]',
        "BLEU MHA - GQA": 'bleu_by_heads["MHA (G = 4)"] - bleu_by_heads["GQA (G = 2)"]',
        "BLEU MHA - MQA": 'bleu_by_heads["MHA (G = 4)"] - bleu_by_heads["MQA (G = 1)"]',
        "loss post, no warm-up": 'warmup_runs["post-norm, no warm-up"]["epoch_loss"][-1]',
        "loss post, warm-up": 'warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]',
        "loss pre, no warm-up": 'warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]',
        "loss pre, warm-up": 'warmup_runs["pre-norm, warm-up"]["epoch_loss"][-1]',
        "post: no warm-up - warm-up": 'warmup_runs["post-norm, no warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]',
        "post warm-up - pre no warm-up": 'warmup_runs["post-norm, warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]',
        "|pre: no warm-up - warm-up|": 'abs(warmup_runs["pre-norm, no warm-up"]["epoch_loss"][-1]'
        ' - warmup_runs["pre-norm, warm-up"]["epoch_loss"][-1])',
        "ablation BLEU, lowest row": "min(ablation_bleu.values())",
        "ablation BLEU, highest row": "max(ablation_bleu.values())",
        "BLEU pre - post": 'ablation_bleu["+ pre-norm"] - ablation_bleu["GPT block (post, layer, ReLU)"]',
        "BLEU RMSNorm - layer norm": 'ablation_bleu["+ RMSNorm"] - ablation_bleu["+ pre-norm"]',
        "BLEU SwiGLU - ReLU": 'ablation_bleu["+ SwiGLU (F\' = 43)"] - ablation_bleu["+ RMSNorm"]',
        "ablation loss, highest - lowest": "max(ablation_loss.values()) - min(ablation_loss.values())",
        "grad norm post / pre, smallest": "min(a / b for a, b in"
        ' zip(grad_norms["post"], grad_norms["pre"]))',
    },
    # Exercise 1 seeds itself (trained_state); varies with the CPU path.
    "distributed": {
        # scaled so that the table's three decimals show them
        "float64 drift, largest (x 1e14)": "1e14 * max(drift[n, 'float64']"
        " for n in ('SGD', 'Adam'))",
        "Adam float32 drift (x 1e6)": "1e6 * drift['Adam', 'float32']",
        "Adam / SGD float32 drift": "drift['Adam', 'float32'] / drift['SGD', 'float32']",
    },
}

# Chapters measured by a function of one seed instead of their notebook.
MEASURES: dict[str, Callable[[int], dict[str, float]]] = {
    "bert": claims_bert.measure,
    "gpt": claims_gpt.measure,
}
CHAPTERS = [*CLAIMS, *MEASURES]

PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    # both at once, as `make notebooks-portable` runs the notebooks
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}

SEED_CELL = """import dataclasses as _dataclasses
if "SETTINGS" in globals():
    SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})
seed_everything({seed})"""
SETTINGS_CELL = """import dataclasses as _dataclasses
SETTINGS = _dataclasses.replace(SETTINGS, seed={seed})"""
# "SETTINGS = ...", "from x import SETTINGS" or a line "    SETTINGS," of an
# import in parentheses.
REBINDS_SETTINGS = re.compile(
    r"^\s*SETTINGS\s*=[^=]|^from \S+ import .*\bSETTINGS\b|^\s+SETTINGS,?$",
    re.MULTILINE,
)


def run_one(notebook: str, seed: int) -> dict[str, float]:
    """Measure one chapter with one seed in this process's environment."""
    if notebook in MEASURES:
        return MEASURES[notebook](seed)
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "book" / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    first_code = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code"
    )
    # A cell that imports or assigns SETTINGS after the first one would undo
    # the seed: the seed goes into SETTINGS again after each such cell.
    for i in reversed(range(first_code + 1, len(nb.cells))):
        cell = nb.cells[i]
        if cell.cell_type == "code" and REBINDS_SETTINGS.search(cell.source):
            nb.cells.insert(
                i + 1,
                nbformat.v4.new_code_cell(SETTINGS_CELL.format(seed=seed)),
            )
    nb.cells.insert(
        first_code + 1, nbformat.v4.new_code_cell(SEED_CELL.format(seed=seed))
    )
    report = (
        "import json as _json\nprint('CLAIMS', _json.dumps({%s}))"
        % ", ".join(
            f"{name!r}: float({expr})"
            for name, expr in CLAIMS[notebook].items()
        )
    )
    nb.cells.append(nbformat.v4.new_code_cell(report))
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for output in nb.cells[-1].outputs:
        text = output.get("text", "")
        if text.startswith("CLAIMS "):
            return json.loads(text[len("CLAIMS ") :])
    raise RuntimeError(f"{notebook} seed {seed}: no claims printed")


def run_in_subprocess(notebook: str, seed: int, path: str) -> dict[str, float]:
    """Run one (chapter, seed) under one CPU path, in a fresh process."""
    chosen = {"ATEN_CPU_CAPABILITY", "MKL_CBWR"}  # set by the path alone
    env = {
        **{k: v for k, v in os.environ.items() if k not in chosen},
        **PATHS[path],
        "PYTHONOPTIMIZE": "1",
        "PYTHONHASHSEED": "0",
    }
    result = subprocess.run(
        [sys.executable, __file__, "--worker", notebook, str(seed)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--chapters", nargs="+", default=CHAPTERS, choices=CHAPTERS
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--paths",
        nargs="+",
        default=["native", "portable"],
        choices=list(PATHS),
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--cache",
        help="a JSON-lines file: finished runs are appended to it and not run again",
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("CHAPTER", "SEED"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_one(args.worker[0], int(args.worker[1]))))
        return

    import torch

    print(
        f"torch {torch.__version__}, native CPU path here: {torch.backends.cpu.get_cpu_capability()}"
    )
    runs = [
        (nb, seed, path)
        for nb in args.chapters
        for seed in args.seeds
        for path in args.paths
    ]
    values: dict[tuple[str, int, str], dict[str, float]] = {}
    cache = pathlib.Path(args.cache) if args.cache else None
    if cache and cache.exists():
        for line in cache.read_text().splitlines():
            record = json.loads(line)
            values[tuple(record["run"])] = record["claims"]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        todo = [run for run in runs if run not in values]
        futures = {pool.submit(run_in_subprocess, *run): run for run in todo}
        for future in concurrent.futures.as_completed(futures):
            run = futures[future]
            values[run] = future.result()
            print(
                f"done: {run[0]} seed {run[1]} {run[2]}",
                file=sys.stderr,
                flush=True,
            )
            if cache:
                with cache.open("a") as f:
                    f.write(
                        json.dumps({"run": list(run), "claims": values[run]})
                        + "\n"
                    )
    columns = [(seed, path) for seed in args.seeds for path in args.paths]
    for notebook in args.chapters:
        print(f"\n## {notebook} (columns: seed/path)\n")
        header = (
            "| claim | "
            + " | ".join(f"{s}/{p}" for s, p in columns)
            + " | min | max |"
        )
        print(header)
        print("|" + "---|" * (len(columns) + 3))
        for claim in values[(notebook, *columns[0])]:
            row = [values[(notebook, s, p)][claim] for s, p in columns]
            cells = " | ".join(f"{v:.3f}" for v in row)
            print(f"| {claim} | {cells} | {min(row):.3f} | {max(row):.3f} |")


if __name__ == "__main__":
    main()
