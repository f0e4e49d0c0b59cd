import sys

from linen2nnx.cli import main

sys.exit(main())
