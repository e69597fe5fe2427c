"""The Tensor Core shapes note (iotrace.notes.tensor_cores) and the matrix-instruction reader it compiles with
(iotrace.compiler.mma): the shapes the GEMM plugin compiles to per target, the corpus counters' FLOPs against 2·M·N·K
and against the tensor pipe's busy counter, the reports with no tensor work, and the padding identity."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iotrace.compiler.mma import ptx_mma, sass_mma
from iotrace.notes import tensor_cores as tc

T4_ADD = "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"


def test_the_ptx_and_sass_readers_count_matrix_instructions_only() -> None:
    ptx = ("\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \t{%f1, %f2}, {%r1}, {%r2}, {%f1, %f2};\n"
           "\t@%p1 wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f3}, %rd1, %rd2, 1, 1, 1, 0, 0;\n"
           "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \t{%f5}, {%r3}, {%r4}, {%f5};\n"
           "\tfma.rn.f32 %f9, %f1, %f2, %f3;\n")
    assert ptx_mma(ptx) == {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": 2,
                            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16": 1}
    sass = ("/*0a10*/ HMMA.16816.F32.BF16 R24, R4, R20, R24 ;\n/*0a20*/ HFMA2.MMA R3, -RZ, RZ, 0, 0 ;\n"
            "/*0a30*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;\n"
            "/*0a40*/ HMMA.16816.F32.BF16 R8, R4, R2, R8 ;")
    assert sass_mma(sass) == {"HGMMA.64x128x16.F32.BF16": 1, "HMMA.16816.F32.BF16": 2}  # HFMA2.MMA is no matrix op


def test_every_shape_row_cites_a_public_source() -> None:
    rows = tc.shapes()
    assert all(re.search(r"https://docs\.nvidia\.com/", r["source"]) for r in rows)
    wgmma = {r["types"]: r["shapes"] for r in rows if r["ptx"] == "wgmma.mma_async"}
    assert wgmma["f16, bf16"].startswith("m64nNk16") and wgmma["e4m3, e5m2"].startswith("m64nNk32")
    sm80 = {r["types"]: r["shapes"] for r in rows if r["ptx"] == "mma.sync" and r["targets"] == "sm_80"}
    assert "m16n8k16" in sm80["f16, bf16"] and "m16n8k32" in sm80["s8/u8"] and sm80["f64"] == "m8n8k4"


@pytest.mark.slow  # six Triton cross-compiles (about 20 s on 2 cores with a cold compile cache)
def test_the_gemm_plugin_compiles_to_the_shapes_of_its_target() -> None:
    found = {(c.target, c.dtype, c.config["BLOCK_M"]): c for c in tc.compile_gemm()}
    assert found[("sm_80", "bf16", 64)].ptx == {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": 32}
    assert found[("sm_80", "fp16", 64)].ptx == {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": 32}
    assert found[("sm_89", "fp8e4m3", 64)].ptx == {"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32": 16}
    hopper = found[("sm_90", "bf16", 128)]
    assert hopper.ptx == {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16": 2} and hopper.issuers == 2
    assert found[("sm_90", "fp8e4m3", 128)].ptx == {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3": 1}
    # 16 rows cannot fill wgmma's 64: the decode config falls back to mma.sync on Hopper.
    assert found[("sm_90", "bf16", 16)].ptx == {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": 16}
    for c in found.values():  # one K step per loop body: static count = tile work / instruction work
        assert sum(c.ptx.values()) == c.expected
        if c.sass:  # nvdisasm beside Triton: the SASS opcodes are ncu's names for the same instructions
            assert sum(c.sass.values()) == c.expected
    assert found[("sm_80", "bf16", 64)].sass in ({}, {"HMMA.16816.F32.BF16": 32})
    assert hopper.sass in ({}, {"HGMMA.64x128x16.F32.BF16": 2})


def test_h100_counted_flops_are_2mnk_and_reproduce_the_busy_counter(corpus: Path) -> None:
    r = tc.read(corpus, tc.H100_GEMM)
    analytic = 2 * tc.H100_MNK**3
    assert r.matrix == {"HGMMA.64x128x16.F32.BF16": 16_777_216} and r.launches == 3
    assert [c.flops_by_type for c in r.all_launches] == [{"bf16 dense": analytic}] * 3
    assert r.grid * 128 * 128 == tc.H100_MNK**2  # M·N from the grid and the template's tile
    busy = 100 * analytic / (r.sm_count * tc.PER_CLOCK["h100-sxm"] * r.cycles)
    counter = r.counters["sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg."
                          "pct_of_peak_sustained_elapsed"]
    assert busy == pytest.approx(counter, abs=0.01)
    text = tc._h100_text(r)
    assert "counted / analytic = 1.0000" in text and "K = 128 × 64 = 8192" in text


@pytest.mark.parametrize(("name", "sass", "ops"), [(tc.A40_IMMA, "IMMA.8816.S8.S8.SAT", 704_643_072 * 2 * 8 * 8 * 16),
                                                   (tc.A40_1BLOCK, "IMMA.16816.S8.S8", 3_072 * 2 * 16 * 8 * 16)])
def test_a40_int8_ops_from_the_shape_reproduce_the_busy_counter(corpus: Path, name: str, sass: str,
                                                                ops: int) -> None:
    r = tc.read(corpus, name)
    assert list(r.matrix) == [sass] and r.count.flops_by_type == {"int8 dense": ops}
    busy = 100 * ops / (r.sm_count * tc.PER_CLOCK["a40"] * r.cycles)
    assert busy == pytest.approx(r.counters["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"],
                                 abs=0.01)
    assert f"the counter says {busy:.2f}%" in tc.tensor_summary(r)


@pytest.mark.parametrize("name", [tc.A100_CUTLASS, T4_ADD])
def test_a_report_without_tensor_work_has_no_tensor_summary(corpus: Path, name: str) -> None:
    r = tc.read(corpus, name)
    assert not r.has_tensor_work and r.matrix == {} and r.count is None
    assert tc.tensor_summary(r) is None
    assert r.counters["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"] == 0


def test_the_cutlass_name_promises_mma_the_counters_deny(corpus: Path) -> None:
    text = tc._cutlass_text(tc.read(corpus, tc.A100_CUTLASS))
    assert "threadblock tile 192×384×128" in text and "instruction 16×8×64" in text
    assert "= 8 warps = 256 threads" in text and "= 144 mma.sync" in text and "no tensor FLOPs" in text


def test_padding_waste_is_the_share_of_multiply_adds_on_zeros() -> None:
    assert tc.padded(71, 16) == 80 and tc.padded(4096, 32) == 4096
    assert tc.waste((97, 83, 71), (16, 8, 16)) == pytest.approx(1 - 97 * 83 * 71 / (112 * 88 * 80))
    assert tc.waste((1, 6144, 4096), (16, 8, 16)) == pytest.approx(15 / 16)  # batch-1 decode: 1 row of 16
    assert tc.waste((1, 6144, 4096), (64, 128, 16)) == pytest.approx(63 / 64)
    assert tc.waste((2048, 28672, 4096), (128, 128, 32)) == 0
