"""The weight formats against their definitions: references no one here wrote and values the specs pin down.

- GGUF Q8_0 / Q4_0 / Q4_1 and MXFP4: bit-exact against the ``gguf`` package's own quantize/dequantize (llama.cpp's
  gguf-py, whose Q8_0 says it is "bit-exact" with ggml-quants.c), on random data and on a real tensor of the pinned
  file (MXFP4 there differs only at exact ties, which the OCP rule rounds to even and gguf-py towards zero); bits
  per weight against ``gguf.GGML_QUANT_SIZES`` (block size, bytes per block).
- Round trips of values each format represents exactly: every E2M1 value times a power-of-two scale (MXFP4, OCP MX
  v1.0 table 5), every finite E4M3 value (OFP8 rev 1.0, through ``torch.float8_e4m3fn``'s own bit patterns),
  NVFP4 blocks built from E4M3 block scales and a tensor scale, Q4_0 / Q4_1 / Q8_0 blocks on their own grids.
- The scale rules on hand-built blocks and the errors for a format that does not exist or a group that does not
  divide a row.
"""

from __future__ import annotations

import pytest
import torch

from iotrace.errors import InvalidValueError
from iotrace.model import quant_formats as qf
from tests.conftest import pinned_model

gguf = pytest.importorskip("gguf", reason="the gguf reference needs iotrace[model] (make setup installs it)")
from gguf import quants as gq  # noqa: E402

#: our key -> the GGML type it must equal bit for bit
GGUF_TYPES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "mxfp4": "MXFP4"}


def _gguf_round_trip(w: torch.Tensor, type_name: str) -> torch.Tensor:
    t = getattr(gguf.GGMLQuantizationType, type_name)
    return torch.from_numpy(gq.dequantize(gq.quantize(w.numpy(), t), t))


@pytest.mark.parametrize("key", sorted(GGUF_TYPES))
@pytest.mark.parametrize("spread", [1e-3, 0.05, 3.0])
def test_gguf_types_bit_exact_with_gguf_package(key: str, spread: float) -> None:
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(48, 576, generator=gen) * spread
    w[3, :32] = 0.0            # an all-zero block
    w[5, 40] = 40 * spread     # an outlier in a block
    ours = qf.parse_format(key).quantise(w, "test")
    assert torch.equal(ours, _gguf_round_trip(w, GGUF_TYPES[key]))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(GGUF_TYPES))
def test_gguf_types_bit_exact_on_a_real_tensor(key: str) -> None:
    from iotrace.model.gguf_file import open_gguf

    model = open_gguf(pinned_model())
    w = torch.from_numpy(model.tensor("blk.3.ffn_down.weight").copy())
    ours, ref = qf.parse_format(key).quantise(w), _gguf_round_trip(w, GGUF_TYPES[key])
    if key != "mxfp4":
        assert torch.equal(ours, ref)
        return
    # The baseline's values lie on Q4_1 grids, so exact midpoints between E2M1 values occur. gguf-py (like
    # ggml-quants.c's best_index_mxfp4) takes the first nearest table entry, i.e. the smaller magnitude; the OCP
    # conversion rounds ties to even (as torchao and AMD's v_cvt_scalef32_pk_fp4_f32 do). Every difference must be
    # such a tie: both values equally far from the input.
    differ = ours != ref
    assert 0 < int(differ.sum()) < 0.01 * w.numel()
    assert torch.equal((ours - w).abs()[differ], (ref - w).abs()[differ])
    assert bool((ours.abs()[differ] != ref.abs()[differ]).all())


@pytest.mark.parametrize("key", sorted(GGUF_TYPES))
def test_bits_per_weight_match_ggml_block_sizes(key: str) -> None:
    block, type_bytes = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, GGUF_TYPES[key])]
    assert qf.parse_format(key).bits_per_weight((576, 576)) == pytest.approx(8 * type_bytes / block)


def test_known_bits_per_weight() -> None:
    shape = (1536, 576)
    expect = {"q4_0": 4.5, "q4_1": 5.0, "q8_0": 8.5, "mxfp4": 4.25, "nvfp4": 4.5 + 32 / (1536 * 576),
              "int4-sym-g64": 4.25, "int4-asym-g64": 4.5, "int4-sym-g128": 4.125, "int4-asym-g128": 4.25,
              "int8-channel": 8 + 32 / 576, "fp8-channel": 8 + 32 / 576, "fp8-tensor": 8 + 32 / (1536 * 576)}
    for key, bits in expect.items():
        assert qf.parse_format(key).bits_per_weight(shape) == pytest.approx(bits), key


# --- exactly representable values come back exactly ----------------------------------------------------------


def _e2m1_signed() -> torch.Tensor:
    v = torch.tensor(qf.E2M1_VALUES)
    return torch.cat([v, -v])


@pytest.mark.parametrize("k", [-20, -3, 0, 5])
def test_mxfp4_every_e2m1_value_times_a_power_of_two(k: int) -> None:
    # 16 signed values + 16 more in one 32-block; amax 6 · 2^k makes the E8M0 scale X = 2^(2 + k − 2) = 2^k
    block = torch.cat([_e2m1_signed(), _e2m1_signed().flip(0)]) * 2.0 ** k
    w = block.reshape(1, 32).repeat(3, 1)
    assert torch.equal(qf.mxfp4(w), w)


def test_mxfp4_scale_rule_and_saturation() -> None:
    # amax 7: floor(log2 7) = 2, X = 2^0 = 1; 7 saturates to 6, 5 is a tie between 4 and 6 (even mantissa: 4),
    # 0.25 a tie between 0 and 0.5 (even: 0), 0.75 between 0.5 and 1 (even: 1)
    w = torch.zeros(1, 32)
    w[0, :6] = torch.tensor([7.0, 5.0, 0.25, 0.75, -3.5, 2.9])
    out = qf.mxfp4(w)[0, :6]
    assert out.tolist() == [6.0, 4.0, 0.0, 1.0, -4.0, 3.0]
    # amax 0.3: floor(log2 0.3) = −2, X = 2^−4: 0.3 / X = 4.8 → 4 → 0.25
    w = torch.zeros(1, 32)
    w[0, 0] = 0.3
    assert qf.mxfp4(w)[0, 0].item() == 0.25


def test_e2m1_ties_round_to_even_mantissa() -> None:
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 100.0, -0.75, -5.0])
    assert qf.e2m1_round(mids).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -1.0, -4.0]


def _e4m3_finite() -> torch.Tensor:
    values = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn).float()
    return values[torch.isfinite(values)]


def test_e4m3_values_round_trip_per_tensor() -> None:
    values = _e4m3_finite()
    assert values.numel() == 254 and values.abs().max() == qf.E4M3_MAX  # 256 patterns less the two NaNs
    w = values.reshape(2, 127)
    assert torch.equal(qf.fp8_e4m3(w, per_channel=False), w)  # amax 448: scale 1


def test_e4m3_values_round_trip_per_channel_with_power_of_two_scales() -> None:
    values = _e4m3_finite()
    w = torch.stack([values * 2.0 ** k for k in (-6, 0, 3)])  # each row's amax 448 · 2^k: scale 2^k
    assert torch.equal(qf.fp8_e4m3(w, per_channel=True), w)
    assert not torch.equal(qf.fp8_e4m3(w, per_channel=False), w)  # one scale cannot keep the small row's subnormals


def test_nvfp4_blocks_from_e4m3_scales_round_trip() -> None:
    s = 2.0 ** -10                                     # the tensor scale: amax / (6 · 448)
    block_scales = [448.0, 1.0, 0.0546875, 13.0]       # E4M3 values (0.0546875 = 7 · 2^-7)
    rows = []
    for e in block_scales:
        block = torch.cat([torch.tensor(qf.E2M1_VALUES), -torch.tensor(qf.E2M1_VALUES)]) * e * s
        rows.append(block)
    w = torch.cat(rows).reshape(4, 16)                  # amax 6 · 448 · s in the first block
    assert torch.equal(qf.nvfp4(w), w)


def test_q4_0_q4_1_q8_0_blocks_on_their_grids() -> None:
    d = 2.0 ** -7
    q = torch.arange(16, dtype=torch.float32)
    q4_0_block = torch.cat([(q - 8) * d, (q - 8) * d])             # −8 d is the signed max: d = max / −8
    assert torch.equal(qf.q4_0(q4_0_block.reshape(1, 32)), q4_0_block.reshape(1, 32))
    m = -0.375                                                      # fp16-exact min
    q4_1_block = torch.cat([m + q * d, m + q.flip(0) * d])
    assert torch.equal(qf.q4_1(q4_1_block.reshape(1, 32)), q4_1_block.reshape(1, 32))
    q8 = torch.cat([torch.arange(-127, 128, 8, dtype=torch.float32)]) * d    # 32 values with |q| up to 127
    assert q8.numel() == 32 and q8.abs().max() == 127 * d
    assert torch.equal(qf.q8_0(q8.reshape(1, 32)), q8.reshape(1, 32))


def test_int8_per_channel_rule() -> None:
    w = torch.tensor([[127.0, -63.4, 0.5, 1.5], [0.0, 0.0, 0.0, 0.0]])
    # row 0: scale 1, round half to even (0.5 → 0, 1.5 → 2); row 1: all zero stays zero
    assert qf.int8_per_channel(w).tolist() == [[127.0, -63.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]]


def test_q4_0_scale_is_the_signed_max_over_minus_eight() -> None:
    block = torch.zeros(1, 32)
    block[0, 0], block[0, 1] = 0.8, -0.4                          # max = +0.8 → d = −0.1: +0.8 is q = 0 (−8 · d)
    out = qf.q4_0(block)
    d = torch.tensor(-0.1).to(torch.float16).float()
    assert out[0, 0] == -8 * d and out[0, 1] == 4 * d


# --- bad input -------------------------------------------------------------------------------------------------


def test_unknown_format_names_the_value() -> None:
    with pytest.raises(InvalidValueError, match="'q5_9'"):
        qf.parse_format("q5_9")


@pytest.mark.parametrize("key", ["int4-sym-g128", "int4-asym-g100", "int8-g7"])
def test_group_that_does_not_divide_names_group_and_tensor(key: str) -> None:
    group = key.rsplit("g", 1)[1]
    with pytest.raises(InvalidValueError, match=rf"block of {group} does not divide blk\.0\.wo's input dimension 576"):
        qf.parse_format(key).quantise(torch.zeros(4, 576), "blk.0.wo")


def test_group_zero_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="group size 0"):
        qf.parse_format("int4-sym-g0")
