"""hvdcomm.torch.compression: horovod.torch's Compression (none, fp16), the
gradient compressors of allreduce and DistributedOptimizer, with Horovod's
class names (``Compressor`` is the base a custom compressor subclasses)."""
import torch


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)`` before the
    allreduce, ``decompress(tensor, ctx) -> tensor`` after it."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
