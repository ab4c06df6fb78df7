import sys

from suites.frontends.cli import main

sys.exit(main())
