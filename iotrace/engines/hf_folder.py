"""The GGUF as a Hugging Face folder (config.json, fp32 safetensors, tokenizer), for the engines that cannot read a
GGUF: vLLM looks for an HF config, and transformers loads a folder in a second where its GGUF loader dequantises for
tens of seconds. Made once per GGUF (its path, size and mtime key the folder) with transformers' own GGUF loader, so
the folder holds exactly the weights transformers' reference reads."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from iotrace.errors import InvalidValueError

__all__ = ["hf_folder"]

#: Bumped when what a folder holds changes.
_SCHEMA = "1"


def _key(gguf: Path) -> str:
    resolved = gguf.resolve()
    stat = resolved.stat()
    identity = "\0".join([_SCHEMA, str(resolved), str(stat.st_size), str(stat.st_mtime_ns)])
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def hf_folder(gguf: Path, root: Path, progress: Callable[[str], None] = lambda _: None) -> Path:
    """The folder under ``root/hf`` holding ``gguf`` converted (made on the first call, saying so through
    ``progress``: tens of seconds)."""
    gguf = Path(gguf)
    if not gguf.is_file():
        raise InvalidValueError(f"no GGUF file at {gguf}", "pass --gguf PATH to a local .gguf file")
    entry = root / "hf" / f"{gguf.stem}-{_key(gguf)}"
    if (entry / "config.json").is_file() and (entry / "model.safetensors").is_file():
        return entry
    progress(f"converting {gguf.name} to a Hugging Face folder for transformers and vLLM (once, tens of seconds)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from transformers import AutoModelForCausalLM

    from iotrace.model.tokenizer import gguf_tokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # transformers' GGUF loader names what it cannot read
        raise InvalidValueError(f"transformers cannot convert {gguf} ({type(exc).__name__}: {str(exc)[:160]})",
                                "pass a GGUF of an architecture transformers' GGUF loader reads") from None
    # The loader marks the model as GGUF-quantised; the saved weights are plain fp32, and a reader of the folder
    # (vLLM) would otherwise look for the GGUF file named in that marker.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        model.save_pretrained(str(staging), safe_serialization=True)
        gguf_tokenizer(gguf).save_pretrained(str(staging))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(staging, entry)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InvalidValueError(f"cannot write the converted model to {entry} ({exc})",
                                "make the engines folder writable, or set IOTRACE_ENGINES to a writable one") from None
    return entry


if __name__ == "__main__":  # `make engines`: convert the pinned GGUF once, into the engines folder given
    import sys

    from iotrace.model.gguf_file import pinned_gguf

    print(f"the pinned GGUF as a Hugging Face folder: {hf_folder(pinned_gguf(), Path(sys.argv[1]))}")
