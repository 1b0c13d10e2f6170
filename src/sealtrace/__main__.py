"""``python -m sealtrace`` runs the command line."""

import sys

from sealtrace.cli import main

sys.exit(main())
