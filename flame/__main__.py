"""`python3 -m flame` is the `flame` command."""

from flame.cli import main

raise SystemExit(main())
