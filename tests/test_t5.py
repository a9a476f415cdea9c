"""course_pkg.models.t5 against Hugging Face's T5ForConditionalGeneration (v1.1: gated-gelu,
untied head), with converted weights.

A peer nobody here wrote, from a tiny random config (never from_pretrained): V 50, D 32,
4 heads of 12 (H d = 48 != D), FFN 64, 2 blocks a stack, 8 buckets up to a distance of 20
on sources of 30 and targets of 25 (so that far positions share buckets), padded sources.
Weights redrawn (matrices std 0.2, norm gains 1 + 0.2 N(0, 1)), float64, eager attention.

Hugging Face keeps float32 steps even in float64: T5LayerNorm's variance and the
attention's softmax (``scores.float()``) are float32. Ours stay float64, so the logits are
compared at that level (measured, bound ~10x), with the bias, the buckets, the missing
1/sqrt(d) and the causal mask each shown to matter by a wrong variant that misses it far.
"""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration

from course_pkg.models.t5 import T5, t5_from_hf, t5_to_hf
from tests import hf_peers
from tests._helpers import assert_backward_reaches_every_parameter_on_meta
from tests.hf_peers import redraw

V, D, F, H, HEAD, N = 50, 32, 64, 4, 12, 2
BUCKETS, DISTANCE = 8, 20
S, T = 30, 25

# measured max |ours - theirs| over the logits with their float32 steps: 4.7e-6 (the same on
# the default and AVX2 paths and on 2 threads); bound ~10x. The wrong variants (other
# buckets, another max distance, no bias, the padding seen) give 2.0 to 4.6.
PARITY_MEASURED = 4.7e-6
PARITY_BOUND = 5e-5


def hf_model(seed: int = 0) -> torch.nn.Module:
    config = T5Config(
        vocab_size=V, d_model=D, d_kv=HEAD, d_ff=F, num_layers=N, num_decoder_layers=N,
        num_heads=H, relative_attention_num_buckets=BUCKETS,
        relative_attention_max_distance=DISTANCE, dropout_rate=0.0,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    model = T5ForConditionalGeneration(config)
    model.config._attn_implementation = "eager"
    return redraw(model.to(torch.float64).eval(), seed)


def our_model(**change) -> T5:
    options = dict(num_buckets=BUCKETS, max_distance=DISTANCE)
    options.update(change)
    return T5(V, D, F, H, HEAD, N, **options).to(torch.float64).eval()


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = hf_peers.tokens(V, 2, S, seed=1)
    tgt = hf_peers.tokens(V, 2, T, seed=2)
    lens = torch.tensor([S, 17])
    return src, tgt, lens


def their_logits(theirs: torch.nn.Module) -> torch.Tensor:
    """Their logits on inputs(), the source's padding masked."""
    src, tgt, lens = inputs()
    mask = (torch.arange(S)[None] < lens[:, None]).long()
    with torch.no_grad():
        return theirs(
            input_ids=src, attention_mask=mask, decoder_input_ids=tgt
        ).logits


def loaded(theirs: torch.nn.Module, **change) -> T5:
    ours = our_model(**change)
    ours.load_state_dict(t5_from_hf(theirs.state_dict()))
    return ours


def difference(theirs=None, **change) -> float:
    theirs = hf_model() if theirs is None else theirs
    ours = loaded(theirs, **change)
    src, tgt, lens = inputs()
    with torch.no_grad():
        got = ours(src, tgt, lens)
    return hf_peers.gap(got, their_logits(theirs))


@pytest.mark.numerics
def test_logits_equal_hugging_face():
    assert difference() <= PARITY_BOUND


@pytest.mark.parametrize(
    "wrong",
    [
        dict(num_buckets=16),  # other buckets
        dict(max_distance=40),  # another distance where the log buckets end
    ],
)
def test_wrong_buckets_miss_the_bound(wrong):
    theirs = hf_model()
    ours = our_model(**wrong)
    state = t5_from_hf(theirs.state_dict())
    for stack in ("encoder", "decoder"):  # as many rows as the wrong model has
        name = f"{stack}.relative_bias.embedding.weight"
        rows = ours.state_dict()[name].shape[0]
        state[name] = torch.cat([state[name]] * 2)[:rows]
    ours.load_state_dict(state)
    src, tgt, lens = inputs()
    with torch.no_grad():
        got = ours(src, tgt, lens)
    assert hf_peers.gap(got, their_logits(theirs)) > 100 * PARITY_BOUND


def test_the_bias_the_scale_and_the_padding_matter():
    theirs = hf_model()
    ours = loaded(theirs)
    expected = their_logits(theirs)
    src, tgt, lens = inputs()
    with torch.no_grad():
        no_padding = ours(src, tgt)  # the padded source seen
        ours.encoder.relative_bias.embedding.weight.zero_()  # no positions
        no_bias = ours(src, tgt, lens)
    assert (no_padding - expected).abs().max() > 100 * PARITY_BOUND
    assert (no_bias - expected).abs().max() > 100 * PARITY_BOUND


def test_a_target_position_never_sees_a_later_one():
    ours = our_model()
    src, tgt, lens = inputs()
    changed = tgt.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % V
    with torch.no_grad():
        a, b = ours(src, tgt, lens), ours(src, changed, lens)
    assert (a[:, :10] - b[:, :10]).abs().max() == 0
    assert (a[:, 10:] - b[:, 10:]).abs().max() > 0


def test_round_trip_is_exact():
    state = hf_model().state_dict()
    copies = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    hf_peers.assert_same_state(t5_to_hf(t5_from_hf(state)), state, copies)
    ours = our_model().state_dict()
    hf_peers.assert_same_state(t5_from_hf(t5_to_hf(ours)), ours)


def test_greedy_decoding_equals_hugging_face():
    theirs = hf_model()
    ours = loaded(theirs)
    src, _, _ = inputs()
    with torch.no_grad():
        expected = theirs.generate(
            src, max_new_tokens=12, do_sample=False, min_new_tokens=12
        )
        tgt = torch.zeros(2, 1, dtype=torch.long)  # the start token
        for _ in range(12):
            tgt = torch.cat(
                [tgt, ours(src, tgt)[:, -1].argmax(-1, keepdim=True)], 1
            )
    assert torch.equal(tgt, expected)


def test_meta_forward_and_backward():
    with torch.device("meta"):
        model = T5(V, 8, 16, 2, 3, 1, num_buckets=4, max_distance=8)
        src = torch.zeros(2, 7, dtype=torch.long)
        out = model(src, src[:, :5], torch.tensor([7, 3])).sum()
    assert_backward_reaches_every_parameter_on_meta(out, model)


@pytest.mark.parametrize(
    ("change", "error", "name"),
    [
        (dict(num_buckets=0), ValueError, "num_buckets"),
        (dict(norm_eps=-1.0), ValueError, "norm_eps"),
    ],
)
def test_bad_configs_are_refused(change, error, name):
    with pytest.raises(error, match=name):
        our_model(**change)


def test_bad_inputs_are_refused():
    ours = our_model()
    src, tgt, lens = inputs()
    with pytest.raises(ValueError, match="tgt"):
        ours(src, tgt[:1])
    with pytest.raises(ValueError, match="src"):
        ours(src + V, tgt)
    with pytest.raises(ValueError, match="src_valid_lens"):
        ours(src, tgt, torch.tensor([S + 1, 2]))
    state = hf_model().state_dict()
    state["encoder.embed_tokens.weight"] = state["shared.weight"] + 1
    with pytest.raises(ValueError, match="embed_tokens"):
        t5_from_hf(state)
