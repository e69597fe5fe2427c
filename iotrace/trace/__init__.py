"""Trace-side helpers. Importing this package imports nothing heavy."""
