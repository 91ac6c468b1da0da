"""uocr's Python workshop: training and evaluating the demo model, and making the test suite's fixtures.

Not part of the product (the C++ library and CLI need none of it). Every entry point is a module,
run from the repository root with this folder on the import path:

    export PYTHONPATH=$PWD/python
    python3 -m uocr_dev.train --help

python/uocr_dev/README.md lists the modules.
"""
import os

# The repository root (python/uocr_dev/__init__.py -> python/uocr_dev -> python -> root).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
