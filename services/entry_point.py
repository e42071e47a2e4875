"""Imported first by every ``python -m services.<name>`` entry point (the services and the
``kafka-py`` command), before anything that imports kio.

kio, the protocol library, imports hypothesis whenever it is importable, only to register test
strategies that no service uses. Where the dev extra is installed (tests, ``cluster up`` from a
checkout) that import was about 0.15 s of CPU in every service start and every command, a third
of the command's start-up. A ``None`` entry makes the import fail as if hypothesis were not
installed, which is what the image and a plain install have anyway.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
