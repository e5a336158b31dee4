"""Training arithmetic that does not depend on the number of CPU threads.

On the CPU, torch splits some sums across its threads, so a model trained with 1 thread and the same model trained
with 2 round differently and end with other weights. Three places do so in this project's models; each gets the
same result whatever the thread count:

- matrix products: MKL's strict reproducible mode (`MKL_CBWR=AUTO,STRICT`, set by the package before torch loads;
  `mkl_strict_mode` says whether it took effect), at no cost in speed;
- LayerNorm's weight and bias gradients, which ATen sums over rows in per-thread blocks: `ThreadStableLayerNorm`
  sums them over the leading dimensions instead (a sum that keeps one output per feature runs each output on one
  thread); its forward pass and input gradient are ATen's own;
- softmax's backward pass along a dimension longer than 16 that is not a multiple of 16 (attention over a padded
  length, Longformer's window of 2w+1): `thread_stable_kernels` replaces ATen's CPU kernel while a stage trains
  with the same formula summed row by row.

What stays split by threads: a sum down to ONE number over more than 32,768 elements (torch's grain size). A loss
is one, but its gradient is not a sum; a parameter's gradient is one only for a parameter with a single element
trained on as many rows (a one-output head over every token of a large batch, a scalar parameter), which none of
this project's models has: their one-output heads read one row per question, paragraph or marker.

A stage gets the last two through its `ThreadStableTraining` callback; new token embeddings are drawn without the
covariance factorisation that depends on the thread count (`backbone.resize_embeddings`); torch's gradient norm
(`gradient_clip_algorithm: norm`) is already the same with any count. So the thread count (`trainer.threads`, chosen
from the load when `auto`) changes how fast a run goes, not what it computes, and a run resumed with another thread
count ends as the uninterrupted run did (`tests/models/test_numerics.py`, `benchmarks/kill_resume.py`).
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytorch_lightning as pl
import torch
from torch import nn

# MKL's conditional-numerical-reproducibility settings (mkl_cbwr.h): `AUTO` keeps the fastest code path for the
# processor; `STRICT` makes every product independent of the thread count.
MKL_CBWR_ALL = -1
MKL_CBWR_STRICT = 0x10000


def mkl_strict_mode() -> bool | None:
    """Whether MKL's strict reproducible mode is on in this process (None: no MKL exported by torch here, e.g. a
    build without MKL, where the products follow that build's own BLAS)."""
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        get_mode = ctypes.CDLL(library).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get_mode.restype, get_mode.argtypes = ctypes.c_int, [ctypes.c_int]
    return bool(get_mode(MKL_CBWR_ALL) & MKL_CBWR_STRICT)


# The registered replacement kernel (destroying it unregisters it), and how many blocks hold it.
_KERNELS: list[torch.library.Library] = []
_HOLDERS = [0]


def _softmax_backward(
    grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype
) -> torch.Tensor:
    """softmax's input gradient, y * (g - sum(g * y)), summed along `dim` one row at a time."""
    return (output * (grad_output - (grad_output * output).sum(dim, keepdim=True))).to(input_dtype)


@contextmanager
def thread_stable_kernels() -> Iterator[None]:
    """While the block runs, ATen's CPU kernel of softmax's backward pass is `_softmax_backward` in this process (the
    same values as ATen's to rounding, and the same with any thread count); nested blocks share one registration."""
    if not _HOLDERS[0]:
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore", UserWarning)
            library.impl("_softmax_backward_data", _softmax_backward, "CPU")
        _KERNELS.append(library)
    _HOLDERS[0] += 1
    try:
        yield
    finally:
        _HOLDERS[0] -= 1
        if not _HOLDERS[0]:
            _KERNELS.pop()._destroy()


class ThreadStableTraining(pl.Callback):
    """Makes a stage's training arithmetic independent of the thread count, in every process that trains it (DDP's
    spawned workers too): the module's LayerNorms become `ThreadStableLayerNorm`s and softmax's backward kernel is
    replaced (`thread_stable_kernels`) from the start of the fit to its end."""

    def __init__(self) -> None:
        self._kernels: AbstractContextManager[None] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self._kernels is None:
            make_thread_stable(pl_module)
            self._kernels = thread_stable_kernels()
            self._kernels.__enter__()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._release()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._release()  # Lightning skips `teardown` when the fit raises (a stop signal, an error)

    def _release(self) -> None:
        if self._kernels is not None:
            self._kernels.__exit__(None, None, None)
            self._kernels = None


class _LayerNormFunction(torch.autograd.Function):
    """`layer_norm` whose weight and bias gradients are sums over the leading dimensions (one thread an output)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        shape: tuple[int, ...],
        eps: float,
    ) -> torch.Tensor:
        output, mean, rstd = torch.native_layer_norm(hidden, shape, weight, bias, eps)
        ctx.save_for_backward(hidden, weight, bias, mean, rstd)
        ctx.shape = shape  # type: ignore[attr-defined]
        return output

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_output: torch.Tensor) -> tuple:  # type: ignore[override]
        hidden, weight, bias, mean, rstd = ctx.saved_tensors  # type: ignore[attr-defined]
        shape = ctx.shape  # type: ignore[attr-defined]
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]  # type: ignore[attr-defined]
        grad_hidden = grad_weight = grad_bias = None
        if needs_hidden:
            grad_hidden = torch.ops.aten.native_layer_norm_backward(
                grad_output, hidden, list(shape), mean, rstd, weight, bias, [True, False, False]
            )[0]
        leading = tuple(range(hidden.dim() - len(shape)))
        if needs_weight:
            grad_weight = (grad_output * ((hidden - mean) * rstd)).sum(leading)
        if needs_bias:
            grad_bias = grad_output.sum(leading)
        return grad_hidden, grad_weight, grad_bias, None, None


class ThreadStableLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` (same parameters, same forward result) whose backward pass on the CPU gives the same weight
    and bias gradients with any number of threads. On a GPU, under autocast, or without gradients it is
    `nn.LayerNorm`."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.device.type != "cpu" or not torch.is_grad_enabled() or torch.is_autocast_enabled("cpu"):
            return super().forward(hidden)
        return _LayerNormFunction.apply(hidden, self.weight, self.bias, tuple(self.normalized_shape), self.eps)


def make_thread_stable(module: nn.Module) -> int:
    """Turn every `nn.LayerNorm` inside `module` into a `ThreadStableLayerNorm` in place (same parameters and state
    dict); the number turned."""
    turned = 0
    for child in module.modules():
        if type(child) is nn.LayerNorm:
            child.__class__ = ThreadStableLayerNorm
            turned += 1
    return turned
