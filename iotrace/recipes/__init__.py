"""The named-card recipe atlas: measured runs of a model, quant and engine on a card, with the wall beside each.

:mod:`~iotrace.recipes.record` is the record (``iotrace.recipe/1``), :mod:`~iotrace.recipes.build` turns imported
bench files and ``iotrace bench --json`` runs into records, :mod:`~iotrace.recipes.store` reads and writes recipe
folders (the published set ships in ``iotrace/data/recipes``), :mod:`~iotrace.recipes.atlas` tables them and
:mod:`~iotrace.recipes.predict` gives each card's wall with a rate from its nearest measured cards.
"""
