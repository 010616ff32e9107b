"""horovod.runner.util: the helpers of Horovod's runner that user and test
code import (threads)."""
