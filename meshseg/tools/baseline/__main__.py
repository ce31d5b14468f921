"""`python -m meshseg.tools.baseline`: see `meshseg.tools.baseline`."""

import sys

from meshseg.tools.baseline import main

sys.argv[0] = "baseline.py"  # the usage line names the command as before
main()
