"""python -m primus.cli: the primus command."""

import sys

from primus.cli import main

sys.exit(main())
