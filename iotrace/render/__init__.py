"""Renderers of iotrace's own answers (cards, derivations, occupancy, runs, tunes): rich for the terminal, plotly for
figures. Trace reports have their renderers in :mod:`iotrace.trace.render`; both import the answers they draw, never
the other way round."""
