"""Every nn.Module in course_pkg runs forward and backward on cpu, meta and (when present) cuda.

The list of modules is discovered from the package, and the test fails if a module has no entry
in FORWARDS: a new layer cannot slip in untested on the data-less ``meta`` device, which is what
catches a tensor created on the CPU inside a module (it would fail to mix with meta tensors).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
from torch import nn

import course_pkg
from course_pkg.experiments import toy_tasks
from course_pkg.models import (
    bert,
    deepseek,
    encoder_decoder,
    gemma,
    gpt,
    llama,
    seq2seq,
    t5,
)
from course_pkg.models.captioner import GridEncoder, ImageCaptioner
from course_pkg.models.convnet import ConvNet
from course_pkg.models.gpt2 import GPT2, GPT2Block
from course_pkg.models.kernel_lm import (
    KernelBlock,
    KernelLM,
    KernelSelfAttention,
)
from course_pkg.models.luong import LuongAttentionDecoder
from course_pkg.models.nadaraya_watson import NWKernelRegression
from course_pkg.models.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
)
from course_pkg.models.variant_gpt import VariantBlock, VariantGPT
from course_pkg.models.vit import PatchEmbedding, ViT, ViTBlock
from course_pkg.nn import blocks, modern_blocks, positional, scoring
from course_pkg.nn.attention import MultiHeadAttention
from course_pkg.nn.grouped_query import GroupedQueryAttention
from course_pkg.nn.latent_attention import MultiHeadLatentAttention
from course_pkg.nn.linear_attention import LinearAttention
from course_pkg.nn.moe import DeepSeekMoE, MoEFeedForward
from course_pkg.nn.relative_position import RelativePositionBias
from course_pkg.nn.rope_scaling import Llama3RotaryEmbedding
from course_pkg.nn.rotary import RotaryEmbedding
from tests._helpers import TINY_DECODER, tiny_deepseek_v3

ABSTRACT = {
    encoder_decoder.Encoder,
    encoder_decoder.Decoder,
    scoring.ScoredAttention,
    seq2seq.AttentionGRUDecoder,
    blocks.EmbeddingStack,
}


def _all_module_classes() -> set[type]:
    found = set()
    for info in pkgutil.walk_packages(course_pkg.__path__, "course_pkg."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, nn.Module)
                and obj.__module__ == module.__name__
            ):
                found.add(obj)
    return found - ABSTRACT


def _tokens(device, batch=2, steps=5, vocab=11):
    return torch.randint(0, vocab, (batch, steps)).to(
        device
    )  # ids drawn on the CPU: meta has no RNG data


def _x(device, *shape):
    return torch.randn(*shape, device=device, requires_grad=True)


def _lens(device, *values):
    return torch.tensor(values, device=device)


def _multihead(make_layer, **options):
    """A run of a multi-head layer of width 8: 3 queries over 6 keys."""

    def run(device):
        return make_layer().to(device)(
            _x(device, 2, 3, 8),
            _x(device, 2, 6, 8),
            _x(device, 2, 6, 8),
            _lens(device, 6, 2),
            **options,
        )

    return run


def _seq2seq(decoder_cls):
    def run(device):
        model = encoder_decoder.EncoderDecoder(
            seq2seq.Seq2SeqEncoder(11, 6, 8, 2, 0.1),
            decoder_cls(13, 6, 8, 2, 0.1),
        ).to(device)
        return model(
            _tokens(device), _tokens(device, vocab=13), _lens(device, 5, 3)
        )

    return run


def _decoder_block(device):
    block = blocks.TransformerDecoderBlock(8, 16, 2, 0.1, 0).to(device)
    state = blocks.DecoderState(
        _x(device, 2, 4, 8), _lens(device, 4, 2), (None,), 0
    )
    return block(_x(device, 2, 3, 8), state)[0]


def _transformer_decoder(device):
    decoder = TransformerDecoder(13, 8, 16, 2, 2, 0.1).to(device)
    state = decoder.init_state(_x(device, 2, 4, 8), _lens(device, 4, 1))
    return decoder(_tokens(device, vocab=13), state)[0]


def _bert_inputs(device):
    return _tokens(device), _tokens(device, vocab=2), _lens(device, 5, 2)


def _gpt_block(device):
    block = gpt.GPTBlock(8, 16, 2, 0.1).to(device)
    # a decoding step: 3 new positions after a cache of 4
    past = block.attention.cache(_x(device, 2, 4, 8), _x(device, 2, 4, 8))
    return block(_x(device, 2, 3, 8), past, need_weights=False)[0]


def _gpt2_block(device):
    block = GPT2Block(8, 16, 2, 0.1).to(device)
    # a decoding step: 3 new positions after a cache of 4, 2 of them padding
    past = block.attention.cache(_x(device, 2, 4, 8), _x(device, 2, 4, 8))
    return block(_x(device, 2, 3, 8), past, _lens(device, 7, 5))[0]


def _published_bert(device):
    model = bert.PublishedBERT(11, 8, 2, 2, 7, 0.1).to(device)
    return model.pool(model(*_bert_inputs(device)))


FORWARDS = {
    toy_tasks.NeighbourReader: lambda d: toy_tasks.NeighbourReader(2).to(d)(
        _tokens(d, steps=8, vocab=8)
    ),
    toy_tasks.CopyBack: lambda d: toy_tasks.CopyBack(
        positional.PositionalEncoding(32, 0.1)
    ).to(d)(_tokens(d, vocab=10)),
    scoring.AdditiveAttention: lambda d: scoring.AdditiveAttention(
        5, 0.1, query_size=3, key_size=4
    ).to(d)(_x(d, 2, 3, 3), _x(d, 2, 6, 4), _x(d, 2, 6, 2), _lens(d, 6, 2)),
    scoring.DotProductAttention: lambda d: scoring.DotProductAttention(0.1).to(
        d
    )(_x(d, 2, 3, 4), _x(d, 2, 6, 4), _x(d, 2, 6, 2), _lens(d, 6, 0)),
    scoring.LuongAttention: lambda d: scoring.LuongAttention(
        "general", 3, 4
    ).to(d)(_x(d, 2, 3, 3), _x(d, 2, 6, 4), _x(d, 2, 6, 2), _lens(d, 6, 2)),
    MultiHeadAttention: _multihead(
        lambda: MultiHeadAttention(8, 2, 0.1), need_weights=False
    ),
    positional.PositionalEncoding: lambda d: positional.PositionalEncoding(
        8, 0.1
    ).to(d)(_x(d, 2, 5, 8)),
    positional.LearnedPositionalEncoding: lambda d: (
        positional.LearnedPositionalEncoding(8, 0.1).to(d)(_x(d, 2, 5, 8))
    ),
    NWKernelRegression: lambda d: NWKernelRegression(0.5).to(d)(
        _x(d, 4), _x(d, 7), _x(d, 7)
    ),
    encoder_decoder.EncoderDecoder: _seq2seq(seq2seq.Seq2SeqDecoder),
    seq2seq.Seq2SeqEncoder: lambda d: seq2seq.Seq2SeqEncoder(
        11, 6, 8, 2, 0.1
    ).to(d)(_tokens(d))[0],
    seq2seq.Seq2SeqDecoder: _seq2seq(seq2seq.Seq2SeqDecoder),
    seq2seq.Seq2SeqAttentionDecoder: _seq2seq(seq2seq.Seq2SeqAttentionDecoder),
    LuongAttentionDecoder: _seq2seq(LuongAttentionDecoder),
    blocks.PositionWiseFFN: lambda d: blocks.PositionWiseFFN(16, 8).to(d)(
        _x(d, 2, 5, 8)
    ),
    blocks.AddNorm: lambda d: blocks.AddNorm(8, 0.1).to(d)(
        _x(d, 2, 5, 8), _x(d, 2, 5, 8)
    ),
    blocks.TransformerEncoderBlock: lambda d: blocks.TransformerEncoderBlock(
        8, 16, 2, 0.1
    ).to(d)(_x(d, 2, 5, 8), _lens(d, 5, 2)),
    TransformerEncoder: lambda d: TransformerEncoder(11, 8, 16, 2, 2, 0.1).to(
        d
    )(_tokens(d), _lens(d, 5, 2)),
    blocks.TransformerDecoderBlock: _decoder_block,
    TransformerDecoder: _transformer_decoder,
    Transformer: lambda d: Transformer(11, 13, 8, 16, 2, 2, 0.1).to(d)(
        _tokens(d), _tokens(d, vocab=13), _lens(d, 5, 3)
    ),
    GroupedQueryAttention: _multihead(
        lambda: GroupedQueryAttention(8, 4, 0.1, num_kv_heads=2),
        causal=True,
    ),
    RotaryEmbedding: lambda d: RotaryEmbedding(4).to(d)(
        _x(d, 2, 2, 5, 4), offset=3
    ),
    modern_blocks.RMSNorm: lambda d: modern_blocks.RMSNorm(8).to(d)(
        _x(d, 2, 5, 8)
    ),
    modern_blocks.SwiGLUFFN: lambda d: modern_blocks.SwiGLUFFN(16, 8).to(d)(
        _x(d, 2, 5, 8)
    ),
    modern_blocks.GeGLUFFN: lambda d: modern_blocks.GeGLUFFN(16, 8).to(d)(
        _x(d, 2, 5, 8)
    ),
    modern_blocks.PreNormEncoderBlock: lambda d: (
        modern_blocks.PreNormEncoderBlock(
            8, 16, 4, 0.1, norm="rms", ffn="swiglu", num_kv_heads=2
        ).to(d)(_x(d, 2, 5, 8), _lens(d, 5, 2))
    ),
    bert.BERTEncoder: lambda d: bert.BERTEncoder(
        11, 8, 16, 2, 2, 0.1, max_len=7
    ).to(d)(*_bert_inputs(d)),
    bert.MaskLM: lambda d: bert.MaskLM(11, 8).to(d)(_x(d, 2, 5, 8)),
    bert.CLSClassifier: lambda d: bert.CLSClassifier(8, 3).to(d)(
        _x(d, 2, 5, 8)
    ),
    bert.BERTModel: lambda d: sum(
        out.float().sum()
        for out in bert.BERTModel(11, 8, 16, 2, 2, 0.1, max_len=7).to(d)(
            *_bert_inputs(d)
        )
    ),
    bert.BERTClassifier: lambda d: bert.BERTClassifier(
        bert.BERTEncoder(11, 8, 16, 2, 2, 0.1, max_len=7), 3, pooling="mean"
    ).to(d)(*_bert_inputs(d)),
    gpt.GPT: lambda d: gpt.GPT(11, 8, 16, 2, 2, 0.1).to(d)(_tokens(d)),
    gpt.GPTBlock: _gpt_block,
    GPT2: lambda d: GPT2(11, 8, 2, 2, 7, 0.1).to(d)(
        _tokens(d), _lens(d, 5, 2)
    ),
    GPT2Block: _gpt2_block,
    bert.PublishedBERT: lambda d: _published_bert(d),
    VariantGPT: lambda d: VariantGPT(
        11, 8, 16, 4, 2, 0.1, num_kv_heads=2, norm="rms", placement="pre"
    ).to(d)(_tokens(d)),
    llama.Llama: lambda d: llama.Llama(
        **TINY_DECODER,
        rope_type="llama3",
        rope_original_max_len=4,
        qk_norm=True,
        sliding_window=3,
    ).to(d)(_tokens(d, steps=7)),
    gemma.Gemma3: lambda d: gemma.Gemma3(
        11, 8, 16, 2, 3, 1, 16, head_width=6, sliding_window=2, global_every=2
    ).to(d)(_tokens(d, steps=7)),
    gemma.GemmaBlock: lambda d: gemma.GemmaBlock(
        8, 16, 2, 1, head_width=6, sliding_window=3
    ).to(d)(_x(d, 2, 5, 8))[0],
    llama.LlamaBlock: lambda d: llama.LlamaBlock(8, 16, 2, 1, qk_norm=True).to(
        d
    )(_x(d, 2, 5, 8))[0],
    llama.LlamaAttention: lambda d: llama.LlamaAttention(
        8, 2, 1, qk_norm=True, sliding_window=2
    ).to(d)(_x(d, 2, 5, 8), _x(d, 2, 5, 8), _x(d, 2, 5, 8), causal=True),
    llama._HeadNormLinear: lambda d: llama._HeadNormLinear(8, 2, 4, 1e-6).to(
        d
    )(_x(d, 2, 5, 8)),
    Llama3RotaryEmbedding: lambda d: Llama3RotaryEmbedding(
        4, original_max_len=4
    ).to(d)(_x(d, 2, 2, 5, 4)),
    MultiHeadLatentAttention: lambda d: MultiHeadLatentAttention(
        8, 2, 4, nope_width=2, rope_width=2, value_width=3, q_rank=5
    ).to(d)(_x(d, 2, 5, 8), absorb=True),
    DeepSeekMoE: lambda d: DeepSeekMoE(8, 4, 4, 2, num_groups=2).to(d)(
        _x(d, 2, 5, 8)
    ),
    deepseek.DeepSeekBlock: lambda d: deepseek.DeepSeekBlock(
        8,
        MultiHeadLatentAttention(
            8, 2, 4, nope_width=2, rope_width=2, value_width=3
        ),
        DeepSeekMoE(8, 4, 4, 2),
    ).to(d)(_x(d, 2, 5, 8))[0],
    deepseek.DeepSeekV3: lambda d: tiny_deepseek_v3().to(d)(
        _tokens(d, steps=7)
    ),
    t5.T5: lambda d: t5.T5(
        11, 8, 16, 2, 3, 1, num_buckets=4, max_distance=8
    ).to(d)(_tokens(d, steps=7), _tokens(d, steps=5)),
    t5._T5Stack: lambda d: t5._T5Stack(8, 16, 2, 3, 1, decoder=True).to(d)(
        _x(d, 2, 5, 8), None, _x(d, 2, 6, 8), None
    ),
    t5._T5Attention: lambda d: t5._T5Attention(8, 2, 3).to(d)(
        _x(d, 2, 5, 8), _x(d, 2, 6, 8), None, None
    ),
    MoEFeedForward: lambda d: MoEFeedForward(8, 16, 4, 2).to(d)(
        _x(d, 2, 5, 8)
    ),
    RelativePositionBias: lambda d: RelativePositionBias(2, 8, 20).to(d)(3, 5),
    VariantBlock: lambda d: VariantBlock(
        8, 16, 4, 0.1, num_kv_heads=1, ffn="swiglu"
    ).to(d)(_x(d, 2, 5, 8))[0],
    LinearAttention: lambda d: LinearAttention(8, 2).to(d)(
        _x(d, 2, 6, 8), _x(d, 2, 6, 8), _x(d, 2, 6, 8), causal=True
    ),
    KernelSelfAttention: lambda d: KernelSelfAttention(8, 2, "performer").to(
        d
    )(_x(d, 2, 6, 8)),
    KernelBlock: lambda d: KernelBlock(8, 16, 2, "decayed").to(d)(
        _x(d, 2, 6, 8)
    ),
    KernelLM: lambda d: KernelLM(11, 8, 2, 2, 6, "linear").to(d)(
        _tokens(d, steps=6)
    ),
    GridEncoder: lambda d: GridEncoder(8, 2, img_size=16).to(d)(
        _x(d, 2, 3, 16, 16)
    )[0],
    ImageCaptioner: lambda d: ImageCaptioner(6, 4, 8, img_size=16).to(d)(
        _x(d, 2, 3, 16, 16), _tokens(d, steps=3, vocab=6)
    ),
    PatchEmbedding: lambda d: PatchEmbedding(8, 4, 6).to(d)(_x(d, 2, 3, 8, 8)),
    ViTBlock: lambda d: ViTBlock(8, 8, 16, 2, 0.1).to(d)(_x(d, 2, 5, 8)),
    ViT: lambda d: ViT(8, 4, 8, 16, 2, 2, 0.1, 0.1, positions="sincos2d").to(
        d
    )(_x(d, 2, 3, 8, 8), need_weights=True),
    ConvNet: lambda d: ConvNet(3, 2, img_size=8, in_channels=3).to(d)(
        _x(d, 2, 3, 8, 8)
    ),
}


def test_every_module_has_a_device_check():
    # class objects, not names: two modules may hold classes of one name
    missing = _all_module_classes() - set(FORWARDS)
    names = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in missing)
    assert not missing, f"add these modules to FORWARDS: {names}"


@pytest.mark.parametrize(
    "cls", list(FORWARDS), ids=lambda cls: cls.__qualname__
)
def test_forward_and_backward_on_device(cls, device):
    torch.manual_seed(0)
    output = FORWARDS[cls](device)
    assert output.device.type == device.type
    output.float().sum().backward()
