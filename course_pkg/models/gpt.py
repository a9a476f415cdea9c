"""A decoder-only Transformer (GPT) and sampling from it.

Chapter: "A decoder-only model: GPT". A GPT block is the encoder block of
:mod:`course_pkg.models.transformer` with a causal mask: self-attention, where a
position sees itself and the positions before it, then the position-wise
FFN, each followed by ``AddNorm`` (post-norm, as in the original GPT). There
is no encoder and no cross-attention. The model embeds the tokens (times
sqrt(D)), adds positions, runs its blocks and maps every position to V
scores for the next token.

Shape letters (see the package docstring): ``B`` batch, ``T`` sequence
length, ``Q`` positions fed in one call, ``t`` positions fed so far (cached
ones included), ``D`` width (``num_hiddens``), ``H`` heads, ``V`` vocabulary
size.

The key/value cache. Under the causal mask a position never looks at a later
one, so its projected keys and values in every block stay the same as the
sequence grows. A cache is a list, one entry per block, of ``(keys (B, t,
D), values (B, t, D))``; feeding one new token with the cache costs one
position per block instead of the whole prefix, and gives the same scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from course_pkg.checks import (
    check_callable,
    check_features,
    check_ids,
    check_nonnegative_int,
    check_positive_int,
    check_positive_number,
    check_token_ids,
    check_valid_lens,
)
from course_pkg.nn.attention import KVCache, resolve_need_weights
from course_pkg.nn.blocks import EmbeddingStack, TransformerEncoderBlock
from course_pkg.nn.positional import (
    LearnedPositionalEncoding,
    PositionalEncoding,
)

# One KVCache per block, in block order.
GPTCache = list[KVCache]
POSITIONAL = ("sinusoidal", "learned", "none")

# ------------------------------------------------------------------ the model


@dataclass(frozen=True)
class GPTSettings:
    """Sizes and budget of the chapter's GPT.

    The sizes are those of the chapter-7 Transformer (D = 32, 4 heads, FFN
    128, no dropout), with as many blocks as its encoder and decoder
    together, so the two models have about as many parameters; both get
    the same epochs, learning rates and batch size. Each sampling setting
    translates the first ``num_sampled`` test sentences (twice).
    """

    num_hiddens: int = 32
    ffn_num_hiddens: int = 128
    num_heads: int = 4
    num_blks: int = 4
    dropout: float = 0.0
    max_len: int = 64
    batch_size: int = 64
    # The longest training sequence, english <sep> french <eos>, minus one.
    num_steps: int = 33
    lr_per_epoch: tuple[float, ...] = (0.01, 0.01, 0.01, 0.005, 0.0025)
    grad_clip: float = 1.0
    # Longer than any French sentence of the corpus, <eos> included.
    max_new_tokens: int = 20
    num_sampled: int = 400

    def model_sizes(self) -> dict[str, Any]:
        """The GPT constructor's arguments from vocab_size on."""
        return dict(
            num_hiddens=self.num_hiddens,
            ffn_num_hiddens=self.ffn_num_hiddens,
            num_heads=self.num_heads,
            num_blks=self.num_blks,
            dropout=self.dropout,
            max_len=self.max_len,
        )


class GPTBlock(TransformerEncoderBlock):
    """An encoder block whose self-attention is causal, with a key/value cache.

    Same arguments and parameters as
    :class:`course_pkg.nn.blocks.TransformerEncoderBlock`; only
    :meth:`forward` differs.
    """

    def forward(
        self,
        X: torch.Tensor,
        cache: KVCache | None = None,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, KVCache]:
        """Run the block on Q new positions.

        Args:
            X: (B, Q, D) block inputs at the new positions.
            cache: None, or the :class:`~course_pkg.nn.attention.KVCache` of the
                t - Q positions before (keys and values (B, t - Q, D)).
            valid_lens: None, or (B,) numbers of real positions among the t
                (right padding: keys from there on are hidden).
            need_weights: explicit attention path (keeps the weights) or
                fused path.
        Returns:
            (B, Q, D) outputs and the cache extended by the new positions
            (keys and values (B, t, D)).
        """
        check_features("X", X, self.ffn.input_size, self)
        cache = self.attention.cache(X, X, past=cache)  # (B, t, D) each
        attended = self.attention.attend(
            X, cache, valid_lens, causal=True, need_weights=need_weights
        )  # (B, Q, D)
        Y = self.addnorm1(X, attended)
        return self.addnorm2(Y, self.ffn(Y)), cache


class GPT(EmbeddingStack):
    """Decoder-only Transformer: embedding, positions, causal blocks, scores.

    Args:
        vocab_size: V. num_hiddens: D. ffn_num_hiddens: FFN width.
        num_heads: H. num_blks: number of blocks. dropout: everywhere.
        max_len: longest sequence accepted.
        positional: "sinusoidal" (the Transformer's table), "learned" (a
            learned embedding per position, as in GPT) or "none" (no
            position information at all).
        use_bias: biases in the attention projections.
        make_block: None (the GPT's :class:`GPTBlock`), or a function of a
            block's index i that builds block i, for models whose blocks
            differ (:class:`course_pkg.models.llama.Llama`); it must keep
            :class:`GPTBlock`'s call, X (B, Q, D) and a cache -> outputs and
            the cache.
        make_head: None (``nn.Linear(D, V)``), or a function that builds the
            output layer, (B, T, D) -> (B, T, V).
    Attributes:
        attention_weights: list, per block, of the (B, H, Q, t) weights of
            the last call (None entries after need_weights=False).
        embedding_scale: what the token embeddings are multiplied by,
            sqrt(D) (GPT-2, :class:`course_pkg.models.gpt2.GPT2`, sets it to 1).
        need_weights: what :meth:`forward` does when not told: None (the
            default) keeps the weights in eval mode only, True or False
            always (:func:`course_pkg.nn.attention.resolve_need_weights`).
    Raises:
        ValueError: on an unknown positional, or num_hiddens not divisible
            by num_heads.
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        max_len: int = 1000,
        *,
        positional: str = "sinusoidal",
        use_bias: bool = False,
        make_block: Callable[[int], nn.Module] | None = None,
        make_head: Callable[[], nn.Module] | None = None,
    ):
        _check_gpt_args(positional, make_block, make_head)
        sizes = (vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks)
        super().__init__(sizes, dropout, max_len)
        self.positional = positional
        if positional == "sinusoidal":
            self.pos_encoding = PositionalEncoding(
                num_hiddens, dropout, max_len
            )
        elif positional == "learned":
            self.pos_encoding = LearnedPositionalEncoding(
                num_hiddens, dropout, max_len
            )
        else:
            self.pos_encoding = None
            self.dropout = nn.Dropout(dropout)
        if make_block is None:

            def make_block(i: int) -> nn.Module:
                return GPTBlock(
                    num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias
                )

        self.blks = nn.ModuleList(make_block(i) for i in range(num_blks))
        if make_head is None:
            self.dense = nn.Linear(num_hiddens, vocab_size)
        else:
            self.dense = make_head()
        # Scaled up so that the positional signal does not swamp it.
        self.embedding_scale = math.sqrt(num_hiddens)
        self.attention_weights: list[torch.Tensor | None] = [None] * num_blks

    def forward(
        self,
        X: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool | None = None,
    ) -> torch.Tensor:
        """Next-token scores at every position.

        Args:
            X: (B, T) token ids, T <= max_len.
            valid_lens: None, or (B,) numbers of real tokens of right-padded
                rows (the padding is hidden from every position; a real
                position never sees it anyway, under the causal mask).
            need_weights: explicit (True) or fused (False) attention; None:
                the model's ``need_weights`` attribute.
        Returns:
            (B, T, V) scores; row i depends on X[:, :i + 1] only.
        Raises:
            TypeError/ValueError: as :meth:`forward_with_cache`.
        """
        return self.forward_with_cache(
            X, None, valid_lens, need_weights=need_weights
        )[0]

    def forward_with_cache(
        self,
        X: torch.Tensor,
        cache: GPTCache | None = None,
        valid_lens: torch.Tensor | None = None,
        *,
        need_weights: bool | None = None,
    ) -> tuple[torch.Tensor, GPTCache]:
        """Scores for Q new positions, given the cache of those before.

        Args:
            X: (B, Q) token ids at positions t - Q .. t - 1.
            cache: None (nothing before), or the cache a previous call
                returned; it is not modified.
            valid_lens: None, or (B,) numbers of real positions among the t.
            need_weights: as in :meth:`forward`.
        Returns:
            (B, Q, V) scores and the cache of all t positions.
        Raises:
            TypeError/ValueError: if X is not (B, Q) integer ids in [0, V),
                the cache does not match the model or X's batch, t exceeds
                max_len, or valid_lens is not (B,) lengths in [0, t].
        """
        offset = self._check_input(X, cache, valid_lens)  # t - Q
        need_weights = resolve_need_weights(self, need_weights)
        X = self.embedding(X) * self.embedding_scale  # (B, Q, D)
        if self.pos_encoding is None:
            X = self.dropout(X)
        else:
            X = self.pos_encoding(X, offset)
        new_cache: GPTCache = []
        for i, blk in enumerate(self.blks):
            X, blk_cache = blk(
                X,
                None if cache is None else cache[i],
                valid_lens,
                need_weights=need_weights,
            )
            new_cache.append(blk_cache)
        self.attention_weights = [
            blk.attention.attention_weights for blk in self.blks
        ]
        return self.dense(X), new_cache

    def _check_input(
        self,
        X: torch.Tensor,
        cache: GPTCache | None,
        valid_lens: torch.Tensor | None,
    ) -> int:
        """The checks of :meth:`forward_with_cache`; returns the number
        t - Q of cached positions."""
        check_token_ids("X", X, self.embedding, min_steps=1)
        offset = self._check_cache(cache, X.shape[0])
        num_steps = offset + X.shape[1]  # t
        if num_steps > self.max_len:
            raise ValueError(
                f"X reaches position {num_steps}, more than "
                f"max_len={self.max_len}"
            )
        check_valid_lens(
            "valid_lens", valid_lens, X.shape[0], num_steps, like=("X", X)
        )
        return offset

    def _check_cache(self, cache: GPTCache | None, batch_size: int) -> int:
        """The number t - Q of cached positions; refuses a foreign cache."""
        if cache is None:
            return 0
        if not isinstance(cache, list) or len(cache) != len(self.blks):
            raise ValueError(
                f"cache must be a list of {len(self.blks)} (keys, values) "
                "pairs from forward_with_cache"
            )
        return self._cached_steps(cache[0][0], batch_size)

    def _cached_steps(self, keys: torch.Tensor, batch_size: int) -> int:
        """t - Q, read from the first block's cached keys (B, t - Q, D);
        refuses keys of another shape or batch."""
        if keys.dim() != 3 or keys.shape[0] != batch_size:
            raise ValueError(
                f"cache keys must have shape (B, t, D) with B={batch_size} "
                f"as in X, got {tuple(keys.shape)}"
            )
        return keys.shape[1]


def _check_gpt_args(
    positional: object, make_block: object, make_head: object
) -> None:
    """positional one of POSITIONAL; make_block and make_head None or
    callables."""
    if positional not in POSITIONAL:
        raise ValueError(
            f"positional must be one of {POSITIONAL}, got {positional!r}"
        )
    for name, make in (
        ("make_block", make_block),
        ("make_head", make_head),
    ):
        if make is not None:
            check_callable(name, make)


# ----------------------------------------------------------------- sampling


def next_token_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The distribution the next token is drawn from.

    In this order: divide the scores by temperature and take the softmax;
    keep the top_k most probable tokens (exactly top_k of them; top_k=1 is
    greedy decoding); keep the smallest set of most probable tokens whose
    total probability reaches top_p (nucleus sampling); renormalise.

    Args:
        logits: (B, V) next-token scores.
        temperature: > 0; below 1 sharpens, above 1 flattens.
        top_k: None or >= 1. top_p: None or in (0, 1].
    Returns:
        (B, V) probabilities, each row summing to 1, zero outside the kept
        tokens.
    Raises:
        TypeError/ValueError: if logits is not (B, V) floating point, a row
            is all -inf (on the CPU; elsewhere it gives NaN), or a setting is
            out of range (named in the message).
    """
    _check_next_token_probs(logits, temperature, top_k, top_p)
    scores = logits.to(torch.promote_types(logits.dtype, torch.float32))
    probs = torch.softmax(scores / temperature, dim=-1)  # (B, V)
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_k is not None and top_k < probs.shape[-1]:
        top = probs.topk(top_k, dim=-1).indices  # (B, top_k)
        keep = torch.zeros_like(keep).scatter(-1, top, True)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass before
        # A token is kept while the mass of those before it is short of
        # top_p: the first one always is.
        keep = keep & torch.zeros_like(keep).scatter(-1, order, before < top_p)
    probs = probs * keep
    return probs / probs.sum(dim=-1, keepdim=True)


def _check_next_token_probs(
    logits: object, temperature: object, top_k: object, top_p: object
) -> None:
    """logits a float (B, V) tensor with a finite score in every row (on the
    CPU); the sampling settings (``_check_sampling``)."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor (B, V)")
    if logits.dim() != 2:
        raise ValueError(
            f"logits must have shape (B, V), got {tuple(logits.shape)}"
        )
    _check_sampling(temperature, top_k, top_p)
    if logits.device.type == "cpu" and logits.isneginf().all(-1).any():
        raise ValueError("logits must have a finite score in every row")


def generate(
    model: GPT,
    prompt: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue every prompt by sampling one token at a time.

    Each step draws from :func:`next_token_probs` (top_k=1: greedy). With
    use_cache the model reads only the new token, with the cached keys and
    values of the earlier ones; without, the whole sequence again.

    Args:
        model: a :class:`GPT` (in eval mode for the call, then restored).
        prompt: (B, T0) token ids, 1 <= T0 <= max_len.
        max_new_tokens: most tokens to add, >= 0, T0 + it <= max_len.
        temperature, top_k, top_p: see :func:`next_token_probs`.
        eos: None, or an id that ends a row (later positions hold eos; all
            rows ended stops). generator: the random source of the draws.
    Returns:
        (B, T0 + n) ids: the prompt and n <= max_new_tokens new tokens.
    """
    _check_generation(
        model, prompt, max_new_tokens, temperature, top_k, top_p, eos
    )
    was_training = model.training
    model.eval()
    tokens = prompt
    finished = prompt.new_zeros(prompt.shape[0], dtype=torch.bool)
    try:
        with torch.no_grad():
            scores, cache = model.forward_with_cache(
                prompt, need_weights=False
            )
            for step in range(max_new_tokens):
                next_token = _draw(
                    scores[:, -1], temperature, top_k, top_p, generator
                )  # (B,)
                if eos is not None:
                    next_token = next_token.masked_fill(finished, eos)
                    finished = finished | (next_token == eos)
                tokens = torch.cat([tokens, next_token[:, None]], dim=1)
                if step == max_new_tokens - 1 or bool(finished.all()):
                    break
                if use_cache:
                    scores, cache = model.forward_with_cache(
                        next_token[:, None], cache, need_weights=False
                    )
                else:
                    scores = model(tokens, need_weights=False)
    finally:
        model.train(was_training)
    return tokens


def _draw(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """One token per row from (B, V) scores: argmax for top_k=1."""
    if top_k == 1:
        return logits.argmax(dim=-1)
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _check_sampling(temperature: Any, top_k: Any, top_p: Any) -> None:
    """Sampling settings: temperature > 0, top_k None or an int >= 1, top_p
    None or in (0, 1] (TypeError, ValueError)."""
    check_positive_number("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None:
        check_positive_number("top_p", top_p)
        if top_p > 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _check_generation(
    model: Any,
    prompt: Any,
    max_new_tokens: Any,
    temperature: Any,
    top_k: Any,
    top_p: Any,
    eos: Any,
) -> None:
    """A language model's generation arguments: model a :class:`GPT`,
    prompt (B, T0) ids in [0, model.vocab_size) with 1 <= T0 <=
    model.max_len, max_new_tokens in [0, max_len - T0], the sampling
    settings (``_check_sampling``) and eos (None or an id).

    Raises:
        TypeError, ValueError: naming the argument.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    vocab_size, max_len = model.vocab_size, model.max_len
    check_token_ids("prompt", prompt, vocab_size, min_steps=1)
    if prompt.shape[1] > max_len:
        raise ValueError(
            f"prompt has length {prompt.shape[1]}, more than the model's "
            f"max_len={max_len}"
        )
    check_nonnegative_int("max_new_tokens", max_new_tokens)
    if prompt.shape[1] + max_new_tokens > max_len:
        raise ValueError(
            f"max_new_tokens must be in [0, max_len - T0] = [0, "
            f"{max_len - prompt.shape[1]}], got {max_new_tokens}"
        )
    _check_sampling(temperature, top_k, top_p)
    if eos is not None:
        check_ids(eos=eos)
    if eos is not None and eos >= vocab_size:
        raise ValueError(f"eos must be in [0, {vocab_size}), got {eos}")
