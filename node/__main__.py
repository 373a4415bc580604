"""`python -m node --config FILE`: run one protocol node (see node/runtime/runner.py)."""

import sys

from node.runtime.runner import main

if __name__ == "__main__":
    sys.exit(main())
