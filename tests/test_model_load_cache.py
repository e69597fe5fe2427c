"""The load caches of the model bench: the tokenizer saved on disk after the first build from the GGUF (it must
tokenize exactly as the one built from the file), and one opened GGUF and tokenizer per file and process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import pinned_model

pytest.importorskip("gguf", reason="the model tests need iotrace[model] (make setup installs it)")
pytest.importorskip("transformers", reason="the tokenizer needs iotrace[model] (make setup installs it)")

from iotrace.model import gguf_file, tokenizer
from iotrace.model.prompts import shipped_prompts
from iotrace.model.quality import reference_text

TEXTS = [
    "The capital of France is",
    "  leading, trailing   and   inner runs of spaces  \n\n\n\t\ttabs\r\nand CRLF   ",
    "Ünïcödé: naïve café, 日本語のテキスト, Ελληνικά, русский, emoji 🚀👩‍💻 and a ZWJ, \u00a0nbsp",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\nprint({k: v for k, v in zip('abc', range(3))})\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "",
]


@pytest.fixture(autouse=True)
def _fresh_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("IOTRACE_CACHE_DIR", str(tmp_path / "cache"))
    tokenizer._memoised.cache_clear()
    gguf_file._open.cache_clear()
    yield
    tokenizer._memoised.cache_clear()
    gguf_file._open.cache_clear()


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record each build of a tokenizer from a GGUF (the slow path the disk cache saves)."""
    built: list[Path] = []
    real = tokenizer._from_gguf

    def spy(path: Path) -> Any:
        built.append(path)
        return real(path)

    monkeypatch.setattr(tokenizer, "_from_gguf", spy)
    return built


@pytest.mark.slow
def test_the_cached_tokenizer_tokenizes_as_the_one_built_from_the_gguf(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = pinned_model()
    built = _count_builds(monkeypatch)
    from_gguf = tokenizer.gguf_tokenizer(path)
    assert len(built) == 1
    entries = list((tmp_path / "cache" / "tokenizers").iterdir())
    assert [e.name for e in entries if e.name.startswith(".")] == []  # no staging directory left behind
    assert len(entries) == 1 and (entries[0] / "tokenizer.json").is_file()

    assert tokenizer.gguf_tokenizer(path) is from_gguf  # memoised in this process: no build, no load
    tokenizer._memoised.cache_clear()  # as a new process would: served from the disk cache
    cached = tokenizer.gguf_tokenizer(path)
    assert len(built) == 1 and cached is not from_gguf

    # Served by the tokenizers library alone: encode and decode, as transformers' tokenizer gives them.
    assert isinstance(cached, tokenizer.CachedTokenizer)
    texts = TEXTS + list(shipped_prompts().values()) + [reference_text()]
    for text in texts:
        for special in (False, True):
            ids = from_gguf.encode(text, add_special_tokens=special)
            assert cached.encode(text, add_special_tokens=special) == ids, (text, special)
        ids = from_gguf.encode(text, add_special_tokens=False)
        assert cached.decode(ids) == from_gguf.decode(ids) == text, text[:80]  # byte-level BPE: lossless
        assert cached.decode(torch.tensor(ids)) == text, text[:80]
    every_id = list(range(len(from_gguf)))
    assert cached.decode(every_id) == from_gguf.decode(every_id)
    for special in (False, True):
        assert cached.decode(every_id, skip_special_tokens=special) == from_gguf.decode(every_id,
                                                                                       skip_special_tokens=special)
    assert cached._full is None  # transformers' tokenizer not loaded for any of that
    for text in texts:  # the rest through transformers' own tokenizer of the same entry
        assert cached(text, add_special_tokens=False)["input_ids"] == from_gguf.encode(text, add_special_tokens=False)
    assert cached.convert_ids_to_tokens(every_id) == from_gguf.convert_ids_to_tokens(every_id)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "all_special_ids",
                 "add_bos_token", "add_eos_token", "padding_side", "clean_up_tokenization_spaces", "chat_template"):
        assert getattr(cached, name, None) == getattr(from_gguf, name, None), name
    assert cached.get_vocab() == from_gguf.get_vocab()
    assert cached.backend_tokenizer.to_str() == from_gguf.backend_tokenizer.to_str()


def _fake_tokenizer(save: Any) -> Any:
    class Fake:
        def save_pretrained(self, directory: str) -> None:
            save(Path(directory))

    return Fake()


def test_a_read_only_cache_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    saved: list[Path] = []
    fake = _fake_tokenizer(saved.append)
    monkeypatch.setattr(tokenizer, "_from_gguf", lambda _: fake)
    assert tokenizer.gguf_tokenizer(model) is fake and saved == []


def test_another_writer_storing_first_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")

    def save(directory: Path) -> None:
        (directory / "tokenizer.json").write_text("mine")
        theirs = directory.parent / directory.name.split("-")[0].lstrip(".")
        theirs.mkdir()
        (theirs / "tokenizer.json").write_text("theirs")

    fake = _fake_tokenizer(save)
    monkeypatch.setattr(tokenizer, "_from_gguf", lambda _: fake)
    assert tokenizer.gguf_tokenizer(model) is fake
    [entry] = (tmp_path / "cache" / "tokenizers").iterdir()  # their entry stays, our staging directory is gone
    assert (entry / "tokenizer.json").read_text() == "theirs"


def test_a_damaged_entry_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    stat = model.stat()
    entry = tokenizer.tokenizer_cache_dir(model.resolve(), stat.st_size, stat.st_mtime_ns)
    entry.mkdir(parents=True)
    (entry / "tokenizer.json").write_text("{not json")
    fake = _fake_tokenizer(lambda d: (d / "tokenizer.json").write_text("rebuilt"))
    monkeypatch.setattr(tokenizer, "_from_gguf", lambda _: fake)
    assert tokenizer.gguf_tokenizer(model) is fake
    assert (entry / "tokenizer.json").read_text() == "rebuilt"


def test_the_cache_key_follows_the_file(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    stat = model.stat()
    key = tokenizer.tokenizer_cache_dir(model.resolve(), stat.st_size, stat.st_mtime_ns)
    assert key == tokenizer.tokenizer_cache_dir(model.resolve(), stat.st_size, stat.st_mtime_ns)
    assert key.parent == tmp_path / "cache" / "tokenizers"
    assert key != tokenizer.tokenizer_cache_dir(model.resolve(), stat.st_size + 1, stat.st_mtime_ns)
    assert key != tokenizer.tokenizer_cache_dir(model.resolve(), stat.st_size, stat.st_mtime_ns + 1)
    assert key != tokenizer.tokenizer_cache_dir(tmp_path / "other.gguf", stat.st_size, stat.st_mtime_ns)


def _tiny_llama(path: Path, layers: int) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_feed_forward_length(16)
    writer.add_vocab_size(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_context_length(64)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_an_unchanged_gguf_is_opened_once_per_process(tmp_path: Path) -> None:
    path = _tiny_llama(tmp_path / "tiny.gguf", 1)
    first = gguf_file.open_gguf(path)
    assert gguf_file.open_gguf(path) is first and gguf_file.open_gguf(str(path)) is first  # type: ignore[arg-type]
    stat = path.stat()
    _tiny_llama(path, 3)  # rewritten: same size, a new config
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = gguf_file.open_gguf(path)
    assert again is not first and (first.config.layers, again.config.layers) == (1, 3)


@pytest.mark.slow  # 2 s or more on two busy cores: kept out of make test-fast (docs/contributing)
def test_the_plain_reader_and_its_dequantisation_give_what_the_gguf_package_gives() -> None:
    """open_gguf reads through plain numpy views of the memory map (not np.memmap slices) and dequantises in chunks of
    rows (not the package's 16-row groups), for speed only: every field and part of the pinned model, every tensor's
    bytes and one tensor of each type dequantised are the package's own, bit for bit, and so is every ggml type the
    package dequantises, on random blocks (NaN and infinite scales included)."""
    import gguf

    path = pinned_model()
    theirs, ours = gguf.GGUFReader(str(path)), gguf_file._reader(gguf, path)
    assert list(ours.fields) == list(theirs.fields) and len(ours.fields) > 30
    for key, field in theirs.fields.items():
        mine = ours.fields[key]
        assert (mine.offset, mine.data, mine.types, mine.contents()) == (field.offset, field.data, field.types,
                                                                         field.contents()), key
        assert [(p.dtype, p.tobytes()) for p in mine.parts] == [(p.dtype, p.tobytes()) for p in field.parts], key
    assert not isinstance(ours.tensors[0].data, np.memmap)
    seen = set()
    for a, b in zip(theirs.tensors, ours.tensors, strict=True):
        assert (b.name, b.tensor_type, b.n_bytes, b.data_offset, b.data.dtype, b.data.shape) == (
            a.name, a.tensor_type, a.n_bytes, a.data_offset, a.data.dtype, a.data.shape)
        assert np.array_equal(a.data, b.data), a.name
        if a.tensor_type not in seen:
            seen.add(a.tensor_type)
            want = gguf.quants.dequantize(a.data, a.tensor_type)
            got = gguf_file._dequantize(gguf, b.data, b.tensor_type)
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), a.name
    assert {t.name for t in seen} == {"F32", "Q4_1", "Q8_0"}
    rng = np.random.default_rng(0)
    checked = []
    with np.errstate(all="ignore"):
        for qtype in gguf.GGMLQuantizationType:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            raw = rng.integers(0, 256, size=(2, 5, 3 * size), dtype=np.uint8)  # 3 blocks a row, 10 rows
            try:
                want = gguf.quants.dequantize(raw, qtype)
            except NotImplementedError:
                continue
            got = gguf_file._dequantize(gguf, raw, qtype)
            assert got.shape == want.shape == (2, 5, 3 * block) and np.array_equal(got, want, equal_nan=True), qtype
            checked.append(qtype.name)
    assert {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL", "BF16"} <= set(checked)
    # The same two inside the package for code that reads through it (transformers' GGUF loader), put back after.
    package = gguf.GGUFReader, gguf.dequantize
    with pytest.raises(RuntimeError, match="inside"), gguf_file.fast_gguf_package():
        assert gguf.GGUFReader is type(ours) and gguf.GGUFReader is not package[0]
        tensor = theirs.tensors[1]
        assert np.array_equal(gguf.dequantize(tensor.data, tensor.tensor_type),
                              package[1](tensor.data, tensor.tensor_type))
        raise RuntimeError("inside")
    assert (gguf.GGUFReader, gguf.dequantize) == package
