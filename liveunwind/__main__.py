"""``python -m liveunwind``: the same as the ``liveunwind`` command (bin/liveunwind).

A signal while this imports the command ends it quietly: the package's
``__init__`` installed handlers for that before this file ran.  As in
bin/liveunwind, what the import creates is left out of the garbage
collector's scans (``gc.freeze``), and liveunwind's modules come from one
file of compiled code where there is a usable one (liveunwind/codebundle.py).
"""

import gc

gc.disable()
from liveunwind.codebundle import install  # noqa: E402

install()
from liveunwind.cli import run  # noqa: E402

gc.freeze()
gc.enable()
run()
