"""``python -m iotrace``: the same as the ``iotrace`` command."""

from iotrace.cli import run

if __name__ == "__main__":  # compile workers are spawned processes that re-import this module
    run()
