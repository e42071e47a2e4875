"""``python -m services.cli`` is the ``kafka-py`` command."""

import sys

import services.entry_point  # noqa: F401 - first: see there
from services.cli.main import main

sys.exit(main())
