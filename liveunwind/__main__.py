"""``python -m liveunwind``: the same as the ``liveunwind`` command."""

from liveunwind.cli import main

raise SystemExit(main())
