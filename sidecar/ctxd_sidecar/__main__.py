import sys

from ctxd_sidecar.cli import main

sys.exit(main())
