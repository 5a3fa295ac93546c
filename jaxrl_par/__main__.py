"""``python -m jaxrl_par`` is the ``jaxrl-par`` command."""

import sys

from jaxrl_par.cli import main

sys.exit(main())
