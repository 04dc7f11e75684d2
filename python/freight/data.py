"""freight.data: datasets by name (as `freight train --data` reads them) and the Loader that
batches them as the command does (seeded shuffling, normalisation, prefetching)."""
from ._freight.data import *  # noqa: F401,F403
from ._freight.data import Dataset, Loader, arrays, load, normalisation  # noqa: F401
