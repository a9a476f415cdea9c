"""The claims of the chapter "Pretraining an encoder: BERT", measured for one seed.

The chapter runs ``compare_pretraining(seed=0)``: pretrained (MLM, MLM + pair task) against from
scratch, accuracy on the test split for two tasks, the tense and the frame of a sentence. Training results differ across CPUs (SIMD paths change
float sums), so a claim the notebook asserts must hold over seeds and paths. :func:`measure` gives
every accuracy of both tasks, the gains over scratch, the pair task's accuracy and the linear
probes of exercise 4 for one seed;
``bench/claims.py --chapters bert`` runs it for seeds 0, 1, 2, each in a fresh process on each CPU
path, and prints the minimum and maximum of each.

Usage:
    python bench/claims.py --chapters bert --paths portable mkl-compatible native
"""

from __future__ import annotations

import torch

from course_pkg.bert_data import TASKS
from course_pkg.bert_experiment import (
    compare_pretraining,
    linear_probe,
    new_bert,
    pair_task_accuracy,
)
from course_pkg.pretrain import SETTINGS


def measure(seed: int) -> dict[str, float]:
    """For each task (tense, frame): the accuracies of scratch, MLM and
    MLM + pair and their differences; and the pair task's accuracy, for one
    seed (one thread, as the notebook)."""
    torch.set_num_threads(1)
    result = compare_pretraining(seed)
    values = {}
    for task, accuracy in result["accuracy"].items():
        values.update(
            {f"{task}: {name}": value for name, value in accuracy.items()}
        )
        values[f"{task}: MLM - scratch"] = (
            accuracy["MLM"] - accuracy["scratch"]
        )
        values[f"{task}: pair - scratch"] = (
            accuracy["MLM + pair"] - accuracy["scratch"]
        )
        values[f"{task}: pair - MLM"] = (
            accuracy["MLM + pair"] - accuracy["MLM"]
        )
    values["pair task"] = pair_task_accuracy(
        result["models"]["MLM + pair"], result["vocab"]
    )
    # Exercise 4: linear probes of the frozen MLM encoder and of the same
    # initial weights untrained.
    untrained = new_bert(len(result["vocab"]), SETTINGS, seed).encoder
    for task in TASKS:
        probes = {
            name: linear_probe(encoder, result["vocab"], task)
            for name, encoder in (
                ("untrained", untrained),
                ("MLM", result["models"]["MLM"].encoder),
            )
        }
        values.update(
            {f"probe {task}: {name}": value for name, value in probes.items()}
        )
        values[f"probe {task}: MLM - untrained"] = (
            probes["MLM"] - probes["untrained"]
        )
    return values
