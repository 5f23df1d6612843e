"""The package version (one place: ``superopt.__version__``, the bridge's ``pong`` and every
run record's environment read it here).

Owns: the version string. Imports nothing.
"""

__version__ = "0.1.0"
