"""``python -m encdec_cli``: the ``encdec`` command."""

import sys

from .runner import main

sys.exit(main())
