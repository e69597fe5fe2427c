"""``python -m iotrace``: the same as the ``iotrace`` command."""

import sys

from iotrace.cli import main

if __name__ == "__main__":  # compile workers are spawned processes that re-import this module
    sys.exit(main())
