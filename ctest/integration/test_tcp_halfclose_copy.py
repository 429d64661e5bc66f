"""L4 TCP proxy (issue 7), acceptance 2 on the copy path: test_tcp_halfclose.py's 10,000
half-closing sessions through a listener with `splice: off` (read/write only)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_tcp_halfclose  # noqa: E402

if __name__ == "__main__":
    test_tcp_halfclose.main("off")
