"""The old name of `engine_config` (`client.config`'s module), kept so imports keep working."""

from .engine_config import *  # noqa: F403 - the same public names
from .engine_config import __all__  # noqa: F401
