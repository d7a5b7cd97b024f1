"""``python -m encdec ...`` runs the command line (used by ``accelerate launch -m encdec``)."""

import sys

from .cli import main

sys.exit(main())
