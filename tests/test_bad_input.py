"""Every public callable of course_pkg under bad input (issue 31).

The callables are discovered, not listed: every module's ``__all__`` (or its
public functions and classes), every public class's constructor and every
public method it defines (``forward`` included). Each gets one valid call: a
parameter with a default keeps it, a size or a number is made up from its
name and annotation (:data:`SIZES`), and what cannot be made up (tensors,
models, vocabularies) comes from :data:`EXAMPLES`. A new callable is swept
without editing this file when its arguments can be made up; otherwise
``test_every_public_callable_has_a_valid_call`` fails and names it.

From each parameter's annotation and its valid value come the bad values
(:func:`bad_values`): a list for a tensor, an integer tensor for a float one,
a float, uint8 or int16 tensor for ids, the tensor on ``meta`` next to
others on the CPU, NaN and inf for a float, a float and a bool for an int,
zero and a negative size, a device that does not exist, an int file
descriptor for a path, a str for a list of sentences, a non-callable for a
function. Each call must raise TypeError or ValueError whose message names
the parameter, and leave the other arguments, the model's parameters (or
the state of a cache whose method it is), the files and every random
generator as they were.

The valid call itself runs (``test_the_valid_call_runs``), so a refusal
cannot name the parameter for another reason. A NumPy integer goes to every
int parameter: refused at the door by name, as a size, a count, an offset
or a seed must be, or accepted, as an id or an index may be; never a failure
deeper in.

The deliberate exceptions are written down, each with its reason:
:data:`NOT_SWEPT` (callables) and :data:`ACCEPTED` (cases that are not
refused, asserted to run without error).
"""

from __future__ import annotations

import atexit
import copy
import functools
import hashlib
import importlib
import inspect
import math
import os
import pathlib
import pkgutil
import random
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from torch import nn

import course_pkg
from course_pkg.data import scenes, translation
from course_pkg.experiments import toy_tasks, vision
from course_pkg.inference import kv_memory, paged_cache
from course_pkg.models import (
    bert,
    captioner,
    convnet,
    deepseek,
    gemma,
    gpt,
    gpt2,
    hf_weights,
    kernel_lm,
    llama,
    luong,
    nadaraya_watson,
    seq2seq,
    t5,
    transformer,
    variant_gpt,
    vit,
)
from course_pkg.nn import (
    attention,
    blocks,
    grouped_query,
    latent_attention,
    modern_blocks,
    moe,
    positional,
    relative_position,
    rope_scaling,
    rotary,
    sliding_window,
)
from course_pkg.training.loop import masked_cross_entropy
from tests._helpers import TINY_DECODER, tiny_deepseek_v3

# ------------------------------------------------------------- discovery


def _public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    ]


@functools.cache
def public_callables() -> dict[str, Any]:
    """``"module.name"`` -> function or class, ``"module.Class.method"`` ->
    (class, method name), for every public callable of course_pkg."""
    found: dict[str, Any] = {}
    infos = pkgutil.walk_packages(course_pkg.__path__, "course_pkg.")
    for info in sorted(infos, key=lambda info: info.name):
        module = importlib.import_module(info.name)
        short = info.name.removeprefix("course_pkg.")
        for name in _public_names(module):
            obj = getattr(module, name)
            key = f"{short}.{name}"
            found[key] = obj
            if not inspect.isclass(obj):
                continue
            # its public methods, inherited ones from course_pkg included
            for klass in reversed(obj.__mro__):
                if not klass.__module__.startswith("course_pkg"):
                    continue
                for method, function in vars(klass).items():
                    if not method.startswith("_") and inspect.isfunction(
                        function
                    ):
                        found[f"{key}.{method}"] = (obj, method)
    return found


# The modules of course_pkg.experiments that are records and claims, not
# experiments (the chapters' harnesses there, toy_tasks, attention_reading,
# lm_translation, bert_comparison, are swept like the library).
MACHINERY = (
    "claims",
    "provenance",
    "bench_records",
    "encoder_decoder",
    "attention_pooling",
    "bahdanau",
    "multihead_attention",
    "self_attention",
    "transformer_training",
    "bert",
    "gpt",
    "pretraining",
    "attention_at_scale",
    "modern_training",
    "distributed",
)

# Callables the sweep leaves out, each with its reason.
NOT_SWEPT = {
    "checks": "the validators themselves: refusing their argument "
    "is their job; every case below goes through them",
    "kernels.flash.check_flash_inputs": "a validator, as those of checks",
    "kernels.flash_triton": "Triton kernels: they run on a CUDA GPU only "
    "(tests/test_flash_triton.py checks check_kernel_inputs, which runs "
    "before any launch, on the Triton interpreter)",
    "training.data_parallel.setup_process_group": "joins a torch.distributed process "
    "group (needs torchrun's environment); tested in test_distributed",
    "training.data_parallel.process_group": "the same, as a context manager",
    "training.data_parallel.teardown_process_group": "no arguments",
    "training.data_parallel.free_port": "no arguments",
    "training.data_parallel.broadcast_parameters": "needs a process group",
    "training.data_parallel.all_reduce_gradients": "needs a process group",
    "training.distributed.main": "the torchrun entry point: argv goes to argparse, "
    "which reports bad options itself (SystemExit)",
    "training.distributed.parse_args": "argparse (SystemExit on bad options)",
    "training.distributed.train_data_parallel": "its args come from parse_args",
    "device.get_device": "no arguments; COURSE_DEVICE is tested in "
    "test_device_that_does_not_exist_is_refused below",
    "files.cache_dir": "no arguments",
    "nn.scoring.ScoredAttention": "abstract: its subclasses are swept",
    "models.encoder_decoder.Encoder": "abstract interface",
    "models.encoder_decoder.Decoder": "abstract interface",
    "models.seq2seq.AttentionGRUDecoder": "abstract: its subclasses are swept",
    "nn.scoring.AdditiveAttention.scores": "the scoring rule alone, as the book "
    "prints it: forward checks the inputs (check_attention_inputs), then "
    "calls it; swept through forward",
    "nn.scoring.LuongAttention.scores": "the same",
    "nn.scoring.AdditiveAttention.project_keys": "the keys' projection, done "
    "once per sequence by forward (and the decoders) after their checks",
    "nn.scoring.LuongAttention.project_keys": "the same",
    **{
        f"experiments.{name}": "the book's own machinery of records and "
        "claims: its callers are bench/claims.py and the notebooks, whose "
        "arguments are literals; tests/test_claims_provenance.py and "
        "test_claims_rule.py test it"
        for name in MACHINERY
    },
    "inference.speculative.Proposer": "a typing.Protocol: the interface a draft "
    "without a network implements (NGramDraft, PromptLookupDraft are swept)",
}

# A parameter whose message names the role of the bad value instead: the
# sizes of check_gru_sizes(*sizes) are named vocab_size, embed_size, ...
ALIASES = {("nn.gru.check_gru_sizes", "sizes"): "vocab_size"}

# NamedTuples and frozen dataclasses that only carry results or states: the
# function that reads one checks its fields (a state by the decoder, a
# record is built by the package itself).
RECORD_BASES = (tuple,)


def _is_record(obj: Any) -> bool:
    return inspect.isclass(obj) and (
        issubclass(obj, RECORD_BASES) or hasattr(obj, "__dataclass_fields__")
    )


def _swept(key: str, obj: Any) -> bool:
    if any(key == k or key.startswith(k + ".") for k in NOT_SWEPT):
        return False
    owner = obj[0] if isinstance(obj, tuple) else obj
    return not _is_record(owner)


# ------------------------------------------------------------- valid calls

# Made-up values of sizes and numbers, by parameter name (default 2 / 1.0).
SIZES = {
    "num_hiddens": 8,
    "num_heads": 2,
    "ffn_num_hiddens": 16,
    "ffn_num_outputs": 8,
    "vocab_size": 11,
    "src_vocab_size": 11,
    "tgt_vocab_size": 11,
    "num_blks": 1,
    "num_layers": 1,
    "embed_size": 4,
    "num_classes": 3,
    "head_width": 4,
    "norm_shape": 8,
    "input_size": 8,
    "query_size": 8,
    "key_size": 8,
    "i": 0,
    "max_len": 16,
}
NUMBERS = {"dropout": 0.0}

TMP = tempfile.mkdtemp(prefix="bad_input_")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
TATOEBA = os.path.join(TMP, "fra.txt")
with open(TATOEBA, "w", encoding="utf-8") as _file:
    _file.write("go .\tva !\nhi .\tsalut .\n")
CHECKPOINT = os.path.join(TMP, "model.pt")


def _float(*shape: int) -> torch.Tensor:
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(
        shape
    ) / (math.prod(shape) + 1)


def _ids(batch: int = 2, steps: int = 3, vocab: int = 11) -> torch.Tensor:
    return (torch.arange(batch * steps) % (vocab - 4) + 4).reshape(
        batch, steps
    )


def _lens(*values: int) -> torch.Tensor:
    return torch.tensor(values)


def _vocab() -> translation.Vocab:
    return translation.Vocab([["a", "b", "c", "d", "e", "f", "g"]])


def _seq2seq() -> nn.Module:
    return seq2seq.seq2seq_model(
        False, 11, 11, seq2seq.Seq2SeqSettings(4, 8, 1, 0.0)
    )


def _transformer() -> nn.Module:
    return transformer.Transformer(11, 11, 8, 16, 2, 1, 0.0)


def _gpt() -> gpt.GPT:
    return gpt.GPT(11, 8, 16, 2, 1, 0.0, max_len=16)


def _gpt2() -> gpt2.GPT2:
    return gpt2.GPT2(11, 8, 2, 1, 16)


def _published_bert() -> bert.PublishedBERT:
    return bert.PublishedBERT(11, 8, 2, 1, 16)


def _decoding() -> dict[str, Any]:
    """What the decoders of inference.decode share: a model, a source, ids."""
    return dict(
        model=_transformer(), src=_ids(), src_valid_len=_lens(3, 1), bos=1,
        eos=2,
    )  # fmt: skip


def _decoder_state() -> blocks.DecoderState:
    return blocks.DecoderState(_float(2, 4, 8), _lens(4, 2), (None,), 0)


FLASH = dict(
    queries=_float(2, 2, 3, 4),
    keys=_float(2, 2, 4, 4),
    values=_float(2, 2, 4, 4),
    valid_lens=_lens(4, 2),
    block_q=2,
    block_k=2,
)
QKV = dict(
    queries=_float(2, 3, 8), keys=_float(2, 4, 8), values=_float(2, 4, 8)
)
# (B, H, Q, d), (B, H, K, d), (B, H, K, d_v): the chapter "Beyond softmax
# attention"'s functions
KERNEL_QKV = dict(
    queries=_float(2, 2, 3, 4),
    keys=_float(2, 2, 4, 4),
    values=_float(2, 2, 4, 4),
)


def _cached_attention_examples(cls: str) -> dict[str, Callable]:
    """EXAMPLES of an attention class's forward, cache and attend (on a cache
    of 4 positions that its instance made); width 8."""
    return {
        f"{cls}.forward": lambda: dict(QKV, valid_lens=_lens(4, 2)),
        f"{cls}.cache": lambda: dict(
            keys=_float(2, 4, 8), values=_float(2, 4, 8)
        ),
        f"{cls}.attend": lambda: dict(
            queries=_float(2, 3, 8),
            cache=INSTANCES[cls]().cache(_float(2, 4, 8), _float(2, 4, 8)),
            valid_lens=_lens(4, 2),
        ),
    }


# Valid arguments of what cannot be made up: "key" -> () -> {name: value}.
# For a method, the instance is built from its class's valid call unless
# INSTANCES gives it.
EXAMPLES: dict[str, Callable[[], dict[str, Any]]] = {
    "nn.attention.transpose_qkv": lambda: dict(X=_float(2, 3, 8), num_heads=2),
    "nn.attention.transpose_output": lambda: dict(
        X=_float(4, 3, 4), num_heads=2
    ),
    "nn.attention.MultiHeadAttention.forward": lambda: dict(
        QKV, valid_lens=_lens(4, 2)
    ),
    "nn.attention.MultiHeadAttention.cache": lambda: dict(
        keys=_float(2, 4, 8), values=_float(2, 4, 8)
    ),
    "nn.attention.MultiHeadAttention.attend": lambda: dict(
        queries=_float(2, 3, 8),
        cache=attention.KVCache(_float(2, 4, 8), _float(2, 4, 8)),
        valid_lens=_lens(4, 2),
    ),
    "nn.attention.resolve_need_weights": lambda: dict(
        model=_gpt(), need_weights=None
    ),
    "nn.attention.copy_weights_from_torch": lambda: dict(
        ours=attention.MultiHeadAttention(8, 2, bias=True),
        theirs=nn.MultiheadAttention(8, 2, batch_first=True),
    ),
    "nn.scoring.AdditiveAttention.forward": lambda: dict(
        QKV, valid_lens=_lens(4, 2)
    ),
    "nn.scoring.AdditiveAttention.scores": lambda: dict(
        queries=QKV["queries"], keys=QKV["keys"]
    ),
    "nn.scoring.DotProductAttention.forward": lambda: dict(
        QKV, valid_lens=_lens(4, 2)
    ),
    "nn.scoring.LuongAttention": lambda: dict(
        score="general", query_size=8, key_size=8
    ),
    "nn.scoring.LuongAttention.forward": lambda: dict(
        QKV, valid_lens=_lens(4, 2)
    ),
    "nn.scoring.LuongAttention.scores": lambda: dict(
        queries=QKV["queries"], keys=QKV["keys"]
    ),
    "nn.scoring.fused_attention": lambda: dict(
        QKV, valid_lens=_lens(4, 2), causal=False, dropout_p=0.0
    ),
    "nn.masks.sequence_mask": lambda: dict(valid_lens=_lens(3, 1), max_len=4),
    "nn.masks.causal_mask": lambda: dict(num_queries=3, num_keys=4),
    "nn.masks.attention_mask": lambda: dict(
        valid_lens=_lens(3, 1),
        num_queries=2,
        num_keys=4,
        causal=True,
        device=torch.device("cpu"),
    ),
    "nn.masks.masked_softmax": lambda: dict(
        X=_float(2, 3, 4), valid_lens=_lens(3, 1)
    ),
    "nn.masks.hide_unseen": lambda: dict(
        X=_float(2, 3, 4), mask=torch.ones(2, 3, 4, dtype=torch.bool)
    ),
    "nn.positional.PositionalEncoding.forward": lambda: dict(
        X=_float(2, 3, 8)
    ),
    "nn.positional.LearnedPositionalEncoding.forward": lambda: dict(
        X=_float(2, 3, 8)
    ),
    "nn.rotary.RotaryEmbedding.forward": lambda: dict(X=_float(2, 2, 3, 4)),
    "nn.rotary.RotaryEmbedding.angles": lambda: dict(
        positions=torch.arange(3)
    ),
    "nn.blocks.PositionWiseFFN.forward": lambda: dict(X=_float(2, 3, 8)),
    "nn.blocks.AddNorm.forward": lambda: dict(
        X=_float(2, 3, 8), Y=_float(2, 3, 8)
    ),
    "nn.blocks.TransformerEncoderBlock.forward": lambda: dict(
        X=_float(2, 3, 8), valid_lens=_lens(3, 1)
    ),
    "nn.blocks.TransformerDecoderBlock.forward": lambda: dict(
        X=_float(2, 3, 8), state=_decoder_state()
    ),
    "nn.blocks.EmbeddingStack": lambda: dict(
        sizes=(11, 8, 16, 2, 1), dropout=0.0, max_len=16
    ),
    "models.transformer.TransformerEncoder.forward": lambda: dict(
        X=_ids(), valid_lens=_lens(3, 1)
    ),
    "models.transformer.TransformerDecoder.forward": lambda: dict(
        X=_ids(), state=_decoder_state()
    ),
    "models.transformer.TransformerDecoder.init_state": lambda: dict(
        enc_outputs=_float(2, 4, 8), enc_valid_lens=_lens(4, 2)
    ),
    "models.transformer.Transformer.forward": lambda: dict(
        enc_X=_ids(), dec_X=_ids(), enc_valid_lens=_lens(3, 1)
    ),
    "kernels.blockwise.blockwise_attention": lambda: dict(
        queries=_float(2, 2, 3, 4),
        keys=_float(2, 2, 4, 4),
        values=_float(2, 2, 4, 4),
        block_size=2,
        valid_lens=_lens(4, 2),
    ),
    **_cached_attention_examples("nn.grouped_query.GroupedQueryAttention"),
    "nn.grouped_query.GroupedQueryAttention.kv_cache_numel": lambda: dict(
        batch_size=2, num_steps=3
    ),
    "nn.modern_blocks.RMSNorm.forward": lambda: dict(X=_float(2, 3, 8)),
    "nn.modern_blocks.SwiGLUFFN.forward": lambda: dict(X=_float(2, 3, 8)),
    "nn.modern_blocks.GeGLUFFN.forward": lambda: dict(X=_float(2, 3, 8)),
    "nn.modern_blocks.check_block_options": lambda: dict(
        norm="layer", ffn="relu"
    ),
    "nn.modern_blocks.PreNormEncoderBlock.forward": lambda: dict(
        X=_float(2, 3, 8), valid_lens=_lens(3, 1)
    ),
    "models.nadaraya_watson.gaussian": lambda: dict(u=_float(5)),
    "models.nadaraya_watson.boxcar": lambda: dict(u=_float(5)),
    "models.nadaraya_watson.constant": lambda: dict(u=_float(5)),
    "models.nadaraya_watson.epanechnikov": lambda: dict(u=_float(5)),
    "models.nadaraya_watson.target_function": lambda: dict(x=_float(5)),
    "models.nadaraya_watson.leave_one_out": lambda: dict(x=_float(5)),
    "models.nadaraya_watson.nadaraya_watson": lambda: dict(
        x_train=_float(5), y_train=_float(5), x_query=_float(3)
    ),
    "models.nadaraya_watson.NWKernelRegression.forward": lambda: dict(
        queries=_float(3), keys=_float(5), values=_float(5)
    ),
    "models.nadaraya_watson.train_nw_regression": lambda: dict(
        model=nadaraya_watson.NWKernelRegression(),
        x_train=_float(5),
        y_train=_float(5),
        num_epochs=1,
        lr=0.1,
    ),
    "models.seq2seq.Seq2SeqEncoder.forward": lambda: dict(X=_ids()),
    "models.seq2seq.Seq2SeqDecoder.forward": lambda: dict(
        X=_ids(), state=seq2seq.GRUState(_float(2, 8), _float(1, 2, 8))
    ),
    "models.seq2seq.Seq2SeqDecoder.init_state": lambda: dict(
        enc_all_outputs=(_float(3, 2, 8), _float(1, 2, 8))
    ),
    "models.seq2seq.Seq2SeqAttentionDecoder.forward": lambda: dict(
        X=_ids(),
        state=seq2seq.BahdanauState(
            _float(2, 4, 8), _float(1, 2, 8), _lens(4, 2), _float(2, 4, 8)
        ),
    ),
    "models.seq2seq.Seq2SeqAttentionDecoder.init_state": lambda: dict(
        enc_all_outputs=(_float(4, 2, 8), _float(1, 2, 8)),
        enc_valid_lens=_lens(4, 2),
    ),
    "models.seq2seq.seq2seq_model": lambda: dict(
        attention=False,
        src_vocab_size=11,
        tgt_vocab_size=11,
        settings=seq2seq.Seq2SeqSettings(4, 8, 1, 0.0),
    ),
    "models.luong.LuongAttentionDecoder.forward": lambda: dict(
        X=_ids(),
        state=INSTANCES["models.luong.LuongAttentionDecoder"]().init_state(
            (_float(4, 2, 8), _float(1, 2, 8)), _lens(4, 2)
        ),
    ),
    "models.luong.LuongAttentionDecoder.init_state": lambda: dict(
        enc_all_outputs=(_float(4, 2, 8), _float(1, 2, 8)),
        enc_valid_lens=_lens(4, 2),
    ),
    "models.luong.luong_model": lambda: dict(
        src_vocab_size=11,
        tgt_vocab_size=11,
        settings=seq2seq.Seq2SeqSettings(4, 8, 1, 0.0),
    ),
    "models.encoder_decoder.EncoderDecoder": lambda: dict(
        encoder=_seq2seq().encoder, decoder=_seq2seq().decoder
    ),
    "models.encoder_decoder.EncoderDecoder.forward": lambda: dict(
        enc_X=_ids(), dec_X=_ids()
    ),
    "nn.gru.init_seq2seq": lambda: dict(module=nn.Linear(2, 2)),
    "nn.gru.check_gru_sizes": lambda: dict(sizes=(2, 3), dropout=0.0),
    "training.loop.masked_cross_entropy": lambda: dict(
        Y_hat=_float(2, 3, 11), Y=_ids(), pad=0
    ),
    "training.loop.optimizer_step": lambda: _optimizer_step(),
    "training.loop.training_record": lambda: dict(
        model=nn.Linear(2, 2), start=0.0, epoch_loss=[1.0], step_loss=[1.0]
    ),
    "training.loop.train_seq2seq": lambda: dict(
        model=_seq2seq(),
        train_iter=[(_ids(), _lens(3, 2), _ids(), _ids())],
        lr=0.01,
        num_epochs=1,
        tgt_vocab_or_pad=0,
        progress=False,
    ),
    "training.loop.train_seq2seq_by_epoch": lambda: dict(
        model=_seq2seq(),
        train_iter=[(_ids(), _lens(3, 2), _ids(), _ids())],
        lr_per_epoch=[0.01, 0.005],
        tgt_vocab_or_pad=0,
    ),
    "inference.decode.cut_at_eos": lambda: dict(tokens=[4, 2, 5], eos=2),
    "inference.decode.greedy_decode": lambda: dict(_decoding(), num_steps=3),
    "inference.decode.sequence_log_prob": lambda: dict(
        _decoding(), tokens=_ids()
    ),
    "inference.decode.beam_search": lambda: dict(
        _decoding(), num_steps=3, beam_size=2
    ),
    "inference.decode.translate": lambda: dict(
        model=_transformer(),
        sentences=["a b"],
        src_vocab=_vocab(),
        tgt_vocab=_vocab(),
        num_steps=3,
    ),
    "data.translation.preprocess_nmt": lambda: dict(text="Go."),
    "data.translation.normalise": lambda: dict(text="Go."),
    "data.translation.tokenize": lambda: dict(sentence="go ."),
    "data.translation.tokenize_pairs": lambda: dict(pairs=[("go .", "va !")]),
    "data.translation.corpus_stats": lambda: dict(pairs=[("go .", "va !")]),
    "data.translation.Vocab.to_tokens": lambda: dict(indices=[2, 3]),
    # ten pairs: the smallest corpus, made in a moment
    "data.corpus.english_french_corpus": lambda: dict(seed=0, num_pairs=10),
    "data.translation.truncate_pad": lambda: dict(
        ids=[4, 5], num_steps=3, pad=0
    ),
    "data.translation.source_array": lambda: dict(
        sentences=["a b"], src_vocab=_vocab(), num_steps=3
    ),
    "data.translation.build_arrays": lambda: dict(
        pairs=[("a b", "c d")],
        src_vocab=_vocab(),
        tgt_vocab=_vocab(),
        num_steps=3,
    ),
    "data.translation.translation_dataloaders": lambda: dict(
        splits=([("a b", "c d")],) * 3, batch_size=2, num_steps=3
    ),
    "data.tatoeba.load_tatoeba": lambda: dict(path=TATOEBA),
    "data.tatoeba.download_fra_eng": lambda: _local_fra_eng_zip(),
    "files.write_atomically": lambda: dict(
        path=os.path.join(TMP, "out.bin"),
        write=lambda handle: handle.write(b"x"),
    ),
    "files.cached_json": lambda: dict(name="x", key="k", compute=lambda: 1),
    "evaluation.bleu.bleu": lambda: dict(
        pred_tokens="a b c d", label_tokens="a b c d"
    ),
    "evaluation.bleu.corpus_bleu": lambda: dict(
        hypotheses=["a b"], references=["a b"]
    ),
    "device.describe_device": lambda: dict(device="cpu"),
    "device.model_device": lambda: dict(model=nn.Linear(2, 2)),
    "evaluation.cost.sequential_depth": lambda: dict(
        output=_float(2, 2).requires_grad_().sum()
    ),
    "evaluation.cost.count_flops": lambda: dict(
        fn=lambda: _float(2, 2) @ _float(2, 2)
    ),
    "evaluation.cost.call_seconds": lambda: dict(fn=lambda: None, repeats=1),
    "evaluation.cost.fastest_seconds": lambda: dict(
        fn=lambda: None, repeats=1
    ),
    "evaluation.cost.median_seconds": lambda: dict(fn=lambda: None, repeats=1),
    "evaluation.memory.peak_memory": lambda: dict(fn=lambda: None),
    "experiments.toy_tasks.neighbour_batch": lambda: dict(
        batch_size=2, generator=torch.Generator().manual_seed(0)
    ),
    "experiments.toy_tasks.NeighbourReader.forward": lambda: dict(
        tokens=_ids(2, 8, 8) % 8
    ),
    "experiments.toy_tasks.NeighbourReader.features": lambda: dict(
        tokens=_ids(2, 8, 8) % 8
    ),
    "experiments.toy_tasks.neighbour_accuracy": lambda: dict(
        model=toy_tasks.NeighbourReader(2),
        tokens=_ids(2, 8, 8) % 8,
        left=_ids(2, 8, 8) % 8,
        right=_ids(2, 8, 8) % 8,
    ),
    "experiments.toy_tasks.CopyBack": lambda: dict(positional=None),
    "experiments.toy_tasks.CopyBack.forward": lambda: dict(
        tokens=_ids(2, 4, 10)
    ),
    "experiments.toy_tasks.train_neighbour_reader": lambda: dict(
        num_heads=1, num_steps=1
    ),
    "experiments.toy_tasks.train_copy_back": lambda: dict(
        positional=None, num_steps=1, max_train_len=4
    ),
    "experiments.toy_tasks.accuracy_by_position": lambda: dict(
        model=toy_tasks.CopyBack(None), length=4
    ),
    "models.gpt.GPTBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.gpt.GPT.forward": lambda: dict(X=_ids()),
    "models.gpt.next_token_probs": lambda: dict(logits=_float(2, 11)),
    "models.gpt.generate": lambda: dict(
        model=_gpt(), prompt=_ids(), max_new_tokens=2
    ),
    **_cached_attention_examples("models.llama.LlamaAttention"),
    "models.llama.LlamaBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.llama.Llama.forward": lambda: dict(X=_ids()),
    "models.llama.Llama.forward_with_cache": lambda: dict(X=_ids()),
    "models.llama.llama_to_hf": lambda: dict(
        state_dict=INSTANCES["models.llama.Llama"]().state_dict(), num_heads=2
    ),
    "models.llama.llama_from_hf": lambda: dict(
        state_dict=llama.llama_to_hf(
            INSTANCES["models.llama.Llama"]().state_dict(), num_heads=2
        ),
        num_heads=2,
    ),
    "models.gemma.GemmaBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.gemma.Gemma3.forward": lambda: dict(X=_ids()),
    "models.gemma.Gemma3.forward_with_cache": lambda: dict(X=_ids()),
    "models.gemma.gemma_to_hf": lambda: dict(
        state_dict=INSTANCES["models.gemma.Gemma3"]().state_dict(),
        num_heads=2,
        query_pre_attn_scalar=4.0,
    ),
    "models.gemma.gemma_from_hf": lambda: dict(
        state_dict=gemma.gemma_to_hf(
            INSTANCES["models.gemma.Gemma3"]().state_dict(), num_heads=2
        ),
        num_heads=2,
        query_pre_attn_scalar=4.0,
    ),
    "nn.latent_attention.MultiHeadLatentAttention.forward": lambda: dict(
        X=_float(2, 3, 8)
    ),
    "nn.latent_attention.MultiHeadLatentAttention.cache": lambda: dict(
        X=_float(2, 3, 8)
    ),
    "nn.latent_attention.MultiHeadLatentAttention.attend": lambda: dict(
        X=_float(2, 3, 8),
        cache=INSTANCES[
            "nn.latent_attention.MultiHeadLatentAttention"
        ]().cache(_float(2, 3, 8)),
    ),
    "nn.moe.DeepSeekMoE.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.deepseek.DeepSeekBlock": lambda: dict(
        num_hiddens=8,
        attention=INSTANCES["nn.latent_attention.MultiHeadLatentAttention"](),
        ffn=modern_blocks.SwiGLUFFN(16, 8),
    ),
    "models.deepseek.DeepSeekBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.deepseek.DeepSeekV3.forward": lambda: dict(X=_ids()),
    "models.deepseek.DeepSeekV3.forward_with_cache": lambda: dict(X=_ids()),
    "models.deepseek.deepseek_to_hf": lambda: dict(
        state_dict=INSTANCES["models.deepseek.DeepSeekV3"]().state_dict()
    ),
    "models.deepseek.deepseek_from_hf": lambda: dict(
        state_dict=deepseek.deepseek_to_hf(
            INSTANCES["models.deepseek.DeepSeekV3"]().state_dict()
        )
    ),
    "models.t5.T5.forward": lambda: dict(
        src=_ids(), tgt=_ids(), src_valid_lens=_lens(3, 2)
    ),
    "models.t5.t5_to_hf": lambda: dict(
        state_dict=INSTANCES["models.t5.T5"]().state_dict()
    ),
    "models.t5.t5_from_hf": lambda: dict(
        state_dict=t5.t5_to_hf(INSTANCES["models.t5.T5"]().state_dict())
    ),
    "nn.moe.MoEFeedForward.forward": lambda: dict(X=_float(2, 3, 8)),
    "nn.moe.MoEFeedForward.route": lambda: dict(X=_float(2, 3, 8)),
    "nn.moe.load_balancing_loss": lambda: dict(
        router_logits=_float(6, 4), num_experts=4, top_k=2
    ),
    "nn.moe.expert_load": lambda: dict(
        router_logits=_float(6, 4), num_experts=4, top_k=2
    ),
    "models.published.build": lambda: dict(name="Mistral 7B"),
    "models.published.count_parameters": lambda: dict(
        model=llama.Llama(30, 16, 12, 4, 1, num_experts=2, top_k=1)
    ),
    "models.published.parameter_counts": lambda: dict(name="Mistral 7B"),
    "models.published.cache_numel_per_token": lambda: dict(
        name="Mistral 7B", context=8
    ),
    "models.published.flops_per_token": lambda: dict(
        name="Mistral 7B", context=8
    ),
    "nn.moe.moe_to_hf": lambda: dict(
        state_dict=moe.MoEFeedForward(8, 6, 4, 2).state_dict(), layout="fused"
    ),
    "nn.moe.moe_from_hf": lambda: dict(
        state_dict=moe.moe_to_hf(moe.MoEFeedForward(8, 6, 4, 2).state_dict())
    ),
    "nn.relative_position.relative_position_bucket": lambda: dict(
        relative_position=torch.arange(-4, 4),
        bidirectional=True,
        num_buckets=8,
        max_distance=20,
    ),
    "nn.relative_position.RelativePositionBias.forward": lambda: dict(
        num_queries=3, num_keys=5
    ),
    "nn.rope_scaling.Llama3RotaryEmbedding.forward": lambda: dict(
        X=_float(2, 2, 3, 4)
    ),
    "nn.rope_scaling.Llama3RotaryEmbedding.angles": lambda: dict(
        positions=torch.arange(5), dtype=torch.float64
    ),
    "models.variant_gpt.VariantBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.variant_gpt.VariantGPT.forward": lambda: dict(X=_ids()),
    "models.variant_gpt.VariantGPT.kv_cache_numel": lambda: dict(
        batch_size=2, num_steps=3
    ),
    "models.variant_gpt.check_placement": lambda: dict(placement="post"),
    "experiments.lm_translation.translation_lm_vocab": lambda: dict(
        pairs=[("a b", "c d")]
    ),
    "experiments.lm_translation.prompt_ids": lambda: dict(
        sentence="a b", vocab=_lm_vocab()
    ),
    "experiments.lm_translation.translation_lm_arrays": lambda: dict(
        pairs=[("a b", "c d")], vocab=_lm_vocab(), num_steps=8
    ),
    "experiments.lm_translation.translation_lm_loader": lambda: dict(
        pairs=[("a b", "c d")], vocab=_lm_vocab(), batch_size=2, num_steps=8
    ),
    "experiments.lm_translation.train_lm": lambda: dict(
        model=gpt.GPT(len(_lm_vocab()), 8, 16, 2, 1, 0.0, max_len=16),
        batches=[(_ids(2, 3, len(_lm_vocab())), _ids(2, 3, len(_lm_vocab())))],
        lr_per_epoch=[0.01],
        pad=0,
    ),
    "experiments.lm_translation.train_translation_gpt": lambda: dict(
        pairs=[("a b", "c d")],
        vocab=_lm_vocab(),
        settings=TINY_GPT_SETTINGS,
        num_epochs=1,
    ),
    "experiments.lm_translation.translate_lm": lambda: dict(
        model=gpt.GPT(len(_lm_vocab()), 8, 16, 2, 1, 0.0, max_len=16),
        sentences=["a b"],
        vocab=_lm_vocab(),
        max_new_tokens=2,
    ),
    "models.bert.mask_tokens": lambda: dict(
        tokens=_ids(),
        valid_lens=_lens(3, 2),
        mask_id=4,
        vocab_size=11,
        num_special=5,
        generator=torch.Generator().manual_seed(0),
    ),
    "models.bert.BERTEncoder.forward": lambda: dict(
        tokens=_ids(), segments=_ids() % 2, valid_lens=_lens(3, 2)
    ),
    "models.bert.BERTModel.forward": lambda: dict(
        tokens=_ids(), segments=_ids() % 2, valid_lens=_lens(3, 2)
    ),
    "models.bert.BERTClassifier": lambda: dict(
        encoder=_bert_encoder(), num_classes=3
    ),
    "models.bert.BERTClassifier.forward": lambda: dict(
        tokens=_ids(), segments=_ids() % 2, valid_lens=_lens(3, 2)
    ),
    "models.bert.MaskLM.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.bert.CLSClassifier.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.bert.mean_over_valid": lambda: dict(
        encoded=_float(2, 3, 8), valid_lens=_lens(3, 2)
    ),
    "data.bert_inputs.bert_vocab": lambda: dict(sentences=["a b", "c d"]),
    "data.bert_inputs.encode_sentences": lambda: dict(
        vocab=_bert_vocab(), sentences=["a b"], num_steps=5
    ),
    "data.bert_inputs.add_second_segment": lambda: dict(
        first=_ids(2, 4),
        first_lens=_lens(3, 2),
        seconds=[[4], [5]],
        sep_id=3,
        pad_id=0,
        num_steps=6,
    ),
    "data.bert_inputs.translation_pairs": lambda: dict(
        num_pairs=2, generator=torch.Generator().manual_seed(0)
    ),
    "data.bert_inputs.label_dataset": lambda: dict(
        vocab=_bert_vocab(),
        rows=[_label_row()],
        num_steps=6,
        task="frame",
    ),
    "experiments.bert_comparison.new_bert": lambda: dict(
        vocab_size=11, settings=_bert_settings(), seed=0
    ),
    "experiments.bert_comparison.mean_outputs": lambda: dict(
        encoder=_bert_encoder(),
        tokens=_ids(),
        segments=_ids() % 2,
        valid_lens=_lens(3, 2),
    ),
    "experiments.bert_comparison.fit_linear_classifier": lambda: dict(
        X=_float(4, 3), y=torch.tensor([0, 1, 2, 0]), num_classes=3, l2=0.01
    ),
    "training.bert_pretraining.fine_tune": lambda: dict(
        classifier=bert.BERTClassifier(_bert_encoder(), 3),
        tokens=_ids(),
        segments=_ids() % 2,
        valid_lens=_lens(3, 2),
        labels=torch.tensor([0, 1]),
        settings=_bert_settings(),
    ),
    "training.bert_pretraining.predict": lambda: dict(
        classifier=bert.BERTClassifier(_bert_encoder(), 3),
        tokens=_ids(),
        segments=_ids() % 2,
        valid_lens=_lens(3, 2),
    ),
    "plotting.show_heatmaps": lambda: dict(
        matrices=_float(1, 1, 2, 3), xlabel="keys", ylabel="queries"
    ),
    "plotting.plot_lines": lambda: dict(
        x=[0, 1], ys=[[0, 1]], xlabel="x", ylabel="y"
    ),
    "experiments.attention_reading.gradient_x_input": lambda: (
        _gradient_x_input()
    ),
    "experiments.attention_reading.compare_rankings": lambda: dict(
        first=_float(2, 3, 4),
        second=_float(2, 3, 4),
        src_lens=[4, 3],
        out_lens=[3, 2],
    ),
    "experiments.attention_reading.seq2seq_attribution": lambda: dict(
        model=_seq2seq(),
        src=_ids(),
        src_valid_len=_lens(3, 2),
        tgt_in=_ids(),
        tgt_out=_ids(),
    ),
    "data.corpus_grammar.sample_clause": lambda: dict(rng=random.Random(0)),
    "training.checkpoint.save_checkpoint": lambda: dict(
        path=os.path.join(TMP, "model.pt"), model=nn.Linear(2, 2)
    ),
    "training.checkpoint.load_checkpoint": lambda: _saved_checkpoint(),
    "training.data_parallel.sharded_loader": lambda: dict(
        dataset=torch.utils.data.TensorDataset(_float(4, 2)),
        global_batch_size=2,
        rank=0,
        world_size=1,
    ),
    "training.data_parallel.train_step": lambda: dict(
        model=_seq2seq(),
        micro_batches=[(_ids(), _lens(3, 2), _ids(), _ids())],
        optimizer=torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1),
        pad=0,
    ),
    "experiments.attention_reading.adjective_attention": lambda: dict(
        sources=[["a", "red", "<eos>"]],
        outputs=[["un", "rouge"]],
        references=[["un", "rouge"]],
        weights=_float(1, 2, 3),
    ),
    # max_len 64: room for the corpus's longest sentence pair
    "experiments.bert_comparison.pair_task_accuracy": lambda: dict(
        model=bert.BERTModel(11, 8, 16, 2, 1, 0.0, max_len=64),
        vocab=_bert_vocab(),
        settings=_bert_settings(max_len=64),
    ),
    "experiments.bert_comparison.linear_probe": lambda: dict(
        encoder=bert.BERTEncoder(11, 8, 16, 2, 1, 0.0, max_len=64),
        vocab=_bert_vocab(),
        task="frame",
        settings=_bert_settings(max_len=64),
    ),
    "training.bert_pretraining.pretrain_bert": lambda: dict(
        model=bert.BERTModel(11, 8, 16, 2, 1, 0.0, max_len=16),
        english=["a b", "b a"],
        french=["c d", "d c"],
        vocab=_bert_vocab(),
        use_pair=False,
        settings=_bert_settings(),
        steps=1,
    ),
    "models.gpt.GPT.forward_with_cache": lambda: dict(X=_ids()),
    "models.gpt2.GPT2Block.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.gpt2.GPT2.forward": lambda: dict(X=_ids(), valid_lens=_lens(3, 2)),
    "models.gpt2.GPT2.forward_with_cache": lambda: dict(
        X=_ids(), valid_lens=_lens(3, 2)
    ),
    "models.bert.PublishedBERT.forward": lambda: dict(
        tokens=_ids(), segments=_ids() % 2, valid_lens=_lens(3, 2)
    ),
    "models.bert.PublishedBERT.pool": lambda: dict(encoded=_float(2, 3, 8)),
    "models.hf_weights.gpt2_from_hf": lambda: dict(
        state_dict=hf_weights.gpt2_to_hf(_gpt2().state_dict())
    ),
    "models.hf_weights.gpt2_to_hf": lambda: dict(
        state_dict=_gpt2().state_dict()
    ),
    "models.hf_weights.bert_from_hf": lambda: dict(
        state_dict=hf_weights.bert_to_hf(_published_bert().state_dict())
    ),
    "models.hf_weights.bert_to_hf": lambda: dict(
        state_dict=_published_bert().state_dict()
    ),
    "nn.blocks.check_activation": lambda: dict(activation="gelu"),
    "nn.blocks.init_normal": lambda: dict(module=nn.Linear(2, 2)),
    "models.variant_gpt.VariantGPT.forward_with_cache": lambda: dict(X=_ids()),
    "kernels.flash.flash_forward": lambda: dict(FLASH),
    "kernels.flash.flash_attention": lambda: dict(FLASH),
    "kernels.flash.standard_attention": lambda: dict(
        queries=FLASH["queries"], keys=FLASH["keys"], values=FLASH["values"]
    ),
    "kernels.flash.flash_backward": lambda: dict(
        FLASH,
        output=_float(2, 2, 3, 4),
        lse=_float(2, 2, 3),
        grad_output=_float(2, 2, 3, 4),
    ),
    "inference.paged_cache.paged_waste": lambda: dict(
        lengths=[2, 3], block_size=4
    ),
    "inference.paged_cache.PagedKVCache.gather": lambda: dict(seq_id=0),
    "inference.paged_cache.PagedKVCache.free": lambda: dict(seq_id=0),
    "inference.paged_cache.contiguous_waste": lambda: dict(
        lengths=[2, 3], max_len=4
    ),
    "training.distributed.build_model": lambda: dict(
        name="transformer", src_vocab_size=11, tgt_vocab_size=11
    ),
    "inference.kv_memory.kv_bytes_per_token": lambda: dict(
        config=_cache_config()
    ),
    "inference.kv_memory.kv_cache_bytes": lambda: dict(
        config=_cache_config(), num_tokens=3, batch_size=2
    ),
    "inference.kv_memory.weight_bytes": lambda: dict(config=_cache_config()),
    "nn.position_scaling.scaled_rotary": lambda: dict(
        head_width=4, scaling="ntk", factor=2.0
    ),
    "inference.paged_cache.PagedKVCache.append": lambda: dict(
        seq_id=0, keys=_float(1, 3, 4), values=_float(1, 3, 4)
    ),
    "inference.paged_cache.PagedKVCache.attend": lambda: dict(
        seq_id=0, queries=_float(2, 2, 4)
    ),
    "nn.sliding_window.sliding_window_attention": lambda: dict(
        queries=_float(2, 2, 3, 4),
        keys=_float(2, 1, 4, 4),
        values=_float(2, 1, 4, 4),
        window=2,
    ),
    "nn.sliding_window.RollingKVCache.append": lambda: dict(
        keys=_float(2, 1, 1, 4), values=_float(2, 1, 1, 4)
    ),
    "nn.sliding_window.RollingKVCache.step": lambda: dict(
        queries=_float(2, 2, 1, 4),
        keys=_float(2, 1, 1, 4),
        values=_float(2, 1, 1, 4),
    ),
    "inference.speculative.acceptance_probability": lambda: dict(
        target_probs=_probs(), draft_probs=_probs().flip(-1)
    ),
    "inference.speculative.residual_distribution": lambda: dict(
        target_probs=_probs(), draft_probs=_probs().flip(-1)
    ),
    "inference.speculative.first_token_distribution": lambda: dict(
        target_probs=_probs(), draft_probs=_probs().flip(-1)
    ),
    "inference.speculative.speculative_generate": lambda: dict(
        target=_gpt(), draft=_gpt(), prompt=_ids(1, 3), max_new_tokens=2, k=2
    ),
    "inference.speculative.measure_speculation": lambda: dict(
        target=_gpt(), draft=_gpt(), prompts=[[4, 5]], max_new_tokens=2, k=2
    ),
    "inference.speculative.NGramDraft": lambda: dict(
        sequences=[[4, 5, 6]], order=2
    ),
    "inference.speculative.NGramDraft.propose": lambda: dict(
        context=[4, 5], k=2
    ),
    "inference.speculative.PromptLookupDraft.propose": lambda: dict(
        context=[4, 5, 4], k=2
    ),
    "experiments.toy_tasks.copy_back_at_lengths": lambda: dict(
        variant="rope-ntk",
        seed=0,
        test_lens=(6,),
        max_train_len=4,
        model=toy_tasks.CopyBack(None, rotary=True),
        num_steps=1,
    ),
    "experiments.bert_comparison.fine_tune_encoders": lambda: dict(
        encoders={"tiny": _bert_encoder()},
        vocab=_bert_vocab(),
        labelled=[("a b", "past", "-", "motion")],
        test_rows=[("c d", "present", "-", "copula")],
        settings=_bert_settings(),
        seed=0,
    ),
    "training.lm_pretraining.CharTokenizer": lambda: dict(text="to be"),
    "training.lm_pretraining.CharTokenizer.encode": lambda: dict(text="be to"),
    "training.lm_pretraining.CharTokenizer.decode": lambda: dict(ids=[0, 1]),
    "training.lm_pretraining.random_windows": lambda: dict(
        tokens=_stream(),
        batch_size=2,
        num_steps=4,
        generator=torch.Generator().manual_seed(0),
    ),
    "training.lm_pretraining.validation_windows": lambda: dict(
        tokens=_stream(), num_steps=4, max_windows=2
    ),
    "training.lm_pretraining.NGramModel": lambda: dict(
        tokens=_stream(), order=2, vocab_size=11, k=0.5
    ),
    "training.lm_pretraining.NGramModel.log_probs": lambda: dict(
        tokens=_stream()
    ),
    "training.lm_pretraining.adamw": lambda: dict(
        model=nn.Linear(2, 2), settings=_lm_settings()
    ),
    "training.lm_pretraining.lm_loss": lambda: dict(
        model=_gpt(), X=_ids(), Y=_ids()
    ),
    "training.lm_pretraining.evaluate_lm": lambda: dict(
        model=_gpt(), X=_ids(), Y=_ids(), batch_size=1
    ),
    "training.lm_pretraining.pretrain_lm": lambda: dict(
        model=_gpt(),
        train_tokens=_stream(),
        valid_X=_ids(),
        valid_Y=_ids(),
        settings=_lm_settings(),
        progress=False,
        on_eval=lambda update, model, loss: None,
    ),
    "data.bpe.pretokenize": lambda: dict(text="To be, or not to be"),
    "data.bpe.train_bpe": lambda: dict(
        text="to be or not to be", vocab_size=260, special_tokens=["<s>"]
    ),
    "data.bpe.merge_ties": lambda: dict(
        text="to be or not to be", num_merges=3
    ),
    "data.bpe.train_hf_bpe": lambda: dict(
        text="to be or not to be", vocab_size=260
    ),
    "data.bpe.BPETokenizer": lambda: dict(
        merges=[(116, 111), (32, 256)], special_tokens=["<s>"]
    ),
    "data.bpe.BPETokenizer.encode": lambda: dict(
        text="to be<s>", allowed_special="all"
    ),
    "data.bpe.BPETokenizer.save": lambda: dict(
        path=os.path.join(TMP, "tokenizer.json")
    ),
    "data.bpe.BPETokenizer.decode": lambda: dict(ids=[116, 256, 257, 258]),
    "data.bpe.BPETokenizer.decode_bytes": lambda: dict(
        ids=[116, 256, 257, 258]
    ),
    "data.shakespeare.train_valid_text": lambda: dict(
        works={"Macbeth": "a", "Hamlet": "b", "Twelfth Night": "c"},
        held_out=("Hamlet",),
    ),
    "training.loop.warmup_inverse_sqrt": lambda: dict(
        optimizer=torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0),
        num_hiddens=8,
        warmup_steps=2,
    ),
    "nn.linear_attention.elu_feature_map": lambda: dict(X=_float(2, 3, 4)),
    "nn.linear_attention.linear_attention": lambda: dict(KERNEL_QKV),
    "nn.linear_attention.quadratic_kernel_attention": lambda: dict(KERNEL_QKV),
    "nn.linear_attention.linear_attention_recurrent": lambda: dict(KERNEL_QKV),
    "nn.linear_attention.LinearAttention.forward": lambda: dict(QKV),
    "nn.random_features.positive_random_features": lambda: dict(
        X=_float(2, 3, 4), W=_float(6, 4)
    ),
    "nn.random_features.softmax_kernel_estimate": lambda: dict(
        queries=_float(3, 4), keys=_float(5, 4), W=_float(6, 4)
    ),
    "nn.random_features.performer_attention": lambda: dict(
        KERNEL_QKV, W=_float(6, 4)
    ),
    "nn.low_rank.linformer_attention": lambda: dict(
        KERNEL_QKV, key_projection=_float(2, 4), value_projection=_float(2, 4)
    ),
    "nn.lsh_attention.lsh_buckets": lambda: dict(
        X=_float(2, 3, 4), rotations=_float(4, 2)
    ),
    "nn.lsh_attention.lsh_attention": lambda: dict(
        queries=_float(2, 2, 3, 4),
        values=_float(2, 2, 3, 4),
        num_buckets=2,
        generator=torch.Generator().manual_seed(0),
    ),
    "nn.attention_graphs.global_local_graph": lambda: dict(
        num_tokens=5, window=2, global_tokens=[0]
    ),
    "nn.attention_graphs.num_edges": lambda: dict(
        mask=torch.ones(3, 4, dtype=torch.bool)
    ),
    "nn.attention_graphs.receptive_field": lambda: dict(
        mask=torch.ones(4, 4, dtype=torch.bool).tril(), num_layers=2
    ),
    "experiments.beyond_softmax.copy_batches": lambda: dict(
        generator=torch.Generator().manual_seed(0)
    ),
    "experiments.beyond_softmax.recall_batches": lambda: dict(
        num_pairs=2,
        num_queries=1,
        num_keys=3,
        num_values=2,
        generator=torch.Generator().manual_seed(0),
    ),  # fmt: skip
    "experiments.beyond_softmax.token_accuracy": lambda: dict(
        model=kernel_lm.KernelLM(5, 8, 2, 1, 4),
        batches=[(_ids(2, 4, 5) % 5, _ids(2, 4, 5) % 5)],
        pad=4,
    ),
    "experiments.beyond_softmax.greedy_translate": lambda: dict(
        model=kernel_lm.KernelLM(len(_lm_vocab()), 8, 2, 1, 16),
        sentences=["a b"],
        vocab=_lm_vocab(),
        max_new_tokens=2,
    ),
    "models.kernel_lm.KernelSelfAttention.forward": lambda: dict(
        X=_float(2, 3, 8)
    ),
    "models.kernel_lm.KernelBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.kernel_lm.KernelLM.forward": lambda: dict(X=_ids(2, 4, 5) % 5),
    "data.scenes.relation": lambda: dict(
        first=scenes.SceneObject("red", "circle", 0, 0),
        second=scenes.SceneObject("blue", "square", 1, 2),
    ),
    "data.scenes.shape_mask": lambda: dict(shape="circle", size=8),
    "data.scenes.generate_scenes": lambda: dict(
        num_scenes=2, generator=torch.Generator().manual_seed(0)
    ),
    "data.scenes.cell_of_patch": lambda: dict(
        patch=3, grid_patches=4, grid_size=2
    ),
    "models.vit.ViT": lambda: dict(
        img_size=8,
        patch_size=4,
        num_hiddens=8,
        mlp_num_hiddens=16,
        num_heads=2,
        num_blks=1,
        emb_dropout=0.0,
        blk_dropout=0.0,
    ),  # fmt: skip
    "models.vit.PatchEmbedding.forward": lambda: dict(X=_float(2, 3, 8, 8)),
    "models.vit.ViTBlock.forward": lambda: dict(X=_float(2, 3, 8)),
    "models.vit.ViT.forward": lambda: dict(X=_float(2, 3, 8, 8)),
    "models.vit.ViT.encode": lambda: dict(X=_float(2, 3, 8, 8)),
    "models.vit.vit_from_torchvision": lambda: dict(
        state_dict=_torchvision_vit().state_dict()
    ),
    "models.vit.vit_from_hf": lambda: dict(state_dict=_hf_vit_state()),
    "evaluation.attribution.last_layer_attention": lambda: dict(
        maps=[_float(1, 2, 3, 3).softmax(-1)]
    ),
    "evaluation.attribution.attention_rollout": lambda: dict(
        maps=[_float(1, 2, 3, 3).softmax(-1)] * 2
    ),
    "evaluation.attribution.gradient_x_input": lambda: dict(
        score=lambda x: x.sum((1, 2, 3)), images=_float(2, 3, 4, 4)
    ),
    "evaluation.attribution.occlusion_map": lambda: dict(
        score=lambda x: x.sum((1, 2, 3)),
        images=_float(2, 3, 4, 4),
        cell_size=2,
    ),
    "evaluation.attribution.pool_to_cells": lambda: dict(
        pixel_map=_float(2, 4, 4), grid_size=2
    ),
    "models.captioner.GridEncoder.forward": lambda: dict(
        images=_float(2, 3, 8, 8)
    ),
    "models.captioner.ImageCaptioner.forward": lambda: dict(
        images=_float(2, 3, 8, 8), dec_X=_ids(2, 3, 6) % 6
    ),
    "models.captioner.greedy_captions": lambda: dict(
        model=captioner.ImageCaptioner(6, 4, 8, img_size=8),
        images=_float(2, 3, 8, 8),
        bos=1,
        eos=2,
        max_len=3,
    ),  # fmt: skip
    "models.captioner.doubly_stochastic_penalty": lambda: dict(
        weights=_float(2, 3, 4).softmax(-1),
        valid=torch.ones(2, 3, dtype=torch.bool),
    ),
    "nn.attention_graphs.graph_attention": lambda: dict(
        KERNEL_QKV, mask=torch.ones(3, 4, dtype=torch.bool).tril()
    ),
    "models.convnet.ConvNet.forward": lambda: dict(X=_float(2, 1, 8, 8)),
    "experiments.vision.caption_tensors": lambda: dict(
        scenes=_vision_scenes()[1], vocab=vision.caption_vocab()
    ),
    "experiments.vision.new_captioner": lambda: dict(
        vocab=vision.caption_vocab(), settings=_caption_settings()
    ),
    "experiments.vision.train_captioner": lambda: dict(
        model=_vision_captioner(),
        images=_vision_scenes()[0],
        dec_X=_vision_captions()[0],
        Y=_vision_captions()[1],
        pad=vision.caption_vocab()["<pad>"],
        settings=_caption_settings(),
        penalty=0.5,
        generator=torch.Generator().manual_seed(0),
    ),
    "experiments.vision.caption_bleu": lambda: dict(
        model=_vision_captioner(),
        images=_vision_scenes()[0],
        scenes=_vision_scenes()[1],
        vocab=vision.caption_vocab(),
    ),
    "experiments.vision.attention_on_objects": lambda: dict(
        model=_vision_captioner(),
        images=_vision_scenes()[0],
        dec_X=_vision_captions()[0],
        scenes=_vision_scenes()[1],
    ),
    "experiments.vision.count_parameters": lambda: dict(model=nn.Linear(2, 2)),
    "experiments.vision.train_classifier": lambda: dict(
        model=convnet.ConvNet(3, 2, img_size=8),
        images=_float(4, 1, 8, 8),
        labels=torch.tensor([0, 1, 2, 0]),
        settings=vision.ClassifierSettings(num_updates=2, batch_size=2),
        generator=torch.Generator().manual_seed(0),
    ),
    "experiments.vision.accuracy": lambda: dict(
        model=convnet.ConvNet(3, 2, img_size=8),
        images=_float(4, 1, 8, 8),
        labels=torch.tensor([0, 1, 2, 0]),
    ),
    "experiments.vision.red_object_scenes": lambda: dict(
        num_scenes=2, generator=torch.Generator().manual_seed(0)
    ),
    "experiments.vision.explanation_maps": lambda: dict(
        model=vision.scenes_vit(), images=_vision_scenes()[0]
    ),
    "experiments.vision.localisation": lambda: dict(
        cell_maps=_float(2, 4, 4), cells=torch.tensor([[0, 1], [2, 3]])
    ),
}

INSTANCES: dict[str, Callable[[], Any]] = {
    "models.captioner.GridEncoder": lambda: captioner.GridEncoder(
        8, img_size=8
    ),
    "models.captioner.ImageCaptioner": lambda: captioner.ImageCaptioner(
        6, 4, 8, img_size=8
    ),
    "models.vit.PatchEmbedding": lambda: vit.PatchEmbedding(8, 4, 6),
    "models.vit.ViTBlock": lambda: vit.ViTBlock(8, 8, 16, 2, 0.0),
    "models.vit.ViT": lambda: _vit_with_maps(),
    "models.convnet.ConvNet": lambda: convnet.ConvNet(3, 2, img_size=8),
    "models.kernel_lm.KernelSelfAttention": lambda: (
        kernel_lm.KernelSelfAttention(8, 2)
    ),
    "models.kernel_lm.KernelBlock": lambda: kernel_lm.KernelBlock(8, 16, 2),
    "models.kernel_lm.KernelLM": lambda: kernel_lm.KernelLM(5, 8, 2, 1, 4),
    "models.gpt2.GPT2Block": lambda: gpt2.GPT2Block(8, 16, 2, 0.0),
    "models.gpt2.GPT2": lambda: _gpt2(),
    "models.bert.PublishedBERT": lambda: _published_bert(),
    "nn.grouped_query.GroupedQueryAttention": lambda: (
        grouped_query.GroupedQueryAttention(8, 2, num_kv_heads=1)
    ),
    "models.luong.LuongAttentionDecoder": lambda: luong.LuongAttentionDecoder(
        11, 4, 8, 1
    ),
    "models.encoder_decoder.EncoderDecoder": _seq2seq,
    "experiments.toy_tasks.NeighbourReader": lambda: toy_tasks.NeighbourReader(
        2
    ),
    "experiments.toy_tasks.CopyBack": lambda: toy_tasks.CopyBack(None),
    "nn.blocks.TransformerDecoderBlock": lambda: (
        blocks.TransformerDecoderBlock(8, 16, 2, 0.0, 0)
    ),
    "models.bert.BERTClassifier": lambda: bert.BERTClassifier(
        _bert_encoder(), 3
    ),
    "models.nadaraya_watson.NWKernelRegression": lambda: (
        nadaraya_watson.NWKernelRegression()
    ),
    "models.llama.Llama": lambda: llama.Llama(
        **TINY_DECODER, max_len=16, qk_norm=True
    ),
    "models.llama.LlamaAttention": lambda: llama.LlamaAttention(
        num_hiddens=8, num_heads=2, num_kv_heads=1, qk_norm=True
    ),
    "models.llama.LlamaBlock": lambda: llama.LlamaBlock(
        num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_kv_heads=1
    ),
    "models.gemma.Gemma3": lambda: gemma.Gemma3(
        **TINY_DECODER,
        max_len=16,
        head_width=6,
        sliding_window=3,
        global_every=2,
    ),
    "models.gemma.GemmaBlock": lambda: gemma.GemmaBlock(
        num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_kv_heads=1
    ),
    "nn.latent_attention.MultiHeadLatentAttention": lambda: (
        latent_attention.MultiHeadLatentAttention(
            8, 2, 4, nope_width=2, rope_width=2, value_width=3, q_rank=5
        )
    ),
    "nn.moe.DeepSeekMoE": lambda: moe.DeepSeekMoE(8, 4, 4, 2, num_groups=2),
    "models.deepseek.DeepSeekBlock": lambda: deepseek.DeepSeekBlock(
        8,
        INSTANCES["nn.latent_attention.MultiHeadLatentAttention"](),
        modern_blocks.SwiGLUFFN(16, 8),
    ),
    "models.deepseek.DeepSeekV3": tiny_deepseek_v3,
    "models.t5.T5": lambda: t5.T5(
        11, 8, 16, 2, 3, 1, num_buckets=4, max_distance=8
    ),
    "nn.moe.MoEFeedForward": lambda: moe.MoEFeedForward(8, 16, 4, 2),
    "nn.relative_position.RelativePositionBias": lambda: (
        relative_position.RelativePositionBias(2, 8, 20)
    ),
    "nn.rope_scaling.Llama3RotaryEmbedding": lambda: (
        rope_scaling.Llama3RotaryEmbedding(4, original_max_len=4)
    ),
    "models.variant_gpt.VariantGPT": lambda: variant_gpt.VariantGPT(
        11, 8, 16, 2, 1, 0.0, max_len=16
    ),
    "models.variant_gpt.VariantBlock": lambda: variant_gpt.VariantBlock(
        8, 16, 2, 0.0
    ),
    "nn.modern_blocks.PreNormEncoderBlock": lambda: (
        modern_blocks.PreNormEncoderBlock(8, 16, 2, 0.0)
    ),
    "nn.modern_blocks.SwiGLUFFN": lambda: modern_blocks.SwiGLUFFN(16, 8),
    "nn.modern_blocks.GeGLUFFN": lambda: modern_blocks.GeGLUFFN(16, 8),
    "nn.modern_blocks.RMSNorm": lambda: modern_blocks.RMSNorm(8),
    "nn.rotary.RotaryEmbedding": lambda: rotary.RotaryEmbedding(4),
    "nn.positional.PositionalEncoding": lambda: positional.PositionalEncoding(
        8, 0.0, 16
    ),
    "nn.positional.LearnedPositionalEncoding": lambda: (
        positional.LearnedPositionalEncoding(8, 0.0, 16)
    ),
    "inference.paged_cache.PagedKVCache": lambda: _paged_cache(),
    "nn.sliding_window.RollingKVCache": lambda: sliding_window.RollingKVCache(
        2, 1, 4, 3
    ),
}


def _stream() -> torch.Tensor:
    return torch.arange(20) % 11


def _lm_settings():
    from course_pkg.training.lm_pretraining import LMSettings

    return LMSettings(batch_size=2, num_steps=4, num_updates=1, warmup_steps=0)


def _cache_config() -> kv_memory.CacheConfig:
    return kv_memory.CacheConfig("tiny", 1, 2, 1, 4, num_params=1e3)


def _probs() -> torch.Tensor:
    return torch.softmax(_float(2, 5), dim=-1)


def _paged_cache() -> paged_cache.PagedKVCache:
    cache = paged_cache.PagedKVCache(4, 2, 1, 4)
    cache.add_sequence(0)
    cache.append(0, _float(1, 3, 4), _float(1, 3, 4))
    return cache


def _vit_with_maps() -> vit.ViT:
    """A small ViT after one call that kept its attention maps."""
    model = vit.ViT(8, 4, 8, 16, 2, 1, 0.0, 0.0)
    model(_float(1, 3, 8, 8), need_weights=True)
    return model


def _vision_scenes() -> tuple[torch.Tensor, list[scenes.Scene]]:
    """Two 32 x 32 scenes of the chapter "Attention on images"."""
    return scenes.generate_scenes(2, torch.Generator().manual_seed(0))


def _vision_captions() -> tuple[torch.Tensor, torch.Tensor]:
    return vision.caption_tensors(_vision_scenes()[1], vision.caption_vocab())


def _caption_settings() -> vision.CaptionSettings:
    return vision.CaptionSettings(
        num_train=2, num_test=2, embed_size=4, num_hiddens=8, channels=2,
        num_epochs=1, batch_size=2,
    )  # fmt: skip


def _vision_captioner() -> captioner.ImageCaptioner:
    return vision.new_captioner(vision.caption_vocab(), _caption_settings())


def _torchvision_vit() -> nn.Module:
    import torchvision

    return torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8,
        mlp_dim=16, num_classes=3,
    )  # fmt: skip


def _hf_vit_state() -> dict[str, torch.Tensor]:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, image_size=8, patch_size=4, num_labels=3,
    )  # fmt: skip
    return ViTForImageClassification(config).state_dict()


# A GPT of the translation chapters' kind, small enough to train in the sweep.
TINY_GPT_SETTINGS = gpt.GPTSettings(
    num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_blks=1,
    batch_size=2, num_steps=8, lr_per_epoch=(0.01, 0.01),
)  # fmt: skip


def _lm_vocab() -> translation.Vocab:
    from course_pkg.experiments.lm_translation import translation_lm_vocab

    return translation_lm_vocab([("a b", "c d")])


def _bert_vocab() -> translation.Vocab:
    from course_pkg.data.bert_inputs import bert_vocab

    return bert_vocab(["a b", "c d"])


def _local_fra_eng_zip() -> dict[str, Any]:
    """download_fra_eng's arguments for a zip of one line made here, read
    through a file:// URL (no network), with its sha1."""
    path = pathlib.Path(TMP, "local", "fra-eng.zip")
    if not path.exists():
        path.parent.mkdir()
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("fra-eng/fra.txt", "Go.\tVa !\n")
    return dict(
        cache_dir=os.path.join(TMP, "fra_cache"),
        url=path.as_uri(),
        sha1=hashlib.sha1(path.read_bytes()).hexdigest(),
    )


def _label_row() -> tuple[str, str, str, str]:
    """(english, tense, mood, frame), each class one that TASKS knows."""
    from course_pkg.data.bert_inputs import TASKS

    row = ["a b", "", "", ""]
    for column, classes in TASKS.values():
        row[column] = classes[0]
    return tuple(row)


def _bert_encoder() -> bert.BERTEncoder:
    return bert.BERTEncoder(11, 8, 16, 2, 1, 0.0, max_len=16)


def _bert_settings(max_len: int = 16):
    from course_pkg.training.bert_pretraining import BERTSettings

    return BERTSettings(8, 16, 2, 1, 0.0, max_len)


def _saved_checkpoint() -> dict[str, Any]:
    from course_pkg.training.checkpoint import save_checkpoint

    model = nn.Linear(2, 2)
    if not os.path.exists(CHECKPOINT):
        save_checkpoint(CHECKPOINT, model)
    return dict(path=CHECKPOINT, model=model)


def _optimizer_step() -> dict[str, Any]:
    model = nn.Linear(2, 1)
    loss = model(_float(3, 2)).sum()
    return dict(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        loss=loss,
        grad_clip=1.0,
    )


def _gradient_x_input() -> dict[str, Any]:
    embeddings = _float(2, 3, 4).requires_grad_()
    return dict(embeddings=embeddings, objectives=(embeddings * 2).sum(-1))


def _annotation(parameter: inspect.Parameter) -> str:
    annotation = parameter.annotation
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else repr(annotation)


def _made_up(name: str, annotation: str) -> Any:
    """A valid value from the name and annotation alone (KeyError if none)."""
    kinds = set(re.findall(r"[A-Za-z_.]+", annotation))
    if "Tensor" in annotation or "torch.Tensor" in kinds:
        raise KeyError(name)
    if "bool" in kinds and "int" not in kinds:
        return False
    if "int" in kinds:
        return SIZES.get(name, 2)
    if "float" in kinds:
        return NUMBERS.get(name, 1.0)
    raise KeyError(name)


class Target(NamedTuple):
    key: str
    function: Callable[..., Any]  # bound for a method
    signature: inspect.Signature
    owner: Any  # the instance of a method, else None


def _valid_arguments(key: str, signature: inspect.Signature) -> dict[str, Any]:
    given = EXAMPLES[key]() if key in EXAMPLES else {}
    arguments = {}
    for name, parameter in signature.parameters.items():
        if name in given:
            arguments[name] = given[name]
        elif parameter.kind in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            continue
        elif parameter.default is not parameter.empty:
            arguments[name] = parameter.default
        else:
            arguments[name] = _made_up(name, _annotation(parameter))
    return arguments


def _instance(class_key: str, cls: type) -> Any:
    torch.manual_seed(0)
    if class_key in INSTANCES:
        return INSTANCES[class_key]()
    signature = inspect.signature(cls)
    return cls(**_valid_arguments(class_key, signature))


def _target(key: str, obj: Any) -> Target:
    torch.manual_seed(0)
    if isinstance(obj, tuple):
        cls, method = obj
        owner = _instance(key.rsplit(".", 1)[0], cls)
        function = getattr(owner, method)
        return Target(key, function, inspect.signature(function), owner)
    return Target(key, obj, inspect.signature(obj), None)


def _valid_call(key: str, obj: Any) -> tuple[Target, dict[str, Any]]:
    """A new target for key (a new instance for a method) and its valid
    arguments."""
    target = _target(key, obj)
    return target, _valid_arguments(key, target.signature)


def _call(target: Target, arguments: dict[str, Any]) -> Any:
    args, kwargs = [], {}
    for name, parameter in target.signature.parameters.items():
        if parameter.kind == parameter.VAR_POSITIONAL:
            args.extend(arguments.get(name, ()))
        elif name not in arguments:
            continue
        elif parameter.kind == parameter.POSITIONAL_ONLY:
            args.append(arguments[name])
        else:
            kwargs[name] = arguments[name]
    return target.function(*args, **kwargs)


# ------------------------------------------------------------- bad values

# Integer parameters that are sizes or counts: 0 and -1 are refused.
SIZE_NAME = re.compile(
    r"^(num_|n_)|_size$|_hiddens$|_outputs$|_steps$|^max_len$|^max_n$|^k$"
    r"|^max_new_tokens$|^repeats$|^length$|^head_width$|^max_train_len$"
    r"|^world_size$|^num_heads$|^sizes$|^norm_shape$"
)


class Bad(NamedTuple):
    label: str
    value: Any


def _parts(annotation: str) -> list[str]:
    return [part.strip() for part in annotation.split("|")]


def bad_values(
    name: str, annotation: str, valid: Any, peer: bool
) -> list[Bad]:
    """The bad values of one parameter, from its annotation and valid value;
    ``peer``: whether a tensor on the CPU sits next to it (another argument
    or the model's parameters)."""
    parts = _parts(annotation)
    bad: list[Bad] = []
    if "torch.Tensor" in parts or "Tensor" in parts:
        if isinstance(valid, (list, tuple)):  # a sequence is allowed too
            return []
        if not isinstance(valid, torch.Tensor):
            return [Bad("a list for a tensor", [1, 2])]
        bad.append(Bad("a list for a tensor", valid.detach().tolist()))
        if valid.dtype.is_floating_point:
            bad.append(Bad("an integer tensor", valid.detach().long()))
        elif valid.dtype in (torch.int64, torch.int32):
            bad.append(Bad("a float tensor", valid.detach().float()))
            bad.append(Bad("uint8 ids", valid.detach().to(torch.uint8)))
            bad.append(Bad("int16 ids", valid.detach().to(torch.int16)))
        if peer:
            bad.append(Bad("on meta next to cpu", valid.detach().to("meta")))
        return bad
    if "float" in parts:
        bad += [Bad("NaN", math.nan), Bad("inf", math.inf), Bad("a str", "1")]
    elif "int" in parts or "tuple[int, ...]" in parts:
        bad += [Bad("a float for an int", 1.5), Bad("a bool for an int", True)]
        if SIZE_NAME.search(name):
            bad += [Bad("a zero size", 0), Bad("a negative size", -1)]
    if "torch.device" in parts:
        bad += [
            Bad("a device that does not exist", "cuda:99"),
            Bad("an int for a device", 3),
        ]
    if "os.PathLike" in parts:
        bad += [
            Bad("a file descriptor", 987654),
            Bad("bytes for a path", b"x"),
        ]
    if parts == ["str"]:
        bad.append(Bad("an int for a str", 3))
    if annotation in ("Sequence[str]", "list[str]"):
        bad.append(Bad("a str for a list of str", "a b"))
    if annotation.startswith("Callable"):
        bad.append(Bad("not callable", 3))
    return bad


# Cases that are deliberately not refused: (key, parameter, label) -> why.
# Each is asserted to run without error.
EMPTY = "an empty result for a size of zero, as with an empty batch"
CPU_LENGTHS = "lengths kept on the CPU serve tensors on any device (they are "
CPU_LENGTHS += "moved, as documented); lengths on another device are refused"
POSITIONS = "positions may be integers or floats of any width (documented)"
SPLIT = "splitting or merging heads only moves numbers: any dtype is fine"
NO_WARMUP = "warmup_steps=0 means no warmup (the documented default)"
ZERO = "a zero size"
ROTARY_ANGLES = (
    "nn.rotary.RotaryEmbedding.angles",
    "nn.rope_scaling.Llama3RotaryEmbedding.angles",
)
# (callable, size): what a size of zero gives, after EMPTY
EMPTY_RESULTS = {
    ("nn.masks.sequence_mask", "max_len"): ": (B, 0)",
    ("nn.masks.causal_mask", "num_queries"): ": (0, K)",
    ("nn.masks.causal_mask", "num_keys"): ": (Q, 0)",
    ("nn.masks.attention_mask", "num_queries"): "",
    ("nn.masks.attention_mask", "num_keys"): "",
    ("nn.positional.sinusoidal_table", "max_len"): ": a (0, D) table",
    ("data.translation.truncate_pad", "num_steps"): ": []",
    ("models.gpt.generate", "max_new_tokens"): ": the prompt itself",
    ("experiments.lm_translation.translate_lm", "max_new_tokens"):
        ": one empty translation per sentence",
    ("training.loop.train_seq2seq", "num_epochs"):
        ": a record with no epochs (the model is not changed)",
    ("training.loop.training_record", "num_tokens"):
        ": a run of zero tokens (train_seq2seq with num_epochs=0)",
    ("inference.speculative.speculative_generate", "max_new_tokens"):
        ": the prompt itself, no target call",
    ("inference.speculative.measure_speculation", "max_new_tokens"):
        ": statistics of zero tokens",
    ("data.bpe.merge_ties", "num_merges"): ": []",
}  # fmt: skip
ACCEPTED: dict[tuple[str, str, str], str] = {
    **dict.fromkeys(
        [
            ("training.loop.linear_warmup", "warmup_steps", ZERO),
            ("experiments.lm_translation.train_lm", "warmup_steps", ZERO),
            ("training.lm_pretraining.warmup_cosine", "warmup_steps", ZERO),
        ],
        NO_WARMUP,
    ),
    ("models.deepseek.DeepSeekV3", "num_dense", ZERO): (
        "no dense block: every block has experts (documented)"
    ),
    ("nn.attention.transpose_qkv", "X", "an integer tensor"): SPLIT,
    ("nn.attention.transpose_output", "X", "an integer tensor"): SPLIT,
    **{
        (key, "positions", label): POSITIONS
        for key in ROTARY_ANGLES
        for label in ("a float tensor", "uint8 ids", "int16 ids")
    },
    **dict.fromkeys(
        [
            ("models.bert.mean_over_valid", "encoded", "on meta next to cpu"),
            ("models.bert.mask_tokens", "tokens", "on meta next to cpu"),
            ("nn.masks.masked_softmax", "X", "on meta next to cpu"),
        ],
        CPU_LENGTHS,
    ),
    **{
        (key, parameter, ZERO): EMPTY + gives
        for (key, parameter), gives in EMPTY_RESULTS.items()
    },
    **dict.fromkeys(
        [
            ("inference.speculative.NGramDraft.propose", "k", ZERO),
            ("inference.speculative.PromptLookupDraft.propose", "k", ZERO),
        ],
        EMPTY + ": no token proposed",
    ),
}


class Case(NamedTuple):
    key: str
    parameter: str
    bad: Bad


def _build() -> tuple[
    dict[str, tuple[Target, dict]], list[Case], dict[str, str]
]:
    built, cases, missing = {}, [], {}
    with torch.random.fork_rng(devices=[]):
        for key, obj in public_callables().items():
            if not _swept(key, obj):
                continue
            try:
                target, arguments = _valid_call(key, obj)
            except Exception as err:  # reported by the test below
                missing[key] = f"{type(err).__name__}: {err}"
                continue
            built[key] = (target, arguments)
            owner_has_tensors = isinstance(target.owner, nn.Module) and any(
                True for _ in target.owner.state_dict()
            )
            for name, parameter in target.signature.parameters.items():
                if name not in arguments:
                    continue
                peer = owner_has_tensors or any(
                    isinstance(value, torch.Tensor)
                    for other, value in arguments.items()
                    if other != name
                )
                annotation = _annotation(parameter)
                valid = arguments[name]
                if parameter.kind == parameter.VAR_POSITIONAL:  # the first
                    for bad in bad_values(name, annotation, valid[0], peer):
                        value = (bad.value, *valid[1:])
                        cases.append(Case(key, name, Bad(bad.label, value)))
                    continue
                for bad in bad_values(name, annotation, valid, peer):
                    cases.append(Case(key, name, bad))
    return built, cases, missing


# The other arguments an accepted case needs to make sense (else the valid
# call's): lengths that fit K = 0, Q <= K for a causal mask.
ACCEPTED_WITH = {
    ("nn.masks.sequence_mask", "max_len", "a zero size"): lambda: dict(
        valid_lens=_lens(0, 0)
    ),
    ("nn.masks.causal_mask", "num_keys", "a zero size"): lambda: dict(
        num_queries=0
    ),
    ("nn.masks.attention_mask", "num_keys", "a zero size"): lambda: dict(
        valid_lens=_lens(0, 0), causal=False
    ),
}

# Cases not refused yet, each with the work left; they run as strict
# xfails, so the day one is fixed the test says to move it out of here.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}

BUILT, CASES, MISSING = _build()
REFUSED = [
    pytest.param(
        case,
        id=f"{case.key}-{case.parameter}-{case.bad.label}",
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[label])]
        if (label := (case.key, case.parameter, case.bad.label)) in KNOWN_GAPS
        else [],
    )
    for case in CASES
    if (case.key, case.parameter, case.bad.label) not in ACCEPTED
]


def test_every_public_callable_has_a_valid_call():
    assert not MISSING, (
        "add a valid call to EXAMPLES (or the callable to NOT_SWEPT with a "
        f"reason): {MISSING}"
    )


def test_the_sweep_covers_the_api():
    swept = {case.key for case in CASES}
    callables = [k for k, obj in public_callables().items() if _swept(k, obj)]
    without_case = sorted(set(callables) - swept - set(MISSING))
    # a callable whose parameters give no bad value (e.g. a bool only)
    assert len(swept) >= 150 and len(CASES) >= 800, (len(swept), len(CASES))
    assert all(
        all(p in ("self",) for p in BUILT[k][0].signature.parameters)
        or not _has_sweepable(k)
        for k in without_case
    ), without_case


def _has_sweepable(key: str) -> bool:
    target, arguments = BUILT[key]
    return any(
        bad_values(n, _annotation(p), arguments[n], False)
        for n, p in target.signature.parameters.items()
        if n in arguments
    )


def _snapshot(target: Target, arguments: dict[str, Any]) -> dict[str, Any]:
    tensors = {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor) and value.device.type != "meta":
            tensors[name] = value.detach().clone()
        if isinstance(value, nn.Module):
            tensors.update(
                {
                    f"{name}.{k}": v.clone()
                    for k, v in value.state_dict().items()
                }
            )
    owner = {}
    if isinstance(target.owner, nn.Module):
        tensors.update(
            {
                f"model.{k}": v.clone()
                for k, v in target.owner.state_dict().items()
            }
        )
    elif target.owner is not None:  # e.g. a cache: its buffers and counters
        for k, v in vars(target.owner).items():
            if isinstance(v, torch.Tensor):
                tensors[f"owner.{k}"] = v.clone()
            else:
                owner[k] = copy.deepcopy(v)
    files = {}
    for folder, _, names in os.walk(TMP):
        for file_name in names:
            path = os.path.join(folder, file_name)
            with open(path, "rb") as handle:
                files[path] = handle.read()
    return dict(
        tensors=tensors,
        files=files,
        owner=owner,
        torch=torch.get_rng_state(),
        python=random.getstate(),
        numpy=np.random.get_state()[1].copy(),
    )


def _assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["tensors"].keys() == after["tensors"].keys()
    for name, tensor in before["tensors"].items():
        assert torch.equal(tensor, after["tensors"][name]), f"{name} changed"
    assert before["files"] == after["files"], "a file changed"
    assert before["owner"] == after["owner"], "the instance's state changed"
    assert torch.equal(before["torch"], after["torch"]), "torch's RNG moved"
    assert before["python"] == after["python"], "Python's RNG moved"
    assert np.array_equal(before["numpy"], after["numpy"]), "NumPy's RNG moved"


def _names(message: str, name: str) -> bool:
    return (
        re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message) is not None
    )


@pytest.mark.parametrize("case", REFUSED)
def test_bad_input_is_refused_by_name_and_changes_nothing(case):
    target, valid = BUILT[case.key]
    arguments = dict(valid, **{case.parameter: case.bad.value})
    before = _snapshot(target, valid)
    with pytest.raises((TypeError, ValueError)) as caught:
        _call(target, arguments)
    name = ALIASES.get((case.key, case.parameter), case.parameter)
    assert _names(str(caught.value), name), (
        f"{type(caught.value).__name__} does not name {name!r}: {caught.value}"
    )
    _assert_unchanged(before, _snapshot(target, valid))


@pytest.mark.parametrize("case", list(ACCEPTED), ids=str)
def test_deliberate_exceptions_are_accepted(case):
    key, parameter, label = case
    (found,) = [c for c in CASES if (c.key, c.parameter, c.bad.label) == case]
    target, valid = BUILT[key]
    others = ACCEPTED_WITH.get(case, dict)()
    _call(target, dict(valid, **others, **{parameter: found.bad.value}))


# The valid call of every swept callable runs: a bad value is then refused
# for being bad, not because the rest of the call was already wrong (a
# refusal that names the parameter for another reason would pass unseen).
VALID_CALLS_NOT_RUN = {
    "experiments.bert_comparison.compare_pretraining": "the BERT chapter's "
    "whole experiment (70 s here): the notebook and its sweep run it",
    "kernels.flash.FlashAttention": "an autograd Function, called through "
    "FlashAttention.apply (flash_attention runs it), never instantiated",
}


@pytest.mark.parametrize("key", sorted(set(BUILT) - set(VALID_CALLS_NOT_RUN)))
def test_the_valid_call_runs(key):
    with torch.random.fork_rng(devices=[]):
        _call(*_valid_call(key, public_callables()[key]))


# A NumPy integer where an int is wanted (course_pkg.checks.check_size): a
# size, a count, an offset or a seed refuses it at the door, by name, changing
# nothing; an id or an index may accept it. Either way nothing fails deeper in,
# where a NumPy integer kept as a size would (a shape, a config,
# random.Random). Each case builds its own instance and arguments, since an
# accepted call may change them; the same call with the Python int runs
# (test_the_valid_call_runs), so a failure here comes from the NumPy integer.
NUMPY_INTS = [
    pytest.param(key, name, id=f"{key}-{name}")
    for key, (target, arguments) in BUILT.items()
    for name, parameter in target.signature.parameters.items()
    if type(arguments.get(name)) is int
    and "int" in _parts(_annotation(parameter))
]


def _seeded_call(key: str, change: dict[str, Any]) -> tuple[Any, Any]:
    """(target, result) of key's valid call with `change` applied, built and
    run from seed 0 (so that two such calls draw the same numbers)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        target, valid = _valid_call(key, public_callables()[key])
        return target, _call(target, dict(valid, **change))


def _same(a: Any, b: Any) -> bool:
    """Equal results: tensors value for value (NaN equal to NaN), modules by
    their state, loaders by their batches, containers item by item (wall
    times, ``*seconds``, left out), integers by value (an id kept as the
    np.int64 it came in as is the same id), other objects by == or, where
    that is identity, by their attributes."""
    if isinstance(a, torch.utils.data.DataLoader):
        return type(a) is type(b) and _same(list(a), list(b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return bool(a == b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            type(a) is type(b)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and (a.device.type == "meta" or torch.equal(a.nan_to_num(), b.nan_to_num()))
        )  # fmt: skip
    if isinstance(a, nn.Module):
        return type(a) is type(b) and _same(a.state_dict(), b.state_dict())
    if isinstance(a, dict):
        return (
            type(a) is type(b)
            and list(a) == list(b)
            and all(_same(a[k], b[k]) for k in a if "seconds" not in str(k))
        )
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):
        return type(a) is type(b) and _same(vars(a), vars(b))
    return type(a) is type(b) and bool(a == b)


@pytest.mark.parametrize("key, name", NUMPY_INTS)
def test_a_numpy_integer_is_refused_at_the_door_or_accepted(key, name):
    with torch.random.fork_rng(devices=[]):
        target, valid = _valid_call(key, public_callables()[key])
    before = _snapshot(target, valid)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            _call(target, dict(valid, **{name: np.int64(valid[name])}))
    except (TypeError, ValueError) as err:
        assert _names(str(err), name) and "int64" in str(err), (
            f"{type(err).__name__} deeper in: {err}"
        )
        _assert_unchanged(before, _snapshot(target, valid))
        return
    # Accepted: then it does what the Python int does.
    _, with_numpy = _seeded_call(key, {name: np.int64(valid[name])})
    _, with_int = _seeded_call(key, {})
    assert _same(with_numpy, with_int), (
        f"{name}=np.int64({valid[name]}) gives another result than the int"
    )


def test_same_tells_results_apart():
    # The comparison the NumPy sweep relies on for accepted calls.
    x = torch.tensor([1.0, float("nan")])
    assert _same(
        (x, {"train_seconds": 1.0}), (x.clone(), {"train_seconds": 2.0})
    )
    assert _same([np.int64(3)], [3]) and _same(True, True)
    assert not _same(True, 1) and not _same([3], [4])
    assert not _same(x, x.double()) and not _same(x, torch.tensor([1.0, 2.0]))
    assert not _same({"loss": 1.0}, {"loss": 1.5})
    assert not _same(nn.Linear(2, 2), nn.Linear(2, 2))


def test_the_numpy_sweep_covers_the_int_arguments():
    assert len(NUMPY_INTS) >= 500, len(NUMPY_INTS)


def test_device_that_does_not_exist_is_refused(monkeypatch):
    from course_pkg.device import get_device

    for name in ("xpu", "cuda:99", "gpu-please"):
        monkeypatch.setenv("COURSE_DEVICE", name)
        with pytest.raises(ValueError, match="COURSE_DEVICE"):
            get_device()


# The examples of issue 31 that the matrix above does not generate.
ISSUE_31 = {
    "Vocab.to_tokens(-1) is not the last token": (
        lambda: _vocab().to_tokens(-1),
        ValueError,
        "indices",
    ),
    "Vocab.to_tokens(1.7) is not <bos>": (
        lambda: _vocab().to_tokens(1.7),
        TypeError,
        "indices",
    ),
    "a str among token lists is not split into letters": (
        lambda: translation.Vocab([["a", "b"], "cd"]),
        TypeError,
        "tokens",
    ),
    "float64 encoder outputs for a float32 decoder": (
        lambda: transformer.TransformerDecoder(
            11, 8, 16, 2, 1, 0.0
        ).init_state(_float(2, 4, 8).double(), _lens(4, 2)),
        TypeError,
        "enc_outputs",
    ),
    "a wrong width in AddNorm": (
        lambda: blocks.AddNorm(8, 0.0)(_float(2, 3, 6), _float(2, 3, 6)),
        ValueError,
        "X",
    ),
    "a block index beyond the state's caches": (
        lambda: blocks.TransformerDecoderBlock(8, 16, 2, 0.0, 5)(
            _float(2, 3, 8), _decoder_state()
        ),
        ValueError,
        "i=5",
    ),
    "logits over V = 0 classes": (
        lambda: masked_cross_entropy(
            torch.ones(2, 3, 0), torch.zeros(2, 3, dtype=torch.long), 0
        ),
        ValueError,
        "Y_hat",
    ),
}


@pytest.mark.parametrize("example", list(ISSUE_31))
def test_the_examples_of_issue_31_are_refused(example):
    call, error, name = ISSUE_31[example]
    with torch.random.fork_rng(devices=[]), pytest.raises(error, match=name):
        call()


def test_load_tatoeba_reads_a_bom_drops_empty_sides_and_keeps_the_fd(tmp_path):
    from course_pkg.data.tatoeba import load_tatoeba

    path = tmp_path / "pairs.txt"
    path.write_bytes(
        "\ufeffgo .\tva !\n\tvide\nhi .\t\nhello .\tsalut .\n".encode()
    )
    pairs = load_tatoeba(path)
    assert pairs == [("go .", "va !"), ("hello .", "salut .")]
    assert pairs.dropped == 2  # one empty English side, one empty French
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(TypeError, match="path"):
            load_tatoeba(fd)
        os.fstat(fd)  # still open: the caller's descriptor is not closed
    finally:
        os.close(fd)
