"""``python -m dpql``: the ``dpql`` command (:func:`dpql.cli.main`), for environments where
the console script is not on ``PATH``."""

import sys

from dpql.cli import main

sys.exit(main())
