"""The GRU as the GRU encoder–decoders build it: time-major, checked, initialised.

Shared by :mod:`course_pkg.models.seq2seq` (the plain and Bahdanau models) and
:mod:`course_pkg.models.luong`. The chapter "The encoder–decoder architecture"
writes out the GRU's equations; ``torch.nn.GRU`` computes them.
"""

from __future__ import annotations

from torch import nn

from course_pkg.checks import check_probability, check_sizes


def init_seq2seq(module: nn.Module) -> None:
    """Xavier-uniform initialisation of Linear and GRU weight matrices.

    Use with ``model.apply``. GRUs start better conditioned this way than
    with PyTorch's uniform default; biases are kept.
    """
    if type(module) is nn.Linear:
        nn.init.xavier_uniform_(module.weight)
    if type(module) is nn.GRU:
        for name, param in module.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(param)


def gru_layer(
    input_size: int, num_hiddens: int, num_layers: int, dropout: float
) -> nn.GRU:
    """A time-major GRU of L = ``num_layers`` layers (input (T, B, ``input_size``)).

    Dropout acts only between layers, so none when L = 1 (PyTorch warns
    otherwise).

    Raises:
        TypeError/ValueError: if a size is not an int >= 1 or dropout not in
            [0, 1).
    """
    _check_gru_layer(input_size, num_hiddens, num_layers, dropout)
    return nn.GRU(
        input_size,
        num_hiddens,
        num_layers,
        dropout=dropout if num_layers > 1 else 0.0,
    )


def _check_gru_layer(
    input_size: object,
    num_hiddens: object,
    num_layers: object,
    dropout: object,
) -> None:
    """input_size, num_hiddens and num_layers ints >= 1; dropout in
    [0, 1)."""
    check_sizes(
        input_size=input_size, num_hiddens=num_hiddens, num_layers=num_layers
    )
    check_probability("dropout", dropout)


def check_gru_sizes(*sizes: int, dropout: float) -> None:
    """Check a GRU model's sizes and dropout before it builds anything.

    Args:
        sizes: vocab_size, embed_size, num_hiddens, num_layers (ints >= 1).
        dropout: a probability in [0, 1).
    Raises:
        TypeError, ValueError: naming the bad argument.
    """
    names = ("vocab_size", "embed_size", "num_hiddens", "num_layers")
    check_sizes(**dict(zip(names, sizes)))
    check_probability("dropout", dropout)
