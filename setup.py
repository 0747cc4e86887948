"""Build hook for the optional C accelerator of ``formats`` (all other metadata is in pyproject.toml).

``parallax.formats._speedups`` is ``optional``: without a C compiler the build prints a warning and the
package falls back to its pure-Python path (see ``parallax/formats/units.py``).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("parallax.formats._speedups", ["parallax/formats/_speedups.c"], optional=True)])
