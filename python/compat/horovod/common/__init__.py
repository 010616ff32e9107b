"""horovod.common: the modules scripts import from (exceptions, util, elastic)."""
