"""Recipe folders: one JSON file per source (``{"schema": "iotrace.recipe/1", "recipes": [...]}``).

The project's published set is ``iotrace/data/recipes``; a user's own folder is named with ``--dir``. Adding a
source file again replaces the recipes it gave before (the folder file is named after it), so ``add`` is idempotent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from iotrace.errors import InvalidValueError
from iotrace.model.imported import load_bench_file
from iotrace.recipes.build import from_bench_json, from_engines_json, from_imported
from iotrace.recipes.record import SCHEMA, Recipe, Source

__all__ = ["PUBLISHED", "Added", "ImportOptions", "add", "read_file", "read_folder", "recipes_of", "write_file"]

#: The recipes the project publishes, each from a real published bench output (rendered as
#: notes/cardbook-recipes.md).
PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "recipes"


@dataclass(frozen=True)
class ImportOptions:
    """What a bench file may not say about itself, as the person adding it states it (recorded in the recipe)."""

    card: str | None = None
    model: str | None = None
    gpus: int = 1
    dtype: str = "bf16"
    ngl: tuple[int, ...] = ()
    batch: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    url: str | None = None
    commit: str | None = None
    date: str | None = None
    license: str | None = None
    why: str | None = None  # the reason for what is stated ("TP=8 per the repository's README")

    def stated(self) -> tuple[str, ...]:
        said = [f"{flag} {value}" for flag, value in (
            ("--card", self.card), ("--model", self.model), ("--dtype", self.dtype if self.model else None),
            ("--gpus", self.gpus if self.gpus != 1 else None),
            ("--ngl", ",".join(map(str, self.ngl)) if self.ngl else None), ("--batch", self.batch),
            ("--input-len", self.input_len), ("--output-len", self.output_len)) if value is not None]
        if said and self.why:
            said.append(f"why: {self.why}")
        return tuple(said)


@dataclass(frozen=True)
class Added:
    """One source filed: where its recipes went, how many, and whether it replaced an earlier filing."""

    source: Path
    written: Path
    recipes: list[Recipe]
    replaced: bool


#: iotrace's own results, by their schema (the first key each writes): the recipes builder and the command.
_OWN_RESULTS = {"iotrace.bench/1": (from_bench_json, "iotrace bench"),
                "iotrace.bench-engines/1": (from_engines_json, "iotrace bench --engine …")}


def recipes_of(path: Path, options: ImportOptions) -> list[Recipe]:
    """The recipes of one source file: an ``iotrace bench --json`` result, or any bench file iotrace imports."""
    path = Path(path)
    head = b""
    if path.is_file():
        with path.open("rb") as handle:  # the schema is the first key iotrace bench writes; the rest is read once
            head = handle.read(4096)
    for schema, (builder, command) in _OWN_RESULTS.items():
        if f'"schema": "{schema}"'.encode() in head or f'"schema":"{schema}"'.encode() in head:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidValueError(f"{path}: an {command} result that does not parse ({exc})",
                                        f"rerun {command} --json > FILE") from None
            return builder(data, path)
    runs = load_bench_file(path, card=options.card, model=options.model, batch=options.batch,
                           input_len=options.input_len, output_len=options.output_len, dtype=options.dtype,
                           gpus=options.gpus, ngl=options.ngl)
    kind = "published" if options.url else "file"
    source = Source(kind=kind, file=path.name, url=options.url, commit=options.commit, date=options.date,
                    license=options.license, stated=options.stated())
    return from_imported(runs, path, source)


def write_file(path: Path, recipes: list[Recipe]) -> None:
    text = json.dumps({"schema": SCHEMA, "recipes": [r.to_dict() for r in recipes]}, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")


def read_file(path: Path) -> list[Recipe]:
    """The recipes of one recipe file, every one checked; a damaged file is refused naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidValueError(f"{path} cannot be read ({exc.strerror or exc})", "check the path") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidValueError(f"{path} is not a recipe file ({exc})",
                                "write recipes with `iotrace recipes add`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("recipes"), list):
        raise InvalidValueError(f"{path} is not a recipe file (schema {SCHEMA!r} with a recipes list)",
                                "write recipes with `iotrace recipes add`")
    return [Recipe.from_dict(item, f"{path} recipe {i}") for i, item in enumerate(data["recipes"])]


def read_folder(folder: Path) -> list[Recipe]:
    """Every recipe in ``folder``'s ``*.json`` files, in file-name order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidValueError(f"{folder} is not a folder of recipes", "name a folder `iotrace recipes add` wrote")
    return [recipe for path in sorted(folder.glob("*.json")) for recipe in read_file(path)]


def add(files: list[Path], folder: Path, options: ImportOptions) -> list[Added]:
    """File each source's recipes into ``folder`` as ``<source name>.json``; every source is read before any is
    written, so one bad file writes nothing."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InvalidValueError(f"{folder} is a file, not a recipes folder", "name a folder with --dir")
    read = [(Path(f), recipes_of(Path(f), options)) for f in files]
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for path, recipes in read:
        target = folder / f"{path.name}.json"
        replaced = target.exists()
        write_file(target, [replace(r, source=replace(r.source, file=path.name)) for r in recipes])
        out.append(Added(path, target, recipes, replaced))
    return out
