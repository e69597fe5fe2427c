"""``iotrace note TRACE`` and ``iotrace notes rebuild|check``: annotated-trace notes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from iotrace.cli.output import OneLineParser, add_card, add_json, emit, output_format
from iotrace.errors import StaleNotesError

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    note = commands.add_parser("note", help="write an annotated-trace note (Markdown + figures) from a profiler export")
    note.add_argument("trace", type=Path, metavar="TRACE", help="the export; its format is found from its content")
    note.add_argument("--title", required=True, help="the note's title")
    note.add_argument("-o", "--output", type=Path, required=True, metavar="NOTE.md",
                      help="where to write it; figures go to img/ beside it; annotations already there are kept")
    note.add_argument("--kernel", metavar="REGEX", help="only kernels whose name matches")
    add_card(note, " (default: the file's device)")
    note.add_argument("--no-images", action="store_true",
                      help="no PNG figures, on purpose (they need kaleido and Chrome/Chromium; without either the "
                           "note is written without figures anyway, with one line saying how to add them)")
    note.set_defaults(func=_cmd_note)

    notes = commands.add_parser("notes", help="the published annotated-trace notes in notes/: rebuild them, or check "
                                              "that none is stale")
    notes_actions = notes.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    notes_actions.required = True
    for action, text in (("rebuild", "rewrite the notes (and their images), keeping the human annotations"),
                         ("check", "exit 1 when a note's numbers differ from what the code computes now")):
        sub = notes_actions.add_parser(action, help=text)
        sub.add_argument("names", nargs="*", metavar="NAME", help="only these notes (default: all)")
        sub.add_argument("--dir", type=Path, default=Path("notes"), help="the notes folder (default notes/)")
        if action == "rebuild":
            sub.add_argument("--no-images", action="store_true", help="leave the PNG figures as they are")
        add_json(sub)
        sub.set_defaults(func=_cmd_notes)


def _cmd_note(args: argparse.Namespace) -> None:
    from iotrace.notes import catalog, from_trace
    from iotrace.notes.images import figure_problem, left_out_notice
    from iotrace.notes.writing import write_note

    output_format("iotrace note", args.output, ("md",), default=None)  # a note is Markdown: -o NAME.md, nothing else
    # A missing browser (or kaleido) costs the figures, not the note: the Markdown is the point, and the figures can
    # be added by rerunning once the browser is there. Checked first, so the note links no image it lacks.
    missing = None if args.no_images else figure_problem()
    note = from_trace.build(args.trace, name=args.output.stem, title=args.title, corpus=catalog.CORPUS,
                            kernel=args.kernel, card=args.card, images=not args.no_images and missing is None)
    text = catalog.render_with_kept(note, args.output)
    # All or nothing: a failure midway leaves no partial note, no empty img/, and the note already there as it was.
    for path in write_note(note, text, args.output, images=bool(note.images)):
        print(f"wrote {path}")
    if missing is not None:
        print(left_out_notice(missing), file=sys.stderr)


def _cmd_notes(args: argparse.Namespace) -> None:
    from iotrace.notes import catalog

    if args.action == "rebuild":
        written = catalog.rebuild(args.dir, args.names, images=not args.no_images)
        emit(args, [str(p) for p in written], lambda: print("\n".join(f"wrote {p}" for p in written)))
        return
    found = catalog.stale(args.dir, args.names)
    emit(args, found, lambda: print("\n".join(f"stale: {name}: {why}" for name, why in found.items()) or
                                     f"every note in {args.dir} matches the code"))
    if found:
        raise StaleNotesError(f"{len(found)} note(s) are stale: {', '.join(found)}",
                              "run `iotrace notes rebuild` (or `make notes`) and commit the result")

