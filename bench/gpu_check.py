"""GPU validation in one prepared call: `python bench/gpu_check.py OUT [--quick] [--budget 480]`.

The same as `iotrace selfcheck OUT`: card ceilings, every kernel against its reference and baselines, occupancy
against the driver, tuner sweeps, profiler captures; results in OUT/results.md and OUT/results.json. With --cpu it
runs end to end without a GPU at tiny sizes (tests/test_selfcheck.py runs it that way in CI).
"""

import sys

from iotrace import interrupts
from iotrace.cli import main

if __name__ == "__main__":
    interrupts.raise_on_sigterm()  # as the iotrace program does: a `timeout` ends it as Ctrl-C would
    sys.exit(main(["selfcheck", *sys.argv[1:]]))
