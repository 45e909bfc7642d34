"""``python -m dpql.cli``: the ``dpql`` command."""

import sys

from dpql.cli import main

sys.exit(main())
