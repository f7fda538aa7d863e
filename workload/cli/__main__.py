import sys

from workload.cli.main import main

sys.exit(main())
