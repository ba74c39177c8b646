"""The bundled demo: task generators, the training script of the demo model, and the builder of the demo datasets.

Outside ``trace_core`` on purpose: training uses torch directly, and the library keeps torch behind ``record.py``.
"""
