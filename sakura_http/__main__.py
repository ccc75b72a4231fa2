"""`python -m sakura_http`: the same as the `sakura-http` command."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
