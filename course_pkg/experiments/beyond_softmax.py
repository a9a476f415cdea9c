"""The chapter "Beyond softmax attention": its four tasks, the budget of
each, and what it claims from training.

Every task trains one :class:`course_pkg.models.kernel_lm.KernelLM` per
attention (softmax, linear, performer, decayed) with the same sizes, data
and budget, so the attention is the only difference:

- **copy**: ``x_1 .. x_n <sep> x_1 .. x_n``; the model must write the n
  tokens again after the separator (scored there only);
- **associative recall**: n key-value pairs ``k_1 v_1 .. k_n v_n``, then
  q queries ``k v`` of keys drawn from the pairs; the model must write each
  query's value (scored there only), the multi-query recall of Arora et al.
  (2023), where a fixed-size state must hold every pair at once;
- **translation**: the course's English-French corpus as language
  modelling (``english <sep> french <eos>``, the GPT chapter's arrays and
  loop), scored by BLEU on the test split with greedy decoding;
- **Shakespeare**: characters, the pretraining chapter's loop, bits per
  byte on the held-out plays.

The copy and recall batches are drawn from a generator seeded by the
run's seed: the training batches differ from seed to seed, the test
batches too (drawn after them), so each seed is a new sample of the data as
well as of the weights.

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``V`` vocabulary size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn

from course_pkg.checks import check_int, check_positive_int, check_sentences
from course_pkg.data.translation import Vocab
from course_pkg.experiments.claims import Claim
from course_pkg.experiments.lm_translation import _prompts_by_length
from course_pkg.training.lm_pretraining import BRIEF_SETTINGS

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class TaskSettings:
    """Sizes and budget of the copy or the recall task.

    Attributes:
        num_hiddens, num_heads, num_blks: the model (D = 32, 2 heads of
            width 16, 2 blocks).
        batch_size: B. num_updates: training batches (one pass, Adam).
        lr: Adam's rate (after a warm-up of ``warmup_steps`` updates).
        num_test_batches, test_batch_size: the test set, drawn after the
            training batches from the same generator.
    """

    num_hiddens: int = 32
    num_heads: int = 2
    num_blks: int = 2
    batch_size: int = 32
    num_updates: int = 600
    lr: float = 3e-3
    warmup_steps: int = 20
    num_test_batches: int = 10
    test_batch_size: int = 100


COPY_SETTINGS = TaskSettings(num_updates=250)
RECALL_SETTINGS = TaskSettings()
COPY = {"length": 16, "vocab": 16}
"""The copy task: 16 tokens of 16 kinds, then the separator, then the copy."""
RECALL = {"num_pairs": 6, "num_queries": 4, "num_keys": 12, "num_values": 12}
"""The recall task: 6 pairs (keys drawn without repeats from 12), 4 queries."""
TRANSLATION_EPOCHS = (0.01, 0.01, 0.005)
"""Adam's rate in each epoch of the translation task (3 epochs)."""
SHAKESPEARE_SETTINGS = dataclasses.replace(
    BRIEF_SETTINGS, batch_size=16, num_updates=200, warmup_steps=20,
    eval_every=200,
)  # fmt: skip
"""The pretraining chapter's brief recipe at an eighth of its tokens: a
quarter of the updates, half the batch."""
SHAKESPEARE_MODEL = {"num_hiddens": 64, "num_heads": 4, "num_blks": 2}


def copy_batches(
    num_batches: int,
    batch_size: int,
    length: int,
    vocab: int,
    generator: torch.Generator,
) -> tuple[list[Batch], int]:
    """Batches of the copy task: ``x <sep> x`` with x of length n drawn
    uniformly from ``vocab`` tokens; the labels are the copy, ``pad``
    elsewhere.

    Token ids: the x's in [0, vocab), ``<sep>`` = vocab, ``pad`` = vocab + 1
    (only in labels): V = vocab + 2.

    Args:
        num_batches, batch_size (B), length (n), vocab: ints >= 1.
        generator: a CPU generator, the source of every token.
    Returns:
        ([(X (B, 2n), Y (B, 2n))] * num_batches, pad); Y[:, n:] = x.
    Raises:
        TypeError/ValueError: a size not an int >= 1, or generator not a
            torch.Generator.
    """
    _check_task(generator, num_batches=num_batches, batch_size=batch_size,
                length=length, vocab=vocab)  # fmt: skip
    separator, pad = vocab, vocab + 1
    batches = []
    for _ in range(num_batches):
        x = torch.randint(vocab, (batch_size, length), generator=generator)
        sep = torch.full((batch_size, 1), separator)
        sequence = torch.cat([x, sep, x], dim=1)  # (B, 2n + 1)
        labels = torch.full((batch_size, 2 * length), pad)
        labels[:, length:] = x  # predicted from <sep> on
        batches.append((sequence[:, :-1], labels))
    return batches, pad


def recall_batches(
    num_batches: int,
    batch_size: int,
    num_pairs: int,
    num_queries: int,
    num_keys: int,
    num_values: int,
    generator: torch.Generator,
) -> tuple[list[Batch], int]:
    """Batches of multi-query associative recall: ``k_1 v_1 .. k_n v_n``
    (n distinct keys, values drawn with repeats), then ``q_1 a_1 .. q_r
    a_r``: r distinct keys of the pairs and their values. The label at q_i
    is a_i, ``pad`` elsewhere.

    Token ids: keys [0, num_keys), values [num_keys, num_keys +
    num_values), ``pad`` = num_keys + num_values (only in labels).

    Args:
        num_batches, batch_size (B): ints >= 1. num_pairs: n <= num_keys.
        num_queries: r <= n. num_keys, num_values: ints >= 1.
        generator: a CPU generator, the source of every draw.
    Returns:
        ([(X (B, 2n + 2r - 1), Y (B, 2n + 2r - 1))] * num_batches, pad).
    Raises:
        TypeError/ValueError: a size not an int >= 1, n > num_keys,
            r > n, or generator not a torch.Generator.
    """
    _check_recall_batches(num_batches, batch_size, num_pairs, num_queries,
                          num_keys, num_values, generator)  # fmt: skip
    pad, B = num_keys + num_values, batch_size
    batches = []
    for _ in range(num_batches):
        order = torch.rand(B, num_keys, generator=generator).argsort(1)
        keys = order[:, :num_pairs]  # (B, n), distinct in each row
        values = torch.randint(
            num_keys, pad, (B, num_pairs), generator=generator
        )
        pick = torch.rand(B, num_pairs, generator=generator).argsort(1)
        asked = pick[:, :num_queries]  # (B, r): which pairs are queried
        queries, answers = keys.gather(1, asked), values.gather(1, asked)
        pairs = torch.stack([keys, values], dim=2).reshape(B, -1)
        questions = torch.stack([queries, answers], dim=2).reshape(B, -1)
        sequence = torch.cat([pairs, questions], dim=1)  # (B, 2n + 2r)
        labels = torch.full((B, sequence.shape[1] - 1), pad)
        labels[:, 2 * num_pairs :: 2] = answers  # at each query
        batches.append((sequence[:, :-1], labels))
    return batches, pad


def token_accuracy(
    model: nn.Module, batches: Sequence[Batch], pad: int
) -> float:
    """The share of labelled positions (label != pad) whose most likely
    next token is the label.

    Args:
        model: (B, T) ids -> (B, T, V) scores. batches: [(X, Y)] of (B, T)
            ids on the CPU. pad: the label of unscored positions.
    Returns:
        A share in [0, 1]; the model is left in eval mode.
    Raises:
        TypeError/ValueError: model not an nn.Module with parameters,
            batches not a list/tuple of (X, Y) integer tensors of one
            (B, T) shape, pad not an int.
    """
    _check_token_accuracy(model, batches, pad)
    device = next(model.parameters()).device
    model.eval()
    right = total = 0
    with torch.no_grad():
        for X, Y in batches:
            guess = model(X.to(device)).argmax(-1).cpu()
            scored = Y != pad
            right += int(((guess == Y) & scored).sum())
            total += int(scored.sum())
    return right / max(total, 1)


def greedy_translate(
    model: nn.Module,
    sentences: Sequence[str],
    vocab: Vocab,
    max_new_tokens: int,
) -> list[list[str]]:
    """Continue ``english <sep>`` with the most likely token until
    ``<eos>``, reading the whole sequence again at each step (a model
    without a cache); prompts of one length are continued together.

    Args:
        model: (B, T) ids -> (B, T, V) scores, trained on
            :func:`course_pkg.experiments.lm_translation.translation_lm_arrays`.
        sentences: English sentences in normal form. vocab: the model's.
        max_new_tokens: the most French tokens (``<eos>`` included), >= 1.
    Returns:
        One list of French tokens per sentence, without ``<eos>``.
    Raises:
        TypeError/ValueError: model not an nn.Module with parameters,
            sentences not a list/tuple of str, vocab not a Vocab,
            max_new_tokens not an int >= 1.
    """
    _check_greedy_translate(model, sentences, vocab, max_new_tokens)
    device = next(model.parameters()).device
    prompts, groups = _prompts_by_length(sentences, vocab)
    translations: list[list[str]] = [[] for _ in sentences]
    model.eval()
    with torch.no_grad():
        for length, members in groups.items():
            tokens = torch.tensor([prompts[i] for i in members], device=device)
            done = torch.zeros(len(members), dtype=torch.bool, device=device)
            for _ in range(max_new_tokens):
                next_token = model(tokens)[:, -1].argmax(-1)  # (B,)
                next_token = next_token.masked_fill(done, vocab.eos)
                done = done | (next_token == vocab.eos)
                tokens = torch.cat([tokens, next_token[:, None]], dim=1)
                if bool(done.all()):
                    break
            for row, i in enumerate(members):
                ids = tokens[row, length:].tolist()
                if vocab.eos in ids:
                    ids = ids[: ids.index(vocab.eos)]
                translations[i] = vocab.to_tokens(ids) if ids else []
    return translations


def _check_model(model: object) -> None:
    """An nn.Module with at least one parameter (its device is read)."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be an nn.Module, got {type(model).__name__}"
        )
    if next(model.parameters(), None) is None:
        raise ValueError("model must have parameters (their device is used)")


def _check_batches(batches: object) -> None:
    """A list or tuple of (X, Y) pairs of (B, T) long tensors."""
    if not isinstance(batches, (list, tuple)):
        raise TypeError(
            "batches must be a list of (X, Y) pairs, "
            f"got {type(batches).__name__}"
        )
    for batch in batches:
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise TypeError("batches must hold (X, Y) pairs")
        X, Y = batch
        for ids in (X, Y):
            if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long:
                raise TypeError("batches must hold (B, T) long tensors")
        if X.dim() != 2 or X.shape != Y.shape:
            raise ValueError(
                "batches must hold X and Y of one (B, T) shape, got "
                f"{tuple(X.shape)} and {tuple(Y.shape)}"
            )


def _check_task(generator: object, **sizes: object) -> None:
    """A torch.Generator and sizes that are ints >= 1."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, got {type(generator).__name__}"
        )
    for name, size in sizes.items():
        check_positive_int(name, size)


def _check_recall_batches(
    num_batches: object,
    batch_size: object,
    num_pairs: object,
    num_queries: object,
    num_keys: object,
    num_values: object,
    generator: object,
) -> None:
    """generator a torch.Generator; the sizes ints >= 1 with num_queries <=
    num_pairs <= num_keys."""
    _check_task(generator, num_batches=num_batches, batch_size=batch_size,
                num_pairs=num_pairs, num_queries=num_queries,
                num_keys=num_keys, num_values=num_values)  # fmt: skip
    if num_pairs > num_keys or num_queries > num_pairs:
        raise ValueError(
            "need num_queries <= num_pairs <= num_keys, got "
            f"{num_queries}, {num_pairs}, {num_keys}"
        )


def _check_token_accuracy(model: object, batches: object, pad: object) -> None:
    """model an nn.Module with parameters; batches a list/tuple of (X, Y)
    pairs of (B, T) long tensors; pad an int."""
    _check_model(model)
    _check_batches(batches)
    check_int("pad", pad)


def _check_greedy_translate(
    model: object, sentences: object, vocab: object, max_new_tokens: object
) -> None:
    """model an nn.Module with parameters; sentences a list/tuple of str;
    vocab a Vocab; max_new_tokens an int >= 1."""
    _check_model(model)
    check_sentences("sentences", sentences)
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a Vocab, got {type(vocab).__name__}")
    check_positive_int("max_new_tokens", max_new_tokens)


KINDS = ("softmax", "linear", "performer", "decayed")
RECALL_CHANCE = 1 / RECALL["num_values"]
CLAIMS = {
    # test accuracy (chance: 1 / vocab); every seed copies (nearly) all, so
    # a floor would be the minimum itself: stated, not asserted
    **{f"copy {kind}": Claim("range", chance=1 / COPY["vocab"]) for kind in KINDS},
    # every attention recalls above chance, with margin
    **{f"recall {kind}": Claim(">", chance=RECALL_CHANCE) for kind in KINDS},
    **{f"BLEU {kind}": Claim("range") for kind in KINDS},
    **{f"bits/byte {kind}": Claim("range") for kind in KINDS},
    # exact attention against the best of the three kernel forms: on recall
    # by a margin; on BLEU ahead in every seed but without margin
    "recall softmax - best kernel": Claim(">", null=0.0),
    "BLEU softmax - best kernel": Claim("range", null=0.0),
    # what the decay buys on recall; how far apart the four are on text
    "recall decayed - linear": Claim("range"),
    "bits/byte spread": Claim("range"),
}  # fmt: skip
