"""The typed input errors of the simulator library (a bottom module: it imports nothing of the package).

One job: name the two kinds of user input the library rejects, so that every module (and the
``plena-sim`` command line, which turns them into exit code 2) can raise and catch them without
importing the module that usually raises them. A key shown in a message is escaped (``isa.safetext``).

* :class:`ConfigError` -- a hardware configuration problem (a TOML key, an override, an HBM timing
  preset), naming the key;
* :class:`ImageError` -- a problem with an HBM image, a manifest, a preload file or a tensor to place.

Both are ``ValueError`` s.
"""

from __future__ import annotations

from isa.safetext import printable

__all__ = ["ConfigError", "ImageError"]


class ConfigError(ValueError):
    """A configuration problem, naming the key (``key``) and the offending value."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{printable(key)}: {message}")


class ImageError(ValueError):
    """A problem with an HBM image, a manifest, a preload file or a tensor to place."""
