"""python3 -m tests.harness SCENARIO [--launcher mpirun|launch|torchrun] | --list (tests/README.md)."""
import sys

from tests.harness.scenario import main

if __name__ == "__main__":
    sys.exit(main())
