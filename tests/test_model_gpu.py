"""The decoder's Triton path on a GPU (bench/gpu_validate.sh runs these): the pinned model in bf16 against the fp32
torch path, and the CUDA-graph decode step against the eager one."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")

pytestmark = pytest.mark.gpu

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"


@pytest.fixture(scope="module")
def pinned():
    from iotrace.model.gguf_file import open_gguf, pinned_gguf

    return open_gguf(pinned_gguf())


def _decoders(pinned, capacity: int):
    from iotrace.cards import detect
    from iotrace.model.decoder import Decoder
    from iotrace.model.ops import TorchOps, TritonOps
    from iotrace.model.weights import from_gguf

    ref = Decoder(from_gguf(pinned, torch.float32, "cuda"), TorchOps(), 1, capacity)
    tri = Decoder(from_gguf(pinned, torch.bfloat16, "cuda"), TritonOps(detect()), 1, capacity)
    return ref, tri


def test_triton_path_in_bf16_follows_the_fp32_torch_path(pinned) -> None:
    ref, tri = _decoders(pinned, 48)
    ids = torch.tensor([PROMPT])
    expected = ref.prefill(ids, all_logits=True)[0]
    got = tri.prefill(ids, all_logits=True)[0].float()
    # bf16 weights and activations through 30 layers: a few percent of the logits' range.
    assert (got - expected).abs().max().item() < 0.08 * expected.abs().max().item()
    tokens_ref, tokens_tri = [int(expected[-1].argmax())], [int(got[-1].argmax())]
    for _ in range(16):
        tokens_ref.append(int(ref.decode(torch.tensor(tokens_ref[-1:], device="cuda")).argmax(-1)))
        tokens_tri.append(int(tri.decode(torch.tensor(tokens_tri[-1:], device="cuda")).argmax(-1)))
    assert tokens_tri[:8] == tokens_ref[:8]  # greedy paths may part later on a near-tie in bf16


def test_cuda_graph_replay_gives_the_eager_step(pinned) -> None:
    _, tri = _decoders(pinned, 48)
    ids = torch.tensor([PROMPT])
    first = tri.prefill(ids).argmax(-1)
    eager = tri.decode(first, eager=True).clone()
    tri.lens -= 1
    assert tri.graphed()
    replayed = tri.decode(first).clone()
    assert torch.equal(eager, replayed)
