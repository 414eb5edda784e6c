"""``python -m liveunwind``: the same as the ``liveunwind`` command.

A signal while this imports the command ends it quietly: the package's
``__init__`` installed handlers for that before this file ran.
"""

from liveunwind.cli import run

run()
