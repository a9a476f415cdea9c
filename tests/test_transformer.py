"""Tests of course_pkg.models.transformer: the Transformer encoder, decoder and model.

Peers nobody here wrote: ``torch.nn.Transformer`` (and its encoder/decoder layers) and
``d2l.torch.TransformerEncoder``, with weights copied into ours. Also: shapes, the key/value
cache (step-by-step decoding equals one call on the whole prefix; greedy decoding of
course_pkg.inference.decode gives the same tokens with and without it; beam search runs), the causal and
padding properties, the fused path, gradcheck in float64, the meta device and bad input.
"""

from __future__ import annotations

import functools
import math

import d2l.torch as d2l
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_pkg.inference.decode import beam_search, greedy_decode
from course_pkg.models.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
)
from course_pkg.nn.attention import copy_weights_from_torch
from course_pkg.nn.blocks import (
    AddNorm,
    DecoderState,
    PositionWiseFFN,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

F64 = torch.float64
SRC_V, TGT_V, D, FFN, H, N = 11, 13, 16, 24, 4, 2


def make_model(
    use_bias: bool = False, dtype: torch.dtype | None = None, seed: int = 0
) -> Transformer:
    """In torch's default dtype unless ``dtype`` is given."""
    torch.manual_seed(seed)
    model = Transformer(SRC_V, TGT_V, D, FFN, H, N, 0.0, use_bias)
    return (model if dtype is None else model.to(dtype)).eval()


def batch(seed: int = 1, B: int = 3, T: int = 7, t: int = 6):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, SRC_V, (B, T), generator=gen)
    tgt = torch.randint(0, TGT_V, (B, t), generator=gen)
    src_lens = torch.tensor([T, 2, 5][:B])
    tgt_lens = torch.tensor([t, 3, 1][:B])
    return src, tgt, src_lens, tgt_lens


# ----------------------------------------------------------------------------- the sublayers


@pytest.mark.usefixtures("float64")
def test_position_wise_ffn_is_relu_mlp_applied_to_every_position():
    ffn = PositionWiseFFN(8, 5, input_size=3)
    X = torch.randn(2, 4, 3)
    expected = F.linear(
        F.relu(F.linear(X, ffn.dense1.weight, ffn.dense1.bias)),
        ffn.dense2.weight,
        ffn.dense2.bias,
    )
    assert ffn(X).shape == (2, 4, 5)
    torch.testing.assert_close(ffn(X), expected, atol=1e-12, rtol=0)
    # Position-wise: one position alone gives the same output as inside the sequence.
    torch.testing.assert_close(
        ffn(X[:, 2:3]), ffn(X)[:, 2:3], atol=1e-12, rtol=0
    )
    assert (
        PositionWiseFFN(8, 5).dense1.in_features == 5
    )  # default input_size = ffn_num_outputs


@pytest.mark.usefixtures("float64")
def test_add_norm_is_layer_norm_of_the_residual_sum_and_drops_out_only_the_sublayer():
    add_norm = AddNorm(6, dropout=0.0)
    X, Y = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    torch.testing.assert_close(
        add_norm(X, Y), F.layer_norm(X + Y, (6,)), atol=1e-12, rtol=0
    )
    # In training with heavy dropout, Y = 0 leaves X untouched: dropout is on Y, not on X.
    noisy = AddNorm(6, dropout=0.9).train()
    torch.testing.assert_close(
        noisy(X, torch.zeros_like(X)),
        F.layer_norm(X, (6,)),
        atol=1e-12,
        rtol=0,
    )


# ----------------------------------------------------------------------------- shapes


@pytest.mark.usefixtures("float64")
def test_encoder_shapes_and_attention_weights():
    model = make_model()
    src, _, src_lens, _ = batch()
    out = model.encoder(src, src_lens)
    assert out.shape == (3, 7, D)
    weights = model.encoder.attention_weights
    assert len(weights) == N and all(w.shape == (3, H, 7, 7) for w in weights)
    for w in weights:
        # Each query spreads its weight over the real source tokens only.
        torch.testing.assert_close(
            w.sum(-1), torch.ones(3, H, 7), atol=1e-12, rtol=0
        )
        for b, length in enumerate(src_lens.tolist()):
            assert torch.all(w[b, :, :, length:] == 0)


def test_decoder_shapes_state_and_attention_weights():
    model = make_model()
    src, tgt, src_lens, tgt_lens = batch()
    state = model.decoder.init_state(model.encoder(src, src_lens), src_lens)
    assert isinstance(state, DecoderState)
    assert state.caches == (None,) * N and state.offset == 0
    Y, new_state = model.decoder(tgt, state, tgt_valid_lens=tgt_lens)
    assert Y.shape == (3, 6, TGT_V)
    assert new_state.offset == 6
    for cache in new_state.caches:
        assert (
            cache.self_attention.keys.shape
            == cache.self_attention.values.shape
            == (3, 6, D)
        )
        assert (
            cache.cross_attention.keys.shape
            == cache.cross_attention.values.shape
            == (3, 7, D)
        )
    self_weights, cross_weights = model.decoder.attention_weights
    assert len(self_weights) == len(cross_weights) == N
    for w in self_weights:
        assert w.shape == (3, H, 6, 6)
        assert torch.all(w.triu(diagonal=1) == 0)  # causal
        for b, length in enumerate(tgt_lens.tolist()):
            assert torch.all(w[b, :, :, length:] == 0)  # target padding
    for w in cross_weights:
        assert w.shape == (3, H, 6, 7)
        for b, length in enumerate(src_lens.tolist()):
            assert torch.all(w[b, :, :, length:] == 0)  # source padding
    # One more token: self-attention of the new position spans all 7 positions.
    model.decoder(tgt[:, :1], new_state)
    assert model.decoder.attention_weights[0][0].shape == (3, H, 1, 7)


@pytest.mark.usefixtures("float64")
def test_model_output_shape_and_fused_path_agrees_with_explicit_one():
    model = make_model(use_bias=True)
    src, tgt, src_lens, tgt_lens = batch()
    explicit = model(src, tgt, src_lens, tgt_valid_lens=tgt_lens)
    assert explicit.shape == (3, 6, TGT_V)
    fused = model(
        src, tgt, src_lens, tgt_valid_lens=tgt_lens, need_weights=False
    )
    torch.testing.assert_close(fused, explicit, atol=1e-12, rtol=0)
    assert model.encoder.attention_weights == [None] * N
    assert model.decoder.attention_weights == [[None] * N, [None] * N]
    # The base class's call (d2l's), without keywords, is the same model.
    torch.testing.assert_close(
        super(Transformer, model).forward(src, tgt, src_lens),
        model(src, tgt, src_lens),
    )


@pytest.mark.usefixtures("float64")
def test_without_the_keyword_eval_mode_keeps_the_weights_and_training_mode_takes_the_fused_path():
    model = make_model(use_bias=True)  # in eval mode
    src, tgt, src_lens, _ = batch()
    explicit = model(src, tgt, src_lens)
    assert all(w is not None for w in model.encoder.attention_weights)
    assert all(
        w is not None
        for weights in model.decoder.attention_weights
        for w in weights
    )
    model.train()  # dropout is 0: the same function
    fused = model(src, tgt, src_lens)
    torch.testing.assert_close(fused, explicit, atol=1e-12, rtol=0)
    assert model.encoder.attention_weights == [None] * N
    assert model.decoder.attention_weights == [[None] * N, [None] * N]
    # The keyword wins over the mode, both ways.
    model(src, tgt, src_lens, need_weights=True)
    assert all(w is not None for w in model.decoder.attention_weights[1])
    model.eval()
    model(src, tgt, src_lens, need_weights=False)
    assert model.encoder.attention_weights == [None] * N


# ----------------------------------------------------------------------------- key/value cache


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("chunks", [[1] * 6, [2, 1, 3], [6]])
def test_step_by_step_decoding_with_the_cache_equals_one_call(
    chunks, need_weights
):
    model = make_model(use_bias=True, dtype=F64)
    src, tgt, src_lens, tgt_lens = batch()
    enc_outputs = model.encoder(src, src_lens)
    full = model.decoder(
        tgt,
        model.decoder.init_state(enc_outputs, src_lens),
        tgt_valid_lens=tgt_lens,
    )[0]
    state, pieces, start = (
        model.decoder.init_state(enc_outputs, src_lens),
        [],
        0,
    )
    for size in chunks:
        Y, state = model.decoder(
            tgt[:, start : start + size],
            state,
            tgt_valid_lens=tgt_lens,
            need_weights=need_weights,
        )
        pieces.append(Y)
        start += size
    assert state.offset == 6
    torch.testing.assert_close(
        torch.cat(pieces, dim=1), full, atol=1e-10, rtol=0
    )


def test_decoder_never_modifies_the_state_it_is_given():
    model = make_model(dtype=F64)
    src, tgt, src_lens, _ = batch()
    state = model.decoder.init_state(model.encoder(src, src_lens), src_lens)
    after_two, state2 = model.decoder(tgt[:, :2], state)
    assert state.caches == (None,) * N and state.offset == 0
    # Branching from one state twice (as beam search does) gives the same thing twice.
    first = model.decoder(tgt[:, 2:3], state2)[0]
    second = model.decoder(tgt[:, 2:3], state2)[0]
    assert torch.equal(first, second)
    assert (
        state2.offset == 2
        and state2.caches[0].self_attention.keys.shape[1] == 2
    )


def lively_model() -> Transformer:
    """An untrained float64 model whose greedy outputs vary from step to step.

    At the default initialisation the scaled target embedding dominates the residual stream, and
    greedy decoding of an untrained model repeats one token; shrinking it lets the positions and
    the source speak, so that decoding tests compare real sequences.
    """
    model = make_model(use_bias=True, dtype=F64, seed=3)
    with torch.no_grad():
        model.decoder.embedding.weight.mul_(0.1)
    return model


@pytest.mark.parametrize(
    "eos", [4, TGT_V + 1]
)  # an id that comes, and one that never does
def test_greedy_decoding_with_and_without_the_cache_gives_the_same_tokens(eos):
    model = lively_model()
    src, _, src_lens, _ = batch()
    cached, _ = greedy_decode(
        model, src, src_lens, bos=1, eos=eos, num_steps=12, use_cache=True
    )
    uncached, _ = greedy_decode(
        model, src, src_lens, bos=1, eos=eos, num_steps=12, use_cache=False
    )
    assert torch.equal(cached, uncached)
    assert all(
        len(set(row)) >= 3 for row in cached.tolist()
    )  # not one token repeated
    assert (eos in cached.tolist()[0]) == (eos < TGT_V)


def test_beam_search_runs_on_the_transformer_and_beam_one_is_greedy():
    model = lively_model()
    src, _, src_lens, _ = batch()
    tokens = beam_search(
        model, src, src_lens, bos=1, eos=4, num_steps=8, beam_size=3
    )
    assert (
        tokens.dim() == 2
        and tokens.shape[0] == 3
        and 1 <= tokens.shape[1] <= 8
    )
    assert tokens.min() >= 0 and tokens.max() < TGT_V
    greedy, _ = greedy_decode(model, src, src_lens, bos=1, eos=4, num_steps=8)
    assert torch.equal(
        beam_search(
            model, src, src_lens, bos=1, eos=4, num_steps=8, beam_size=1
        ),
        greedy,
    )


# ----------------------------------------------------------------------------- properties


@functools.cache
def shared_model() -> Transformer:
    """One float64 model for the property tests (they only read it)."""
    return make_model(dtype=F64)


@settings(max_examples=25)
@given(step=st.integers(0, 4), seed=st.integers(0, 2**16))
def test_decoder_output_at_a_step_ignores_later_target_tokens(step, seed):
    model = shared_model()
    src, tgt, src_lens, _ = batch()
    gen = torch.Generator().manual_seed(seed)
    changed = tgt.clone()
    changed[:, step + 1 :] = (
        tgt[:, step + 1 :]
        + torch.randint(1, TGT_V, tgt[:, step + 1 :].shape, generator=gen)
    ) % TGT_V
    before, after = model(src, tgt, src_lens), model(src, changed, src_lens)
    torch.testing.assert_close(
        after[:, : step + 1], before[:, : step + 1], atol=1e-12, rtol=0
    )
    # Not vacuous: the later positions, whose tokens all changed, do see the change.
    assert not torch.allclose(after[:, step + 1 :], before[:, step + 1 :])


@settings(max_examples=25)
@given(seed=st.integers(0, 2**16))
def test_source_tokens_beyond_valid_len_change_nothing(seed):
    model = shared_model()
    src, tgt, src_lens, _ = batch()
    gen = torch.Generator().manual_seed(seed)
    changed = src.clone()
    for b, length in enumerate(src_lens.tolist()):
        changed[b, length:] = torch.randint(
            0, SRC_V, (src.shape[1] - length,), generator=gen
        )
    torch.testing.assert_close(
        model(changed, tgt, src_lens),
        model(src, tgt, src_lens),
        atol=1e-12,
        rtol=0,
    )
    enc_before, enc_after = (
        model.encoder(src, src_lens),
        model.encoder(changed, src_lens),
    )
    for b, length in enumerate(src_lens.tolist()):
        torch.testing.assert_close(
            enc_after[b, :length], enc_before[b, :length], atol=1e-12, rtol=0
        )


# ----------------------------------------------------------------------------- parity with torch.nn.Transformer


def copy_ffn_and_norms(
    ours: nn.Module,
    theirs: nn.Module,
    add_norms: list[AddNorm],
    norms: list[nn.LayerNorm],
) -> None:
    ours.ffn.dense1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.dense2.load_state_dict(theirs.linear2.state_dict())
    for add_norm, norm in zip(add_norms, norms):
        add_norm.ln.load_state_dict(norm.state_dict())


@torch.no_grad()
def copy_from_torch(model: Transformer, reference: nn.Transformer) -> None:
    for ours, theirs in zip(model.encoder.blks, reference.encoder.layers):
        copy_weights_from_torch(ours.attention, theirs.self_attn)
        copy_ffn_and_norms(
            ours,
            theirs,
            [ours.addnorm1, ours.addnorm2],
            [theirs.norm1, theirs.norm2],
        )
    for ours, theirs in zip(model.decoder.blks, reference.decoder.layers):
        copy_weights_from_torch(ours.attention1, theirs.self_attn)
        copy_weights_from_torch(ours.attention2, theirs.multihead_attn)
        norms = [theirs.norm1, theirs.norm2, theirs.norm3]
        copy_ffn_and_norms(
            ours, theirs, [ours.addnorm1, ours.addnorm2, ours.addnorm3], norms
        )


def torch_reference(dtype: torch.dtype) -> nn.Transformer:
    """torch's Transformer of our configuration, without the final LayerNorm of each stack.

    Same sizes, post-norm (norm_first=False), ReLU, dropout 0, batch_first. ``nn.Transformer`` ends
    each stack with an extra LayerNorm by default (needed by its pre-norm variant). In a post-norm
    stack, as in the paper and d2l, every block already ends with a LayerNorm, so there is no such
    final norm: we set ``encoder.norm`` and ``decoder.norm`` to None (both stacks skip a None norm).
    It runs in train mode (dropout is 0, so nothing changes) to keep torch off its inference fast
    path, which returns zeros at padded positions instead of computing them.
    """
    torch.manual_seed(7)
    reference = nn.Transformer(
        D, H, N, N, FFN, dropout=0.0, batch_first=True, dtype=torch.float32
    )
    reference.encoder.norm = None
    reference.decoder.norm = None
    with torch.no_grad():  # non-default norms, so a copying mistake cannot hide behind weight 1, bias 0
        for module in reference.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    # drawn in float32 and cast: every dtype gets the same weights
    return reference.to(dtype).train()


def model_and_reference(
    dtype: torch.dtype,
) -> tuple[Transformer, nn.Transformer]:
    """Our model (biases on) with the weights of torch's reference."""
    model, reference = (
        make_model(use_bias=True, dtype=dtype),
        torch_reference(dtype),
    )
    copy_from_torch(model, reference)
    return model, reference


def torch_masks(src, tgt, src_lens, tgt_lens):
    src_padding = (
        torch.arange(src.shape[1])[None] >= src_lens[:, None]
    )  # True = ignore
    tgt_padding = torch.arange(tgt.shape[1])[None] >= tgt_lens[:, None]
    causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).triu(
        diagonal=1
    )
    return src_padding, tgt_padding, causal


def reference_inputs(model, src, tgt):
    """The input layer built from parts we did not write, for the reference model.

    torch's ``F.embedding`` on our embedding weights (shared: they are the copy), times sqrt(D)
    as in the paper, plus d2l's sinusoidal table; it is checked against our encoder's and
    decoder's own input layers.
    """
    dtype = model.encoder.embedding.weight.dtype
    table = d2l.PositionalEncoding(D, 0.0).P.to(dtype)  # (1, max_len, D)
    inputs = []
    for coder, ids in ((model.encoder, src), (model.decoder, tgt)):
        embedded = F.embedding(ids, coder.embedding.weight) * math.sqrt(D)
        theirs = embedded + table[:, : ids.shape[1]]
        ours = coder.pos_encoding(
            coder.embedding(ids) * math.sqrt(coder.num_hiddens)
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        inputs.append(theirs)
    return inputs


def reference_output(model, Y):
    """The output layer: torch's ``F.linear`` on our dense layer's (shared) weights."""
    return F.linear(Y, model.decoder.dense.weight, model.decoder.dense.bias)


def reference_scores(
    model, reference, src, tgt, src_lens, tgt_lens, causal=None
):
    """torch's full model between the reference input and output layers: (B, t, V).
    ``causal``: torch's target mask, the usual one if None."""
    src_padding, tgt_padding, usual = torch_masks(src, tgt, src_lens, tgt_lens)
    causal = usual if causal is None else causal
    src_in, tgt_in = reference_inputs(model, src, tgt)
    out = reference(
        src_in,
        tgt_in,
        tgt_mask=causal,
        src_key_padding_mask=src_padding,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=src_padding,
    )
    return reference_output(model, out)


# tests/measure_tolerances.py, float32 against float64 (paths default/avx2, with and without MKL_CBWR=COMPATIBLE, 1/2/4 threads):
# ours errs by at most 2.3e-6, torch by 2.1e-6, they differ by at most 2.0e-6; bound = 10 x the
# sum of the errors, rounded up. A target mask that sees one position ahead moves a score by 1.06.
STACKS_FLOAT32_BOUND = 1e-4
TOLERANCES = [
    pytest.param(
        torch.float32, STACKS_FLOAT32_BOUND, marks=pytest.mark.numerics
    ),
    (F64, 1e-12),
]


def stacks_and_torch(dtype, future=0):
    """[(what, ours, torch's)]: encoder stack, decoder stack fed torch's memory, full model on
    both attention paths, with padding in source and target. ``future`` > 0: a deliberate bug,
    torch's target mask lets each position see that many later ones."""
    model, reference = model_and_reference(dtype)
    src, tgt, src_lens, tgt_lens = batch()
    src_padding, tgt_padding, causal = torch_masks(
        src, tgt, src_lens, tgt_lens
    )
    if future:
        causal = torch.ones_like(causal).triu(diagonal=1 + future)
    src_in, tgt_in = reference_inputs(model, src, tgt)
    pairs = []

    # Encoder stack.
    memory = reference.encoder(src_in, src_key_padding_mask=src_padding)
    X = src_in
    for blk in model.encoder.blks:
        X = blk(X, src_lens)
    pairs.append(("encoder stack", X, memory))

    # Decoder stack, fed torch's memory.
    expected = reference.decoder(
        tgt_in,
        memory,
        tgt_mask=causal,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=src_padding,
    )
    state = model.decoder.init_state(memory, src_lens)
    Y = tgt_in
    for blk in model.decoder.blks:
        Y, state = blk(Y, state, tgt_valid_lens=tgt_lens)
    pairs.append(("decoder stack", Y, expected))

    # Full model, both attention paths.
    full_expected = reference_scores(
        model, reference, src, tgt, src_lens, tgt_lens, causal
    )
    for need_weights in (True, False):
        got = model(
            src,
            tgt,
            src_lens,
            tgt_valid_lens=tgt_lens,
            need_weights=need_weights,
        )
        pairs.append(
            (f"model, need_weights={need_weights}", got, full_expected)
        )
    return pairs


@pytest.mark.parametrize("dtype, tol", TOLERANCES)
def test_stacks_and_model_match_torch_nn_transformer(dtype, tol):
    """Encoder stack, decoder stack and the full model, with padding in source and target.

    Our valid lens stand for torch's src_key_padding_mask, tgt_key_padding_mask and
    memory_key_padding_mask; our causal self-attention for its tgt_mask. For the full model,
    torch's stacks get an input and output layer built from torch's and d2l's functions on our
    (copied) weights: see reference_inputs and reference_output.
    """
    for what, ours, theirs in stacks_and_torch(dtype):
        assert ours.dtype == dtype
        assert (ours - theirs).abs().max() <= tol, what


def test_model_matches_torch_when_fed_one_token_at_a_time():
    model, reference = model_and_reference(F64)
    src, tgt, src_lens, _ = batch()
    full_lens = torch.tensor([6, 6, 6])  # no target padding
    expected = reference_scores(
        model, reference, src, tgt, src_lens, full_lens
    )
    state = model.decoder.init_state(model.encoder(src, src_lens), src_lens)
    steps = []
    for j in range(tgt.shape[1]):
        Y, state = model.decoder(tgt[:, j : j + 1], state)
        steps.append(Y)
    torch.testing.assert_close(
        torch.cat(steps, dim=1), expected, atol=1e-10, rtol=0
    )


@pytest.mark.usefixtures("float64")
def test_encoder_matches_d2l_transformer_encoder():
    torch.manual_seed(0)
    ours = TransformerEncoder(SRC_V, D, FFN, H, N, 0.0).eval()
    theirs = d2l.TransformerEncoder(SRC_V, D, FFN, H, N, 0.0).eval()
    src, _, src_lens, _ = batch()
    theirs(src, src_lens)  # materialise d2l's lazy layers
    weights = {
        k.replace("blks.", "blks.block"): v
        for k, v in ours.state_dict().items()
        if k != "pos_encoding.P"
    }
    theirs.load_state_dict(weights)
    torch.testing.assert_close(
        ours(src, src_lens), theirs(src, src_lens), atol=1e-12, rtol=0
    )
    for w_ours, w_theirs in zip(
        ours.attention_weights, theirs.attention_weights
    ):
        torch.testing.assert_close(
            w_ours, w_theirs.reshape(w_ours.shape), atol=1e-12, rtol=0
        )


# ----------------------------------------------------------------------------- gradcheck


def test_gradcheck_encoder_block_float64():
    torch.manual_seed(0)
    block = TransformerEncoderBlock(4, 6, 2, 0.0, use_bias=True).double()
    X = torch.randn(2, 3, 4, dtype=F64, requires_grad=True)
    lens = torch.tensor([3, 2])
    assert torch.autograd.gradcheck(lambda X: block(X, lens), (X,))


def test_gradcheck_decoder_block_float64_with_a_cache():
    torch.manual_seed(0)
    block = TransformerDecoderBlock(4, 6, 2, 0.0, 0, use_bias=True).double()
    X_past = torch.randn(2, 2, 4, dtype=F64, requires_grad=True)
    X_new = torch.randn(2, 1, 4, dtype=F64, requires_grad=True)
    enc_outputs = torch.randn(2, 3, 4, dtype=F64, requires_grad=True)
    lens = torch.tensor([3, 1])

    def step(X_past, X_new, enc_outputs):
        _, state = block(X_past, DecoderState(enc_outputs, lens, (None,), 0))
        return block(X_new, state)[0]

    assert torch.autograd.gradcheck(step, (X_past, X_new, enc_outputs))


# ----------------------------------------------------------------------------- devices


def test_every_module_runs_forward_and_backward_on_the_device(device):
    with torch.device(device):
        model = Transformer(SRC_V, TGT_V, D, FFN, H, N, 0.1, use_bias=True)
        src = torch.zeros(2, 5, dtype=torch.long)
        tgt = torch.ones(2, 4, dtype=torch.long)
        lens = torch.tensor([5, 3])
        X = torch.randn(2, 4, D, requires_grad=True)
        X_lens = torch.tensor([4, 2])
    ffn, add_norm = (
        PositionWiseFFN(FFN, D).to(device),
        AddNorm(D, 0.1).to(device),
    )
    enc_block = TransformerEncoderBlock(D, FFN, H, 0.1).to(device)
    dec_block = TransformerDecoderBlock(D, FFN, H, 0.1, 0).to(device)
    outputs = [
        ffn(X),
        add_norm(X, X),
        enc_block(X, X_lens),
        dec_block(X, DecoderState(X, X_lens, (None,), 0))[0],
        model(src, tgt, lens),
        model(src, tgt, lens, tgt_valid_lens=X_lens, need_weights=False),
    ]
    state = model.decoder.init_state(model.encoder(src, lens), lens)
    for j in range(2):
        Y, state = model.decoder(tgt[:, j : j + 1], state)
        outputs.append(Y)
    sum(out.sum() for out in outputs).backward()
    assert (
        outputs[4].shape == (2, 4, TGT_V)
        and outputs[4].device.type == device.type
    )
    assert X.grad.shape == X.shape
    for module in (ffn, enc_block, dec_block, model):
        assert all(
            p.grad is not None and p.grad.device.type == device.type
            for p in module.parameters()
        )


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_the_argument_named():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        Transformer(SRC_V, TGT_V, 10, FFN, 3, N, 0.0)
    with pytest.raises(ValueError, match="even"):
        TransformerEncoder(SRC_V, 5, FFN, 5, N, 0.0)
    with pytest.raises(ValueError, match=r"X must have shape \(\.\.\., 4\)"):
        PositionWiseFFN(8, 4)(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="same shape"):
        AddNorm(4, 0.0)(torch.randn(2, 3, 4), torch.randn(2, 2, 4))

    model = make_model()
    src, tgt, src_lens, _ = batch()
    encoder, decoder = model.encoder, model.decoder
    with pytest.raises(TypeError, match="X must hold integer token ids"):
        encoder(src.float(), src_lens)
    with pytest.raises(ValueError, match=r"X must have shape \(B, T\)"):
        encoder(src[None], src_lens)
    with pytest.raises(ValueError, match=r"ids in \[0, 11\)"):
        encoder(src + SRC_V, src_lens)
    with pytest.raises(
        ValueError, match=r"valid_lens must have shape \(B,\)=\(3,\)"
    ):
        encoder(src, src_lens[:2])
    with pytest.raises(ValueError, match="valid_lens must be <= 7"):
        encoder(src, src_lens + 10)
    with pytest.raises(ValueError, match="valid_lens must be >= 0"):
        encoder(src, src_lens - 10)
    with pytest.raises(TypeError, match="valid_lens must hold integers"):
        encoder(src, src_lens.float())

    enc_outputs = encoder(src, src_lens)
    with pytest.raises(
        ValueError, match=r"enc_outputs must have shape \(B, T, 16\)"
    ):
        decoder.init_state(enc_outputs[..., :4], src_lens)
    with pytest.raises(ValueError, match="enc_valid_lens must be <= 7"):
        decoder.init_state(enc_outputs, src_lens + 10)
    state = decoder.init_state(enc_outputs, src_lens)
    with pytest.raises(TypeError, match="state must be the DecoderState"):
        decoder(tgt, list(state))
    with pytest.raises(ValueError, match="state.caches must hold num_blks=2"):
        decoder(tgt, state._replace(caches=(None,)))
    with pytest.raises(ValueError, match="B=3 as in the state"):
        decoder(tgt[:2], state)
    with pytest.raises(
        ValueError, match=r"tgt_valid_lens must have shape \(B,\)"
    ):
        decoder(tgt, state, tgt_valid_lens=torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="max_len"):
        short = TransformerDecoder(TGT_V, D, FFN, H, 1, 0.0, max_len=4)
        short(
            tgt[:, :3],
            short(tgt[:, :3], short.init_state(enc_outputs, src_lens))[1],
        )


def test_stacks_check_the_length_against_max_len_before_embedding():
    torch.manual_seed(0)
    encoder = TransformerEncoder(SRC_V, D, FFN, H, 1, 0.0, max_len=4)
    decoder = TransformerDecoder(TGT_V, D, FFN, H, 1, 0.0, max_len=4)
    src = torch.randint(0, SRC_V, (2, 5))
    with pytest.raises(ValueError, match=r"X must have shape .*max_len=4"):
        encoder(src)  # named for the caller's X, not "offset + T"
    state = decoder.init_state(encoder(src[:, :4]), None)
    tgt = torch.randint(0, TGT_V, (2, 3))
    _, state = decoder(tgt, state)  # 3 positions cached
    with pytest.raises(ValueError, match=r"X \(B, Q=2\) after the 3"):
        decoder(tgt[:, :2], state)
    Y, _ = decoder(tgt[:, :1], state)  # 3 + 1 = max_len still fits
    assert Y.shape == (2, 1, TGT_V)
