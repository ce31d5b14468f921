"""`python -m meshseg.tools.bench`: see `meshseg.tools.bench.command`."""

import sys

from meshseg.tools.bench.command import main

sys.argv[0] = "bench.py"  # the usage line names the command as before
sys.exit(main())
