"""pytest plugin (entry point ``pytest11``): pytest-benchmark regression gates for iotrace kernels.

Loaded by every pytest run once iotrace is installed, so it imports nothing heavy at import time.
"""
