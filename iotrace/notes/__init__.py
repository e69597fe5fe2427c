"""Annotated-trace notes: Markdown that renders on a code-hosting site without plugins, built from the identities,
the kernels' cost models and the reports, with human annotations that survive regeneration.

``catalog`` lists the published notes under ``notes/`` and rebuilds or checks them (a stale note fails the tests);
``document`` is the note model and its Markdown; ``annotations`` keeps the human-written blocks.
"""
