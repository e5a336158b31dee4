"""Training arithmetic that does not depend on the CPU thread count (`musique_models.models.numerics`): each
backbone family's gradients, LayerNorm's and softmax's are the same with 1, 2 and 3 threads, and the same (to
rounding) as torch's own. Each case first shows that torch's own arithmetic does differ at its size,
so that the test could fail."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from transformers import (
    AutoModel,
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    LongformerConfig,
    LongformerModel,
)

from musique_models import PROJECT_ROOT
from musique_models.models.backbone import load_encoder
from musique_models.models.numerics import (
    ThreadStableLayerNorm,
    make_thread_stable,
    mkl_strict_mode,
    thread_stable_kernels,
)

COUNTS = (1, 2, 3)


@contextmanager
def _threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _per_count(compute: Callable[[], dict[str, torch.Tensor]]) -> dict[int, dict[str, torch.Tensor]]:
    results = {}
    for count in COUNTS:
        with _threads(count):
            results[count] = compute()
    return results


def _differing(results: dict[int, dict[str, torch.Tensor]]) -> list[str]:
    return sorted(
        {name for count in COUNTS[1:] for name in results[1] if not torch.equal(results[1][name], results[count][name])}
    )


def test_mkl_products_are_in_strict_mode_and_independent_of_the_thread_count() -> None:
    assert mkl_strict_mode() is True  # the package set MKL_CBWR before torch made its first product
    generator = torch.Generator().manual_seed(0)
    left, right = torch.randn(384, 4000, generator=generator), torch.randn(4000, 384, generator=generator)
    assert not _differing(_per_count(lambda: {"product": left @ right}))


def test_layer_norm_gradients_are_the_same_with_any_thread_count_and_match_torch() -> None:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(4096, 384, generator=generator)
    upstream = torch.randn(4096, 384, generator=generator)

    def gradients(norm_type: type[torch.nn.LayerNorm]) -> Callable[[], dict[str, torch.Tensor]]:
        def compute() -> dict[str, torch.Tensor]:
            norm = torch.nn.LayerNorm(384)
            norm.__class__ = norm_type
            with torch.no_grad():
                norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
            inputs = hidden.clone().requires_grad_()
            output = norm(inputs)
            output.backward(upstream)
            return {"output": output.detach(), "input": inputs.grad, "weight": norm.weight.grad, "bias": norm.bias.grad}

        return compute

    torch_own = _per_count(gradients(torch.nn.LayerNorm))
    assert {"weight", "bias"} <= set(_differing(torch_own))  # ATen's sums depend on the thread count here
    stable = _per_count(gradients(ThreadStableLayerNorm))
    assert not _differing(stable)
    assert torch.equal(stable[1]["output"], torch_own[1]["output"])  # the forward pass is ATen's own
    assert torch.equal(stable[1]["input"], torch_own[1]["input"])
    for name in ("weight", "bias"):
        torch.testing.assert_close(stable[1][name], torch_own[1][name], rtol=1e-4, atol=1e-3)


def test_softmax_backward_is_the_same_with_any_thread_count_and_matches_torch() -> None:
    generator = torch.Generator().manual_seed(0)
    scores, upstream = torch.randn(2048, 65, generator=generator), torch.randn(2048, 65, generator=generator)

    def compute() -> dict[str, torch.Tensor]:
        inputs = scores.clone().requires_grad_()
        inputs.softmax(-1).backward(upstream)
        return {"input": inputs.grad}

    torch_own = _per_count(compute)
    assert _differing(torch_own)  # a length above 16 and not a multiple of 16: ATen's kernel splits by threads
    with thread_stable_kernels():
        stable = _per_count(compute)
    assert not _differing(stable)
    assert _differing(_per_count(compute))  # ATen's own kernel is back after the block
    torch.testing.assert_close(stable[1]["input"], torch_own[1]["input"], rtol=1e-5, atol=1e-6)


def test_torch_gradient_norm_is_already_the_same_with_any_thread_count() -> None:
    """What `gradient_clip_algorithm: norm` sums: torch's norm kernel splits its sum the same way with any thread
    count, where a plain sum of squares does not."""
    values = torch.randn(3_000_001, generator=torch.Generator().manual_seed(0))
    assert _differing(_per_count(lambda: {"sum of squares": values.pow(2).sum()}))
    assert not _differing(_per_count(lambda: {"norm": torch.nn.utils.get_total_norm([values, values[:5000]])}))


def _bert() -> torch.nn.Module:
    return BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256))


def _longformer() -> torch.nn.Module:
    config = LongformerConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        attention_window=32,
        max_position_embeddings=1026,
        pad_token_id=0,
    )
    return LongformerModel(config)


def _bart() -> torch.nn.Module:
    config = BartConfig(
        d_model=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_position_embeddings=1024,
    )
    return BartForConditionalGeneration(config)


@pytest.mark.slow
@pytest.mark.parametrize("build", [_bert, _longformer, _bart], ids=["bert", "longformer", "bart"])
def test_every_gradient_of_a_backbone_is_the_same_with_any_thread_count(build: Callable[[], torch.nn.Module]) -> None:
    """A training step's gradients (dropout on, a padded batch of 300 tokens: attention over a length that is not
    a multiple of 16) with torch's own arithmetic differ between thread counts; made thread-stable, none does."""
    torch.manual_seed(0)
    model = build().train()
    input_ids = torch.randint(5, 1000, (4, 300), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(input_ids)
    mask[0, 150:] = 0

    def gradients(stable: bool) -> Callable[[], dict[str, torch.Tensor]]:
        def compute() -> dict[str, torch.Tensor]:
            copied = copy.deepcopy(model)
            if stable:
                make_thread_stable(copied)
            torch.manual_seed(1)
            if isinstance(copied, BartForConditionalGeneration):
                loss = copied(input_ids=input_ids, attention_mask=mask, labels=input_ids[:, :37].contiguous()).loss
            else:
                loss = copied(input_ids=input_ids, attention_mask=mask).last_hidden_state.pow(2).mean()
            loss.backward()
            grads = {name: p.grad for name, p in copied.named_parameters() if p.grad is not None}
            return {**grads, "clip norm": torch.nn.utils.clip_grad_norm_(copied.parameters(), 0.5)}

        return compute

    assert _differing(_per_count(gradients(stable=False)))
    with thread_stable_kernels():
        assert not _differing(_per_count(gradients(stable=True)))


def test_a_new_token_embedding_is_the_same_with_any_thread_count() -> None:
    """The paragraph marker's embedding row, added to the real MiniLM's vocabulary, is the same with 1, 2 and 3
    threads: the mean of the old rows. transformers' default (`mean_resizing`) draws it through a factorisation
    that depends on the count."""
    spec = instantiate(OmegaConf.load(PROJECT_ROOT / "conf" / "backbone" / "minilm.yaml"))

    def transformers_row() -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = AutoModel.from_pretrained(spec.model_dir())
        model.resize_token_embeddings(30523)
        return {"marker": model.get_input_embeddings().weight[-1].detach().clone()}

    def our_row() -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        weight = load_encoder(spec, 30523).get_input_embeddings().weight.detach()
        return {"marker": weight[-1].clone(), "mean": weight[:-1].mean(0)}

    assert _differing(_per_count(transformers_row))
    ours = _per_count(our_row)
    assert not _differing(ours)
    assert torch.equal(ours[1]["marker"], ours[1]["mean"])
