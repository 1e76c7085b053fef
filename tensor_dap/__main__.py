import sys

from tensor_dap.cli import main

sys.exit(main())
