"""Run the benchmark suite from a checkout: `python benchmarks/run.py [--quick] [--cases ...]`
(the same as `PYTHONPATH=. python3 -m flame bench ...`)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flame.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
