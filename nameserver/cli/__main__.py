"""``python -m nameserver.cli``: the same as the ``metaledger`` command."""

import sys

from nameserver.cli import main

sys.exit(main())
