import sys

from formats.cli import main

sys.exit(main())
