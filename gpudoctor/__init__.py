"""gpudoctor: a doctor for GPU inference environments.

Importing this package is cheap on purpose: the CLI must start in a broken
environment, so nothing heavy (rich, pynvml, psutil) is imported here.
"""

__version__ = "0.1.0"
