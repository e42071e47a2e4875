"""``python -m services.cli.dump_log``: the same tool as ``kafka-py dump-log``."""

import sys

from services.cli.dump_log.cli import main

sys.exit(main())
