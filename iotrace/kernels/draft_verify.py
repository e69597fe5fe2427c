"""Speculative decoding's verification step: accept a prefix of the draft tokens, then emit one more token.

For each sequence with draft tokens x_1..x_γ drawn from the draft's distributions q_i, and the target's p_i at
the same positions (plus p_{γ+1}): draft token i is accepted when u_i < p_i(x_i) / q_i(x_i), scanning left to
right and stopping at the first rejection. At a rejection at position r the emitted token is drawn from
normalise(max(0, p_r − q_r)); when all γ are accepted the bonus token is drawn from p_{γ+1}. This leaves the
output distribution exactly p (Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via
Speculative Decoding", Algorithm 1 and Theorem 3.5; Chen et al. 2023, "Accelerating LLM Decoding with
Speculative Sampling"). Greedy mode accepts while x_i is argmax p_i and emits argmax p_r.

The target may come as probabilities p or as logits (``logits=True``, the shape's ``logits`` flag): the softmax is
then fused, each row's max and normaliser found in one online pass (Milakov & Gimelshein 2018) and p_i(x) =
exp(l_i(x) − m_i) / Z_i formed where it is used, so the (γ+1)·V probabilities are never written and read back.

Every random draw comes from the uniforms passed in (γ acceptance tests and one sample), so the kernel is
deterministic and the torch reference reproduces it token for token. One program per sequence; no host
synchronisation; γ may differ per sequence (draft_lens).

Cost (identity 4): bytes = the γ acceptance scalars of p and q, plus one row of p and q (V each) at the
position that emits (greedy: every p row up to it); about 8·V bytes per sequence, memory-bound. With logits every
target row is read once for its softmax statistics: (γ+1)·V·4 + V·4 bytes per sequence, against the unfused
softmax's (γ+1)·V·4 read + (γ+1)·V·4 written before the 8·V of the probability kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import torch
import triton
import triton.language as tl

from iotrace.errors import InvalidValueError
from iotrace.plugins import hookimpl
from iotrace.plugins.spec import (
    DEFAULT_BACKEND,
    Baselines,
    Config,
    Cost,
    KernelSpec,
    Shape,
    Tolerance,
    TritonLaunch,
    TritonUnit,
)

if TYPE_CHECKING:
    from iotrace.cards import Card

__all__ = ["DraftVerifySpec", "verify", "verify_reference"]

#: |Σ p − 1| allowed for a probability row before it is refused (fp32 softmax rows sum within ~1e-6 of 1).
SUM_TOLERANCE = 1e-3


@triton.jit
def _row_argmax(row_ptr, V, BLOCK_V: tl.constexpr):
    """The first index of the largest of V values, read in blocks (a whole vocabulary does not fit at once).
    Probabilities or logits alike: softmax keeps the order."""
    best_val = -float("inf")
    best_idx = 0
    for start in range(0, V, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        vals = tl.load(row_ptr + offs, mask=offs < V, other=-float("inf"))
        block_max = tl.max(vals, 0)
        block_idx = tl.min(tl.where(vals == block_max, offs, V), 0)  # first index of the maximum
        take = block_max > best_val
        best_idx = tl.where(take, block_idx, best_idx)
        best_val = tl.where(take, block_max, best_val)
    return best_idx


@triton.jit
def _row_softmax_stats(row_ptr, V, BLOCK_V: tl.constexpr):
    """The max m and normaliser Z = Σ exp(l − m) of a row of V logits, in one online pass (Milakov & Gimelshein
    2018, "Online normalizer calculation for softmax", algorithm 3). Logits are checked finite on the host."""
    m = -float("inf")
    z = 0.0
    for start in range(0, V, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        x = tl.load(row_ptr + offs, mask=offs < V, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        z = z * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    return m, z


@triton.jit
def _emit_weights(p_ptr, q_ptr, offs, V, q_limit, bonus, m, inv_z, LOGITS: tl.constexpr):
    """Unnormalised weights of the emitted token over one block: p for the bonus, max(0, p - q) after a rejection;
    with LOGITS, p = exp(l − m) / Z from the row's softmax statistics."""
    if LOGITS:
        p = tl.exp(tl.load(p_ptr + offs, mask=offs < V, other=-float("inf")) - m) * inv_z
    else:
        p = tl.load(p_ptr + offs, mask=offs < V, other=0.0)
    q = tl.load(q_ptr + offs, mask=offs < q_limit, other=0.0)
    return tl.where(bonus, p, tl.maximum(p - q, 0.0))


@triton.jit
def _verify_kernel(
    draft_ptr, lens_ptr, q_ptr, p_ptr, u_ptr, accepted_ptr, token_ptr,
    stride_db, stride_qb, stride_qi, stride_pb, stride_pi, stride_ub,
    V,
    GAMMA: tl.constexpr, GREEDY: tl.constexpr, LOGITS: tl.constexpr, BLOCK_V: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    n = tl.load(lens_ptr + seq)
    q_row = q_ptr + seq * stride_qb
    p_row = p_ptr + seq * stride_pb
    # 1. Acceptance: a running flag stays 1 while every draft token so far was accepted.
    still = 1
    accepted = 0
    for i in tl.static_range(GAMMA):
        token = tl.load(draft_ptr + seq * stride_db + i)
        if GREEDY:
            ok = token == _row_argmax(p_row + i * stride_pi, V, BLOCK_V)
        else:
            q_tok = tl.load(q_row + i * stride_qi + token)
            u = tl.load(u_ptr + seq * stride_ub + i)
            if LOGITS:  # u < p/q with p = exp(l − m) / Z, multiplied out
                m, z = _row_softmax_stats(p_row + i * stride_pi, V, BLOCK_V)
                ok = u * q_tok * z < tl.exp(tl.load(p_row + i * stride_pi + token) - m)
            else:
                ok = u * q_tok < tl.load(p_row + i * stride_pi + token)  # u < p/q without dividing by a zero q
        still = tl.where((i < n) & ok, still, 0)
        accepted += still
    # 2. The emitted token at position `accepted`: residual max(0, p - q) after a rejection, p for the bonus.
    r = accepted
    bonus = r == n
    u = tl.load(u_ptr + seq * stride_ub + GAMMA)
    if GREEDY:
        chosen = _row_argmax(p_row + r * stride_pi, V, BLOCK_V)
    else:
        q_limit = tl.where(bonus, 0, V)  # no q row past the draft: the bonus samples from p alone
        if LOGITS:
            m_r, z_r = _row_softmax_stats(p_row + r * stride_pi, V, BLOCK_V)
            inv_z = 1.0 / z_r
        else:
            m_r = 0.0
            inv_z = 1.0
        total = 0.0
        for start in range(0, V, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            weight = _emit_weights(p_row + r * stride_pi, q_row + r * stride_qi, offs, V, q_limit, bonus, m_r, inv_z,
                                   LOGITS)
            total += tl.sum(weight, 0)
        target = u * total
        prefix = 0.0
        chosen = V
        last = 0
        for start in range(0, V, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            weight = _emit_weights(p_row + r * stride_pi, q_row + r * stride_qi, offs, V, q_limit, bonus, m_r, inv_z,
                                   LOGITS)
            cdf = prefix + tl.cumsum(weight, 0)
            hit = tl.min(tl.where((cdf > target) & (weight > 0), offs, V), 0)
            chosen = tl.minimum(chosen, hit)
            last = tl.maximum(last, tl.max(tl.where(weight > 0, offs, 0), 0))
            prefix += tl.sum(weight, 0)
        chosen = tl.where(chosen == V, last, chosen)  # u·total rounded past the last step of the CDF
    tl.store(accepted_ptr + seq, accepted)
    tl.store(token_ptr + seq, chosen.to(tl.int32))


def _check_inputs(draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
                  logits: bool = False) -> None:
    batch, gamma = draft.shape
    vocab = p.shape[-1]
    if tuple(q.shape[:2]) != (batch, gamma) or tuple(p.shape[:2]) != (batch, gamma + 1) or \
            tuple(u.shape) != (batch, gamma + 1) or tuple(lens.shape) != (batch,):
        raise InvalidValueError(f"draft-verify shapes do not agree: draft {tuple(draft.shape)}, q {tuple(q.shape)}, "
                                f"p {tuple(p.shape)}, uniforms {tuple(u.shape)}, lens {tuple(lens.shape)}",
                                "draft (B, γ), q (B, γ, V), p (B, γ+1, V), uniforms (B, γ+1), lens (B,)")
    if q.shape[-1] != vocab:
        raise InvalidValueError(f"the draft's vocabulary ({q.shape[-1]}) differs from the target's ({vocab})",
                                "speculative decoding needs one tokenizer for draft and target")
    if logits and not torch.isfinite(p).all():
        raise InvalidValueError("target logits hold NaN or infinity", "check the target model's output")
    if not ((logits or torch.isfinite(p).all()) and torch.isfinite(q).all()):
        raise InvalidValueError("probabilities hold NaN or infinity", "check the softmax that produced them")
    if (not logits and ((p < 0).any() or (abs(p.sum(-1) - 1) > SUM_TOLERANCE).any())) or (q < 0).any() or \
            (abs(q.sum(-1) - 1) > SUM_TOLERANCE).any():
        raise InvalidValueError(f"probability rows must be >= 0 and sum to 1 within {SUM_TOLERANCE}",
                                "pass softmax outputs, or the target's logits with logits=True")
    if (lens < 0).any() or (lens > gamma).any():
        raise InvalidValueError(f"draft lengths must lie in 0..{gamma}", "one length per sequence, at most γ")
    if ((draft < 0) | (draft >= vocab)).any():
        raise InvalidValueError(f"draft tokens must lie in 0..{vocab - 1}", "check the draft model's output")


def verify(draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
           accepted: torch.Tensor, token: torch.Tensor, greedy: bool, config: Mapping[str, int],
           validate: bool = True, logits: bool = False) -> None:
    """Run the verification step into ``accepted`` (B,) and ``token`` (B,), both int32.

    ``p`` holds the target's probabilities, or its logits with ``logits`` (the softmax is then fused).
    ``validate`` checks the inputs first (it reads them on the host); the timed path passes False.
    """
    if validate:
        _check_inputs(draft, lens, q, p, u, logits)
    _verify_launch(draft, lens, q, p, u, accepted, token, greedy, config, logits)()


#: Triton's default num_stages on NVIDIA targets (CUDAOptions.num_stages): the launch has always run with it, and
#: the compile must pipeline the vocabulary loops the same way.
_STAGES = 3


def _verify_launch(draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
                   accepted: torch.Tensor, token: torch.Tensor, greedy: bool, config: Mapping[str, int],
                   logits: bool) -> TritonLaunch:
    """The one statement of a verify launch, one program per sequence: :func:`verify` calls it,
    :meth:`DraftVerifySpec.compile_units` compiles it."""
    batch, gamma = draft.shape
    args = {"draft_ptr": draft, "lens_ptr": lens, "q_ptr": q, "p_ptr": p, "u_ptr": u, "accepted_ptr": accepted,
            "token_ptr": token, "stride_db": draft.stride(0), "stride_qb": q.stride(0), "stride_qi": q.stride(1),
            "stride_pb": p.stride(0), "stride_pi": p.stride(1), "stride_ub": u.stride(0), "V": p.shape[-1]}
    constexprs = {"GAMMA": gamma, "GREEDY": greedy, "LOGITS": logits, "BLOCK_V": config["BLOCK_V"]}
    return TritonLaunch(_verify_kernel, (batch, 1, 1), args, constexprs, config["num_warps"], _STAGES)


def verify_reference(draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
                     greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule in plain torch (vectorised over the batch, in fp64, on the inputs' device): accepted counts
    and emitted tokens."""
    batch, gamma = draft.shape
    q, p, u = q.double(), p.double(), u.double()
    draft, lens = draft.long(), lens.long()
    rows = torch.arange(batch, device=p.device)
    still = torch.ones(batch, dtype=torch.bool, device=p.device)
    accepted = torch.zeros(batch, dtype=torch.long, device=p.device)
    for i in range(gamma):
        if greedy:
            ok = draft[:, i] == p[:, i].argmax(-1)
        else:
            ok = u[:, i] * q[rows, i, draft[:, i]] < p[rows, i, draft[:, i]]
        still &= ok & (i < lens)
        accepted += still.long()
    p_r = p[rows, accepted]
    if greedy:
        return accepted.int(), p_r.argmax(-1).int()
    q_r = torch.where((accepted < lens)[:, None], q[rows, accepted.clamp(max=gamma - 1)], 0.0) if gamma else 0.0
    weight = torch.where((accepted == lens)[:, None], p_r, (p_r - q_r).clamp(min=0))
    cdf = weight.cumsum(-1)
    target = u[:, gamma] * weight.sum(-1)
    hit = (cdf > target[:, None]) & (weight > 0)
    last = torch.where(weight > 0, torch.arange(weight.shape[-1], device=p.device), 0).max(-1).values
    token = torch.where(hit.any(-1), hit.int().argmax(-1), last)
    return accepted.int(), token.int()


#: How close (as a fraction of the step) a uniform may come to a decision boundary in the generated test inputs.
TIE_MARGIN = 1e-4


def _away_from_ties(u: torch.Tensor, draft: torch.Tensor, lens: torch.Tensor, q: torch.Tensor,
                    p: torch.Tensor) -> torch.Tensor:
    """Move generated uniforms off the decision boundaries (u = p/q, or u·total on a step of the residual CDF).

    The kernel decides in fp32 and the reference in fp64; a uniform within rounding of a boundary lets them pick
    adjacent tokens, both correctly. Test inputs stay clear of such ties (a 0.15% event at a 128k vocabulary);
    the acceptance and sampling rules themselves are untouched.
    """
    u = u.clone()
    batch, gamma = draft.shape
    rows = torch.arange(batch)
    for i in range(gamma):
        ratio = (p[rows, i, draft[:, i]] / q[rows, i, draft[:, i]].clamp(min=1e-30)).double()
        close = (u[:, i].double() - ratio).abs() < TIE_MARGIN
        u[close, i] = (u[close, i] + 0.5) % 1.0
    for _ in range(8):  # a shifted uniform is rarely near another step; a few passes settle every row
        accepted, _ = verify_reference(draft, lens, q, p, u, greedy=False)
        p_r = p[rows, accepted.long()].double()
        q_r = torch.where((accepted < lens)[:, None], q[rows, accepted.long().clamp(max=max(gamma - 1, 0))].double(),
                          torch.zeros_like(p_r)) if gamma else torch.zeros_like(p_r)
        weight = torch.where((accepted == lens)[:, None], p_r, (p_r - q_r).clamp(min=0))
        cdf = weight.cumsum(-1) / weight.sum(-1, keepdim=True)
        near = ((cdf - u[:, gamma:].double()).abs() < TIE_MARGIN).any(-1)
        if not near.any():
            break
        u[near, gamma] = (u[near, gamma] + 0.37) % 1.0
    return u


class DraftVerifySpec(KernelSpec):
    name: ClassVar[str] = "draft-verify"
    summary: ClassVar[str] = "speculative decoding's verify step: accept a draft prefix, emit the next token"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32",)
    shape_keys: ClassVar[tuple[str, ...]] = ("batch", "gamma", "vocab", "greedy", "varlen", "logits")
    shape_flags: ClassVar[tuple[str, ...]] = ("greedy", "varlen", "logits")
    presets: ClassVar[dict[str, Shape]] = {
        # Llama-3's vocabulary is 128256 (config.json); batch 64 with γ = 4 is a serving batch at a common draft
        # length, where the verify step's throughput matters.
        f"llama-3-b{b}-g{g}" + ("-greedy" if greedy else "") + ("-logits" if logits else ""): {
            "batch": b, "gamma": g, "vocab": 128256, "greedy": greedy, "varlen": 0, "logits": logits}
        for b, g, greedy, logits in itertools.product((1, 64), (4, 8), (0, 1), (0, 1))}
    default_shape: ClassVar[Shape] = {"batch": 37, "gamma": 4, "vocab": 1000, "greedy": 0, "varlen": 1}
    interpreter_budget: ClassVar[int] = 2_000_000

    def reduce_shape(self, shape: Shape, max_elements: int) -> Shape:
        if shape["batch"] * (shape["gamma"] + 1) * shape["vocab"] <= max_elements:
            return dict(shape)
        batch = min(shape["batch"], 8)
        vocab = max(33, max_elements // (batch * (shape["gamma"] + 1))) | 1
        return {**shape, "batch": batch, "vocab": min(shape["vocab"], vocab)}

    def make_inputs(self, shape: Shape, dtype: str, device: str, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        batch, gamma, vocab = shape["batch"], shape["gamma"], shape["vocab"]
        # Peaked target distributions and a draft that agrees with them in part, as real draft models do.
        target_logits = 3 * torch.randn(batch, gamma + 1, vocab, generator=gen)
        p = torch.softmax(target_logits.double(), -1).float()
        noise = torch.softmax(3 * torch.randn(batch, gamma, vocab, generator=gen), -1)
        q = 0.7 * p[:, :gamma] + 0.3 * noise
        draft = torch.multinomial(q.reshape(-1, vocab), 1, generator=gen).reshape(batch, gamma) if gamma else \
            torch.zeros(batch, 0, dtype=torch.long)
        if shape["greedy"]:  # greedy drafts are argmaxes of q, which often but not always match p's
            draft = q.argmax(-1)
        lens = (torch.randint(0, gamma + 1, (batch,), generator=gen) if shape["varlen"]
                else torch.full((batch,), gamma))
        u = _away_from_ties(torch.rand(batch, gamma + 1, generator=gen), draft, lens, q, p)
        as_device = {"device": device}
        return {"draft": draft.to(torch.int32).to(**as_device), "lens": lens.to(torch.int32).to(**as_device),
                "q": q.to(**as_device), "p": (target_logits if shape["logits"] else p).to(**as_device),
                "u": u.to(**as_device), "greedy": torch.tensor(shape["greedy"]),
                "logits": torch.tensor(shape["logits"])}

    def baselines(self, inputs: Mapping[str, torch.Tensor], shape: Shape, dtype: str) -> Baselines:
        """The same rule in eager torch on the device (fp64, vectorised over the batch), softmax first for logits."""
        greedy, logits = bool(shape["greedy"]), bool(shape["logits"])

        def eager() -> object:
            p = torch.softmax(inputs["p"], -1) if logits else inputs["p"]
            return verify_reference(inputs["draft"], inputs["lens"], inputs["q"], p, inputs["u"], greedy)

        return {"eager torch": eager}

    def make_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch = inputs["draft"].shape[0]
        device = inputs["draft"].device
        return {"accepted": torch.empty(batch, dtype=torch.int32, device=device),
                "token": torch.empty(batch, dtype=torch.int32, device=device)}

    def reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cpu = {name: x.cpu() for name, x in inputs.items()}
        p = torch.softmax(cpu["p"].double(), -1) if bool(cpu["logits"]) else cpu["p"]
        accepted, token = verify_reference(cpu["draft"], cpu["lens"], cpu["q"], p, cpu["u"], bool(cpu["greedy"]))
        return {"accepted": accepted, "token": token}

    def launch_kernel(self, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor], config: Config,
                      backend: str = DEFAULT_BACKEND) -> None:
        verify(inputs["draft"], inputs["lens"], inputs["q"], inputs["p"], inputs["u"], outputs["accepted"],
               outputs["token"], bool(inputs["greedy"]), config, validate=inputs["draft"].device.type == "cpu",
               logits=bool(inputs["logits"]))

    def tolerance(self, dtype: str) -> Tolerance:
        return Tolerance(0.0, 0.0)  # counts and token ids: exact

    def cost(self, shape: Shape, dtype: str) -> Cost:
        batch, gamma, vocab = shape["batch"], shape["gamma"], shape["vocab"]
        if shape["greedy"]:  # argmax over every p row up to the emitting one: at most γ + 1 rows
            nbytes = batch * ((gamma + 1) * vocab * 4 + 2 * gamma * 4 + 8)
            flops = batch * (gamma + 1) * vocab
            formula = "bytes = B·((γ+1)·V·4 [p rows for argmax] + 8·γ [draft, scalars] + 8 [outputs])"
        elif shape["logits"]:  # every logits row once for its softmax statistics, and the q row that emits
            nbytes = batch * ((gamma + 1) * vocab * 4 + vocab * 4 + gamma * (4 + 4 + 4 + 4) + 4 + 8)
            flops = batch * ((gamma + 1) * 4 * vocab + 6 * vocab)
            formula = ("bytes = B·((γ+1)·V·4 [logits rows, softmax fused] + V·4 [q row at the emitting position] "
                       "+ 16·γ [draft, logits, q, u scalars] + 12); a minimum: the emitting row's re-reads are "
                       "assumed to hit L2")
        else:
            nbytes = batch * (2 * vocab * 4 + gamma * (4 + 4 + 4 + 4) + 4 + 8)
            flops = batch * 4 * vocab
            formula = "bytes = B·(2·V·4 [p and q rows at the emitting position] + 16·γ [draft, p, q, u scalars] + 12)"
        return Cost(float(flops), float(nbytes), "fp32", formula)

    def space(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> list[Config]:
        return [{"BLOCK_V": bv, "num_warps": w} for bv in (256, 1024, 4096) for w in (1, 2, 4, 8)
                if bv >= 32 * w]

    def default_config(self, shape: Shape, dtype: str, card: Card, backend: str = DEFAULT_BACKEND) -> Config:
        return {"BLOCK_V": 1024 if shape["vocab"] >= 1024 else 256, "num_warps": 4}

    def check_shape(self, shape: Mapping[str, int]) -> Shape:
        out = super().check_shape(shape)
        if out["gamma"] > 32:
            raise InvalidValueError(f"draft-verify gamma={out['gamma']} is past 32", "draft at most 32 tokens a step")
        return out

    def compile_units(self, shape: Shape, dtype: str, config: Config,
                      backend: str = DEFAULT_BACKEND) -> list[TritonUnit]:
        # The tensors make_inputs and make_outputs lay out, on the meta device: draft (B, γ), q (B, γ, V),
        # p (B, γ+1, V), uniforms (B, γ+1), lengths and both outputs (B,).
        batch, gamma, vocab = shape["batch"], shape["gamma"], shape["vocab"]
        i32 = torch.empty(batch, dtype=torch.int32, device="meta")
        launch = _verify_launch(
            torch.empty(batch, gamma, dtype=torch.int32, device="meta"), i32,
            torch.empty(batch, gamma, vocab, device="meta"), torch.empty(batch, gamma + 1, vocab, device="meta"),
            torch.empty(batch, gamma + 1, device="meta"), torch.empty_like(i32), torch.empty_like(i32),
            bool(shape["greedy"]), config, bool(shape["logits"]))
        return [launch.unit()]


@hookimpl
def iotrace_kernels() -> list[KernelSpec]:
    return [DraftVerifySpec()]
