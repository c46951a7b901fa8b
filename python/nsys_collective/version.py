"""The package's version, a leaf every stage may read (the package root imports them all)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("collectivetrace-nsys")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
