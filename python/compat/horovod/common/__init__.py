"""horovod.common names that scripts import (exceptions)."""
