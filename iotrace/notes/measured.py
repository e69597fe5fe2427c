"""The measurement cache of the notes measured on the pinned model (and of the kernel notes, tens of Triton
cross-compiles each): the note as last measured, keyed by its inputs.

A model note (quantisation, speculation) runs the pinned model for minutes. What it prints is a function of its
inputs: the source of every iotrace module its build can reach (``iotrace.source_graph.reachable``), the data files
the package reads (card peaks, model shapes), the GGUF's bytes, and the versions of the libraries that compute (torch,
numpy, gguf, tokenizers, Python). ``iotrace notes rebuild`` measures and writes the note's generated text beside the
notes (``measured/<name>.json``) with the key of those inputs; ``iotrace notes check`` (and the test of each
committed note) reads that text back when the key is still the inputs' key, and measures again when any input
changed. So a figure edited in the note, an annotation quoting a number the note does not print, and any change to
the code or library that computes a figure are all still caught; only an unchanged measurement is not redone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

from iotrace.errors import InvalidValueError
from iotrace.notes.document import Note, Section
from iotrace.source_graph import PACKAGE, module_files, reachable

__all__ = ["SCHEMA", "cache_path", "inputs", "key_of", "load", "save"]

SCHEMA = "iotrace.note-measured/1"
#: The libraries whose arithmetic or parsing a model note's figures go through.
LIBRARIES = ("torch", "numpy", "gguf", "tokenizers", "triton")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


#: (package root, the digest of its sources, the modules reached from) -> reachable(): parsing the package's 280
#: modules takes seconds, and `notes check` asks once per cached note of the same unchanged sources.
_REACHED: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}


def _reachable(modules: list[str], files: dict[str, Path], root: Path) -> list[str]:
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    memo = (str(root), digest.hexdigest(), tuple(sorted(modules)))
    if memo not in _REACHED:
        _REACHED[memo] = reachable(modules, root)
    return _REACHED[memo]


def inputs(module: str, model_file: Path | None, root: Path = PACKAGE, *, also: tuple[str, ...] = (),
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a note built by ``module`` (e.g. ``iotrace.notes.quantisation``) depends on: each reachable source
    file's and each package data file's sha256 (paths relative to the package), the model file's, and the versions.
    ``also``: modules the note loads by name, which no import reaches (a kernel note's plugins); ``extra``: anything
    else its figures depend on (recorded as given)."""
    modules = module_files(root)
    files = {modules[m].relative_to(root.parent).as_posix(): modules[m]
             for m in _reachable([module, *also], modules, root)}
    data = sorted((root / "data").glob("*.toml"))
    found = {"sources": {name: _sha256(path) for name, path in sorted(files.items())},
             "data": {p.name: _sha256(p) for p in data},
             "model": None if model_file is None else {"file": model_file.name, "sha256": _sha256(model_file)},
             "versions": {"python": platform.python_version(), **{lib: _version(lib) for lib in LIBRARIES}}}
    return found if extra is None else {**found, "extra": extra}  # a model note's key as before: no "extra"


def key_of(found: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()


def cache_path(notes_dir: Path, name: str) -> Path:
    return notes_dir / "measured" / f"{name}.json"


def save(notes_dir: Path, note: Note, found: dict[str, Any]) -> Path:
    """Write ``note``'s generated text (its sections; no annotations, no figures) with the key of ``found``."""
    path = cache_path(notes_dir, note.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"schema": SCHEMA, "key": key_of(found), "inputs": found,
              "note": {"name": note.name, "title": note.title, "header": note.header,
                       "sections": [{"slug": s.slug, "title": s.title, "body": s.body} for s in note.sections]}}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load(notes_dir: Path, name: str, found: dict[str, Any]) -> Note | None:
    """The cached note whose key is ``found``'s; None where there is none or an input changed (measure again). A
    cache file that is not one is refused, naming it: deleting it makes the next check measure."""
    path = cache_path(notes_dir, name)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("schema") != SCHEMA:
            raise ValueError(f"schema {record.get('schema')!r}, not {SCHEMA}")
        if record["key"] != key_of(found):
            return None
        body = record["note"]
        note = Note(body["name"], body["title"], dict(body["header"]))
        note.sections = [Section(s["slug"], s["title"], s["body"]) for s in body["sections"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidValueError(f"{path} is not a note's measurement cache ({exc})",
                                f"delete it and run `iotrace notes rebuild {name}`") from None
    return note
