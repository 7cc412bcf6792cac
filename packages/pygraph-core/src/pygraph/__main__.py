"""``python -m pygraph``: the ``pygraph`` command."""

from __future__ import annotations

import sys

from pygraph.cli import main

sys.exit(main())
