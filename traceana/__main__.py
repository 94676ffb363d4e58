import sys

from traceana.cli import main

sys.exit(main())
