"""Turning an encoder–decoder into translations: greedy and beam search.

Chapters "The encoder–decoder architecture" (greedy decoding), "Bahdanau
attention" (attention weights collected while decoding) and "The Transformer".
Every function here works with any
:class:`course_pkg.models.encoder_decoder.EncoderDecoder` whose decoder follows the
contract stated in :mod:`course_pkg.models.encoder_decoder`:
``decoder(X (B, Q), state) -> (Y (B, Q, V), new_state)``.

Shape letters (see the package docstring): ``B`` batch, ``T`` source length,
``S`` generated tokens, ``V`` target vocabulary; the beam width is spelled
``beam_size``.

Conventions. Output token tensors do not include <bos>. A hypothesis ends with
its first <eos>, which is kept; when hypotheses of one batch end at different
steps, the positions after a hypothesis' <eos> are filled with <eos> (so no pad
id is needed, and cutting at the first <eos> recovers every hypothesis).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_pkg.checks import (
    check_device,
    check_ids,
    check_module_input,
    check_nonnegative_number,
    check_positive_int,
    check_same_device,
    check_sentences,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.data.translation import source_array


def cut_at_eos(tokens: list[int], eos: int) -> list[int]:
    """The ids before the first <eos> (all of them if there is none).

    Raises:
        TypeError: if eos is not an int. ValueError: if it is negative.
    """
    check_ids(eos=eos)
    return tokens[: tokens.index(eos)] if eos in tokens else list(tokens)


# ------------------------------------------------------------- greedy decoding


def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    bos: int,
    eos: int,
    num_steps: int,
    use_cache: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Decode by taking the most probable next token at every step.

    With ``use_cache=True`` the decoder reads one new token per step with the
    state its previous call returned; with False it re-reads the whole prefix
    from a fresh ``init_state`` (slower; the two must agree: the decoder
    contract).

    Args:
        model: an EncoderDecoder. src: (B, T_src) source ids. src_valid_len:
            (B,) source lengths. bos, eos: the target's <bos> and <eos> ids.
        num_steps: most tokens to generate.
    Returns:
        tokens (B, S) with S <= num_steps (stops when every row has produced
        <eos>; later positions hold <eos>), and the decoder's attention
        weights (B, S, T_src) when it keeps them as one tensor, else None.
    Raises:
        TypeError/ValueError: on src or src_valid_len of the wrong type or
            shape, num_steps < 1.
    """
    _check_greedy_decode(model, src, src_valid_len, bos, eos, num_steps)
    batch_size = src.shape[0]
    with _eval_mode(model):
        enc_all_outputs = model.encoder(src, src_valid_len)
        state = model.decoder.init_state(enc_all_outputs, src_valid_len)
        prefix = src.new_full((batch_size, 1), bos, dtype=torch.long)
        finished = torch.zeros(batch_size, dtype=torch.bool, device=src.device)
        step_weights: list[torch.Tensor] = []
        for _ in range(num_steps):
            if use_cache:
                Y, state = model.decoder(prefix[:, -1:], state)  # (B, 1, V)
                weights = _decoder_weights(model)
                if weights is not None:
                    step_weights.append(weights)
            else:
                Y, _ = model.decoder(
                    prefix,
                    model.decoder.init_state(enc_all_outputs, src_valid_len),
                )
            next_token = Y[:, -1].argmax(dim=-1)  # (B,)
            next_token = next_token.masked_fill(finished, eos)
            prefix = torch.cat((prefix, next_token.unsqueeze(1)), dim=1)
            finished |= next_token == eos
            if bool(finished.all()):
                break
        if use_cache:
            weights = torch.cat(step_weights, dim=1) if step_weights else None
        else:  # the last call read the whole prefix
            weights = _decoder_weights(model)
    return prefix[:, 1:], weights


def _check_greedy_decode(
    model: nn.Module,
    src: object,
    src_valid_len: object,
    bos: object,
    eos: object,
    num_steps: object,
) -> None:
    """src (B, T_src) ids and src_valid_len (B,) as :func:`_check_src`; bos,
    eos ids; num_steps an int >= 1."""
    _check_src(model, src, src_valid_len)
    check_ids(bos=bos, eos=eos)
    check_positive_int("num_steps", num_steps)


# ------------------------------------------------------ scoring a given output


def sequence_log_prob(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    tokens: torch.Tensor,
    bos: int,
    eos: int,
) -> torch.Tensor:
    """log p(tokens | src) under the model, teacher-forced.

    Each row counts up to and including its first <eos>.

    Args:
        model: an EncoderDecoder. src: (B, T_src). src_valid_len: (B,).
        tokens: (B, S) generated ids in [0, V) without <bos> (as returned by
            the decoders here).
        bos, eos: target <bos> and <eos> ids.
    Returns:
        (B,) float tensor of summed log-probabilities.
    Raises:
        TypeError/ValueError: on inputs of the wrong type or shape, float
            tokens, or (on the CPU) ids outside [0, V).
    """
    _check_sequence_log_prob(model, src, src_valid_len, tokens, bos, eos)
    tokens = tokens.long()
    dec_in = torch.cat(
        (torch.full_like(tokens[:, :1], bos), tokens[:, :-1]), dim=1
    )  # (B, S)
    with _eval_mode(model):
        scores = model(src, dec_in, src_valid_len)  # (B, S, V)
    log_probs = _log_softmax(scores)
    check_token_ids("tokens", tokens, scores.shape[-1])  # V known only now
    token_log_probs = log_probs.gather(-1, tokens.unsqueeze(-1))[..., 0]
    is_eos = (tokens == eos).long()
    # a position counts if no <eos> came strictly before it
    counts = (is_eos.cumsum(dim=1) - is_eos) == 0
    return torch.where(
        counts, token_log_probs, torch.zeros_like(token_log_probs)
    ).sum(dim=1)


def _check_sequence_log_prob(
    model: nn.Module,
    src: object,
    src_valid_len: object,
    tokens: object,
    bos: object,
    eos: object,
) -> None:
    """src, src_valid_len as :func:`_check_src`; tokens (B, S) integer ids
    (in [0, V) when the decoder's embedding gives V) on src's device; bos,
    eos ids."""
    _check_src(model, src, src_valid_len)
    embedding = getattr(model.decoder, "embedding", None)  # V, if known
    vocab_size = getattr(embedding, "num_embeddings", None)
    check_token_ids("tokens", tokens, vocab_size)
    check_same_device(src=src, tokens=tokens)
    check_ids(bos=bos, eos=eos)
    if tokens.shape[0] != src.shape[0]:
        raise ValueError(
            f"tokens must have shape (B, S) with B={src.shape[0]}, "
            f"got {tuple(tokens.shape)}"
        )


# ----------------------------------------------------------------- beam search


class _Beam(NamedTuple):
    """The settings of one search (see :func:`beam_search`)."""

    bos: int
    eos: int
    num_steps: int
    beam_size: int
    alpha: float


def _beam_search_one(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor | list[None],
    beam: _Beam,
) -> list[int]:
    """Beam search for one source (1, T): the best hypothesis' ids (ending
    with <eos> if it finished)."""
    bos, eos, num_steps, beam_size, alpha = beam
    device = src.device
    lens = src_valid_len  # (1,), or [None]: every position is valid
    has_lens = isinstance(lens, torch.Tensor)
    repeated_len = lens.expand(beam_size) if has_lens else None
    enc_all_outputs = model.encoder(src.expand(beam_size, -1), repeated_len)
    prefixes = torch.full((beam_size, 1), bos, device=device)  # (beam, 1+s)
    # Summed log-probabilities, in float64 (MPS has none) so long sums lose
    # nothing. Only row 0 is a real hypothesis at the start; -inf rows never
    # win a place.
    dtype = torch.float32 if device.type == "mps" else torch.float64
    scores = torch.full((beam_size,), -math.inf, dtype=dtype, device=device)
    scores[0] = 0.0
    finished: list[tuple[float, list[int]]] = []  # (normalised score, ids)
    for length in range(1, num_steps + 1):
        # Uncached on purpose: any decoder state layout works, at the cost of
        # re-reading the prefixes.
        state = model.decoder.init_state(enc_all_outputs, repeated_len)
        Y, _ = model.decoder(prefixes, state)
        log_probs = _log_softmax(Y[:, -1])  # (beam_size, V)
        vocab_size = log_probs.shape[-1]
        candidates = (scores[:, None] + log_probs).flatten()  # (beam * V,)
        top = candidates.topk(min(beam_size, candidates.numel()))
        alive = []  # (row, token, score) of the extensions that go on
        for score, flat_id in zip(top.values.tolist(), top.indices.tolist()):
            if score == -math.inf:
                break
            row, token = divmod(flat_id, vocab_size)
            ids = prefixes[row, 1:].tolist() + [token]
            if token == eos or length == num_steps:  # out of steps: compete
                finished.append((score / length**alpha, ids))
            else:
                alive.append((row, token, score))
        if not alive:
            break
        # Log-probabilities only decrease, so an alive hypothesis can at best
        # reach score / num_steps**alpha (its score stays <= 0 and its length
        # grows to at most num_steps): stop once none can win.
        best_alive = max(score for _, _, score in alive) / num_steps**alpha
        if finished and max(f[0] for f in finished) >= best_alive:
            break
        # Dead rows keep the beam's shape: copies of row 0 that score -inf.
        num_dead = beam_size - len(alive)
        alive += [(alive[0][0], alive[0][1], -math.inf)] * num_dead
        rows, tokens, new_scores = zip(*alive)
        new_tokens = torch.tensor(tokens, device=device)[:, None]
        prefixes = torch.cat((prefixes[list(rows)], new_tokens), dim=1)
        scores = torch.tensor(new_scores, dtype=dtype, device=device)
    return max(finished, key=lambda item: item[0])[1]


def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_len: torch.Tensor,
    bos: int,
    eos: int,
    num_steps: int,
    beam_size: int,
    alpha: float = 0.75,
) -> torch.Tensor:
    """Beam search with length normalisation, for any EncoderDecoder.

    At every step each hypothesis in the beam is extended by every token and
    the ``beam_size`` best extensions (by summed log-probability) are kept; an
    extension that ends with <eos> leaves the beam as a finished hypothesis (so
    that step, fewer than ``beam_size`` hypotheses go on). Among the finished
    hypotheses (and, after num_steps, the unfinished ones) the output maximises
    ``log p(y | x) / len(y) ** alpha``, len(y) counting the <eos>. The search
    stops early only when no alive hypothesis can still beat the best finished
    one. The decoder re-reads the full prefixes each step from a fresh
    ``init_state`` of the encoder run on the source repeated beam_size times,
    so this works for any decoder state layout.

    Args:
        model: an EncoderDecoder. src: (B, T_src) source ids (each row is
            searched on its own).
        src_valid_len: (B,), or None (every source position is valid).
            bos, eos: target ids. num_steps: most tokens to generate.
        beam_size: >= 1 (1 is greedy decoding). alpha:
            length-normalisation exponent (0: none).
    Returns:
        (B, S) long tokens, S <= num_steps, <eos>-filled after each row's first
        <eos>; (0, 0) for an empty batch.
    Raises:
        TypeError/ValueError: on src/src_valid_len/bos/eos of the wrong type
            or shape, num_steps or beam_size < 1, alpha not finite >= 0.
    """
    _check_beam_search(
        model, src, src_valid_len, bos, eos, num_steps, beam_size, alpha
    )
    beam = _Beam(bos, eos, num_steps, beam_size, alpha)
    with _eval_mode(model):
        lens = [None] * len(src) if src_valid_len is None else src_valid_len
        hypotheses = [
            _beam_search_one(model, src[b : b + 1], lens[b : b + 1], beam)
            for b in range(len(src))
        ]
    width = max((len(ids) for ids in hypotheses), default=0)
    rows = [ids + [eos] * (width - len(ids)) for ids in hypotheses]
    tokens = torch.tensor(rows, dtype=torch.long, device=src.device)
    return tokens.reshape(len(rows), width)  # (0, 0) for an empty batch


def _check_beam_search(
    model: nn.Module,
    src: object,
    src_valid_len: object,
    bos: object,
    eos: object,
    num_steps: object,
    beam_size: object,
    alpha: object,
) -> None:
    """The checks of :func:`greedy_decode` (src, src_valid_len, bos, eos,
    num_steps); beam_size an int >= 1; alpha a finite number >= 0."""
    _check_greedy_decode(model, src, src_valid_len, bos, eos, num_steps)
    check_positive_int("beam_size", beam_size)
    check_nonnegative_number("alpha", alpha)


# ------------------------------------------------- sentences in, sentences out


def translate(
    model: nn.Module,
    sentences: list[str],
    src_vocab: Any,
    tgt_vocab: Any,
    num_steps: int,
    device: torch.device | str | None = None,
    beam_size: int = 1,
) -> list[list[str]]:
    """Translate source sentences into target tokens (beam_size 1: greedy).

    Args:
        model: an EncoderDecoder. sentences: source sentences (normalised as
            the corpus is).
        src_vocab, tgt_vocab: the :class:`course_pkg.data.translation.Vocab` objects the
            model was trained with.
        num_steps: source length after padding/trimming (as in training) and
            most target tokens.
        device: where to run; None: the model's device. beam_size: 1 for
            greedy, else beam search.
    Returns:
        One list of target tokens per sentence, without <bos>/<eos>.
    Raises:
        TypeError, ValueError: if sentences is not a list of str (a str would
            be read as characters), or num_steps/beam_size is not an int >= 1.
    """
    device = _check_translate(sentences, num_steps, beam_size, device)
    if device is None:
        device = next(model.parameters()).device
    src, src_valid_len = source_array(sentences, src_vocab, num_steps)
    src, src_valid_len = src.to(device), src_valid_len.to(device)
    if beam_size == 1:
        tokens, _ = greedy_decode(
            model, src, src_valid_len, tgt_vocab.bos, tgt_vocab.eos, num_steps
        )
    else:
        tokens = beam_search(
            model,
            src,
            src_valid_len,
            tgt_vocab.bos,
            tgt_vocab.eos,
            num_steps,
            beam_size,
        )
    return [
        tgt_vocab.to_tokens(cut_at_eos(row, tgt_vocab.eos))
        for row in tokens.tolist()
    ]


def _check_translate(
    sentences: object, num_steps: object, beam_size: object, device: object
) -> torch.device | None:
    """sentences a list of str; num_steps, beam_size ints >= 1; device None or
    a device of this machine. Returns device as a torch.device or None."""
    check_sentences("sentences", sentences)
    check_positive_int("num_steps", num_steps)
    check_positive_int("beam_size", beam_size)
    return check_device("device", device)


# ------------------------------------------------------------ private helpers


def _check_src(model: nn.Module, src: Any, src_valid_len: Any) -> None:
    check_token_ids("src", src, None)
    check_module_input("src", src, model)
    check_valid_lens(
        "src_valid_len", src_valid_len, *src.shape, like=("src", src)
    )


def _decoder_weights(model: nn.Module) -> torch.Tensor | None:
    """The decoder's last (B, Q, T_src) attention weights, or None."""
    weights = getattr(model.decoder, "attention_weights", None)
    is_one_tensor = isinstance(weights, torch.Tensor) and weights.dim() == 3
    return weights if is_one_tensor else None


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and no autograd inside; the model's mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _log_softmax(Y: torch.Tensor) -> torch.Tensor:
    """log_softmax over the last axis, in float32 at least (bf16 is coarse)."""
    return F.log_softmax(
        Y.to(torch.promote_types(Y.dtype, torch.float32)), dim=-1
    )
