"""Device rows matched to CardBook cards, and the note an unmatched device leaves (iotrace.trace.devices)."""

from __future__ import annotations

import numpy as np

from iotrace.trace.devices import unmatched_notes, with_cards


def test_an_unknown_nvidia_device_falls_back_and_says_which_card_it_needs() -> None:
    notes: list[str] = ["earlier note"]
    rows = with_cards([{"device": 0, "name": "NVIDIA FooGPU", "cc": "8.9", "sm_count": 46}], notes=notes)
    assert rows[0]["card"] is None and rows[0]["vendor"] == "nvidia"
    assert notes == ["earlier note", "device 0 'NVIDIA FooGPU' (CC 8.9, 46 SMs) is not in the CardBook: its "
                     "rooflines use the file's own properties; add a card for it to iotrace/data/cards.toml "
                     "(see docs/commands/cards.md: the CardBook)"]


def test_a_name_match_with_the_wrong_sm_count_is_refused_and_noted() -> None:
    rows = with_cards([{"device": 1, "name": "NVIDIA GeForce RTX 4090", "cc": "8.9", "sm_count": np.int64(114)}])
    assert rows[0]["card"] is None
    assert unmatched_notes(rows) == [
        "device 1 'NVIDIA GeForce RTX 4090' (CC 8.9, 114 SMs) is not in the CardBook: its rooflines use the file's "
        "own properties; add a card for it to iotrace/data/cards.toml (see docs/commands/cards.md: the CardBook)"]


def test_rtx3080_rows_pick_the_variant_by_sm_count() -> None:
    rows = with_cards([{"device": 0, "name": "NVIDIA GeForce RTX 3080", "sm_count": 70.0},
                       {"device": 1, "name": "NVIDIA GeForce RTX 3080", "sm_count": 68}])
    assert [r["card"] for r in rows] == ["rtx3080-12gb", "rtx3080"]
    assert unmatched_notes(rows) == []


def test_amd_devices_match_only_when_one_card_fits_and_nameless_ones_get_no_note() -> None:
    """An AMD device is matched by name, gfx target and CUs (cards.match_amd): ROCm Kineto's 'AMD Radeon Graphics'
    with 104 CUs is an MI210 or one MI250 GCD, so it gets no card; an MI300X by name does; one MI250 GCD (half the
    card) gets none rather than the whole card's peaks."""
    notes: list[str] = []
    rows = with_cards([{"device": 0, "name": "AMD Radeon Graphics", "warp_size": 64, "sm_count": 104},
                       {"device": 1, "name": "AMD Instinct MI300X", "sm_count": 304, "arch": "gfx942"},
                       {"device": 2, "cc": "8.6", "vendor": "nvidia"},
                       {"device": 3, "name": "AMD Instinct MI250X/MI250", "arch": "gfx90a", "sm_count": 104}],
                      notes=notes)
    assert [r["card"] for r in rows] == [None, "mi300x", None, None]
    assert [r["vendor"] for r in rows] == ["amd", "amd", "nvidia", "amd"]
    assert notes == []


def test_without_notes_nothing_is_recorded_and_known_cards_match() -> None:
    rows = with_cards([{"device": 0, "name": "NVIDIA L40S", "sm_count": 142, "cc": "8.9"}])
    assert rows[0]["card"] == "l40s" and unmatched_notes(rows) == []
