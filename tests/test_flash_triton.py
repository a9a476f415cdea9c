"""course_pkg.kernels.flash_triton: the Triton kernels, on every machine.

Without a CUDA GPU the kernels run in Triton's interpreter: Triton reads
``TRITON_INTERPRET`` when a kernel is defined, so it is set here, before the
module is imported (this is the only test module that imports it; the
pytest process then interprets every Triton kernel, which on a machine
without a GPU is the only way to run one). On a GPU it is left unset and
the same parity tests run compiled, marked ``cuda``.

- parity, forward and backward, with the PyTorch version
  (:mod:`course_pkg.kernels.flash`) and SDPA, float32 bounds from the float64
  reference (tests/test_flash.py), float64 to 1e-12;
- ahead-of-time compilation for sm80 and sm90 with the bundled ptxas, in a
  subprocess without the interpreter, for each dtype the kernels take: a
  float64 kernel holds no float32 value (the scale stays float64), every
  address offset is int64 (B * H * T * d may pass 2**31), and what each
  asks of shared memory is the record's;
- the record of every tile the checks accept, compiled for sm80 and sm90
  (``course_pkg/kernels/flash_resources.jsonl``, written by
  ``bench/kernel_resources.py``): complete, within the A100's and the
  H100's shared memory, and from today's kernels (the digest of their
  syntax trees, course_pkg.experiments.provenance.jit_digest);
- bad input refused before launch;
- without triton the package still imports and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from course_pkg.kernels import flash_triton  # noqa: E402
from course_pkg.kernels.flash import flash_attention  # noqa: E402
from course_pkg.kernels.flash_triton import triton_flash_attention  # noqa: E402
from tests.conftest import CUDA  # noqa: E402
from tests.test_flash import (  # noqa: E402
    FORWARD_BOUND,
    GRADIENT_BOUND,
    flash_arguments,
    inputs,
    reference,
    sdpa_mask,
)

DEVICES = ["cpu", CUDA] if flash_triton.INTERPRETED else [CUDA]

# (B, H, Q, K, d, valid_lens, causal, block_q, block_k, dtype); T <= 128.
f32, f64 = torch.float32, torch.float64
# fmt: off
CASES = {
    "plain": (1, 2, 64, 64, 32, None, False, 32, 32, f32),
    "T=100, not a multiple": (2, 1, 100, 100, 16, None, False, 32, 32, f32),
    "causal": (1, 1, 128, 128, 32, None, True, 32, 64, f32),
    "causal, Q < K": (1, 2, 40, 90, 16, None, True, 32, 32, f32),
    "lengths (B,) with 0": (
        2, 1, 70, 70, 16, torch.tensor([0, 33]), False, 32, 32, f32,
    ),
    "lengths (B, Q)": (
        1, 1, 33, 50, 16, torch.arange(33)[None] % 7, False, 32, 32, f32,
    ),
    "causal with lengths": (
        2, 1, 64, 64, 32, torch.tensor([64, 20]), True, 32, 32, f32,
    ),
    "d=64, blocks 64 x 32": (1, 1, 96, 96, 64, None, False, 64, 32, f32),
    # the causal loops split where the diagonal starts: tiles of unequal
    # heights, Q < K, lengths not multiples of either
    "causal, 16 x 32, Q < K": (1, 1, 45, 77, 16, None, True, 16, 32, f32),
    "causal, 32 x 16": (1, 2, 77, 77, 16, None, True, 32, 16, f32),
    "causal, 64 x 16, Q < K, lengths": (
        2, 1, 50, 99, 16, torch.tensor([99, 30]), True, 64, 16, f32,
    ),
    "float64": (1, 2, 50, 50, 16, None, False, 32, 32, f64),
    "float64 causal": (1, 1, 96, 96, 32, None, True, 32, 32, f64),
    "float64 causal, lengths, Q < K": (
        2, 1, 30, 61, 16, torch.tensor([61, 0]), True, 32, 32, f64,
    ),
}
# fmt: on


def _case(name, device):
    B, H, Tq, Tk, d, lens, causal, bq, bk, dtype = CASES[name]
    leaves = [x.detach().to(device) for x in inputs(B, H, Tq, Tk, d, d, dtype)]
    return leaves, lens, causal, bq, bk


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", CASES)
def test_kernels_match_the_pytorch_version_and_sdpa(name, device):
    leaves, lens, causal, bq, bk = _case(name, device)
    ours = [x.clone().requires_grad_() for x in leaves]
    torch_version = [x.clone().requires_grad_() for x in leaves]
    exact = [x.double().clone().requires_grad_() for x in leaves]
    out = triton_flash_attention(*ours, lens, causal, bq, bk)
    out_torch = flash_attention(*torch_version, lens, causal, bq, bk)
    out_exact = reference(*exact, lens, causal)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grad = grad.to(device, out.dtype)
    grads = torch.autograd.grad(out, ours, grad)
    grads_torch = torch.autograd.grad(out_torch, torch_version, grad)
    grads_exact = torch.autograd.grad(out_exact, exact, grad.double())
    double = leaves[0].dtype == torch.float64
    forward_bound = 1e-12 if double else FORWARD_BOUND
    gradient_bound = 1e-12 if double else GRADIENT_BOUND
    for result in (out, out_torch):
        assert (result.double() - out_exact).abs().max() < forward_bound
    for result in (grads, grads_torch):
        for got, want in zip(result, grads_exact):
            assert (got.double() - want).abs().max() < gradient_bound
    if not double:  # and SDPA, which nobody here wrote
        mask = sdpa_mask(lens, *out.shape[2:3], leaves[1].shape[2], causal)
        sdpa = F.scaled_dot_product_attention(
            *leaves, attn_mask=mask.to(device)
        )
        assert (out - sdpa).abs().max() < 2 * FORWARD_BOUND


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_kernels_on_a_gpu(dtype):
    leaves, _, _, _, _ = _case("causal", "cuda")
    q, k, v = (x.to(dtype).requires_grad_() for x in leaves)
    out = triton_flash_attention(q, k, v, None, True, 64, 64)
    sdpa = F.scaled_dot_product_attention(
        *(x.detach().float() for x in (q, k, v)), is_causal=True
    )
    # float16 / bfloat16 inputs, float32 accumulation: a few units of the
    # last place of the 16-bit output (eps: 1e-3 and 8e-3).
    assert (out.float() - sdpa).abs().max() < 40 * torch.finfo(dtype).eps
    out.float().sum().backward()
    assert all(x.grad.isfinite().all() for x in (q, k, v))


# ---------------------------------------------------------------- bad input


def _arguments(**change):
    return flash_arguments(40, 40, 16, 32, **change)


BAD = {
    "non-contiguous": (dict(keys=torch.randn(1, 2, 16, 40).transpose(2, 3)),
                       ValueError, "keys must be contiguous"),  # fmt: skip
    "d not a power of two": (
        dict(queries=torch.randn(1, 2, 40, 24), keys=torch.randn(1, 2, 40, 24),
             values=torch.randn(1, 2, 40, 24)), ValueError, "d = d_v"),
    "d below 16": (
        dict(queries=torch.randn(1, 2, 40, 8), keys=torch.randn(1, 2, 40, 8),
             values=torch.randn(1, 2, 40, 8)), ValueError, "d = d_v"),
    "d_v != d": (dict(values=torch.randn(1, 2, 40, 32)), ValueError, "d_v"),
    "block of 48": (dict(block_q=48), ValueError, "block_q x block_k must"),
    "block of 128": (dict(block_k=128), ValueError, "block_q x block_k must"),
    "a tile too large for shared memory": (
        {n: torch.randn(1, 2, 40, 128) for n in ("queries", "keys", "values")}
        | dict(block_q=64, block_k=64), ValueError, "fits an A100"),
    "T * d past int32": (
        {n: torch.empty(1, 1, 2**24, 128, device="meta")
         for n in ("queries", "keys", "values")}, ValueError, "T \\* d"),
    "block not an int": (dict(block_k=32.0), TypeError, "block_k"),
    "integer inputs": (
        dict(queries=torch.ones(1, 2, 40, 16, dtype=torch.int32)),
        TypeError, "queries"),
    "two devices": (dict(keys=torch.randn(1, 2, 40, 16, device="meta")),
                    ValueError, "one device"),  # fmt: skip
    "meta tensors": (
        {n: torch.randn(1, 2, 40, 16, device="meta")
         for n in ("queries", "keys", "values")}, ValueError, "CUDA device"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_before_launch(case):
    change, error, message = BAD[case]
    with pytest.raises(error, match=message):
        triton_flash_attention(**_arguments(**change))


def _backward_arguments(**change):
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    arguments = dict(
        queries=q, keys=k, values=v,
        output=torch.randn(1, 2, 40, 16), lse=torch.randn(1, 2, 40),
        grad_output=torch.randn(1, 2, 40, 16),
    )  # fmt: skip
    arguments.update(change)
    return arguments


BAD_BACKWARD = {
    "a short lse": (dict(lse=torch.randn(1, 2, 39)), ValueError, "lse"),
    "lse in float64 for float32": (
        dict(lse=torch.randn(1, 2, 40, dtype=torch.float64)), TypeError,
        "lse must be torch.float32"),
    "output of another width": (
        dict(output=torch.randn(1, 2, 40, 32)), ValueError, "output"),
    "grad_output of another length": (
        dict(grad_output=torch.randn(1, 2, 41, 16)), ValueError,
        "grad_output"),
    "grad_output in float64": (
        dict(grad_output=torch.randn(1, 2, 40, 16, dtype=torch.float64)),
        TypeError, "grad_output"),
    "lse not a tensor": (dict(lse=[0.0] * 40), TypeError, "lse"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_BACKWARD)
def test_the_backward_refuses_results_of_another_forward(case, monkeypatch):
    # the interpreter's checks pass for CPU tensors: these are the backward's
    monkeypatch.setattr(flash_triton, "INTERPRETED", True)
    launched = []
    monkeypatch.setattr(
        flash_triton, "flash_backward_dkdv_kernel", launched
    )  # a launch would fail on indexing a list: none may happen
    change, error, message = BAD_BACKWARD[case]
    with pytest.raises(error, match=message):
        flash_triton.triton_flash_backward(**_backward_arguments(**change))


def test_the_interpreter_refuses_bfloat16(monkeypatch):
    monkeypatch.setattr(flash_triton, "INTERPRETED", True)
    arguments = _arguments()
    for name in ("queries", "keys", "values"):
        arguments[name] = arguments[name].bfloat16()
    with pytest.raises(TypeError, match="bfloat16"):
        triton_flash_attention(**arguments)


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(flash_triton, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        triton_flash_attention(**_arguments())


# ---------------------------------------------------- compiling without a GPU

COMPILE = """
import json, re, sys, torch
from course_pkg.kernels.flash_triton import compile_kernels

def head_widened(ttir):
    # the head's index (program id y) is made int64 before any arithmetic
    head = re.search(r"(%\\w+) = tt.get_program_id y : i32", ttir).group(1)
    uses = [line for line in ttir.splitlines()
            if re.search(re.escape(head) + r"\\b", line)
            and not line.strip().startswith(head + " =")]
    return bool(uses) and all("arith.extsi" in u and "i32 to i64" in u for u in uses)

for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
    for name, kernel in compile_kernels(int(sys.argv[1]), dtype, 16, 16, 16, True).items():
        ttir = kernel.asm["ttir"]
        print(json.dumps(dict(
            dtype=str(dtype).removeprefix("torch."), kernel=name,
            elf=kernel.asm["cubin"][:4] == b"\\x7fELF",
            shared=kernel.metadata.shared,
            f32=bool(re.search(r"\\bf32\\b", ttir)),
            head64=head_widened(ttir),
        )))
"""


@pytest.mark.parametrize("capability", [80, 90])
def test_kernels_compile_for_sm80_and_sm90_without_a_gpu(capability):
    # The smallest tiles the checks accept (d = 16, blocks of 16): where
    # tl.dot's minimum sizes bite; the record below holds every other tile.
    environment = dict(os.environ)
    environment.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [sys.executable, "-c", COMPILE, str(capability)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 4 * 3, result.stdout
    recorded = {
        (r["dtype"], r["kernel"]): r["shared"]
        for r in RESOURCES
        if (r["capability"], r["d"], r["block_q"], r["block_k"])
        == (capability, 16, 16, 16)
    }
    for row in rows:
        assert row["elf"], row
        # float64 stays float64: no float32 scale or accumulator (on a GPU
        # a float32 1/sqrt(d) put a float64 output 2.4e-8 off, H100)
        assert row["dtype"] != "float64" or not row["f32"], row
        # the head's offset (head * T * d) is int64: B * H * T * d may pass
        # 2**31; within a head, T * d < 2**31 (checked at the door)
        assert row["head64"], row
        assert row["shared"] == recorded[row["dtype"], row["kernel"]], row


RESOURCES = [
    json.loads(line)
    for line in flash_triton.RESOURCES.read_text().splitlines()
]
KERNELS = (
    "flash_forward_kernel",
    "flash_backward_dkdv_kernel",
    "flash_backward_dq_kernel",
)
DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def test_every_candidate_tile_was_compiled_and_accepted_tiles_fit():
    # The record holds every candidate, so that tile_fits decides from what
    # Triton compiled, never from a tile that is missing.
    candidates = {
        (capability, dtype, d, bq, bk, kernel)
        for capability in flash_triton.SHARED_LIMITS
        for dtype in DTYPES
        for d in (16, 32, 64, 128)
        for bq in flash_triton.BLOCKS
        for bk in flash_triton.BLOCKS
        for kernel in KERNELS
    }
    recorded = {
        (r["capability"], r["dtype"], r["d"], r["block_q"], r["block_k"],
         r["kernel"]): r["shared"]
        for r in RESOURCES
    }  # fmt: skip
    assert set(recorded) == candidates
    for (capability, dtype, d, bq, bk, _), shared in recorded.items():
        if flash_triton.tile_fits(DTYPES[dtype], d, bq, bk):
            assert shared <= flash_triton.SHARED_LIMITS[capability]
    # what the package itself uses: the default tiles, the GPU benchmark's
    accepted = flash_triton.tile_fits
    assert all(
        accepted(DTYPES[t], d, 32, 32) for t in DTYPES for d in (16, 32, 64)
    )
    assert accepted(torch.bfloat16, 64, 64, 64)
    # and the rule refuses what does not fit: float32 at d = 128, 64 x 64
    # asks for more shared memory than an A100 has
    assert not accepted(torch.float32, 128, 64, 64)
    too_large = recorded[80, "float32", 128, 64, 64, "flash_forward_kernel"]
    assert too_large > flash_triton.SHARED_LIMITS[80]


def test_the_record_is_of_todays_kernels():
    import triton

    from course_pkg.experiments.provenance import jit_digest

    today = (triton.__version__, jit_digest(flash_triton))
    for row in RESOURCES:
        assert (row["triton"], row["kernels_digest"]) == today, (
            f"{flash_triton.RESOURCES.name} was compiled from other kernels or another "
            "Triton: run .venv/bin/python bench/kernel_resources.py --record"
        )


NO_TRITON = """
import sys
sys.modules["triton"] = None  # what an import of a missing package gives
import course_pkg, course_pkg.kernels.flash
from course_pkg.kernels import triton_status
available, why = triton_status()
print(available, why)
try:
    import course_pkg.kernels.flash_triton
except ImportError as error:
    print("ImportError:", error)
"""


def test_without_triton_the_package_imports_and_says_why():
    result = subprocess.run(
        [sys.executable, "-c", NO_TRITON],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("False triton does not import here")
    assert "ImportError: course_pkg.kernels.flash_triton needs triton" in (
        result.stdout
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_padding_gives_the_result_of_zero_padding(bad, device):
    # keys past every query's length hold NaN or inf: the kernels' output,
    # lse and gradients are those with zeros there, bit for bit
    leaves, _, _, _, _ = _case("plain", device)
    lens = torch.tensor([40])
    padding = (torch.arange(64) >= 40)[:, None].to(device)  # (K, 1)
    q, k, v = leaves
    zero = (q, k.masked_fill(padding, 0.0), v.masked_fill(padding, 0.0))
    bad_inputs = (q, k.masked_fill(padding, bad), v.masked_fill(padding, bad))
    want = flash_triton.triton_flash_forward(*zero, lens, False, 32, 32)
    got = flash_triton.triton_flash_forward(*bad_inputs, lens, False, 32, 32)
    for a, b in zip(got, want):
        assert a.isfinite().all() and torch.equal(a, b)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for tensors in (zero, bad_inputs):
        tensors = [x.clone().requires_grad_() for x in tensors]
        out = triton_flash_attention(*tensors, lens, False, 32, 32)
        grads.append(torch.autograd.grad(out, tensors, grad.to(device)))
    for a, b in zip(*grads):
        assert a.isfinite().all() and torch.equal(a, b)
