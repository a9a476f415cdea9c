"""Weights of Hugging Face's GPT-2 and BERT in the course's classes, and back.

The converters read and write plain state dicts (``{name: tensor}``), so the
package never imports ``transformers``: the tests and the chapters that load
a published model import it themselves and pass ``model.state_dict()``.

GPT-2 (``GPT2LMHeadModel``, or ``GPT2Model`` without the ``transformer.``
prefix) into :class:`course_pkg.models.gpt2.GPT2`. Its layers are ``Conv1D``,
which stores a weight as (inputs, outputs), the transpose of
``nn.Linear``'s (outputs, inputs); its attention projects queries, keys and
values with one fused layer, ``c_attn``, of 3 D outputs, which the course's
:class:`~course_pkg.nn.attention.MultiHeadAttention` keeps as ``W_q``, ``W_k``
and ``W_v``, in that order. The output layer ``lm_head`` is the token
embedding ``wte``.

BERT (``BertModel``) into :class:`course_pkg.models.bert.PublishedBERT`: the same
layers under other names; the position table is (max_len, D) there and
(1, max_len, D) here.

Neither direction needs the number of heads: it is not in the weights.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

import torch

StateDict = dict[str, torch.Tensor]
# Buffers some versions of transformers keep in a state dict: masks and
# position ids, not weights.
_GPT2_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")
_BERT_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def _linear(ours: str, theirs: str) -> Iterator[tuple[str, str]]:
    """The weight and bias names of one linear layer or layer norm."""
    for part in ("weight", "bias"):
        yield f"{ours}.{part}", f"{theirs}.{part}"


def _block_tensors(
    num_blks: int, theirs: str, layers: tuple[tuple[str, str], ...]
) -> Iterator[tuple[str, str]]:
    """The weight and bias names of every layer of every block: ours under
    ``blks.{i}.``, Hugging Face's under ``theirs.format(i)``."""
    for i in range(num_blks):
        for our_layer, their_layer in layers:
            yield from _linear(
                f"blks.{i}.{our_layer}", theirs.format(i) + their_layer
            )


# ------------------------------------------------------------------- GPT-2

# A block's layers (ours, Hugging Face's) but the fused c_attn.
_GPT2_LAYERS = (
    ("ln_1", "ln_1"),
    ("attention.W_o", "attn.c_proj"),
    ("ln_2", "ln_2"),
    ("ffn.dense1", "mlp.c_fc"),
    ("ffn.dense2", "mlp.c_proj"),
)


def _gpt2_pairs(num_blks: int) -> Iterator[tuple[str, str, bool]]:
    """(our name, Hugging Face's name, transposed?) of every GPT-2 tensor but
    the fused query/key/value projection."""
    yield "embedding.weight", "wte.weight", False
    yield "pos_encoding.embedding.weight", "wpe.weight", False
    for ours, theirs in _block_tensors(num_blks, "h.{}.", _GPT2_LAYERS):
        # Conv1D weights are transposed, the layer norms' are not
        yield ours, theirs, ours.endswith(".weight") and ".ln_" not in ours
    yield from ((o, t, False) for o, t in _linear("dense.0", "ln_f"))


def gpt2_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`~course_pkg.models.gpt2.GPT2` state dict from Hugging Face's.

    Args:
        state_dict: ``GPT2LMHeadModel.state_dict()`` (names start with
            ``transformer.``; ``lm_head.weight``, if there, must equal
            ``wte``) or ``GPT2Model.state_dict()``.
    Returns:
        {name: tensor} for ``GPT2.load_state_dict``, the tensors in the
        given dtype (transposed ones made contiguous).
    Raises:
        TypeError: if state_dict is not a mapping of names to tensors.
        ValueError: naming a missing tensor, one left over, or an output
            layer that is not the token embedding.
    """
    theirs = _check_state_dict("state_dict", state_dict)
    lm_head = theirs.pop("lm_head.weight", None)
    theirs = {
        name.removeprefix("transformer."): tensor
        for name, tensor in theirs.items()
        if not _GPT2_BUFFERS.search(name)
    }
    num_blks = _count_blocks(theirs, r"h\.(\d+)\.ln_1\.weight")
    # every shape against the configuration, before anything is converted
    names = {
        name.removeprefix("transformer."): name
        for name in state_dict
        if isinstance(name, str)
    }
    sizes = _gpt2_sizes(
        theirs, "wte.weight", "wpe.weight", "h.0.mlp.c_fc.bias", names
    )
    _check_shapes(theirs, _gpt2_hf_shapes(num_blks), sizes, names)
    if lm_head is not None:
        _check_shapes(
            {"lm_head.weight": lm_head}, {"lm_head.weight": ("V", "D")}, sizes
        )
    ours: StateDict = {}
    used = set()
    for our_name, their_name, transposed in _gpt2_pairs(num_blks):
        tensor = _take(theirs, their_name, used)
        ours[our_name] = tensor.t().contiguous() if transposed else tensor
    for i in range(num_blks):
        for part in ("weight", "bias"):
            fused = _take(theirs, f"h.{i}.attn.c_attn.{part}", used)
            if part == "weight":
                fused = fused.t()  # (3 D, D): W_q, W_k, W_v stacked
            for name, chunk in zip("qkv", fused.chunk(3, dim=0), strict=True):
                ours[f"blks.{i}.attention.W_{name}.{part}"] = (
                    chunk.contiguous()
                )
    _check_all_used(theirs, used)
    if lm_head is not None and not torch.equal(
        lm_head, ours["embedding.weight"]
    ):
        raise ValueError(
            "state_dict's lm_head.weight must equal transformer.wte.weight "
            "(GPT-2 ties them)"
        )
    ours["dense.1.weight"] = ours["embedding.weight"]
    return ours


def gpt2_to_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Hugging Face's ``GPT2LMHeadModel`` state dict from a
    :class:`~course_pkg.models.gpt2.GPT2`'s: the inverse of :func:`gpt2_from_hf`.

    Args:
        state_dict: ``GPT2.state_dict()``.
    Returns:
        {name: tensor} for ``GPT2LMHeadModel.load_state_dict`` (with
        ``lm_head.weight``, the token embedding).
    Raises:
        TypeError, ValueError: as :func:`gpt2_from_hf`.
    """
    ours = _check_state_dict("state_dict", state_dict)
    num_blks = _count_blocks(ours, r"blks\.(\d+)\.ln_1\.weight")
    sizes = _gpt2_sizes(ours, *_GPT2_OUR_ANCHORS)
    _check_shapes(ours, _gpt2_our_shapes(num_blks), sizes)
    theirs: StateDict = {}
    used = {"dense.1.weight"}
    for our_name, their_name, transposed in _gpt2_pairs(num_blks):
        tensor = _take(ours, our_name, used)
        theirs[their_name] = tensor.t().contiguous() if transposed else tensor
    for i in range(num_blks):
        for part in ("weight", "bias"):
            fused = torch.cat(
                [
                    _take(ours, f"blks.{i}.attention.W_{name}.{part}", used)
                    for name in "qkv"
                ]
            )  # (3 D, D) or (3 D,)
            theirs[f"h.{i}.attn.c_attn.{part}"] = (
                fused.t().contiguous() if part == "weight" else fused
            )
    _check_all_used(ours, used)
    if "dense.1.weight" in ours and not torch.equal(
        ours["dense.1.weight"], ours["embedding.weight"]
    ):
        raise ValueError(
            "state_dict's dense.1.weight must equal embedding.weight "
            "(GPT-2 ties them)"
        )
    result = {f"transformer.{name}": t for name, t in theirs.items()}
    result["lm_head.weight"] = theirs["wte.weight"]
    return result


# -------------------------------------------------------------------- BERT

# A block's layers (ours, Hugging Face's).
_BERT_LAYERS = (
    ("attention.W_q", "attention.self.query"),
    ("attention.W_k", "attention.self.key"),
    ("attention.W_v", "attention.self.value"),
    ("attention.W_o", "attention.output.dense"),
    ("addnorm1.ln", "attention.output.LayerNorm"),
    ("ffn.dense1", "intermediate.dense"),
    ("ffn.dense2", "output.dense"),
    ("addnorm2.ln", "output.LayerNorm"),
)


def _bert_pairs(num_blks: int) -> Iterator[tuple[str, str]]:
    """(our name, Hugging Face's name) of every BERT tensor but the
    position table."""
    yield "token_embedding.weight", "embeddings.word_embeddings.weight"
    yield "segment_embedding.weight", "embeddings.token_type_embeddings.weight"
    yield from _linear("embedding_norm", "embeddings.LayerNorm")
    yield from _block_tensors(num_blks, "encoder.layer.{}.", _BERT_LAYERS)
    yield from _linear("pooler.0", "pooler.dense")


def bert_from_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """A :class:`~course_pkg.models.bert.PublishedBERT` state dict from Hugging
    Face's ``BertModel.state_dict()`` (with its pooler).

    Args:
        state_dict: ``BertModel.state_dict()``; a token-type table must have
            2 rows to load (the course's segments are 0 and 1).
    Returns:
        {name: tensor} for ``PublishedBERT.load_state_dict``.
    Raises:
        TypeError: if state_dict is not a mapping of names to tensors.
        ValueError: naming a missing tensor or one left over.
    """
    theirs = {
        name: tensor
        for name, tensor in _check_state_dict("state_dict", state_dict).items()
        if name not in _BERT_BUFFERS
    }
    num_blks = _count_blocks(
        theirs, r"encoder\.layer\.(\d+)\.output\.dense\.weight"
    )
    sizes = _bert_sizes(theirs, *_BERT_HF_ANCHORS)
    ours_to_theirs = dict(_bert_pairs(num_blks))
    shapes = {
        ours_to_theirs.get(name, _BERT_POSITIONS[1]): letters
        for name, letters in _bert_our_shapes(num_blks).items()
    }
    shapes[_BERT_POSITIONS[1]] = ("L", "D")  # theirs has no leading 1
    _check_shapes(theirs, shapes, sizes)
    return _convert(
        theirs,
        _bert_pairs(num_blks),
        forward=True,
        extra=_BERT_POSITIONS,
        reshape=lambda table: table[None],  # (max_len, D) -> (1, max_len, D)
    )


def bert_to_hf(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Hugging Face's ``BertModel`` state dict from a
    :class:`~course_pkg.models.bert.PublishedBERT`'s: the inverse of
    :func:`bert_from_hf`, with its refusals (TypeError, ValueError).
    """
    ours = _check_state_dict("state_dict", state_dict)
    num_blks = _count_blocks(ours, r"blks\.(\d+)\.ffn\.dense2\.weight")
    sizes = _bert_sizes(ours, *_BERT_OUR_ANCHORS)
    _check_shapes(ours, _bert_our_shapes(num_blks), sizes)
    return _convert(
        ours,
        _bert_pairs(num_blks),
        forward=False,
        extra=_BERT_POSITIONS,
        reshape=lambda table: table[0],  # (1, max_len, D) -> (max_len, D)
    )


def _convert(
    source: StateDict,
    pairs: Iterator[tuple[str, str]],
    *,
    forward: bool,
    extra: tuple[str, str],
    reshape: Callable[[torch.Tensor], torch.Tensor],
) -> StateDict:
    """Rename every tensor of source by pairs (theirs -> ours when forward),
    and one extra pair through reshape; refuse missing and left-over
    tensors."""
    used: set[str] = set()
    result: StateDict = {}
    for ours, theirs in [*pairs, extra]:
        src, dst = (theirs, ours) if forward else (ours, theirs)
        tensor = _take(source, src, used)
        result[dst] = reshape(tensor) if (ours, theirs) == extra else tensor
    _check_all_used(source, used)
    return result


# ------------------------------------------------------------------ checks


def _check_state_dict(name: str, state_dict: object) -> StateDict:
    """A mapping of str to tensors, as a dict (TypeError otherwise)."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(
            f"{name} must be a mapping of names to tensors (a state dict), "
            f"got {type(state_dict).__name__}"
        )
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} must map str names to tensors, got {key!r}: "
                f"{type(value).__name__}"
            )
    return dict(state_dict)


def _count_blocks(state: StateDict, pattern: str) -> int:
    """The number of blocks, from the names matching pattern (one group, the
    block index); refuses a state dict without block 0 or with a gap."""
    found = {
        int(match.group(1))
        for name in state
        if (match := re.fullmatch(pattern, name))
    }
    if not found or found != set(range(len(found))):
        raise ValueError(
            "state_dict must hold blocks 0, 1, ..., N - 1 (names like "
            f"{pattern!r}), found block indices {sorted(found)}"
        )
    return len(found)


# Shapes in letters: V vocabulary, D width, L positions, F the FFN's width,
# S token types (BERT), "3D" three widths, "1" a leading axis of one.
Letters = tuple[str, ...]

# GPT-2's block layers under h.{i}., their weights in Hugging Face's (Conv1D)
# layout (in, out); each bias has the weight's last axis.
_GPT2_BLOCK_SHAPES: dict[str, Letters] = {
    "ln_1": ("D",),
    "attn.c_attn": ("D", "3D"),
    "attn.c_proj": ("D", "D"),
    "ln_2": ("D",),
    "mlp.c_fc": ("D", "F"),
    "mlp.c_proj": ("F", "D"),
}


# The tensors whose shapes give the configuration (V, D, L, F and, for
# BERT, the segments S): every other tensor is checked against them.
_GPT2_OUR_ANCHORS = (
    "embedding.weight",
    "pos_encoding.embedding.weight",
    "blks.0.ffn.dense1.bias",
)
_BERT_OUR_ANCHORS = (
    "token_embedding.weight",
    "segment_embedding.weight",
    ("pos_embedding", ("1", "L", "D")),
    "blks.0.ffn.dense1.bias",
)
_BERT_POSITIONS = ("pos_embedding", "embeddings.position_embeddings.weight")
_BERT_HF_ANCHORS = (
    "embeddings.word_embeddings.weight",
    "embeddings.token_type_embeddings.weight",
    ("embeddings.position_embeddings.weight", ("L", "D")),
    "encoder.layer.0.intermediate.dense.bias",
)


def _gpt2_hf_shapes(num_blks: int) -> dict[str, Letters]:
    """Hugging Face's GPT-2 names (without ``transformer.``) and shapes."""
    shapes = {
        "wte.weight": ("V", "D"),
        "wpe.weight": ("L", "D"),
        "ln_f.weight": ("D",),
        "ln_f.bias": ("D",),
    }
    for i in range(num_blks):
        for layer, letters in _GPT2_BLOCK_SHAPES.items():
            shapes[f"h.{i}.{layer}.weight"] = letters
            shapes[f"h.{i}.{layer}.bias"] = letters[-1:]
    return shapes


def _gpt2_our_shapes(num_blks: int) -> dict[str, Letters]:
    """:class:`~course_pkg.models.gpt2.GPT2`'s names and shapes."""
    theirs = _gpt2_hf_shapes(num_blks)
    shapes = {
        ours: theirs[name][::-1] if transposed else theirs[name]
        for ours, name, transposed in _gpt2_pairs(num_blks)
    }
    for i in range(num_blks):
        for name in "qkv":
            shapes[f"blks.{i}.attention.W_{name}.weight"] = ("D", "D")
            shapes[f"blks.{i}.attention.W_{name}.bias"] = ("D",)
    shapes["dense.1.weight"] = ("V", "D")
    return shapes


def _gpt2_sizes(
    state: StateDict,
    embedding: str,
    positions: str,
    ffn_bias: str,
    names: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """V and D from the token embedding, L from the position table, F from
    the first block's FFN bias."""
    vocab_size, width = _anchor(state, embedding, ("V", "D"), names)
    num_positions = _anchor(state, positions, ("L", "D"), names)[0]
    ffn = _anchor(state, ffn_bias, ("F",), names)[0]
    return {"V": vocab_size, "D": width, "L": num_positions, "F": ffn}


# BERT's block layers (ours) and their weights' shapes; a bias has the
# weight's first axis, a layer norm's weight and bias are (D,).
_BERT_BLOCK_SHAPES: dict[str, Letters] = {
    "attention.W_q": ("D", "D"),
    "attention.W_k": ("D", "D"),
    "attention.W_v": ("D", "D"),
    "attention.W_o": ("D", "D"),
    "addnorm1.ln": ("D",),
    "ffn.dense1": ("F", "D"),
    "ffn.dense2": ("D", "F"),
    "addnorm2.ln": ("D",),
}


def _bert_our_shapes(num_blks: int) -> dict[str, Letters]:
    """:class:`~course_pkg.models.bert.PublishedBERT`'s names and shapes."""
    layers = {"embedding_norm": ("D",), "pooler.0": ("D", "D")}
    for i in range(num_blks):
        for layer, letters in _BERT_BLOCK_SHAPES.items():
            layers[f"blks.{i}.{layer}"] = letters
    shapes: dict[str, Letters] = {
        "token_embedding.weight": ("V", "D"),
        "segment_embedding.weight": ("S", "D"),
        "pos_embedding": ("1", "L", "D"),
    }
    for layer, letters in layers.items():
        shapes[f"{layer}.weight"] = letters
        shapes[f"{layer}.bias"] = letters[:1]
    return shapes


def _bert_sizes(
    state: StateDict,
    embedding: str,
    segments: str,
    positions: tuple[str, Letters],
    ffn_bias: str,
) -> dict[str, int]:
    """V and D from the token embedding, S from the token-type table, L from
    the position table, F from the first block's FFN bias."""
    vocab_size, width = _anchor(state, embedding, ("V", "D"))
    num_segments = _anchor(state, segments, ("S", "D"))[0]
    table = _anchor(state, *positions)
    ffn = _anchor(state, ffn_bias, ("F",))[0]
    return {
        "V": vocab_size, "D": width, "S": num_segments,
        "L": table[positions[1].index("L")], "F": ffn,
    }  # fmt: skip


def _letters(letters: Letters) -> str:
    return f"({', '.join(letters)}{',' if len(letters) == 1 else ''})"


def _anchor(
    state: StateDict,
    name: str,
    letters: Letters,
    names: Mapping[str, str] | None = None,
) -> tuple[int, ...]:
    """The shape of a tensor the sizes are read from: ValueError naming it
    if it is missing or not of len(letters) dimensions."""
    key = names.get(name, name) if names else name
    if name not in state:
        raise ValueError(f"state_dict has no tensor {key!r}")
    shape = tuple(state[name].shape)
    if len(shape) != len(letters):
        raise ValueError(
            f"state_dict[{key!r}] must have shape {_letters(letters)}, "
            f"got {shape}"
        )
    return shape


def _check_shapes(
    state: StateDict,
    shapes: Mapping[str, Letters],
    sizes: dict[str, int],
    names: Mapping[str, str] | None = None,
) -> None:
    """Refuse a tensor of state whose shape is not its letters' sizes
    (ValueError naming its key, the shape expected and the one given).
    Missing tensors are left to :func:`_take`."""
    values = {**sizes, "3D": 3 * sizes["D"], "1": 1}
    config = ", ".join(f"{k}={v}" for k, v in sizes.items())
    for name, letters in shapes.items():
        if name not in state:
            continue
        want = tuple(values[letter] for letter in letters)
        got = tuple(state[name].shape)
        if got != want:
            key = names.get(name, name) if names else name
            raise ValueError(
                f"state_dict[{key!r}] must have shape {_letters(letters)}="
                f"{want} (the model's configuration: {config}), got {got}"
            )


def _take(state: StateDict, name: str, used: set[str]) -> torch.Tensor:
    """state[name], marked used; ValueError naming it if missing."""
    if name not in state:
        raise ValueError(f"state_dict has no tensor {name!r}")
    used.add(name)
    return state[name]


def _check_all_used(state: StateDict, used: set[str]) -> None:
    """Refuse tensors no conversion read (another model's state dict)."""
    left = sorted(set(state) - used)
    if left:
        raise ValueError(
            f"state_dict has tensors the conversion does not know: {left[:5]}"
            + (" ..." if len(left) > 5 else "")
        )
