"""``python -m encdec ...`` runs the command line (used by ``accelerate launch -m encdec``)."""

import sys

from encdec_cli import main

sys.exit(main())
