"""Tests of course_pkg.models.gpt and course_pkg.experiments.lm_translation: the decoder-only model and its sampling.

Peers nobody here wrote: ``torch.nn.TransformerEncoder`` under a causal mask, with weights
copied into ours, and ``torch.softmax``/``torch.topk`` as the reference of the sampling filters.
Also: causality (hypothesis), the key/value cache (step by step = one call; cached and uncached
greedy generation agree), greedy = top_k=1, the top-k and top-p filters keep exactly the right
tokens, the French-only labels, gradcheck in float64, the meta device and bad input (refused
before any computation).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from course_pkg.data.corpus import english_french_corpus
from course_pkg.data.translation import tokenize
from course_pkg.device import seed_everything
from course_pkg.experiments.lm_translation import (
    SEP,
    train_lm,
    train_translation_gpt,
    translate_lm,
    translation_lm_arrays,
    translation_lm_loader,
    translation_lm_vocab,
)
from course_pkg.models.gpt import (
    GPT,
    GPTBlock,
    GPTSettings,
    generate,
    next_token_probs,
)
from course_pkg.nn.attention import KVCache
from course_pkg.nn.blocks import TransformerEncoderBlock
from course_pkg.nn.positional import sinusoidal_table
from course_pkg.training.loop import masked_cross_entropy

V, D, FFN, H, N = 13, 16, 24, 4, 2


def make_model(
    positional: str = "sinusoidal",
    seed: int = 0,
    dtype: torch.dtype | None = None,
    max_len: int = 40,
) -> GPT:
    """In torch's default dtype unless ``dtype`` is given."""
    torch.manual_seed(seed)
    model = GPT(V, D, FFN, H, N, 0.0, max_len, positional=positional)
    return (model if dtype is None else model.to(dtype)).eval()


def tokens(seed: int = 1, B: int = 3, T: int = 9) -> torch.Tensor:
    return torch.randint(
        0, V, (B, T), generator=torch.Generator().manual_seed(seed)
    )


# ----------------------------------------------------------------------------- the model


def test_shapes_attention_weights_and_cache():
    model = make_model()
    X = tokens()
    scores, cache = model.forward_with_cache(X)
    assert scores.shape == (3, 9, V)
    assert len(cache) == N and all(
        k.shape == v.shape == (3, 9, D) for k, v in cache
    )
    assert all(w.shape == (3, H, 9, 9) for w in model.attention_weights)
    torch.testing.assert_close(model(X), scores)


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "none"])
@settings(max_examples=25)
@given(
    seed=st.integers(0, 10_000),
    position=st.integers(0, 8),
    need_weights=st.booleans(),
)
def test_changing_later_tokens_never_changes_earlier_scores(
    positional, seed, position, need_weights
):
    model = make_model(positional, seed=seed % 5)
    X = tokens(seed)
    changed = X.clone()
    later = torch.randint(
        0,
        V,
        changed[:, position:].shape,
        generator=torch.Generator().manual_seed(seed + 1),
    )
    changed[:, position:] = later
    changed[:, position] = (
        X[:, position] + 1
    ) % V  # the first changed position really changes
    with torch.no_grad():
        before = model(X, need_weights=need_weights)
        after = model(changed, need_weights=need_weights)
    torch.testing.assert_close(
        after[:, :position], before[:, :position], atol=1e-12, rtol=0
    )
    assert (after[:, position] - before[:, position]).abs().amax(
        dim=-1
    ).min() > 0


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("chunks", [[9], [1] * 9, [4, 1, 3, 1], [2, 7]])
@pytest.mark.parametrize("need_weights", [True, False])
def test_feeding_chunks_with_the_cache_equals_one_call(chunks, need_weights):
    model = make_model()
    X = tokens()
    with torch.no_grad():
        whole = model(X, need_weights=need_weights)
        cache, parts, start = None, [], 0
        for size in chunks:
            part, new_cache = model.forward_with_cache(
                X[:, start : start + size], cache, need_weights=need_weights
            )
            if cache is not None:  # the cache given is not modified
                assert cache[0][0].shape[1] == start
            cache, start = new_cache, start + size
            parts.append(part)
    torch.testing.assert_close(
        torch.cat(parts, dim=1), whole, atol=1e-12, rtol=0
    )


@pytest.mark.usefixtures("float64")
def test_positional_options():
    X = tokens()
    with pytest.raises(ValueError, match="positional"):
        GPT(V, D, FFN, H, N, 0.0, positional="rotary")
    # Without positions, one causal block is blind to the order of the past: the last position's
    # scores do not change when the tokens before it are shuffled. A second block is not (the
    # earlier positions it reads saw different prefixes): the causal mask itself carries order.
    shuffled = torch.cat([X[:, :-1].flip(1), X[:, -1:]], dim=1)
    torch.manual_seed(0)
    one_block = GPT(V, D, FFN, H, 1, 0.0, positional="none").eval()
    torch.testing.assert_close(
        one_block(shuffled)[:, -1], one_block(X)[:, -1], atol=1e-12, rtol=0
    )
    for model in (make_model("none"), make_model("sinusoidal")):
        assert not torch.allclose(
            model(shuffled)[:, -1], model(X)[:, -1], atol=1e-3
        )
    assert isinstance(
        make_model("learned").pos_encoding.embedding, nn.Embedding
    )


# ----------------------------------------------------------------------------- parity of the reused blocks


@pytest.mark.usefixtures("float64")
def test_block_at_the_last_position_is_the_encoder_block_on_the_prefix():
    """A GPT block is an encoder block that sees only the prefix: at position i its output equals
    the (non-causal) encoder block's output at the last position of X[:, :i + 1]."""
    torch.manual_seed(0)
    block = GPTBlock(D, FFN, H, 0.0).eval()
    X = torch.randn(2, 6, D)
    causal, _ = block(X)
    for i in range(6):
        prefix = TransformerEncoderBlock.forward(block, X[:, : i + 1])
        torch.testing.assert_close(
            causal[:, i], prefix[:, -1], atol=1e-12, rtol=0
        )


# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# ours errs by at most 4.6e-7, torch by 4.3e-7, they differ by at most 4.8e-7; bound = 10 x the
# sum of the errors, rounded up. A mask that sees one position ahead moves a score by 0.63.
GPT_TORCH_FLOAT32_BOUND = 2e-5


def gpt_and_torch_encoder(dtype, future=0):
    """[(ours, torch's)] scores, with and without weights: ours = Embedding * sqrt(D) +
    sinusoids -> torch's post-norm encoder stack with the causal mask -> Linear. Weights are
    made in float32 and cast. ``future`` > 0: a deliberate bug, torch's mask lets each position
    see that many later ones."""
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(
        D, H, FFN, dropout=0.0, batch_first=True, dtype=torch.float32
    )
    reference = nn.TransformerEncoder(layer, N, enable_nested_tensor=False)
    with torch.no_grad():
        for module in (
            reference.modules()
        ):  # non-default norms: a copying mistake cannot hide
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    reference = reference.to(dtype).train()  # drawn in float32, then cast
    torch.manual_seed(0)
    model = GPT(V, D, FFN, H, N, 0.0, 40, use_bias=True).to(dtype).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.blks, reference.layers):
            W_q, W_k, W_v = theirs.self_attn.in_proj_weight.chunk(3)
            b_q, b_k, b_v = theirs.self_attn.in_proj_bias.chunk(3)
            for linear, weight, bias in (
                (ours.attention.W_q, W_q, b_q),
                (ours.attention.W_k, W_k, b_k),
                (ours.attention.W_v, W_v, b_v),
            ):
                linear.weight.copy_(weight)
                linear.bias.copy_(bias)
            ours.attention.W_o.load_state_dict(
                theirs.self_attn.out_proj.state_dict()
            )
            ours.ffn.dense1.load_state_dict(theirs.linear1.state_dict())
            ours.ffn.dense2.load_state_dict(theirs.linear2.state_dict())
            ours.addnorm1.ln.load_state_dict(theirs.norm1.state_dict())
            ours.addnorm2.ln.load_state_dict(theirs.norm2.state_dict())
    X = tokens(T=11)
    causal = torch.ones(11, 11, dtype=torch.bool).triu(
        diagonal=1 + future
    )  # True = may not attend
    with torch.no_grad():
        inputs = model.embedding(X) * math.sqrt(D) + sinusoidal_table(40, D)[
            :11
        ].to(dtype)
        expected = model.dense(reference(inputs, mask=causal))
        return [
            (model(X, need_weights=need_weights), expected)
            for need_weights in (True, False)
        ]


@pytest.mark.parametrize(
    "dtype, tol",
    [
        pytest.param(
            torch.float32, GPT_TORCH_FLOAT32_BOUND, marks=pytest.mark.numerics
        ),
        (torch.float64, 1e-12),
    ],
)
def test_model_matches_torch_transformer_encoder_under_a_causal_mask(
    dtype, tol
):
    """Ours = Embedding * sqrt(D) + sinusoids -> torch's post-norm encoder stack with the causal mask -> Linear."""
    for ours, theirs in gpt_and_torch_encoder(dtype):
        assert ours.dtype == dtype
        assert (ours - theirs).abs().max() <= tol


def test_gradcheck_block_float64_with_a_cache():
    torch.manual_seed(0)
    block = GPTBlock(8, 12, 2, 0.0).double()
    past = (
        torch.randn(2, 3, 8, dtype=torch.float64),
        torch.randn(2, 3, 8, dtype=torch.float64),
    )

    def run(X, keys, values):
        return block(X, KVCache(keys, values))[0]

    X = torch.randn(2, 2, 8, dtype=torch.float64, requires_grad=True)
    inputs = (X, past[0].requires_grad_(), past[1].requires_grad_())
    assert torch.autograd.gradcheck(run, inputs)


def test_meta_device_forward_and_backward_with_a_cache():
    model = GPT(V, D, FFN, H, N, 0.1).to("meta")
    X = tokens().to("meta")
    scores, cache = model.forward_with_cache(X[:, :5])
    more, _ = model.forward_with_cache(X[:, 5:], cache)
    assert scores.device.type == more.device.type == "meta" and more.shape == (
        3,
        4,
        V,
    )
    (scores.sum() + more.sum()).backward()
    assert model.embedding.weight.grad.device.type == "meta"


# ----------------------------------------------------------------------------- generation


def greedy_by_hand(
    model: GPT, prompt: torch.Tensor, steps: int
) -> torch.Tensor:
    out = prompt
    with torch.no_grad():
        for _ in range(steps):
            out = torch.cat(
                [out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1
            )
    return out


@pytest.mark.parametrize("seed", range(4))
def test_greedy_generation_is_the_same_with_and_without_the_cache_and_is_top_k_1(
    seed,
):
    model = make_model(seed=seed)
    prompt = tokens(seed, T=4)
    by_hand = greedy_by_hand(model, prompt, 12)
    for use_cache in (True, False):
        for temperature in (
            0.3,
            1.0,
            5.0,
        ):  # temperature does not change the argmax
            out = generate(
                model,
                prompt,
                12,
                temperature=temperature,
                top_k=1,
                use_cache=use_cache,
            )
            assert torch.equal(out, by_hand)


def test_sampling_is_repeatable_and_cache_does_not_change_the_draws():
    model = make_model()
    prompt = tokens(T=3)
    draws = [
        generate(
            model,
            prompt,
            10,
            temperature=1.5,
            generator=torch.Generator().manual_seed(5),
            use_cache=cache,
        )
        for cache in (True, True, False)
    ]
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], draws[2])
    other = generate(
        model,
        prompt,
        10,
        temperature=1.5,
        generator=torch.Generator().manual_seed(6),
    )
    assert not torch.equal(draws[0], other)


def test_samples_stay_in_the_top_k_and_follow_the_distribution():
    model = make_model()
    prompt = tokens(T=5, B=1).expand(4000, -1)
    with torch.no_grad():
        probs = next_token_probs(model(prompt[:1])[:, -1], 1.0, top_k=3)[0]
    drawn = generate(
        model, prompt, 1, top_k=3, generator=torch.Generator().manual_seed(0)
    )[:, -1]
    counts = torch.bincount(drawn, minlength=V).double() / len(drawn)
    assert set(drawn.tolist()) <= set(probs.nonzero().flatten().tolist())
    # Within 5 binomial standard deviations of the expected frequencies.
    std = (probs.double() * (1 - probs.double()) / len(drawn)).sqrt()
    assert torch.all((counts - probs.double()).abs() <= 5 * std + 1e-12)


def test_eos_ends_a_row_and_generation_stops_when_all_rows_have_ended():
    model = make_model()
    prompt = tokens(T=3)
    free = generate(model, prompt, 15, top_k=1)
    eos = int(free[0, 5])  # the token row 0 writes at its third new position
    out = generate(model, prompt, 15, top_k=1, eos=eos)
    for row, free_row in zip(out.tolist(), free.tolist()):
        new = row[3:]
        if eos in new:
            end = new.index(eos)
            assert new[: end + 1] == free_row[3 : 3 + end + 1] and set(
                new[end:]
            ) == {eos}
        else:
            assert new == free_row[3 : 3 + len(new)]
    assert out.shape[1] == 18 or bool((out[:, -1] == eos).all())
    assert generate(model, prompt, 0).shape == (3, 3)


def test_generation_leaves_the_training_mode_as_it_was():
    model = make_model().train()
    generate(model, tokens(T=2), 3)
    assert model.training


# ----------------------------------------------------------------------------- the sampling filters


# Scores at least 0.1 apart: ties (which either token may win) are not the property tested.
logit_rows = st.lists(
    st.integers(-80, 80), min_size=2, max_size=12, unique=True
).map(lambda xs: [x / 10 for x in xs])


@settings(max_examples=60)
@given(row=logit_rows, temperature=st.floats(0.2, 4.0), k=st.integers(1, 12))
def test_top_k_keeps_exactly_the_k_most_probable_tokens(row, temperature, k):
    logits = torch.tensor([row], dtype=torch.float64)
    probs = next_token_probs(logits, temperature, top_k=k)[0]
    expected = torch.softmax(logits[0] / temperature, -1)
    kept = set(torch.topk(logits[0], min(k, len(row))).indices.tolist())
    assert set(probs.nonzero().flatten().tolist()) == kept
    index = sorted(kept)
    torch.testing.assert_close(
        probs[index], expected[index] / expected[index].sum()
    )


@settings(max_examples=60)
@given(row=logit_rows, p=st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_most_probable_set_that_reaches_p(row, p):
    logits = torch.tensor([row], dtype=torch.float64)
    probs = next_token_probs(logits, top_p=p)[0]
    full = torch.softmax(logits[0], -1)
    kept = probs.nonzero().flatten()
    # The kept tokens are the most probable ones ...
    assert (
        full[kept].min() >= full[probs == 0].max()
        if len(kept) < len(row)
        else True
    )
    # ... and the fewest of them whose total reaches p.
    assert full[kept].sum() >= p - 1e-12
    assert full[kept].sum() - full[kept].min() < p
    torch.testing.assert_close(probs[kept], full[kept] / full[kept].sum())


def test_temperature_and_the_order_of_the_filters():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    torch.testing.assert_close(
        next_token_probs(logits, 0.5), torch.softmax(logits / 0.5, -1)
    )
    torch.testing.assert_close(
        next_token_probs(logits, top_p=1.0), torch.softmax(logits, -1)
    )
    # top-p acts on the top-k distribution: of the top 2 (renormalised 0.73, 0.27), p = 0.7 keeps one.
    assert next_token_probs(logits, top_k=2, top_p=0.7)[
        0
    ].nonzero().flatten().tolist() == [0]
    assert next_token_probs(logits, top_p=0.7)[
        0
    ].nonzero().flatten().tolist() == [0, 1]


# ----------------------------------------------------------------------------- translation as language modelling


@pytest.fixture(scope="module")
def corpus():
    train, _, test = english_french_corpus(seed=0, num_pairs=400)
    return train, test, translation_lm_vocab(train)


def test_sequences_are_english_sep_french_eos_with_labels_on_the_french_part_only(
    corpus,
):
    train, _, vocab = corpus
    X, Y = translation_lm_arrays(train[:50], vocab, 40)
    sep, pad = vocab[SEP], vocab.pad
    for (english, french), x, y in zip(train[:50], X.tolist(), Y.tolist()):
        n, m = len(tokenize(english)), len(tokenize(french))
        assert vocab.to_tokens(x[: n + 1 + m]) == tokenize(english) + [
            SEP
        ] + tokenize(french)
        assert x[n] == sep and set(x[n + 1 + m :]) <= {pad}
        assert y[:n] == [pad] * n  # no loss on the English part
        assert y[n : n + m + 1] == vocab[tokenize(french)] + [vocab.eos]
        assert (
            x[n + 1 : n + 1 + m] == y[n : n + m]
        )  # the label is the next input
        assert set(y[n + m + 1 :]) <= {pad}


def test_loader_batches_similar_lengths_and_trimming_changes_no_loss(corpus):
    train, _, vocab = corpus
    loader = translation_lm_loader(train, vocab, 16, 40, seed=0)
    model = GPT(len(vocab), D, FFN, H, N, 0.0, 40).eval()
    seen = 0
    for X, Y in loader:
        lengths = (X != vocab.pad).sum(1)
        assert X.shape == Y.shape and X.shape[1] == int(lengths.max())
        seen += len(X)
    assert seen == len(train)
    loader = translation_lm_loader(train, vocab, 16, 40, seed=0)
    first_epoch = [X.tolist() for X, _ in loader]
    assert first_epoch != [
        X.tolist() for X, _ in loader
    ]  # a new order every epoch
    assert first_epoch == [
        X.tolist()
        for X, _ in translation_lm_loader(train, vocab, 16, 40, seed=0)
    ]
    X_full, Y_full = translation_lm_arrays(train[:16], vocab, 40)
    X, Y = next(
        iter(translation_lm_loader(train[:16], vocab, 16, 40, shuffle=False))
    )
    with torch.no_grad():
        torch.testing.assert_close(
            masked_cross_entropy(model(X), Y, vocab.pad),
            masked_cross_entropy(model(X_full), Y_full, vocab.pad),
        )


def test_translate_lm_batches_by_length_like_one_sentence_at_a_time(corpus):
    _, test, vocab = corpus
    torch.manual_seed(0)
    model = GPT(len(vocab), D, FFN, H, N, 0.0, 40).eval()
    sentences = [english for english, _ in test[:12]]
    together = translate_lm(model, sentences, vocab, 8)
    alone = [translate_lm(model, [s], vocab, 8)[0] for s in sentences]
    assert together == alone
    assert all(len(t) <= 8 and "<eos>" not in t for t in together)


# ----------------------------------------------------------------------------- bad input


def count_calls(model: nn.Module) -> list[int]:
    calls = [
        0
    ]  # calls of the model's parts: the model itself may check its input first
    for module in list(model.modules())[1:]:
        module.register_forward_pre_hook(
            lambda *_: calls.__setitem__(0, calls[0] + 1)
        )
    return calls


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(max_new_tokens=40), "max_new_tokens"),  # T0 + 40 > max_len
        (dict(eos=V), "eos"),
        (dict(prompt=tokens(T=41)), "prompt"),  # longer than max_len = 40
        (dict(prompt=tokens()[0]), "prompt"),  # (T,) instead of (B, T)
        (dict(prompt=torch.zeros(2, 0, dtype=torch.long)), "prompt"),
        (dict(prompt=torch.full((2, 3), V)), "prompt"),
    ],
)
def test_generate_refuses_bad_values_before_any_computation(kwargs, name):
    model = make_model().train()
    calls = count_calls(model)
    arguments = dict(prompt=tokens(T=3), max_new_tokens=5) | kwargs
    with pytest.raises(ValueError, match=name):
        generate(model, **arguments)
    assert calls[0] == 0 and model.training


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(prompt=tokens().float()), "prompt"),
        (dict(prompt=[[1, 2]]), "prompt"),
        (dict(top_k=2.0), "top_k"),
        (dict(temperature="hot"), "temperature"),
        (dict(max_new_tokens=2.5), "max_new_tokens"),
        (dict(model=nn.Linear(2, 2)), "model"),
    ],
)
def test_generate_refuses_wrong_types(kwargs, name):
    arguments = (
        dict(model=make_model(), prompt=tokens(T=3), max_new_tokens=5) | kwargs
    )
    with pytest.raises(TypeError, match=name):
        generate(**arguments)


@pytest.mark.parametrize(
    "eos, error",
    [(2.5, TypeError), ("a", TypeError), (-1, ValueError), (V, ValueError)],
)
def test_generate_names_a_bad_eos(eos, error):
    with pytest.raises(error, match="eos"):
        generate(make_model(), tokens(T=3), 5, eos=eos)


def test_next_token_probs_refuses_a_row_of_minus_infinity_not_nan():
    logits = torch.zeros(2, 4)
    logits[1] = -math.inf
    with pytest.raises(ValueError, match="logits"):
        next_token_probs(logits)
    logits[1, 2] = 0.0  # one finite score is enough
    probs = next_token_probs(logits)
    assert torch.isfinite(probs).all() and probs[1, 2] == 1.0


def test_translate_lm_refuses_a_str_and_train_lm_no_epochs(corpus):
    _, _, vocab = corpus
    model = GPT(len(vocab), D, FFN, H, N, 0.0, 40)
    with pytest.raises(TypeError, match="sentences"):
        translate_lm(model, "i see a dog .", vocab, 8)  # not 14 sentences
    with pytest.raises(ValueError, match="lr_per_epoch"):
        train_lm(model, [], [], vocab.pad)  # IndexError before
    with pytest.raises(ValueError, match="lr_per_epoch"):
        train_lm(model, [], [0.01, 0.0], vocab.pad)
    with pytest.raises(ValueError, match="warmup_steps"):
        train_lm(model, [], [0.01], vocab.pad, warmup_steps=-1)
    with pytest.raises(TypeError, match="warmup_steps"):
        train_lm(model, [], [0.01], vocab.pad, warmup_steps=2.5)


def test_train_lm_steps_with_the_warmup_rate(corpus):
    # The rate Adam actually uses at each update, read by torch's global
    # optimizer hook just before each step: the epoch's rate times the linear
    # warm-up, counted over the whole run.
    train, _, vocab = corpus
    loader = translation_lm_loader(train[:24], vocab, 8, 20, seed=0)
    model = GPT(len(vocab), D, FFN, H, N, 0.0, 40)
    used = []
    handle = register_optimizer_step_pre_hook(
        lambda optimizer, args, kwargs: used.append(
            optimizer.param_groups[0]["lr"]
        )
    )
    try:
        history = train_lm(
            model, loader, [0.01, 0.02], vocab.pad, warmup_steps=4
        )
    finally:
        handle.remove()
    expected = [0.01 / 4, 0.01 * 2 / 4, 0.01 * 3 / 4, 0.02, 0.02, 0.02]
    assert len(used) == 6  # 3 batches per epoch, 2 epochs
    assert used == pytest.approx(expected, rel=1e-12)
    assert history["step_lr"] == used
    plain = train_lm(model, loader, [0.01, 0.02], vocab.pad)
    assert plain["step_lr"] == [0.01] * 3 + [0.02] * 3


def test_train_translation_gpt_is_the_chapters_recipe(corpus):
    # The inference chapter's target and draft (and bench/'s copies of them)
    # come from train_translation_gpt: the same weights as the recipe written
    # out (loader, then seed, then the model, then train_lm), for the first
    # num_epochs of the settings' rates.
    train, _, vocab = corpus
    settings = GPTSettings(
        num_hiddens=D, ffn_num_hiddens=FFN, num_heads=H, num_blks=1,
        max_len=40, batch_size=8, num_steps=20, lr_per_epoch=(0.01, 0.005, 1.0),
    )  # fmt: skip
    model, history = train_translation_gpt(
        train[:24], vocab, settings, seed=3, num_epochs=2
    )
    loader = translation_lm_loader(train[:24], vocab, 8, 20, seed=3)
    seed_everything(3)
    by_hand = GPT(len(vocab), **settings.model_sizes())
    expected = train_lm(by_hand, loader, [0.01, 0.005], vocab.pad, 1.0)
    assert len(history["epoch_loss"]) == 2
    assert history["epoch_loss"] == expected["epoch_loss"]
    for name, tensor in by_hand.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert not model.training and model.need_weights is False
    with pytest.raises(ValueError, match=r"num_epochs must be <= .* = 3"):
        train_translation_gpt(train[:24], vocab, settings, num_epochs=4)
    with pytest.raises(TypeError, match="settings must be a GPTSettings"):
        train_translation_gpt(train[:24], vocab, settings.model_sizes())


def test_forward_and_filters_refuse_bad_input():
    model = make_model()
    calls = count_calls(model)
    with pytest.raises(ValueError, match="max_len"):
        model(tokens(T=41))
    _, cache = model.forward_with_cache(tokens(T=30))
    calls[0] = 0
    with pytest.raises(ValueError, match="max_len"):
        model.forward_with_cache(tokens(T=11), cache)
    with pytest.raises(ValueError, match="cache"):
        model.forward_with_cache(tokens(B=2, T=1), cache)
    with pytest.raises(ValueError, match="cache"):
        model.forward_with_cache(tokens(T=1), cache[:1])
    with pytest.raises(TypeError, match="X"):
        model(tokens().float())
    assert calls[0] == 0
    with pytest.raises(ValueError, match="logits"):
        next_token_probs(torch.zeros(3))
    with pytest.raises(TypeError, match="logits"):
        next_token_probs(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="top_p"):
        next_token_probs(torch.zeros(2, 3), top_p=2.0)
    with pytest.raises(ValueError, match="num_steps"):
        translation_lm_arrays(
            [("a .", "un .")], translation_lm_vocab([("a .", "un .")]), 0
        )
