"""course_pkg.models.llama against Hugging Face's LlamaForCausalLM (Llama 3 RoPE scaling),
Qwen3ForCausalLM (QK-norm, and heads of their own width), MistralForCausalLM (sliding
window), MixtralForCausalLM and Qwen3MoeForCausalLM (experts in every block; the router's
logits compared too), with converted weights.

Peers nobody here wrote. They are built from tiny random configs (V 50, D 32, 4 heads, 2 KV
heads, 2 blocks; never from_pretrained), their weights redrawn larger than their 0.02
initialisation so that every option changes the logits visibly, and run in float64 with SDPA.
Hugging Face keeps two float32 steps even in float64: every RMSNorm casts its input to float32
(``hidden_states.to(torch.float32)``), and RoPE's angles are computed from a float32 inverse
frequency and float32 positions (``.float()``). Ours stay float64. So the logits are compared
with a bound at that float32 level, measured (PARITY_MEASURED) and set ~10x above; each
option's wrong variant (scaling, QK-norm or window off) is shown to miss that bound by far.
A second comparison does their two float32 steps in float64 (``in_float64``, on the instance)
and bounds the difference at 1e-12; Llama 3's frequencies are checked against their function
on their own. Our cached decoding is compared with our uncached forward in float64 at 1e-12.
"""

from __future__ import annotations

import types

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from course_pkg.models.llama import (
    Llama,
    LlamaAttention,
    LlamaBlock,
    llama_from_hf,
    llama_to_hf,
)
from course_pkg.nn.rope_scaling import (
    Llama3RotaryEmbedding,
    llama3_inverse_frequency,
)
from tests import hf_peers
from tests.hf_peers import redraw

V, D, F, H, G, N = 50, 32, 64, 4, 2, 2
MAX_LEN = 128
# Llama 3's original_max_position_embeddings: the test runs past it
ORIGINAL = 64
T = 80
WINDOW = 12  # Mistral's window, well below T
EPS = 1e-6
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
# d = 8, base 10000: wavelengths 6.3, 63, 628, 6283 against L / 4 = 16 and L = 64: one pair
# kept, one blended, two divided by 8 (every branch of the scaling).

# measured max |ours - theirs| over the logits (float32 steps inside theirs); bound ~10x
# (2 x 80 positions; the logits reach 4.5). The wrong variants give 2.9 to 6.2.
PARITY_MEASURED = {"llama3": 6.4e-6, "qwen3": 1.3e-6, "mistral": 2.6e-6}
PARITY_BOUND = 6e-5
# their float32 steps done in float64 (in_float64): measured 8.8e-15 (llama3), 5.6e-15
# (qwen3), 7.5e-15 (mistral); also ours cached against ours uncached
EXACT_BOUND = 1e-12
# Llama 3's frequencies, ours (float64) against theirs (float32): relative 4.7e-8 measured
FREQUENCY_BOUND = 5e-7
KINDS = ("llama3", "qwen3", "mistral")


def hf_model(
    kind: str, seed: int = 0, head_dim: int = D // H
) -> torch.nn.Module:
    """Hugging Face's model of that kind, float64, eval, weights redrawn from seed."""
    common = dict(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_attention_heads=H,
        num_key_value_heads=G, num_hidden_layers=N, max_position_embeddings=MAX_LEN,
        rms_norm_eps=EPS, tie_word_embeddings=False, head_dim=head_dim,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    plain = {"rope_type": "default", "rope_theta": 10000.0}
    if kind == "llama3":
        rope = {
            "rope_type": "llama3", "rope_theta": 10000.0,
            "original_max_position_embeddings": ORIGINAL, **LLAMA3,
        }  # fmt: skip
        model = LlamaForCausalLM(LlamaConfig(**common, rope_parameters=rope))
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, rope_parameters=plain))
    else:
        config = MistralConfig(
            **common, rope_parameters=plain, sliding_window=WINDOW
        )
        model = MistralForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return redraw(model.to(torch.float64).eval(), seed)


def float64_llama(**options) -> Llama:
    """Our Llama of this file's sizes with those options, in float64, in eval mode."""
    model = Llama(V, D, F, H, N, G, max_len=MAX_LEN, **options)
    return model.to(torch.float64).eval()


def our_model(kind: str, **change) -> Llama:
    """Our Llama of that kind (float64), options overridden by ``change``."""
    options = dict(
        rope_type="llama3" if kind == "llama3" else "default",
        rope_factor=LLAMA3["factor"],
        rope_low_freq_factor=LLAMA3["low_freq_factor"],
        rope_high_freq_factor=LLAMA3["high_freq_factor"],
        rope_original_max_len=ORIGINAL,
        qk_norm=kind == "qwen3",
        sliding_window=WINDOW if kind == "mistral" else None,
        norm_eps=EPS,
    )
    options.update(change)
    return float64_llama(**options)


def in_float64(model: torch.nn.Module) -> torch.nn.Module:
    """Their model with its two float32 steps done in float64, on this instance only: every
    RMSNorm without the cast, and RoPE's angles from float64 positions and a float64 inverse
    frequency (their default formula, or for Llama 3 ours, which
    test_llama3_frequencies_equal_hugging_face checks against theirs)."""

    def norm(self, X):
        mean_square = X.pow(2).mean(-1, keepdim=True)
        return self.weight * (
            X * torch.rsqrt(mean_square + self.variance_epsilon)
        )

    def rope(self, X, position_ids):
        angles = position_ids[..., None].to(X.dtype) * self.inv_freq.to(
            X.dtype
        )
        angles = torch.cat((angles, angles), dim=-1)
        return (
            angles.cos() * self.attention_scaling,
            angles.sin() * self.attention_scaling,
        )

    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(norm, module)
    rotary = model.model.rotary_emb
    d = model.config.head_dim
    if model.config.rope_parameters["rope_type"] == "llama3":
        frequency = llama3_inverse_frequency(
            d, 10000.0, original_max_len=ORIGINAL, **LLAMA3
        )
    else:
        pairs = torch.arange(0, d, 2, dtype=torch.float64)
        frequency = 1.0 / (10000.0 ** (pairs / d))
    rotary.inv_freq = frequency
    rotary.forward = types.MethodType(rope, rotary)
    return model


def tokens(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return hf_peers.tokens(V, batch, length, seed)


def loaded(kind: str, theirs: torch.nn.Module, **change) -> Llama:
    ours = our_model(kind, **change)
    state = llama_from_hf(theirs.state_dict(), num_heads=H)
    if not ours.qk_norm:  # a wrong variant without QK-norm drops those gains
        state = {k: v for k, v in state.items() if ".norm.weight" not in k}
    ours.load_state_dict(state)
    return ours


def logit_difference(kind: str, exact: bool = False, **change) -> float:
    theirs = in_float64(hf_model(kind)) if exact else hf_model(kind)
    ours = loaded(kind, theirs, **change)
    X = tokens()
    with torch.no_grad():
        expected = theirs(X).logits
        got = ours(X)
    return (got - expected).abs().max().item()


@pytest.mark.numerics
@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_hugging_face(kind):
    assert logit_difference(kind) <= PARITY_BOUND


@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_hugging_face_in_float64_throughout(kind):
    assert logit_difference(kind, exact=True) <= EXACT_BOUND


def test_qwen3_heads_of_their_own_width_equal_hugging_face():
    # Qwen3's published models have head_dim 128 whatever D / H is (0.6B: D 1024, 16 heads
    # of 128): here heads of 12 in a model of D / H = 8, so H d = 48 != D = 32.
    theirs = in_float64(hf_model("qwen3", head_dim=12))
    ours = Llama(V, D, F, H, N, G, max_len=MAX_LEN, qk_norm=True, norm_eps=EPS,
                 head_width=12).to(torch.float64).eval()  # fmt: skip
    state = llama_from_hf(theirs.state_dict(), num_heads=H)
    ours.load_state_dict(state)
    assert ours.blks[0].attention.W_q.weight.shape == (H * 12, D)
    assert ours.blks[0].attention.W_o.weight.shape == (D, H * 12)
    X = tokens()
    with torch.no_grad():
        assert (ours(X) - theirs(X).logits).abs().max() <= EXACT_BOUND
    back = llama_to_hf(ours.state_dict(), num_heads=H)
    for name, tensor in theirs.state_dict().items():
        assert torch.equal(back[name], tensor), name
    # the head width comes from the query projection's H d rows and num_heads
    with pytest.raises(ValueError, match="even width"):
        llama_from_hf(theirs.state_dict(), num_heads=5)


def test_llama3_frequencies_equal_hugging_face():
    config = hf_model("llama3").config
    theirs, scaling = ROPE_INIT_FUNCTIONS["llama3"](config)  # float32
    ours = llama3_inverse_frequency(
        D // H, 10000.0, original_max_len=ORIGINAL, **LLAMA3
    )
    plain = 10000.0 ** (
        -torch.arange(0, D // H, 2, dtype=torch.float64) / (D // H)
    )
    assert scaling == 1.0
    # theirs is float32 (see FREQUENCY_BOUND); every branch of the scaling is taken
    relative = ((ours - theirs.double()) / ours).abs().max().item()
    assert relative <= FREQUENCY_BOUND
    assert ours[0] == plain[0]  # the fast pair is kept
    assert torch.allclose(
        ours[2:], plain[2:] / LLAMA3["factor"]
    )  # the slow ones divided
    assert plain[1] / LLAMA3["factor"] < ours[1] < plain[1]  # one blended


@pytest.mark.parametrize(
    ("kind", "wrong"),
    [
        ("llama3", dict(rope_type="default")),  # scaling off
        ("llama3", dict(rope_factor=4.0)),  # another factor
        ("qwen3", dict(qk_norm=False)),  # QK-norm off
        ("mistral", dict(sliding_window=None)),  # window off
        ("mistral", dict(sliding_window=WINDOW + 1)),  # window one too wide
    ],
)
def test_wrong_variants_miss_the_bound(kind, wrong):
    assert logit_difference(kind, **wrong) > 100 * PARITY_BOUND


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_is_exact(kind):
    state = hf_model(kind).state_dict()
    back = llama_to_hf(llama_from_hf(state, num_heads=H), num_heads=H)
    hf_peers.assert_same_state(back, state)
    ours = our_model(kind).state_dict()
    again = llama_from_hf(llama_to_hf(ours, num_heads=H), num_heads=H)
    hf_peers.assert_same_state(again, ours)


@pytest.mark.parametrize("kind", KINDS)
def test_cached_chunks_equal_one_forward(kind, float64):
    ours = our_model(kind)
    assert hf_peers.chunked_gap(ours, tokens(), 30, 31) <= EXACT_BOUND


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_equals_hugging_face(kind):
    theirs = hf_model(kind)
    prompt = tokens(length=40)
    hf_peers.assert_greedy_equals_theirs(
        loaded(kind, theirs), theirs, prompt, 40
    )


def _meta_cases():
    """(module, inputs) for each new nn.Module, built on the meta device."""
    X = torch.zeros(2, 5, 8)
    return {
        "Llama": (
            Llama(
                V, 8, 16, 2, 2, 1, rope_type="llama3",
                rope_original_max_len=4, qk_norm=True, sliding_window=3,
            ),
            (torch.zeros(2, 7, dtype=torch.long),),
        ),
        "LlamaBlock": (LlamaBlock(8, 16, 2, 1, qk_norm=True), (X,)),
        "LlamaAttention": (
            LlamaAttention(8, 2, 1, qk_norm=True, sliding_window=2),
            (X, X, X),
        ),
        "Llama3RotaryEmbedding": (
            Llama3RotaryEmbedding(4, original_max_len=4),
            (torch.zeros(2, 2, 5, 4, requires_grad=True),),
        ),
    }  # fmt: skip


@pytest.mark.parametrize(
    "name", ["Llama", "LlamaBlock", "LlamaAttention", "Llama3RotaryEmbedding"]
)
def test_meta_forward_and_backward(name):
    with torch.device("meta"):
        module, inputs = _meta_cases()[name]
        kwargs = {"causal": True} if name == "LlamaAttention" else {}
        out = module(*inputs, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    grads = [p.grad for p in module.parameters()] or [inputs[0].grad]
    assert all(g is not None and g.device.type == "meta" for g in grads)


@pytest.mark.parametrize(
    ("change", "error", "name"),
    [
        (dict(num_kv_heads=3), ValueError, "num_kv_heads"),
        (dict(num_kv_heads=2.0), TypeError, "num_kv_heads"),
        (
            dict(num_heads=5, num_kv_heads=1),
            ValueError,
            "num_heads",
        ),  # 5 does not divide D
        (
            dict(num_hiddens=12),
            ValueError,
            "num_heads",
        ),  # d = 3: RoPE needs it even
        (dict(sliding_window=-1), ValueError, "sliding_window"),
        (dict(sliding_window=0), ValueError, "sliding_window"),
        (dict(sliding_window=2.5), TypeError, "sliding_window"),
        (dict(sliding_window=4, dropout=0.1), ValueError, "dropout"),
        (dict(rope_type="yarn"), ValueError, "rope_type"),
        (dict(rope_type="llama3", rope_factor=0.5), ValueError, "rope_factor"),
        (
            dict(rope_type="llama3", rope_high_freq_factor=1.0),
            ValueError,
            "rope_high_freq_factor",
        ),
        (
            dict(rope_type="llama3", rope_original_max_len=0),
            ValueError,
            "rope_original_max_len",
        ),
        (dict(rope_base=1.0), ValueError, "rope_base"),
        (dict(rope_base="10000"), TypeError, "rope_base"),
        (dict(qk_norm=1), TypeError, "qk_norm"),
        (dict(norm_eps=-1e-6), ValueError, "norm_eps"),
        (dict(vocab_size=0), ValueError, "vocab_size"),
    ],
)
def test_bad_configs_are_refused(change, error, name):
    sizes = dict(
        vocab_size=V, num_hiddens=D, ffn_num_hiddens=F, num_heads=H, num_blks=N,
        num_kv_heads=G,
    )  # fmt: skip
    sizes.update(change)
    with pytest.raises(error, match=name):
        Llama(**sizes)


def test_bad_converter_input_is_refused():
    state = hf_model("llama3").state_dict()
    with pytest.raises(TypeError, match="state_dict"):
        llama_from_hf([("a", torch.zeros(1))], num_heads=H)
    with pytest.raises(ValueError, match="num_heads"):
        llama_from_hf(state, num_heads=3)
    with pytest.raises(TypeError, match="num_heads"):
        llama_from_hf(state, num_heads=4.0)
    missing = {
        k: v
        for k, v in state.items()
        if k != "model.layers.1.mlp.up_proj.weight"
    }
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj.weight"):
        llama_from_hf(missing, num_heads=H)
    bad = dict(state)
    bad["model.layers.0.self_attn.o_proj.weight"] = torch.zeros(D, D + 1)
    with pytest.raises(ValueError, match="o_proj"):
        llama_from_hf(bad, num_heads=H)
    extra = {**state, "model.layers.0.self_attn.q_proj.bias": torch.zeros(D)}
    with pytest.raises(ValueError, match="q_proj.bias"):
        llama_from_hf(extra, num_heads=H)


def test_windowed_model_refuses_valid_lens():
    model = our_model("mistral")
    with pytest.raises(ValueError, match="valid_lens"):
        model(tokens(length=5), torch.tensor([5, 3]))


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: llama3_inverse_frequency(3), ValueError, "head_width"),
        (lambda: llama3_inverse_frequency(4, 1.0), ValueError, "base"),
        (
            lambda: llama3_inverse_frequency(4, factor=0.5),
            ValueError,
            "factor",
        ),
        (
            lambda: llama3_inverse_frequency(4, low_freq_factor=4.0),
            ValueError,
            "high_freq_factor",
        ),
        (
            lambda: llama3_inverse_frequency(4, original_max_len=8.0),
            TypeError,
            "original_max_len",
        ),
        (
            lambda: llama3_inverse_frequency(4, dtype=torch.int64),
            TypeError,
            "dtype",
        ),
        (lambda: Llama3RotaryEmbedding(4, factor=-1), ValueError, "factor"),
        (lambda: LlamaAttention(8, 3), ValueError, "num_heads"),
        (
            lambda: LlamaAttention(8, 2, rotary=Llama3RotaryEmbedding(2)),
            ValueError,
            "rotary",
        ),
        (lambda: LlamaAttention(8, 2, rotary="rope"), TypeError, "rotary"),
        (lambda: LlamaAttention(8, 2, sliding_window=0), ValueError, "window"),
        (lambda: LlamaBlock(8, 0, 2), ValueError, "ffn_num_hiddens"),
    ],
)
def test_bad_arguments_of_the_parts_are_refused(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_windowed_attention_is_causal_only():
    attention = LlamaAttention(8, 2, sliding_window=2)
    X = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="causal"):
        attention(X, X, X)
    with pytest.raises(ValueError, match="valid_lens"):
        attention(X, X, X, torch.tensor([5, 3]), causal=True)


# ----------------------------------------------------------------------------- mixtures of experts

E, K = 4, 2  # experts, experts a token
MOE_KINDS = ("mixtral", "qwen3_moe")
# measured max |ours - theirs| over the logits as they run (float32 norms, RoPE and router
# softmax inside theirs; the same on the default and AVX2 paths and on 2 threads); bound
# ~10x. The wrong variants give 2.4 to 4.2. With their float32
# steps in float64 (router_in_float64): logits 7.5e-15, router logits 4.2e-15 (EXACT_BOUND).
MOE_PARITY_MEASURED = {"mixtral": 3.5e-6, "qwen3_moe": 1.8e-6}
MOE_PARITY_BOUND = 4e-5


def hf_moe(kind: str, seed: int = 0) -> torch.nn.Module:
    """Hugging Face's Mixtral or Qwen3-MoE (Qwen3's QK-norm, gates not renormalised),
    experts in every block, float64, eval, weights redrawn from seed."""
    common = dict(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_attention_heads=H,
        num_key_value_heads=G, num_hidden_layers=N, max_position_embeddings=MAX_LEN,
        rms_norm_eps=EPS, tie_word_embeddings=False, head_dim=D // H,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        num_experts_per_tok=K, experts_implementation="eager",
    )  # fmt: skip
    if kind == "mixtral":
        config = MixtralConfig(
            **common, num_local_experts=E, sliding_window=None
        )
        model = MixtralForCausalLM(config)
    else:
        config = Qwen3MoeConfig(
            **common, num_experts=E, moe_intermediate_size=F,
            norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
        )  # fmt: skip
        model = Qwen3MoeForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return redraw(model.to(torch.float64).eval(), seed)


def our_moe(kind: str, **change) -> Llama:
    options = dict(
        qk_norm=kind == "qwen3_moe", norm_eps=EPS, num_experts=E, top_k=K,
        norm_topk_prob=kind == "mixtral",
    )  # fmt: skip
    options.update(change)
    return float64_llama(**options)


def router_in_float64(model: torch.nn.Module) -> torch.nn.Module:
    """in_float64, and their routers' softmax (float32 in theirs) in float64."""

    def route(self, hidden):
        logits = torch.nn.functional.linear(
            hidden.reshape(-1, self.hidden_dim), self.weight
        )
        gates, chosen = logits.softmax(-1).topk(self.top_k, dim=-1)
        if getattr(
            self, "norm_topk_prob", True
        ):  # Mixtral always renormalises
            gates = gates / gates.sum(-1, keepdim=True)
        return logits, gates, chosen

    for module in model.modules():
        if type(module).__name__.endswith("TopKRouter"):
            module.forward = types.MethodType(route, module)
    return in_float64(model)


def moe_differences(
    kind: str, exact: bool = False, **change
) -> tuple[float, float]:
    """Max |ours - theirs| over the logits, and over every block's router logits."""
    theirs = router_in_float64(hf_moe(kind)) if exact else hf_moe(kind)
    ours = our_moe(kind, **change)
    ours.load_state_dict(llama_from_hf(theirs.state_dict(), num_heads=H))
    return hf_peers.logit_and_router_gaps(ours, theirs, tokens())


@pytest.mark.numerics
@pytest.mark.parametrize("kind", MOE_KINDS)
def test_moe_logits_equal_hugging_face(kind):
    logits, _ = moe_differences(kind)
    assert logits <= MOE_PARITY_BOUND


@pytest.mark.parametrize("kind", MOE_KINDS)
def test_moe_logits_and_router_logits_equal_hugging_face_in_float64(kind):
    logits, routers = moe_differences(kind, exact=True)
    assert logits <= EXACT_BOUND
    assert routers <= EXACT_BOUND


@pytest.mark.parametrize(
    ("kind", "wrong"),
    [
        ("mixtral", dict(top_k=1)),  # one expert a token instead of two
        ("qwen3_moe", dict(top_k=1)),
        ("mixtral", dict(norm_topk_prob=False)),  # gates not renormalised
        ("qwen3_moe", dict(norm_topk_prob=True)),
    ],
)
def test_moe_wrong_variants_miss_the_bound(kind, wrong):
    logits, _ = moe_differences(kind, **wrong)
    assert logits > 100 * MOE_PARITY_BOUND


@pytest.mark.parametrize("kind", MOE_KINDS)
def test_moe_round_trip_is_exact_and_loads_into_hugging_face(kind):
    theirs = hf_moe(kind)
    state = theirs.state_dict()
    back = llama_to_hf(llama_from_hf(state, num_heads=H), num_heads=H)
    hf_peers.assert_same_state(back, state)
    ours = our_moe(kind)
    theirs.load_state_dict(llama_to_hf(ours.state_dict(), num_heads=H))
    X = tokens()
    with torch.no_grad():
        assert (ours(X) - theirs(X).logits).abs().max() <= MOE_PARITY_BOUND


@pytest.mark.parametrize("kind", MOE_KINDS)
def test_moe_greedy_generation_equals_hugging_face(kind):
    theirs = hf_moe(kind)
    ours = our_moe(kind)
    ours.load_state_dict(llama_from_hf(theirs.state_dict(), num_heads=H))
    prompt = tokens(length=20)
    hf_peers.assert_greedy_equals_theirs(ours, theirs, prompt, 30)


def test_moe_model_on_meta_and_its_refusals():
    with torch.device("meta"):
        model = Llama(V, 8, 16, 2, 2, 1, num_experts=3, top_k=2)
        model(torch.zeros(2, 5, dtype=torch.long)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert len(model.router_logits) == 2
    with pytest.raises(ValueError, match="top_k"):
        Llama(V, D, F, H, N, G, num_experts=2, top_k=3)
    with pytest.raises(TypeError, match="norm_topk_prob"):
        Llama(V, D, F, H, N, G, num_experts=2, norm_topk_prob=1)
    with pytest.raises(ValueError, match="ffn must be 'swiglu'"):
        LlamaBlock(D, F, H, G, ffn="geglu", num_experts=2)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fused_path_equals_the_explicit_one(kind):
    # need_weights=False takes scaled_dot_product_attention (with the window's band for
    # Mistral); float64, uncached and cached
    ours = our_model(kind)
    X = tokens()
    with torch.no_grad():
        explicit = ours(X, need_weights=True)
        fused = ours(X, need_weights=False)
        first, cache = ours.forward_with_cache(X[:, :30], need_weights=False)
        second, cache = ours.forward_with_cache(
            X[:, 30:31], cache, need_weights=False
        )  # one query alone
        third, _ = ours.forward_with_cache(
            X[:, 31:], cache, need_weights=False
        )
    assert all(w is None for w in ours.attention_weights)
    assert (fused - explicit).abs().max() <= EXACT_BOUND
    chunks = torch.cat([first, second, third], 1)
    assert (chunks - explicit).abs().max() <= EXACT_BOUND
