import sys

from benchmarks.eval.evaluate import main

sys.exit(main())
