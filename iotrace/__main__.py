"""``python -m iotrace``: the same as the ``iotrace`` command."""

import sys

from iotrace.cli import main

sys.exit(main())
