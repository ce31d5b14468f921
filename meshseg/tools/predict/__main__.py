"""`python -m meshseg.tools.predict`: see `meshseg.tools.predict`."""

import sys

from meshseg.tools.predict import main

sys.argv[0] = "predict.py"  # the usage line names the command as before
main()
