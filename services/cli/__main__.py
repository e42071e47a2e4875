"""``python -m services.cli`` is the ``kafka-py`` command."""

import sys

from services.cli.main import main

sys.exit(main())
