"""``python -m plena_cli`` = ``plena-sim``."""

import sys

from .main import main

sys.exit(main())
