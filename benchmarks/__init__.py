"""flame's benchmarks: the suite's entry point (run.py), its results (results/), and one-off
measurement scripts. The harness itself is the flame.bench package, so `flame bench` works from an
installed flame too."""
